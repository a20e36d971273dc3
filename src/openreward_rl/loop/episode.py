"""The `Episode` protocol, its settings, and `run_episode`, which owns sessions, retries and timeouts."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, overload, runtime_checkable

import attrs

from openreward_rl.config import ToolTimeouts, fill_system_prompt
from openreward_rl.env.environment import (
    DEFAULT_CLOSE_TIMEOUT_S,
    DEFAULT_OPEN_RETRY,
    DEFAULT_READ_RETRY,
    EnvSession,
    open_session,
)
from openreward_rl.env.repeats import OncePerKey
from openreward_rl.env.tasks import TaskRef
from openreward_rl.errors import ConfigError, EnvError, ModelFamilyError
from openreward_rl.loop.context import ContextPolicy
from openreward_rl.loop.heap import settle_heap
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.redaction import redact
from openreward_rl.reducers.base import RewardPolicy, get_reducer
from openreward_rl.retry import RetryPolicy

__all__ = [
    "Episode",
    "EpisodeSettings",
    "run_episode",
    "episode_reward",
    "failed_trajectory",
    "fault_stop",
    "format_system_prompt",
    "first_system_prompt",
    "DEFAULT_NUDGE",
]

logger = logging.getLogger(__name__)

DEFAULT_NUDGE = "No tool call detected. Please use the provided tools to complete the task."

# Failed attempts already logged as warnings, by (environment, stop reason, detail): a dead server fails
# every episode the same way, and one line says it; the repeats go to debug level.
_REPORTED = OncePerKey()


@runtime_checkable
class Episode(Protocol):
    """One multi-turn agent run over one task, in an open environment session.

    An Episode reports what happened: `step_rewards` (every reward the environment gave, in order),
    `finished` and the stop reason. It does not reduce them: the runner (`run_episode`) sets
    `Trajectory.reward` with the configured `RewardPolicy`, so every Episode gets the same reducer.
    """

    async def run(self, session: EnvSession) -> Trajectory: ...


@attrs.frozen
class EpisodeSettings:
    """Limits and policies of the default loop.

    - `max_new_tokens`: per-call cap, used when `sampling_params` has none (Slime passes its
      `--rollout-max-response-len` there).
    - `max_context_len`: the episode's token budget; each call's `max_new_tokens` is clamped to what
      is left, and the episode ends with `context_overflow` when nothing is.
    - `on_no_tool_call`: "end" the episode, or "nudge" the model with `nudge_message` (environments
      with a `@terminal` tool always send a plain answer to that tool instead).
    - `system_prompt`: may hold a `{tools}` placeholder (cookbook templates); the model's chat
      template renders the tools natively either way.
    - `tool_preamble`: where the chat template drops `tools`, the tool preamble that teaches the
      parser's calls (`families.tool_preamble.parser_preamble`) follows the system prompt (not when it
      has `{tools}`), with one worked call of the first tool when `tool_call_example`.
    - `train_thinking`: keep the model's reasoning tokens in the loss (they always stay in context).
    - `max_tool_output_tokens`: longer tool output is cut, with a marker saying so.
    - `context_policy`: what to do as the context fills (`openreward_rl.loop.context`); None keeps
      appending until `context_overflow`. `max_compactions`: at most this many boundaries per episode;
      None (the default): no cap, but an episode whose previous boundary freed room for one turn only
      ends `context_overflow` (compaction stalled: it no longer frees room, or the summaries no longer
      shrink the context), so compaction is bounded by the episode's turns and stops when it stops working.

    The reward policy is not a setting of the loop: the runner (`run_episode`) reduces every
    Episode's step rewards with it.
    """

    max_turns: int = 20
    max_context_len: int | None = None
    max_new_tokens: int = 4096
    sampling_params: Mapping[str, Any] = attrs.field(factory=dict)
    system_prompt: str | None = None
    tool_preamble: bool = True
    tool_call_example: bool = False
    tool_execution: Literal["sequential", "parallel"] = "sequential"
    on_no_tool_call: Literal["end", "nudge"] = "end"
    nudge_message: str = DEFAULT_NUDGE
    train_thinking: bool = True
    max_tool_output_tokens: int | None = 8192
    episode_timeout: float | None = None
    context_policy: ContextPolicy | None = None
    max_compactions: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.max_compactions is not None and self.max_compactions < 0:
            raise ConfigError(f"max_compactions must be non-negative, got {self.max_compactions}")
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be at least 1, got {self.max_turns}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if self.max_context_len is not None and self.max_context_len < 2:
            raise ConfigError(f"max_context_len must be at least 2, got {self.max_context_len}")
        if self.tool_execution not in ("sequential", "parallel"):
            raise ConfigError(f"tool_execution must be 'sequential' or 'parallel', got {self.tool_execution!r}")
        if self.on_no_tool_call not in ("end", "nudge"):
            raise ConfigError(f"on_no_tool_call must be 'end' or 'nudge', got {self.on_no_tool_call!r}")
        if self.max_tool_output_tokens is not None and self.max_tool_output_tokens < 1:
            raise ConfigError(f"max_tool_output_tokens must be at least 1, got {self.max_tool_output_tokens}")


def has_tools_placeholder(template: str | None) -> bool:
    """Whether a system prompt template writes the tools itself (a `{tools}` placeholder)."""
    return template is not None and "{tools}" in template


def format_system_prompt(template: str | None, tools: Sequence[Mapping[str, Any]]) -> str | None:
    """The system prompt; a `{tools}` placeholder gets one JSON line per tool (the cookbook's format).

    >>> format_system_prompt("Tools: {tools}", [{"type": "function", "function": {"name": "f"}}])
    'Tools: {"name": "f"}'
    """
    if not has_tools_placeholder(template):
        return template or None
    try:
        return fill_system_prompt(
            template, "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
        )
    except ValueError as error:
        raise ConfigError(f"system prompt template: {error}") from None


def first_system_prompt(
    template: str | None,
    tools: Sequence[Mapping[str, Any]],
    renderer: Any,
    *,
    parser: Any,
    tool_preamble: bool = True,
    example: bool = False,
) -> str | None:
    """The system prompt of an episode's first context: `template` (its `{tools}` filled), then, where the
    template has no `{tools}` and `tool_preamble` is on, the tool preamble that teaches `parser`'s calls
    (`ChatRenderer.tool_preamble`: None where the chat template renders the tools itself, or where no
    preamble teaches this parser's calls)."""
    system_prompt = format_system_prompt(template, tools)
    if tool_preamble and not has_tools_placeholder(template):
        preamble = renderer.tool_preamble(tools, parser=parser, example=example)
        if preamble:
            system_prompt = f"{system_prompt}\n\n{preamble}" if system_prompt else preamble
    return system_prompt


@overload
def fault_stop(
    error: EnvError | TimeoutError | ModelFamilyError, *, timeout_detail: Callable[[], str]
) -> tuple[StopReason, str]: ...
@overload
def fault_stop(error: BaseException, *, timeout_detail: Callable[[], str]) -> tuple[StopReason, str] | None: ...
def fault_stop(error: BaseException, *, timeout_detail: Callable[[], str]) -> tuple[StopReason, str] | None:
    """How an episode ends on `error`: the one mapping from faults to stop reasons, or None for an
    error that is no fault (a bug in the episode code, which the caller logs and aborts).
    `timeout_detail` says what ran out, for a timeout.

    >>> from openreward_rl.env.environment import EnvironmentFault
    >>> fault_stop(EnvironmentFault("session died", kind="ToolFailed"), timeout_detail=str)
    (<StopReason.ENV_ERROR: 'env_error'>, 'session died')
    >>> fault_stop(TimeoutError(), timeout_detail=lambda: "ran past 60s")
    (<StopReason.TIMEOUT: 'timeout'>, 'ran past 60s')
    >>> fault_stop(KeyError("x"), timeout_detail=str) is None
    True
    """
    if isinstance(error, EnvError):
        return StopReason.ENV_ERROR, str(error)
    if isinstance(error, TimeoutError):
        return StopReason.TIMEOUT, timeout_detail()
    if isinstance(error, ModelFamilyError):
        return StopReason.ABORTED, f"chat template: {error}"
    return None


def failed_trajectory(task: TaskRef, stop_reason: StopReason, detail: str) -> Trajectory:
    """The record of an episode that failed before its first prompt existed."""
    return Trajectory(
        task=task,
        segments=[],
        turns=[],
        messages=[],
        step_rewards=[],
        reward=None,
        stop_reason=stop_reason,
        stop_detail=detail,
    )


def episode_reward(trajectory: Trajectory, policy: RewardPolicy) -> float | None:
    """The reward `policy` gives the trajectory's step rewards; None for an infrastructure failure.

    >>> from openreward_rl.loop.trajectory import StopReason, Trajectory
    >>> from openreward_rl.task import TaskRef
    >>> done = Trajectory(task=TaskRef("E", "test", index=0), segments=[], turns=[], messages=[], step_rewards=[0.5, 1.0], reward=None, stop_reason=StopReason.COMPLETED, finished=True)
    >>> episode_reward(done, RewardPolicy(get_reducer("mean")))
    0.75
    """
    if trajectory.stop_reason.is_infrastructure_failure:
        return None
    return policy.final_reward(trajectory.step_rewards, finished=trajectory.finished)


async def run_episode(
    episode_factory: Callable[[], Episode],
    client: Any,
    task: TaskRef,
    *,
    secrets: Mapping[str, str | tuple[str, list[str]]] | None = None,
    attempts: int = 2,
    tool_timeout: float | ToolTimeouts | None = None,
    toolset: str | None = None,
    open_timeout: float | None = 600.0,
    attempt_timeout: float | None = None,
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT_S,
    open_retry: RetryPolicy = DEFAULT_OPEN_RETRY,
    read_retry: RetryPolicy = DEFAULT_READ_RETRY,
    reward_policy: RewardPolicy | None = None,
) -> Trajectory:
    """Run one episode in a fresh session; retry infrastructure failures with a fresh session.

    Returns the first trajectory that is not an infrastructure failure, or the last failure (its
    stop reason says which: `env_error`, `aborted`, `timeout`), never raising for a fault of the
    environment, the engine or the episode code. Engine aborts are not retried: an abort means the
    trainer wants the rollout to stop. `toolset` names the SDK session toolset the environment binds;
    `tool_timeout` bounds each tool call (one number, or per tool). `secrets` go to the session (`open_session` registers them
    for redaction): no stop detail or log line written here holds one.

    `reward_policy` (default: sum the step rewards) turns the episode's step rewards into its
    reward; whatever reward the Episode set is replaced. An infrastructure failure has no reward.

    Two time limits, one per layer: `attempt_timeout` bounds one whole attempt (opening the session
    included) and a run past it is a TIMEOUT failure with nothing kept; `EpisodeSettings.episode_timeout`
    (the config's `episode_timeout`) bounds the Episode's own loop, which then keeps what it produced.
    """
    if attempts < 1:
        raise ConfigError(f"attempts must be at least 1, got {attempts}")
    settle_heap()  # once per process: the collector set for many episodes in flight (loop.heap)
    policy = reward_policy or RewardPolicy(get_reducer("sum"))
    limits = _SessionLimits(tool_timeout, open_timeout, attempt_timeout, close_timeout, open_retry, read_retry, toolset)
    trajectory: Trajectory | None = None
    for attempt in range(1, attempts + 1):
        trajectory = await _run_once(episode_factory, client, task, secrets, limits)
        trajectory.stop_detail = redact(trajectory.stop_detail)
        trajectory.metrics["attempts"] = float(attempt)
        trajectory.reward = episode_reward(trajectory, policy)
        if not trajectory.stop_reason.is_infrastructure_failure or trajectory.stop_reason is StopReason.ABORTED:
            return trajectory
        first = _REPORTED.first((task.environment, trajectory.stop_reason, trajectory.stop_detail))
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "episode on %s failed (%s: %s), attempt %d of %d%s",
            task.environment,
            trajectory.stop_reason.value,
            trajectory.stop_detail,
            attempt,
            attempts,
            "; the same failure again is logged at debug level" if first else "",
        )
    assert trajectory is not None
    return trajectory


@attrs.frozen
class _SessionLimits:
    tool_timeout: float | ToolTimeouts | None
    open_timeout: float | None
    attempt_timeout: float | None
    close_timeout: float
    open_retry: RetryPolicy
    read_retry: RetryPolicy
    toolset: str | None = None


async def _run_once(
    episode_factory: Callable[[], Episode],
    client: Any,
    task: TaskRef,
    secrets: Mapping[str, str | tuple[str, list[str]]] | None,
    limits: _SessionLimits,
) -> Trajectory:
    deadline = asyncio.timeout(limits.attempt_timeout)
    try:
        async with deadline:
            async with open_session(
                client,
                task,
                secrets=secrets,
                tool_timeout=limits.tool_timeout,
                toolset=limits.toolset,
                open_timeout=limits.open_timeout,
                close_timeout=limits.close_timeout,
                open_retry=limits.open_retry,
                read_retry=limits.read_retry,
            ) as session:
                return await session.while_alive(episode_factory().run(session))  # ended at once if its session dies
    except Exception as error:
        failure = error  # the name `error` is unbound once the except block ends; the closure reads this one

        def timeout_detail() -> str:
            if deadline.expired():
                return f"the episode attempt ran past attempt_timeout={limits.attempt_timeout:g}s"
            return f"the episode timed out: {type(failure).__name__}: {failure}"

        stop = fault_stop(error, timeout_detail=timeout_detail)
        if stop is None:  # a bug in the episode code: one aborted sample, not a crashed run
            logger.exception("episode on %s raised %s; the sample is aborted", task.environment, type(error).__name__)
            stop = (StopReason.ABORTED, f"the episode raised {type(error).__name__}: {error}")
        return failed_trajectory(task, *stop)

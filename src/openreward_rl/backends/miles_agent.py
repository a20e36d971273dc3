"""Miles' agentic path: an OpenReward episode as a Miles agent function.

```
--custom-generate-function-path openreward_rl.backends.miles_agent.generate
--custom-agent-function-path openreward_rl.backends.miles_agent.run
--custom-rm-path openreward_rl.backends.miles.reward
--use-session-server --tito-model qwen3 --hf-checkpoint Qwen/Qwen3-4B   # no --apply-chat-template
--metadata-key metadata
--dynamic-sampling-filter-path openreward_rl.backends.filters.keep_informative_groups
```

Miles' `miles.rollout.generate_hub.agentic_tool_call.generate` opens a session on its session
server and calls the agent function `run(base_url, prompt, request_kwargs, metadata)`; every model
call goes to `{base_url}/v1/chat/completions`, where the session server renders the messages,
calls SGLang and records the sampled token ids and log-probs; afterwards Miles assembles the
training `Sample` from those records and merges the dict `run` returns into `sample.metadata`.

`run` plays the episode `metadata` names (the row written by `openreward-rl prepare`) with this
library's episode loop: the config's environments, secrets, tool timeouts, reducers and reward
policy, context budget (`--max-seq-len`, else `--rollout-max-context-len`), retries (only before the
first model call: a retried episode would rewrite the session's history). The model speaks through
`SessionChatEngine`, which reads the sampled ids, log-probs, finish reason and weight version from
the session server's `meta_info`; tool calls come parsed by SGLang's tool-call parser
(`--sglang-tool-call-parser`). `run` returns the episode record (`episode_reward`, `stop_reason`,
`stop_detail`, `metrics`, ...; see `_sample/record.py`) plus `agent_metrics.total_tool_time`, which Miles
turns into `non_generation_time`; `openreward_rl.backends.miles.reward` reads the reward from it.

`generate` wraps Miles' own agentic generate: it hands the trainer's `args` to `run` (Miles does not
pass them to an agent function; the tokenizer comes from `--hf-checkpoint`) and applies the episode's
status, since Miles sets it from the last model call alone. An infrastructure failure (environment
error, timeout, abort) becomes ABORTED with `remove_sample=True` and its loss mask and log-probs
zeroed, never a trained 0; max_turns/context limits become TRUNCATED.

Miles skips the reward model for an ABORTED sample, and its train-data conversion zeroes the loss mask
of a `remove_sample` one but still puts its reward into the group normalization (`torch.tensor`, which
a None breaks). So a removed sample carries the placeholder value 0.0 as its reward (None under
`--group-rm`, where the reward hook fills it) and a record saying it failed; the dynamic filter drops
its group. When no model call reached the session (the environment failed first, the agent raised, or
the samples could not be collected) Miles returns a copy of the input sample, ABORTED, without the
record `run` returned: `generate` makes it the masked one-token placeholder with that record (or one
saying why none exists). With Miles' generate used directly, set `$OPENREWARD_RL_TOKENIZER` to the
checkpoint and keep the dynamic filter, which drops groups whose member's record says the run failed;
Miles' own aborted samples then keep reward None, which only the filter keeps out of training.

Context policies: Miles' session server takes a later request only if it replays the stored history,
which a compacted context does not, so the environments left at the default policy run without one here
and an environment that names a policy is refused. A refused setup (a `ConfigError`) is raised as
`openreward_rl.backends.miles.RolloutStepError`, which ends the rollout step: Miles' agentic generate logs
and swallows an `Exception` from the agent function, and its class-based rollout loop one from a group.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import attrs

from openreward_rl.backends._sample.fill import (
    episode_metadata,
    fill_placeholder,
    non_generation_seconds,
    sample_fields,
    status_for,
)
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.backends._sample.reward import flatten
from openreward_rl.backends._sample.state import load_process_parts
from openreward_rl.backends.miles import step_errors
from openreward_rl.config import ConfigError, TrainConfig, config_path
from openreward_rl.engines.base import EngineError, FinishReason, Generation, GenerationRequest
from openreward_rl.engines.openai_chat import CHAT_FINISH_REASONS, OpenAIChatEngine, parse_chat_completion
from openreward_rl.env.tasks import task_from_metadata
from openreward_rl.loop.rollout import Rollouts, close_episode_builder, episode_builder
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.observe.upload import TrajectoryUploader
from openreward_rl.retry import RetryPolicy

__all__ = ["run", "generate", "SessionChatEngine", "chat_sampling_params"]

logger = logging.getLogger(__name__)

TOKENIZER_ENV = "OPENREWARD_RL_TOKENIZER"
AGENTIC_GENERATE_MODULE = "miles.rollout.generate_hub.agentic_tool_call"

# Miles' build_chat_request_kwargs renames SGLang keys to Chat Completions ones; the episode loop
# speaks SGLang's names (it clamps `max_new_tokens` per turn), so `run` maps them back.
_FROM_CHAT = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens", "seed": "sampling_seed"}
_TO_CHAT = {value: key for key, value in _FROM_CHAT.items()}
_FINISH = {**CHAT_FINISH_REASONS, "abort": FinishReason.ABORT}

_ARGS: contextvars.ContextVar[Any] = contextvars.ContextVar("openreward_rl_miles_args", default=None)
# Where `run` leaves its record for `generate`: Miles drops it when the session recorded no model call.
_RECORD: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "openreward_rl_miles_record", default=None
)
NO_RECORD_DETAIL = "Miles returned the sample without the agent's record (the agent function raised, or the session's samples could not be collected)"


def chat_sampling_params(request_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Miles' `request_kwargs` (Chat Completions names) as the SGLang sampling params the episode loop uses.

    >>> chat_sampling_params({"max_tokens": 64, "temperature": 1.0, "seed": 3})
    {'max_new_tokens': 64, 'temperature': 1.0, 'sampling_seed': 3}
    """
    return {_FROM_CHAT.get(key, key): value for key, value in request_kwargs.items() if value is not None}


@attrs.define(eq=False)
class SessionChatEngine(OpenAIChatEngine):
    """An `Engine` on a Miles session (`{base_url}/v1`): Chat Completions out, the session server's
    `meta_info.output_token_logprobs` back, so the ids and log-probs are the sampled ones.

    Sampling keys pass through under their Chat Completions names (SGLang's `ChatCompletionRequest`
    accepts SGLang's extras such as `top_k`, `stop_token_ids`, `skip_special_tokens`). A reply without
    `meta_info.output_token_logprobs` is an error: it did not come through a session server.
    """

    calls: int = attrs.field(default=0, init=False)

    @property
    def retry_policy(self) -> RetryPolicy:
        """`max_attempts` tries, at once: the session server is local to the rollout."""
        return RetryPolicy(attempts=self.max_attempts, initial_s=0.0, max_s=0.0, jitter_s=0.0)

    def sampling_body(self, sampling_params: Mapping[str, Any]) -> dict[str, Any]:
        return {
            _TO_CHAT.get(key, key): value
            for key, value in sampling_params.items()
            if value is not None and key != "custom_params"
        }

    async def generate(self, request: GenerationRequest) -> Generation:
        body = self.payload(request)
        self.calls += 1
        reply = await self.post_with_retries(body)
        parsed, content, _, _ = parse_chat_completion(reply)
        choice = reply["choices"][0]
        meta = choice.get("meta_info")
        if not isinstance(meta, Mapping) or "output_token_logprobs" not in meta:
            raise EngineError(
                f"{self.base_url}: the reply has no choices[0].meta_info.output_token_logprobs; is this a Miles session server?"
            )
        entries = meta["output_token_logprobs"]
        finish_info = meta["finish_reason"] if isinstance(meta.get("finish_reason"), Mapping) else {}
        finish = _FINISH.get(finish_info.get("type") or choice.get("finish_reason") or "stop", FinishReason.STOP)
        return Generation(
            tuple(int(entry[1]) for entry in entries),
            tuple(float(entry[0]) for entry in entries),
            finish,
            weight_version=None if meta.get("weight_version") is None else str(meta["weight_version"]),
            text=content,
            parsed=parsed,
            abort_message=finish_info.get("message") if finish is FinishReason.ABORT else None,
            meta={"id": reply.get("id"), "usage": reply.get("usage")},
        )


@attrs.define(eq=False)
class _AgentState:
    config: TrainConfig
    tokenizer: Any
    model: str
    client: Any
    uploader: TrajectoryUploader


_STATES: dict[tuple[Any, ...], _AgentState] = {}


def _checkpoint(args: Any) -> str:
    checkpoint = getattr(args, "hf_checkpoint", None) or os.environ.get(TOKENIZER_ENV)
    if not checkpoint:
        raise ConfigError(
            "the OpenReward agent function needs the tokenizer: use --custom-generate-function-path "
            f"openreward_rl.backends.miles_agent.generate (it passes --hf-checkpoint on), or set ${TOKENIZER_ENV}"
        )
    return str(checkpoint)


def _state(args: Any) -> _AgentState:
    checkpoint = _checkpoint(args)
    key = (os.getpid(), id(asyncio.get_running_loop()), checkpoint, str(config_path().resolve()))
    state = _STATES.get(key)
    if state is None:
        config, tokenizer, client, uploader = load_process_parts(checkpoint)
        state = _AgentState(_without_compaction(config), tokenizer, checkpoint, client, uploader)
        _STATES[key] = state
    return state


def _without_compaction(config: TrainConfig) -> TrainConfig:
    """`config` with the default context policy off; an environment that names a policy is refused (the session
    server takes a later request only if it replays the stored history, which a compacted context does not)."""
    config = config.without_default_compaction()
    if config.compacts:
        names = ", ".join(name for name, env in config.environments.items() if env.compacts)
        raise ConfigError(
            f"Miles' agent function cannot compact an episode's context ({names} names a context_policy): Miles' session server "
            "takes a request only if it replays the stored history; use openreward_rl.backends.miles.generate, or context_policy: none"
        )
    return config


async def close_agent_states() -> None:
    """Close the SDK clients of every cached agent state and what their episode builders hold open (an agent
    builder's endpoints); tests call it, a trainer process just exits."""
    states = list(_STATES.values())
    _STATES.clear()
    for state in states:
        await close_episode_builder(episode_builder(state.config.episode))
        await state.client.environments.aclose()


async def run(
    base_url: str,
    prompt: Any,
    request_kwargs: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Miles agent function: play the episode `metadata` names against the session at `base_url`.

    Returns the dict Miles merges into `sample.metadata`: the episode record (its `episode_reward`
    is what `openreward_rl.backends.miles.reward` returns) and `agent_metrics.total_tool_time`.
    `prompt` is not used: the environment's own prompt opens the episode.
    """
    metadata = dict(metadata or {})
    args = _ARGS.get()
    with step_errors():
        task = task_from_metadata(metadata)
        state = _state(args)
    context = metadata.get("max_seq_len") or getattr(args, "rollout_max_context_len", None)
    sampling = chat_sampling_params(request_kwargs or {})
    max_new_tokens = int(sampling.get("max_new_tokens") or getattr(args, "rollout_max_response_len", None) or 4096)
    engine = SessionChatEngine(f"{base_url.rstrip('/')}/v1", state.model, state.tokenizer)
    rollouts = Rollouts.from_config(
        attrs.evolve(state.config, attempts=1),
        engine=engine,
        tokenizer=state.tokenizer,
        client=state.client,
        model=state.model,
        max_context_len=int(context) if context else None,
        max_new_tokens=max_new_tokens,
    )
    try:
        trajectory = await _play(rollouts, engine, task, sampling, attempts=state.config.attempts)
    finally:
        await engine.aclose()
    if trajectory.messages:
        state.uploader.submit(trajectory, sampling_params=sampling)
    metrics = trajectory.metrics
    tool_time = non_generation_seconds(metrics)
    out = episode_metadata(metadata, trajectory)
    out["agent_metrics"] = {"total_tool_time": tool_time, "model_calls": float(engine.calls)}
    holder = _RECORD.get()
    if holder is not None:
        holder.update(out)
    return out


async def _play(
    rollouts: Rollouts, engine: SessionChatEngine, task: Any, sampling: Mapping[str, Any], *, attempts: int
) -> Trajectory:
    """The episode, retried on infrastructure failures only while no model call reached the session."""
    started = time.monotonic()
    trajectory: Trajectory | None = None
    for attempt in range(1, attempts + 1):
        trajectory = await rollouts.run(task, sampling_params=sampling, engine=engine)
        trajectory.metrics["attempts"] = float(attempt)
        failed = trajectory.stop_reason.is_infrastructure_failure and trajectory.stop_reason is not StopReason.ABORTED
        if not failed or engine.calls:
            break
        logger.warning(
            "episode on %s failed before its first model call (%s: %s), attempt %d of %d",
            task.environment,
            trajectory.stop_reason.value,
            trajectory.stop_detail,
            attempt,
            attempts,
        )
    assert trajectory is not None
    trajectory.metrics.setdefault("episode_seconds", time.monotonic() - started)
    return trajectory


def apply_episode_status(sample: Any, *, preset_reward: bool = True) -> None:
    """Set a Miles-assembled sample's status from the episode record `run` left in its metadata.

    ABORTED from Miles (a model call was aborted) stays ABORTED. An infrastructure failure is ABORTED
    with `remove_sample`, a zero loss mask and log-probs, and the placeholder reward 0.0 (Miles runs no
    reward model for it; None when `preset_reward` is off, for a group RM that refuses preset rewards).
    """
    record = EpisodeRecord.of_sample(sample)
    if record is None:
        return
    status_enum = type(sample).Status
    if getattr(sample.status, "name", None) == "ABORTED" or record.infrastructure_failure:
        sample.status = status_enum.ABORTED
        length = int(sample.response_length or 0)
        sample.loss_mask = [0] * length
        if sample.rollout_log_probs is not None:
            sample.rollout_log_probs = [0.0] * length
        if "remove_sample" in sample_fields(sample):
            sample.remove_sample = True
        sample.reward = 0.0 if preset_reward else None
        return
    sample.status = status_for(sample, record.stop_reason)


def remove_unrecorded(
    sample: Any, agent_record: Mapping[str, Any], tokenizer: Any, *, preset_reward: bool = True
) -> None:
    """A sample Miles returned without the agent's record (no model call reached the session): the masked
    placeholder, ABORTED and removed, with the episode's record (or one saying why there is none)."""
    row = dict(sample.metadata or {})
    try:
        record = EpisodeRecord.from_metadata({**row, **agent_record})
    except ValueError:
        record = EpisodeRecord(
            environment=str(row.get("environment", "")),
            stop_reason=StopReason.ABORTED,
            stop_detail=NO_RECORD_DETAIL,
            split=row.get("split"),
            index=row.get("index"),
            variant=row.get("variant"),
        )
    metadata = attrs.evolve(record, placeholder=True).to_metadata({**row, **agent_record})
    fill_placeholder(sample, tokenizer, metadata, reward=0.0 if preset_reward else None)


async def generate(input: Any) -> Any:  # noqa: A002  (Miles detects the new form by this name)
    """Miles' agentic generate with the trainer's `args` handed to `run` and the episode's status applied."""
    import importlib

    agentic = importlib.import_module(AGENTIC_GENERATE_MODULE)
    args = getattr(input, "args", None) or input.state.args
    agent_record: dict[str, Any] = {}
    token, record_token = _ARGS.set(args), _RECORD.set(agent_record)
    try:
        output = await agentic.generate(input)
    finally:
        _ARGS.reset(token)
        _RECORD.reset(record_token)
    samples = output.samples
    preset_reward = not getattr(args, "group_rm", False)
    for sample in flatten(samples) if isinstance(samples, list) else [samples]:
        if EpisodeRecord.of_sample(sample) is None:
            remove_unrecorded(sample, agent_record, _placeholder_tokenizer(args), preset_reward=preset_reward)
        else:
            apply_episode_status(sample, preset_reward=preset_reward)
    return output


def _placeholder_tokenizer(args: Any) -> Any:
    """The tokenizer for a placeholder's ids; without one (no checkpoint could load) id 0 is used."""
    try:
        return _state(args).tokenizer
    except Exception as error:  # the sample is removed either way; its ids only need to be valid
        logger.warning("no tokenizer for the removed sample's placeholder ids (%s); using id 0", error)
        return _NO_TOKENIZER


@attrs.frozen
class _NoTokenizer:
    pad_token_id: int = 0
    eos_token_id: int = 0


_NO_TOKENIZER = _NoTokenizer()


def _add_arguments(parser: Any) -> None:
    """Miles' agentic generate's own flags (`--custom-agent-function-path`, `--max-seq-len`)."""
    import importlib

    importlib.import_module(AGENTIC_GENERATE_MODULE).generate.add_arguments(parser)


generate.add_arguments = _add_arguments  # type: ignore[attr-defined]

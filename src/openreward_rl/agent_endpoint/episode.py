"""`AgentEpisode`: an agent program not written for this library runs one episode on an OpenReward session.

The program gets an `AgentTask`: the OpenAI base URL and key of its episode on an `AgentEndpoint` (every
model call it makes there is recorded token-exact), the task's opening messages, the environment's tools as
OpenAI function specs, and a way to run a tool on the session (`call_tool` in process, `tools_url` over
HTTP). It returns its final answer (or None). The program is either

- a Python async callable `agent(task) -> str | None`, or
- a `SubprocessAgent`: a command run with `OPENAI_BASE_URL`, `OPENAI_API_KEY`, `OPENREWARD_TOOLS_URL` and
  `OPENREWARD_TASK` (JSON: `{"prompt": [...messages], "tools": [...function specs], "tools_url": ...}`, also
  written to its stdin) in its environment; what it prints on stdout is its final answer.

The rewards are the environment's: each tool call's reward, in order, are the episode's step rewards (the
runner reduces them with the configured reward policy). Where the environment has a terminal tool and
the program ends with an answer before the environment finished, the answer goes to that tool, as
`ToolEpisode` does with a plain answer (not when its last answer hit the token cap: the episode is then
`truncated`). A program that runs past `agent_timeout` (hung) is a TIMEOUT; one
that raises or exits non-zero (crashed) is ABORTED; an environment fault is ENV_ERROR even where the
program swallowed it, and an engine fault ABORTED: infrastructure failures with their reason, never a reward.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from openreward_rl.agent_endpoint.recorder import EpisodeRecorder, RecorderSettings
from openreward_rl.agent_endpoint.server import AgentEndpoint
from openreward_rl.engines.base import Engine, FinishReason
from openreward_rl.env.environment import EnvSession, ToolOutcome
from openreward_rl.errors import EnvError
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.loop.episode import EpisodeSettings
from openreward_rl.loop.trajectory import StopReason, ToolResult, Trajectory
from openreward_rl.parsers.base import ToolCall, ToolParser

__all__ = [
    "AgentCrashed",
    "AgentEpisode",
    "AgentEpisodeBuilder",
    "AgentProgram",
    "AgentTask",
    "SubprocessAgent",
    "ToolAnswer",
    "agent_episode_builder",
]

DEFAULT_API_KEY = "openreward-rl"
STDERR_KEPT = 2000  # characters of a crashed command's stderr kept in the stop detail


class AgentCrashed(Exception):
    """The agent program failed (a command's non-zero exit, with the end of its stderr)."""


@attrs.frozen
class ToolAnswer:
    """What a tool call on the session gave the agent."""

    text: str
    reward: float | None = None
    finished: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class AgentTask:
    """One episode, as the agent program sees it."""

    base_url: str
    api_key: str
    prompt: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tools_url: str
    call_tool: Callable[[str, Mapping[str, Any]], Awaitable[ToolAnswer]] = attrs.field(repr=False)

    def describe(self) -> dict[str, Any]:
        """The JSON a subprocess agent gets."""
        return {"prompt": self.prompt, "tools": self.tools, "tools_url": self.tools_url}


AgentProgram = Callable[[AgentTask], Awaitable["str | None"]]


@attrs.frozen
class SubprocessAgent:
    """An agent program run as a command (see the module docstring for what it gets). On a timeout or a
    cancelled episode its process group is killed."""

    command: Sequence[str]
    env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: str | None = None

    async def __call__(self, task: AgentTask) -> str | None:
        described = json.dumps(task.describe(), ensure_ascii=False)
        environ = {
            **os.environ,
            **self.env,
            "OPENAI_BASE_URL": task.base_url,
            "OPENAI_API_KEY": task.api_key,
            "OPENREWARD_TOOLS_URL": task.tools_url,
            "OPENREWARD_TASK": described,
        }
        for key in (
            "NO_PROXY",
            "no_proxy",
        ):  # the endpoint is on loopback: never through a proxy the trainer's environment names
            entries = [e for e in environ.get(key, "").split(",") if e.strip()]
            environ[key] = ",".join(dict.fromkeys([*entries, "127.0.0.1", "localhost"]))
        process = await asyncio.create_subprocess_exec(
            *self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environ,
            cwd=self.cwd,
            start_new_session=True,
        )
        try:
            out, err = await process.communicate(described.encode())
        except BaseException:
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGKILL)  # its own session: the command and what it started
                await process.wait()
            raise
        if process.returncode != 0:
            tail = err.decode(errors="replace")[-STDERR_KEPT:].strip()
            raise AgentCrashed(
                f"the agent command exited with status {process.returncode}" + (f": {tail}" if tail else "")
            )
        return out.decode(errors="replace").strip() or None


@attrs.define
class AgentEpisode:
    """Runs `agent` on the session through `endpoint` (see the module docstring). `agent_timeout` bounds the
    program's whole run; the episode's own time limit is the runner's (`run_episode`'s `attempt_timeout`)."""

    endpoint: AgentEndpoint
    agent: AgentProgram
    agent_timeout: float | None = None
    parser: ToolParser | None = None  # the endpoint's where None
    settings: RecorderSettings | None = None  # the endpoint's where None
    engine: Engine | None = None  # the endpoint's where None; the runner's engine for this episode

    async def run(self, session: EnvSession) -> Trajectory:
        started = time.perf_counter()
        await self.endpoint.ensure_started()
        tools = await session.tools()
        prompt = await session.prompt_messages()
        has_terminal_tool = await session.terminal_tool() is not None
        env_faults: list[str] = []
        numbers = itertools.count()

        async def call_tool(name: str, arguments: Mapping[str, Any]) -> ToolAnswer:
            call_started = time.perf_counter()
            try:
                outcome = await session.call_tool(name, arguments)
            except EnvError as error:
                env_faults.append(str(error))
                raise
            return _recorded(
                recorder,
                ToolCall(name, dict(arguments), f"agent_call_{next(numbers)}"),
                outcome,
                time.perf_counter() - call_started,
            )

        async def run_tool(name: str, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
            return (await call_tool(name, arguments)).to_dict()

        recorder = self.endpoint.open_episode(
            tool_runner=run_tool, parser=self.parser, settings=self.settings, engine=self.engine
        )
        api_key = self.endpoint.api_key or DEFAULT_API_KEY
        task = AgentTask(
            self.endpoint.base_url(recorder.key),
            api_key,
            prompt,
            tools,
            self.endpoint.tools_url(recorder.key),
            call_tool,
        )
        failure: tuple[StopReason, str] | None = None
        try:
            try:
                async with asyncio.timeout(self.agent_timeout):
                    answer = await self.agent(task)
            except TimeoutError:
                failure = (StopReason.TIMEOUT, f"the agent ran past agent_timeout={self.agent_timeout:g}s")
            except EnvError as error:
                failure = (StopReason.ENV_ERROR, str(error))
            except Exception as error:
                failure = (StopReason.ABORTED, f"the agent failed: {type(error).__name__}: {error}")
            else:
                gave_answer = (
                    answer and not recorder.last_answer_truncated
                )  # a cut-off answer is no answer, as in ToolEpisode
                if (
                    answer
                    and gave_answer
                    and has_terminal_tool
                    and not session.finished
                    and not env_faults
                    and recorder.fault is None
                ):
                    outcome = await session.call_terminal_tool(answer)
                    _recorded(recorder, ToolCall("__terminal__", {"message": answer}, "terminal"), outcome, 0.0)
        finally:
            self.endpoint.close_episode(recorder.key)
        stop_reason, detail = failure or _ending(recorder, session, env_faults)
        return recorder.trajectory(
            session.task,
            stop_reason=stop_reason,
            stop_detail=detail,
            finished=session.finished,
            seconds=time.perf_counter() - started,
        )


@attrs.define
class AgentEpisodeBuilder:
    """The `EpisodeBuilder` `agent_episode_builder` returns: one `AgentEndpoint` per renderer of the runner, each
    episode sampling through the engine it is built with (the hooks wrap the process's engine per episode)."""

    # why the partial-rollout hooks refuse it: they park an episode's model call between steps and resume it,
    # and an agent program's call is an HTTP request the program holds open while it runs on
    cannot_suspend: ClassVar[str] = (
        "an agent program's episode: the program holds each model call open and runs on, so the episode cannot be "
        "parked at the step's end and resumed in the next"
    )

    agent: AgentProgram
    agent_timeout: float | None = None
    endpoints: dict[int, AgentEndpoint] = attrs.field(factory=dict, repr=False)

    def __call__(
        self,
        engine: Engine,
        renderer: ChatRenderer,
        parser: ToolParser,
        settings: EpisodeSettings,
        *,
        routing_key: str | None = None,
    ) -> AgentEpisode:
        endpoint = self.endpoints.get(id(renderer))
        if endpoint is None or endpoint.renderer is not renderer:
            endpoint = self.endpoints[id(renderer)] = AgentEndpoint(engine, renderer, parser)
        settings_for_episode = RecorderSettings.from_episode(settings)
        return AgentEpisode(
            endpoint,
            self.agent,
            agent_timeout=self.agent_timeout,
            parser=parser,
            settings=settings_for_episode,
            engine=engine,
        )

    async def aclose(self) -> None:
        """Stop the endpoints serving on the running loop (the runner's state closes); those of a loop gone
        are forgotten. A later episode starts a new one."""
        loop = asyncio.get_running_loop()
        endpoints = list(self.endpoints.values())
        self.endpoints.clear()
        for endpoint in endpoints:
            if endpoint.serving_on(loop):
                await endpoint.aclose()


def agent_episode_builder(agent: AgentProgram, *, agent_timeout: float | None = None) -> AgentEpisodeBuilder:
    """An `EpisodeBuilder` (the config's `episode:`) that runs `agent` on each episode: one `AgentEndpoint`
    per renderer of the runner (each episode on the runner's engine for it), started on 127.0.0.1 with the first episode; each episode gets
    the runner's parser and its environment's limits (`EpisodeSettings`: max_new_tokens, max_context_len,
    sampling_params, train_thinking, tool_preamble). Not under the trainers' `--partial-rollout`
    (`AgentEpisodeBuilder.cannot_suspend` says why; the hooks refuse it).

        build = agent_episode_builder(SubprocessAgent(["python", "my_agent.py"]), agent_timeout=600)
        # config: episode: path/to/this_file.py:build
    """
    return AgentEpisodeBuilder(agent, agent_timeout)


def _recorded(recorder: EpisodeRecorder, call: ToolCall, outcome: ToolOutcome, seconds: float) -> ToolAnswer:
    result = ToolResult(
        call=call,
        text=outcome.text,
        reward=outcome.reward,
        finished=outcome.finished,
        error=outcome.error,
        seconds=seconds,
        metadata=outcome.metadata,
    )
    recorder.record_tool_result(result)
    return ToolAnswer(outcome.text, outcome.reward, outcome.finished, outcome.error)


def _ending(recorder: EpisodeRecorder, session: EnvSession, env_faults: Sequence[str]) -> tuple[StopReason, str]:
    """How an episode whose program returned ended: a fault it swallowed first, then the environment's word."""
    if env_faults:
        return StopReason.ENV_ERROR, env_faults[0]
    if recorder.fault is not None:
        return recorder.fault
    if session.finished:
        return StopReason.COMPLETED, ""
    if recorder.overflow is not None:
        return StopReason.CONTEXT_OVERFLOW, recorder.overflow
    if recorder.turns and recorder.turns[-1].finish_reason is FinishReason.LENGTH:
        return StopReason.TRUNCATED, f"the last answer hit its cap of {recorder.turns[-1].max_new_tokens} tokens"
    return StopReason.NO_TOOL_CALL, "the agent ended before the environment finished the episode"

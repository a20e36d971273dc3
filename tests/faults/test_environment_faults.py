"""Environment faults through whole episodes: the SDK's real environment `Server` on 127.0.0.1
serving examples/environments/faulty.py (in-process, and as a child process for the kill tests),
the real Qwen3 tokenizer and chat template, and the SGLang /generate test double."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator

import pytest
from fault_harness import SAMPLING, EpisodeRun, assert_sample
from openreward import AsyncOpenReward

from hermes_calls import call
from openreward_rl import EpisodeSettings, StopReason
from openreward_rl.assets import load_tokenizer
from openreward_rl.env import environment
from openreward_rl.env.local_server import LocalEnvServer, serve_environments
from openreward_rl.env.tool_output import TRUNCATION_MARKER
from openreward_rl.testing import ScriptedCompletion

pytestmark = pytest.mark.anyio
SUBMIT = ScriptedCompletion(text=call("submit", answer="ok"))


@pytest.fixture
def faulty(env_server: LocalEnvServer, openreward_client: AsyncOpenReward) -> EpisodeRun:
    return EpisodeRun(openreward_client, env_server.base_url, env_server.variant_for("Faulty"))


@pytest.mark.parametrize("tool", ["explode", "wrong_return"])
async def test_a_tool_that_raises_ends_the_episode_as_env_error(faulty: EpisodeRun, fault_report, tool: str) -> None:
    trajectory, _ = await faulty.run([ScriptedCompletion(text=call(tool))])
    fault_report.sample(f"tool raises ({tool})", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ENV_ERROR
    assert "ToolFailed" in trajectory.stop_detail
    assert sum(trajectory.loss_mask) > 0  # the sampled call is kept in the ledger
    assert not any(t.tool_results for t in trajectory.turns)  # no result was invented


async def test_a_hanging_tool_times_out_as_env_error(faulty: EpisodeRun, fault_report) -> None:
    trajectory, _ = await faulty.run([ScriptedCompletion(text=call("hang", seconds=600))], tool_timeout=0.3)
    fault_report.sample("tool hangs (tool_timeout)", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ENV_ERROR
    assert "timed out after 0.3s" in trajectory.stop_detail and "hang" in trajectory.stop_detail


async def test_a_hanging_tool_hits_the_episode_timeout(faulty: EpisodeRun, fault_report) -> None:
    settings = EpisodeSettings(sampling_params=SAMPLING, episode_timeout=0.5)
    trajectory, _ = await faulty.run([ScriptedCompletion(text=call("hang", seconds=600))], settings=settings)
    fault_report.sample("tool hangs (episode_timeout)", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.TIMEOUT
    assert trajectory.prompt_ids and sum(trajectory.loss_mask) > 0  # the partial episode is kept


async def test_a_hanging_tool_hits_the_attempt_timeout_and_nothing_is_kept(faulty: EpisodeRun, fault_report) -> None:
    """The runner's limit (`run_episode(attempt_timeout=)`) bounds the whole attempt; unlike the
    Episode's own `episode_timeout` it cannot keep a partial trajectory."""
    trajectory, _ = await faulty.run([ScriptedCompletion(text=call("hang", seconds=600))], attempt_timeout=0.5)
    fault_report.sample("tool hangs (attempt_timeout)", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.TIMEOUT and "attempt_timeout=0.5s" in trajectory.stop_detail
    assert not trajectory.prompt_ids and not trajectory.turns


async def test_megabytes_of_tool_output_are_cut_to_the_token_budget(faulty: EpisodeRun, fault_report) -> None:
    budget = 256
    settings = EpisodeSettings(sampling_params=SAMPLING, max_tool_output_tokens=budget)
    trajectory, server = await faulty.run(
        [ScriptedCompletion(text=call("flood", megabytes=4)), SUBMIT], settings=settings
    )
    fault_report.sample("tool returns 4 MiB", trajectory)
    assert_sample(trajectory, infrastructure=False)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0
    flood = trajectory.turns[0].tool_results[0]
    assert flood.truncated and flood.text.endswith(TRUNCATION_MARKER.format(limit=budget))
    tokenizer = load_tokenizer("offline:qwen3")
    body = flood.text[: -len(TRUNCATION_MARKER.format(limit=budget))]
    assert len(tokenizer.encode(body, add_special_tokens=False)) <= budget
    assert trajectory.metrics["tool_outputs_truncated"] == 1.0
    # what the model saw next is the cut text, not megabytes
    second_prompt = server.requests[1].input_ids
    assert len(second_prompt) - len(server.requests[0].input_ids) < budget + 200


async def test_control_characters_never_reach_the_model(faulty: EpisodeRun, fault_report) -> None:
    trajectory, server = await faulty.run([ScriptedCompletion(text=call("garble")), SUBMIT])
    fault_report.sample("tool returns control characters", trajectory)
    assert_sample(trajectory, infrastructure=False)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0
    text = trajectory.turns[0].tool_results[0].text
    assert not any(ch in text for ch in "\x00\x07\x08\x1b\x0b\x0c\x7f")
    assert "emoji:" in text and "\U0001f575" in text  # valid text survives
    seen = load_tokenizer("offline:qwen3").decode(server.requests[1].input_ids)
    assert "\x00" not in seen and "\x1b" not in seen


async def test_unencodable_tool_output_is_an_env_error(faulty: EpisodeRun, fault_report) -> None:
    """The SDK server cannot encode a lone surrogate; the session dies (ToolFailed): an env fault."""
    trajectory, _ = await faulty.run([ScriptedCompletion(text=call("unencodable"))])
    fault_report.sample("tool returns a lone surrogate", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ENV_ERROR


async def test_a_model_written_lone_surrogate_is_refused_before_the_tool_runs(faulty: EpisodeRun, fault_report) -> None:
    r"""JSON lets the model write "\ud800"; sent on, it would kill the session. It goes back to the model."""
    bad = '<tool_call>\n{"name": "submit", "arguments": {"answer": "\\ud800"}}\n</tool_call>'
    trajectory, _ = await faulty.run([ScriptedCompletion(text=bad), SUBMIT])
    fault_report.sample("model writes a lone surrogate", trajectory)
    assert_sample(trajectory, infrastructure=False)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0
    refused = trajectory.turns[0].tool_results[0]
    assert refused.error == "bad_input_shape" and "invalid Unicode" in refused.text


async def test_unknown_tools_and_malformed_calls_go_back_to_the_model(faulty: EpisodeRun, fault_report) -> None:
    script = [
        ScriptedCompletion(text=call("teleport", where="moon")),
        ScriptedCompletion(text='<tool_call>\n{"name": "submit", "arguments": {"answer": }\n</tool_call>'),
        ScriptedCompletion(text=call("flood", megabytes="lots")),
        SUBMIT,
    ]
    trajectory, server = await faulty.run(script)
    fault_report.sample("unknown tool / bad JSON / bad arguments", trajectory)
    assert_sample(trajectory, infrastructure=False)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0
    assert [len(t.tool_results) for t in trajectory.turns] == [0, 0, 1, 1]  # invalid calls never ran
    assert trajectory.turns[2].tool_results[0].error == "input_validation"
    tokenizer = load_tokenizer("offline:qwen3")
    assert "unknown tool 'teleport'" in tokenizer.decode(server.requests[1].input_ids)
    assert "invalid_json" in tokenizer.decode(server.requests[2].input_ids)


@pytest.fixture
async def faulty_child() -> AsyncIterator[LocalEnvServer]:
    """Faulty in a child process, so that it can be hard-killed like a crashed pod."""
    server = serve_environments(["examples/environments/faulty.py:Faulty"], subprocess=True)
    async with server:
        yield server


async def test_env_server_killed_between_turns(
    faulty_child: LocalEnvServer, openreward_client: AsyncOpenReward, fault_report
) -> None:
    run = EpisodeRun(openreward_client, faulty_child.base_url, None)

    def script(request) -> ScriptedCompletion:
        if len(run_requests) == 1:  # the model's second turn: the environment has just crashed
            faulty_child.kill()
        run_requests.append(request)
        return ScriptedCompletion(text=call("garble") if len(run_requests) == 1 else call("submit", answer="ok"))

    run_requests: list = []
    started = time.perf_counter()
    trajectory, _ = await run.run(script_fn=script, attempts=2)
    elapsed = time.perf_counter() - started
    fault_report.sample("env server killed between turns", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert faulty_child.returncode is not None and faulty_child.returncode < 0  # it really was killed
    assert trajectory.stop_reason is StopReason.ENV_ERROR
    # The liveness probe ended it, not the SDK's ~15 s of call retries; the second attempt could not open.
    assert "unreachable" in trajectory.stop_detail, trajectory.stop_detail
    assert trajectory.metrics["attempts"] == 2.0
    print(f"\nenv server killed between turns: episode ended after {elapsed:.1f}s with {trajectory.stop_detail!r}")


async def test_env_server_killed_during_a_tool_call(
    faulty_child: LocalEnvServer, openreward_client: AsyncOpenReward, fault_report
) -> None:
    run = EpisodeRun(openreward_client, faulty_child.base_url, None)

    async def kill_when_the_tool_runs() -> None:
        while True:  # the episode is inside `hang` once the double has answered the first turn
            await asyncio.sleep(0.05)
            if served:
                await asyncio.sleep(0.3)
                await asyncio.to_thread(faulty_child.kill)
                return

    served: list = []

    def script(request) -> ScriptedCompletion:
        served.append(request)
        return ScriptedCompletion(text=call("hang", seconds=600))

    killer = asyncio.ensure_future(kill_when_the_tool_runs())
    started = time.perf_counter()
    trajectory, _ = await run.run(script_fn=script, attempts=1)
    elapsed = time.perf_counter() - started
    await killer
    fault_report.sample("env server killed during a tool call", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ENV_ERROR
    assert "unreachable" in trajectory.stop_detail and "hang" in trajectory.stop_detail, trajectory.stop_detail
    print(f"\nenv server killed during a tool call: episode ended after {elapsed:.1f}s")


@pytest.mark.parametrize("when", ["between turns", "during a tool call"])
async def test_env_server_that_stops_answering_ends_the_episode_within_the_window(
    faulty_child: LocalEnvServer,
    openreward_client: AsyncOpenReward,
    fault_report,
    monkeypatch: pytest.MonkeyPatch,
    when: str,
) -> None:
    """A server that accepts connections and answers nothing (SIGSTOPped: hung, or its host cut off) ends
    the episode as env_error within the liveness window (shortened here from 60 s), never as a reward; the
    second attempt's session open meets the same verdict within seconds, not after `open_timeout` (600 s)."""
    window_s = 2.0
    monkeypatch.setattr(environment, "UNRESPONSIVE_S", window_s)
    run = EpisodeRun(openreward_client, faulty_child.base_url, None)
    stopped: list[float] = []

    def script(request) -> ScriptedCompletion:
        if not stopped and (when == "during a tool call" or requests):
            os.kill(faulty_child.pid, signal.SIGSTOP)  # the model's answer is a call the server will never answer
            stopped.append(time.perf_counter())
        requests.append(request)
        return ScriptedCompletion(text=call("garble") if len(requests) == 1 else call("submit", answer="ok"))

    requests: list = []
    try:
        trajectory, _ = await run.run(script_fn=script, attempts=2)
        elapsed = time.perf_counter() - stopped[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(faulty_child.pid, signal.SIGCONT)
    fault_report.sample(f"env server stopped answering {when}", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ENV_ERROR and trajectory.reward is None
    assert "answered nothing" in trajectory.stop_detail, trajectory.stop_detail
    assert trajectory.metrics["attempts"] == 2.0
    # the first attempt: after_s (1 s) then the window; the second: a few unanswered probes; plus the backoff
    assert elapsed < 1.0 + window_s + 30.0, elapsed  # not open_timeout (600 s) nor CALL_ANSWER_WAIT_S (300 s)
    print(
        f"\nenv server stopped answering {when}: episode ended {elapsed:.1f}s after the stop with {trajectory.stop_detail!r}"
    )

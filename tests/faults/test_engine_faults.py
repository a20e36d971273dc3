"""Engine faults through whole episodes: the SGLang /generate test double (a faithful double of its
wire format; SGLang cannot run here) injecting 5xx storms, dropped connections, hangs and aborts,
against the SDK's real environment `Server` (Faulty) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fault_harness import SAMPLING, EpisodeRun, assert_sample
from openreward import AsyncOpenReward

from hermes_calls import call
from openreward_rl import EpisodeSettings, StopReason
from openreward_rl.env.local_server import LocalEnvServer
from openreward_rl.reducers import RewardPolicy, get_reducer
from openreward_rl.testing import ScriptedCompletion

pytestmark = pytest.mark.anyio
SUBMIT = ScriptedCompletion(text=call("submit", answer="ok"))


@pytest.fixture
async def faulty(env_server: LocalEnvServer) -> AsyncIterator[EpisodeRun]:
    client = AsyncOpenReward(api_key="local")
    try:
        yield EpisodeRun(client, env_server.base_url, env_server.variant_for("Faulty"))
    finally:
        await client.environments.aclose()


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_an_engine_error_storm_aborts_the_sample(faulty: EpisodeRun, fault_report, status: int) -> None:
    trajectory, server = await faulty.run(
        [SUBMIT], server_setup=lambda s: s.fail_next(10, status=status), engine_attempts=3
    )
    fault_report.sample(f"engine answers {status} x10", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ABORTED and "after 3 attempt(s)" in trajectory.stop_detail
    assert len(server.requests) == 0 or all(r.path == "/generate" for r in server.requests)


async def test_a_short_engine_error_burst_is_retried(faulty: EpisodeRun, fault_report) -> None:
    trajectory, _ = await faulty.run([SUBMIT], server_setup=lambda s: s.fail_next(2, status=503), engine_attempts=3)
    fault_report.sample("engine answers 503 x2", trajectory)
    assert_sample(trajectory, infrastructure=False)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0


async def test_a_dropped_connection_is_retried(faulty: EpisodeRun, fault_report) -> None:
    trajectory, _ = await faulty.run([SUBMIT], server_setup=lambda s: s.drop_next(1), engine_attempts=2)
    fault_report.sample("engine drops the connection", trajectory)
    assert_sample(trajectory, infrastructure=False)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0


async def test_dropped_connections_past_the_retries_abort(faulty: EpisodeRun, fault_report) -> None:
    trajectory, _ = await faulty.run([SUBMIT], server_setup=lambda s: s.drop_next(5), engine_attempts=2)
    fault_report.sample("engine drops every connection", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ABORTED


async def test_a_hanging_engine_times_out_and_aborts(faulty: EpisodeRun, fault_report) -> None:
    trajectory, _ = await faulty.run(
        [SUBMIT], server_setup=lambda s: s.hang_next(5), engine_attempts=2, engine_timeout_s=0.3
    )
    fault_report.sample("engine hangs", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ABORTED and "timeout" in trajectory.stop_detail


async def test_an_abort_in_the_scheduler_aborts_without_retrying(faulty: EpisodeRun, fault_report) -> None:
    trajectory, server = await faulty.run([SUBMIT], server_setup=lambda s: s.abort_next(1))
    fault_report.sample("engine aborts before any token", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ABORTED and trajectory.metrics["attempts"] == 1.0
    assert len(server.requests) == 1  # an abort is never re-sent as a new turn


async def test_an_abort_mid_turn_keeps_the_partial_output(faulty: EpisodeRun, fault_report) -> None:
    trajectory, _ = await faulty.run([ScriptedCompletion(text="Let me think about", finish="abort")])
    fault_report.sample("engine aborts mid-turn", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ABORTED and sum(trajectory.loss_mask) > 0


async def test_a_length_finish_is_truncated_not_a_failure(faulty: EpisodeRun, fault_report) -> None:
    policy = RewardPolicy(get_reducer("sum"), nonterminal_reward=0.0)
    settings = EpisodeSettings(sampling_params={**SAMPLING, "max_new_tokens": 5})
    trajectory, _ = await faulty.run([SUBMIT], settings=settings, reward_policy=policy)
    fault_report.sample("model hits max_new_tokens", trajectory)
    assert_sample(trajectory, infrastructure=False)
    assert trajectory.stop_reason is StopReason.TRUNCATED and trajectory.reward == 0.0  # the policy's, not a fault's
    assert trajectory.turns[0].tool_results == ()  # the cut call never ran

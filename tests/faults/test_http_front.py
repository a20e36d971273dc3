"""5xx and 429 between the client and the environment: `HttpFront`, a real reverse proxy on
127.0.0.1, in front of the SDK's real environment `Server` (Faulty), through whole episodes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fault_harness import FAST_RETRY, EpisodeRun, assert_sample
from http_front import HttpFront
from openreward import AsyncOpenReward

from hermes_calls import call
from openreward_rl import StopReason
from openreward_rl.env.local_server import LocalEnvServer
from openreward_rl.testing import ScriptedCompletion

pytestmark = pytest.mark.anyio
SUBMIT = ScriptedCompletion(text=call("submit", answer="ok"))


@pytest.fixture
async def front(env_server: LocalEnvServer) -> AsyncIterator[HttpFront]:
    async with HttpFront(env_server.base_url) as front:
        yield front


@pytest.fixture
async def run(front: HttpFront, env_server: LocalEnvServer) -> AsyncIterator[EpisodeRun]:
    client = AsyncOpenReward(api_key="local")
    try:
        yield EpisodeRun(client, front.url, env_server.variant_for("Faulty"))
    finally:
        await client.environments.aclose()


@pytest.mark.parametrize(
    ("count", "status", "paths", "label"),
    [
        pytest.param(2, 503, None, "proxy answers 503 x2", id="a_few_503s"),
        # The SDK gives session creation 4 tries; 5 capacity refusals outlast them, our open retry does not.
        pytest.param(
            5, 429, ["/create_session"], "proxy answers 429 x5 on create", id="a_429_storm_longer_than_the_sdk_retries"
        ),
    ],
)
async def test_refusals_are_ridden_out(
    front: HttpFront, run: EpisodeRun, fault_report, count: int, status: int, paths: list[str] | None, label: str
) -> None:
    front.fail_next(count, status=status, retry_after="0", paths=paths)
    trajectory, _ = await run.run([SUBMIT])
    fault_report.sample(label, trajectory)
    assert_sample(trajectory, infrastructure=False)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0
    assert front.statuses(status) == count


async def test_endless_429_is_an_env_error_naming_the_concurrency_setting(
    front: HttpFront, run: EpisodeRun, fault_report
) -> None:
    front.fail_next(1000, status=429, retry_after="0")
    trajectory, _ = await run.run([SUBMIT], attempts=2)
    fault_report.sample("proxy answers 429 forever", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ENV_ERROR
    assert "at capacity (HTTP 429)" in trajectory.stop_detail
    assert "--sglang-server-concurrency" in trajectory.stop_detail and "--concurrency" in trajectory.stop_detail
    assert front.statuses(429) == 2 * FAST_RETRY.attempts * 4  # 2 episode attempts x 3 opens x 4 SDK tries
    assert not any(path.endswith("/call") for path, _ in front.seen)  # no tool ran


async def test_a_500_on_create_is_not_retried(front: HttpFront, run: EpisodeRun, fault_report) -> None:
    front.fail_next(1, status=500, paths=["/create_session"])
    trajectory, _ = await run.run([SUBMIT])
    fault_report.sample("proxy answers 500 on create", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ENV_ERROR and "HTTP 500" in trajectory.stop_detail
    assert front.statuses(500) == 1 and front.seen == [(front.seen[0][0], 500)]


async def test_a_502_on_a_tool_call_is_retried_by_the_sdk(front: HttpFront, run: EpisodeRun, fault_report) -> None:
    """The SDK repeats a /call that failed before the server assigned it a task id: here the proxy
    refused it, so the tool never ran. (Had it run, the repeat could run it twice: see docs/reliability.md.)"""
    front.fail_next(1, status=502, retry_after="0", paths=["/call"])
    trajectory, _ = await run.run([SUBMIT])
    fault_report.sample("proxy answers 502 on a tool call", trajectory)
    assert_sample(trajectory, infrastructure=False)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0
    assert [s for p, s in front.seen if p.endswith("/call")] == [502, 200]


async def test_busy_reads_inside_a_session_are_retried(front: HttpFront, run: EpisodeRun, fault_report) -> None:
    front.fail_next(4, status=503, retry_after="0", paths=["/tools", "/task_tools"])
    trajectory, _ = await run.run([SUBMIT])
    fault_report.sample("proxy answers 503 x4 on tool listing", trajectory)
    assert_sample(trajectory, infrastructure=False)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0
    assert front.statuses(503) == 4


async def test_prepare_rides_out_busy_listings_under_the_retry_policy_it_is_given(
    front: HttpFront, env_server: LocalEnvServer, tmp_path
) -> None:
    """`prepare(retry=...)` repeats a listing that stayed busy through the SDK's own 3 tries: with 3
    attempts of no back-off, 6 busy answers are ridden out at once (production waits 1 + 2 s)."""
    from openreward_rl.cli.prepare import prepare
    from openreward_rl.config import parse_config
    from openreward_rl.retry import RetryPolicy

    config = parse_config(
        {"environments": {"Faulty": {"variant": env_server.variant_for("Faulty")}}, "env_base_url": front.url}
    )
    output = tmp_path / "tasks.jsonl"
    instant = RetryPolicy(attempts=3, initial_s=0.0, max_s=0.0, jitter_s=0.0)
    front.fail_next(6, status=503, retry_after="0", paths=["/tasks"])
    client = AsyncOpenReward(api_key="local")
    try:
        count = await prepare(config, output, max_tasks=2, seed=0, client=client, retry=instant, check_retry=instant)
        front.fail_next(6, status=503, retry_after="0", paths=["/tasks"])
        with pytest.raises(Exception, match="503"):
            await prepare(
                config, output, max_tasks=2, seed=0, client=client, retry=RetryPolicy(attempts=1), check_retry=instant
            )
    finally:
        await client.environments.aclose()
    assert count == 2 and len(output.read_text().splitlines()) == 2
    assert (
        sum(1 for path, status in front.seen if path.endswith("/tasks") and status == 503) == 6 + 3
    )  # one attempt: the SDK's 3 tries

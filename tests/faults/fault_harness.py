"""Shared pieces of the fault suite: one episode against a real environment server and the SGLang
test double (a faithful double of SGLang's /generate wire format; SGLang cannot run here), and the
checks every fault test makes on the sample it produced."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from openreward import AsyncOpenReward

from openreward_rl import ChatRenderer, EpisodeSettings, StopReason, TaskRef, ToolEpisode, Trajectory, run_episode
from openreward_rl.assets import load_tokenizer
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.parsers import get_parser
from openreward_rl.reducers import RewardPolicy
from openreward_rl.retry import RetryPolicy
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 512}
# Short waits: the suite must stay fast; the shapes of the policies are what is under test.
FAST_RETRY = RetryPolicy(attempts=3, initial_s=0.01, max_s=0.05, jitter_s=0.01)


@attrs.define
class EpisodeRun:
    """Runs one episode of `environment` on the server at `base_url` with a scripted model."""

    client: AsyncOpenReward
    base_url: str
    variant: str | None
    tokenizer_name: str = "offline:qwen3"

    async def run(
        self,
        script: Sequence[ScriptedCompletion] = (),
        *,
        environment: str = "Faulty",
        index: int = 0,
        settings: EpisodeSettings | None = None,
        reward_policy: RewardPolicy | None = None,
        server_setup: Callable[[SGLangTestServer], None] | None = None,
        script_fn: Callable[[Any], ScriptedCompletion] | None = None,
        engine_attempts: int = 2,
        engine_timeout_s: float = 30.0,
        attempts: int = 1,
        tool_timeout: float | None = None,
        attempt_timeout: float | None = None,
        secrets: Mapping[str, str] | None = None,
        open_retry: RetryPolicy = FAST_RETRY,
        read_retry: RetryPolicy = FAST_RETRY,
        close_timeout: float = 2.0,
    ) -> tuple[Trajectory, SGLangTestServer]:
        tokenizer = load_tokenizer(self.tokenizer_name)
        settings = settings or EpisodeSettings(sampling_params=SAMPLING)
        async with SGLangTestServer(tokenizer, script=script_fn or list(script)) as server:
            if server_setup:
                server_setup(server)
            engine = SGLangEngine(
                server.url,
                max_attempts=engine_attempts,
                backoff_initial_s=0.01,
                backoff_max_s=0.02,
                timeout_s=engine_timeout_s,
            )
            task = TaskRef(environment, "train", index=index, base_url=self.base_url, variant=self.variant)
            try:
                trajectory = await run_episode(
                    lambda: ToolEpisode(
                        engine, ChatRenderer(tokenizer), get_parser("hermes"), settings, routing_key="faults"
                    ),
                    self.client,
                    task,
                    reward_policy=reward_policy,
                    secrets=secrets,
                    attempts=attempts,
                    tool_timeout=tool_timeout,
                    attempt_timeout=attempt_timeout,
                    open_retry=open_retry,
                    read_retry=read_retry,
                    close_timeout=close_timeout,
                )
            finally:
                await engine.aclose()
        return trajectory, server


def slime_samples(trajectory: Trajectory, tokenizer_name: str = "offline:qwen3") -> list[Any]:
    """The trajectory as the Slime adapter writes it into Slime's `Sample` (tests/doubles/slime_double.py,
    a double of Slime's `Sample` and of the checks Slime applies; Slime cannot run here)."""
    from doubles.slime_double import Sample, check_output
    from openreward_rl.backends._sample.fill import samples_from_trajectory

    row = Sample(index=0, prompt="", metadata={"environment": trajectory.task.environment, "source": "faults"})
    samples = samples_from_trajectory(row, trajectory, tokenizer=load_tokenizer(tokenizer_name))
    return check_output(samples[0] if len(samples) == 1 else samples)  # what the hook hands Slime


def assert_sample(trajectory: Trajectory, *, infrastructure: bool) -> None:
    """The invariants of every sample the suite produces.

    - never empty: it has tokens, or it is an explicit failure (no segments, reward None, a failure
      stop reason);
    - an infrastructure fault is never a reward: infrastructure failures carry reward None, and a
      fault the test injected into the infrastructure must end as one;
    - the training view is consistent (one mask entry and one log-prob per response token);
    - written into Slime's `Sample` by the adapter it is non-empty, passes Slime's checks, and is
      ABORTED (removed, loss fully masked) exactly when the fault was the infrastructure's.
    """
    assert isinstance(trajectory.stop_reason, StopReason)
    assert trajectory.stop_detail or not trajectory.stop_reason.is_infrastructure_failure, "a failure says why"
    if trajectory.tokens:
        assert len(trajectory.response_ids) == len(trajectory.loss_mask) == len(trajectory.rollout_logprobs)
        assert trajectory.prompt_ids
    else:
        assert (
            not trajectory.segments and trajectory.reward is None and trajectory.stop_reason.is_infrastructure_failure
        )
    if trajectory.stop_reason.is_infrastructure_failure:
        assert trajectory.reward is None, f"an infrastructure failure became reward {trajectory.reward}"
        assert not trajectory.trainable
    assert trajectory.stop_reason.is_infrastructure_failure is infrastructure, (
        trajectory.stop_reason,
        trajectory.stop_detail,
    )
    for sample in slime_samples(trajectory):  # Slime's own invariants hold, whatever happened
        assert sample.tokens and sample.response_length >= 1
        if infrastructure:
            assert sample.status.name == "ABORTED" and sample.remove_sample and not any(sample.loss_mask)
            assert sample.metadata["reward_observed"] is False
        else:
            assert sample.status.name in ("COMPLETED", "TRUNCATED") and not sample.remove_sample

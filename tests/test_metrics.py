"""Per-environment summaries and the unbiased pass@k estimator."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from openreward_rl.env.tasks import TaskRef
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.observe.metrics import EpisodeStats, aggregate, flat_metrics, pass_at_k, summarize


def episode(
    env: str, index: int, reward: float | None, stop: StopReason = StopReason.COMPLETED, **metrics: float
) -> Trajectory:
    return Trajectory(
        TaskRef(env, "test", index=index),
        [],
        [],
        [],
        [],
        reward,
        stop,
        stop_detail=f"{stop.value} detail",
        metrics=dict(metrics),
    )


@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_the_fraction_of_k_subsets_with_a_success(args: tuple[int, int, int]) -> None:
    n, c, k = args
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    exact = sum(any(outcomes[i] for i in subset) for subset in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(exact)


@pytest.mark.parametrize("n, c, k", [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_rejects_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


def test_infrastructure_failures_are_counted_apart_and_never_scored() -> None:
    trajectories = [
        episode("A", 0, 1.0, turns=2, sampled_tokens=10),
        episode("A", 0, 0.0, turns=4, sampled_tokens=30),
        episode("A", 1, 0.0, turns=1, sampled_tokens=5),
        episode("A", 1, None, StopReason.ENV_ERROR),
        episode("A", 2, None, StopReason.TRUNCATED, turns=1, sampled_tokens=50),
        episode("B", 0, 0.5, turns=1, sampled_tokens=7),
    ]
    summary = summarize(trajectories)
    a = summary["A"]
    assert (a.episodes, a.scored, a.infrastructure_failures, a.unrewarded, a.tasks) == (5, 4, 1, 1, 3)
    assert a.reward_mean == pytest.approx(1 / 4)  # the unrewarded truncated episode counts 0, as the trainer sees it
    assert a.success_rate == pytest.approx(1 / 4)  # ... and it is not a success
    assert a.failures == {"env_error": (1, "env_error detail")}
    assert a.stop_reasons == {"completed": 0.6, "env_error": 0.2, "truncated": 0.2}
    assert a.turns_mean == pytest.approx(2.0) and a.sampled_tokens_mean == pytest.approx(23.75)
    # pass@1 over the three tasks: 1/2, 0/1, 0/1; pass@2 only over task 0 (the others have one scored sample)
    assert a.pass_at_k == {1: pytest.approx(1 / 6), 2: pytest.approx(1.0)}
    assert summary["B"].success_rate == 1.0 and summary["B"].pass_at_k == {1: 1.0}


def test_reward_figures_are_what_the_trainer_optimises() -> None:
    """A scored episode without a reward (truncated before any) is 0.0 for the trainer's reward hook
    (`EpisodeRecord.trained_reward`); the summary's reward figures count it so, and count it apart."""
    trajectories = [episode("A", i, 0.5) for i in range(3)] + [
        episode("A", 3, None, StopReason.TRUNCATED),
        episode("A", 4, None, StopReason.ABORTED),
    ]
    a = summarize(trajectories)["A"]
    assert (a.scored, a.unrewarded, a.infrastructure_failures) == (4, 1, 1)
    assert a.reward_mean == pytest.approx(1.5 / 4) and a.reward_min == 0.0 and a.reward_max == 0.5
    assert a.reward_std == pytest.approx(statistics.pstdev([0.5, 0.5, 0.5, 0.0]))
    flat = flat_metrics({"A": a})
    assert flat["A/reward_mean"] == pytest.approx(0.375) and flat["A/unrewarded"] == 1.0


def test_success_threshold_is_configurable() -> None:
    trajectories = [episode("A", 0, 0.5), episode("A", 1, 1.0)]
    assert summarize(trajectories, success_threshold=0.75)["A"].success_rate == 0.5


def test_flat_metrics_keys_per_environment() -> None:
    flat = flat_metrics(
        summarize([episode("Org/Env", 0, 1.0, turns=3), episode("Org/Env", 0, None, StopReason.TIMEOUT)]),
        prefix="eval/",
    )
    assert flat["eval/Org/Env/reward_mean"] == 1.0
    assert flat["eval/Org/Env/infra_failures"] == 1.0
    assert flat["eval/Org/Env/stop/timeout"] == 0.5
    assert flat["eval/Org/Env/pass@1"] == 1.0
    assert all(isinstance(v, float) and not math.isnan(v) for v in flat.values())


def test_an_environment_with_only_failures_has_no_reward_figures() -> None:
    summary = summarize([episode("A", 0, None, StopReason.ABORTED)])
    assert summary["A"].reward_mean is None and summary["A"].success_rate is None and summary["A"].pass_at_k == {}
    assert "A/reward_mean" not in flat_metrics(summary)


def test_eval_flat_metrics_carry_the_rollout_log_figures() -> None:
    """What the rollout log used to compute alone now comes with every summary."""
    trajectories = [
        episode("A", 0, 1.0, turns=2, env_seconds=1.0, model_seconds=3.0, **{"parse_errors/invalid_json": 2.0}),
        episode("A", 1, 0.0, turns=4, prefix_breaks=1.0),
        episode("A", 1, None, StopReason.TIMEOUT),
    ]
    trajectories[0].finished = True
    flat = flat_metrics(summarize(trajectories))
    assert flat["A/turns_mean"] == 3.0
    assert flat["A/parse_errors/invalid_json_mean"] == pytest.approx(2 / 3)  # 0 for the episodes without any
    assert flat["A/reward_min"] == 0.0 and flat["A/reward_max"] == 1.0
    assert flat["A/reward_observed_rate"] == pytest.approx(2 / 3) and flat["A/infra_failure_rate"] == pytest.approx(
        1 / 3
    )
    assert flat["A/finished_rate"] == pytest.approx(1 / 3)
    assert flat["A/prefix_break_rate"] == pytest.approx(1 / 3) and flat["A/env_time_fraction"] == 0.25
    assert flat["A/trainable_fraction"] == pytest.approx(2 / 3)  # the timeout is not trainable
    assert {f"A/stop/{r.value}" for r in StopReason} <= set(flat) and flat["A/stop/aborted"] == 0.0


def test_records_and_trajectories_summarize_alike() -> None:
    trajectories = [
        episode("A", 0, 1.0, turns=2),
        episode("A", 0, 0.0, turns=3),
        episode("A", 1, None, StopReason.ENV_ERROR),
    ]
    records = [EpisodeStats.from_trajectory(t) for t in trajectories]
    assert summarize(records) == summarize(trajectories) == summarize([records[0], *trajectories[1:]])


def test_an_infrastructure_failure_reward_is_never_counted() -> None:
    """Even where a writer left a reward on a failed trajectory."""
    record = EpisodeStats.from_trajectory(episode("A", 0, 1.0, StopReason.ABORTED))
    assert record.reward is None and not record.succeeded()
    assert "A/reward_mean" not in flat_metrics(summarize([record]))


def test_aggregate_adds_all_and_keeps_tasks_of_different_environments_apart() -> None:
    records = [
        EpisodeStats("A", 1.0, "completed", task=TaskRef("A", "test", index=0).label),
        EpisodeStats("A", 0.0, "completed", task=TaskRef("A", "test", index=0).label),
        EpisodeStats("B", 0.0, "completed", task=TaskRef("A", "test", index=0).label),
        EpisodeStats("B", 0.0, "completed"),  # no task identity: counted, but not in pass@k
    ]
    flat = aggregate(records, "p")
    assert flat["p/A/pass@1"] == 0.5 and flat["p/A/pass@2"] == 1.0 and flat["p/A/tasks"] == 1.0
    assert flat["p/B/pass@1"] == 0.0 and flat["p/B/episodes"] == 2.0
    # over all: A's task 0 and B's task 0 are two tasks (pass@1 = mean of 1/2 and 0)
    assert flat["p/all/tasks"] == 2.0 and flat["p/all/pass@1"] == 0.25 and flat["p/all/pass@2"] == 1.0
    assert flat["p/all/episodes"] == 4.0 and flat["p/all/success_rate"] == 0.25
    assert aggregate([], "p") == {}


def test_an_environment_with_only_failures_logs_no_success_rate() -> None:
    flat = aggregate([EpisodeStats("A", None, "env_error", stop_detail="gone")])
    assert "openreward/A/success_rate" not in flat and "openreward/A/reward_mean" not in flat
    assert flat["openreward/A/infra_failure_rate"] == 1.0 and flat["openreward/A/stop/env_error"] == 1.0
    assert summarize([EpisodeStats("A", None, "env_error", stop_detail="gone")])["A"].failures == {
        "env_error": (1, "gone")
    }


def test_tasks_named_by_spec_are_told_apart_in_pass_at_k() -> None:
    """Two tasks given by their spec (no index), two samples each: one task always solved, one never.
    Grouping by (split, index, variant) alone read them as one task of 4 samples (tasks=1, pass@4=1.0)."""

    def episode(spec: dict, reward: float) -> Trajectory:
        return Trajectory(
            task=TaskRef("SpecEnv", "test", task_spec=spec),
            segments=[],
            turns=[],
            messages=[],
            step_rewards=[reward],
            reward=reward,
            stop_reason=StopReason.COMPLETED,
            finished=True,
        )

    episodes = [episode({"q": "a"}, 1.0), episode({"q": "a"}, 1.0), episode({"q": "b"}, 0.0), episode({"q": "b"}, 0.0)]
    summary = summarize(episodes)["SpecEnv"]
    assert summary.tasks == 2
    assert summary.pass_at_k == {1: 0.5, 2: 0.5}

"""The Slime/Miles rollout-log hooks, called as Slime's `log_rollout_data` calls them, into a
real offline wandb run opened the way Slime's rollout manager opens it.

`SlimeSample` is a stand-in for `slime.utils.types.Sample` (not installable here) with the two
fields the hooks read, `reward` and `metadata`; the metadata is the `EpisodeRecord` the adapters
write, built from real trajectories.
"""

from __future__ import annotations

import argparse
import logging

import attrs
import pytest
import wandb

from observe_fixtures import read_offline_run, real_trajectory
from openreward_rl.backends import rollout_log
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.backends.rollout_log import episode_of_sample, log_eval_rollout, log_rollout
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.observe.metrics import EpisodeStats, aggregate, summarize
from openreward_rl.task import TaskRef


@attrs.define
class SlimeSample:
    reward: float | None
    metadata: dict


def sample_of(
    trajectory: Trajectory, *, environment: str = "addenv", reward: float | None = None, **fields
) -> SlimeSample:
    """A sample as the generate hook fills it: the trajectory's `EpisodeRecord` (with `fields` changed) as metadata."""
    record = attrs.evolve(EpisodeRecord.of_trajectory(trajectory, {}), environment=environment, **fields)
    return SlimeSample(reward=trajectory.reward if reward is None else reward, metadata=record.to_metadata())


def infra_failure() -> Trajectory:
    return Trajectory(
        task=TaskRef("addenv", "train", index=1),
        segments=[],
        turns=[],
        messages=[],
        step_rewards=[],
        reward=None,
        stop_reason=StopReason.ENV_ERROR,
        stop_detail="session died",
    )


def slime_args(**overrides) -> argparse.Namespace:
    values = {
        "use_wandb": True,
        "wandb_project": "slime",
        "wandb_group": None,
        "wandb_always_use_train_step": False,
        "rollout_batch_size": 4,
        "n_samples_per_prompt": 2,
        "global_batch_size": 4,
        "wandb_api_key": "secret-wandb",
    }
    return argparse.Namespace(**{**values, **overrides})


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setattr(rollout_log, "_LOGGER", None)
    yield tmp_path
    if wandb.run is not None:
        wandb.run.finish()


def test_rollout_metrics_land_on_slimes_rollout_step(offline):
    run = wandb.init(project="slime", dir=str(offline))  # what Slime's init_tracking(primary=False) leaves
    good = real_trajectory()
    # Slime 0-pads failed samples' reward; the metadata says no reward was observed
    wrong = Trajectory.from_dict({**good.to_dict(), "reward": 0.0})
    samples = [sample_of(good), sample_of(wrong, environment="other/env"), sample_of(infra_failure(), reward=0.0)]
    assert log_rollout(0, slime_args(), samples, {"rollout/extra": 1.0}, 12.5) is False
    assert log_rollout(1, slime_args(), samples[:1], None, 3.0) is False
    run.finish()

    _, rows = read_offline_run(offline)
    assert [r["rollout/step"] for r in rows] == [0, 1]
    first = rows[0]
    assert first["openreward/addenv/episodes"] == 2
    assert first["openreward/addenv/reward_mean"] == 1.25  # the infra failure is not a 0
    assert first["openreward/addenv/infra_failure_rate"] == 0.5
    assert first["openreward/addenv/stop/env_error"] == 0.5 and first["openreward/addenv/stop/completed"] == 0.5
    assert first["openreward/other/env/reward_mean"] == 0.0
    assert first["openreward/other/env/success_rate"] == 0.0
    assert first["openreward/all/episodes"] == 3
    assert first["openreward/all/success_rate"] == 0.5
    assert first["openreward/addenv/tool_calls_mean"] == 2.0  # mean over the episodes that ran
    assert first["openreward/rollout_seconds"] == 12.5
    assert 0.0 < first["openreward/addenv/env_time_fraction"] < 1.0
    assert rows[1]["openreward/addenv/episodes"] == 1


def test_eval_metrics_land_on_slimes_eval_step(offline):
    run = wandb.init(project="slime", dir=str(offline))
    data = {
        "addenv_eval": {
            "rewards": [1.25, 0.0],
            "truncated": [False, False],
            "samples": [sample_of(real_trajectory()), sample_of(infra_failure(), reward=0.0)],
        }
    }
    assert log_eval_rollout(3, slime_args(), data, None) is False
    run.finish()
    _, rows = read_offline_run(offline)
    assert len(rows) == 1
    assert rows[0]["eval/step"] == 3
    assert rows[0]["openreward_eval/addenv/reward_mean"] == 1.25
    assert rows[0]["openreward_eval/addenv/episodes"] == 2


def test_without_an_active_run_the_hook_starts_one_with_redacted_args(offline):
    assert (
        log_rollout(2, slime_args(wandb_always_use_train_step=True), [sample_of(real_trajectory())], {}, 1.0) is False
    )
    rollout_log._LOGGER.finish()
    config, rows = read_offline_run(offline)
    assert rows[0]["rollout/step"] == 2 * 4 * 2 // 4
    assert config["wandb_api_key"] == "<redacted>" and config["rollout_batch_size"] == 4


def test_fan_out_siblings_count_once_and_foreign_samples_are_ignored():
    good = real_trajectory()
    samples = [
        sample_of(good, segment=0, segments=2),
        sample_of(good, segment=1, segments=2),
        sample_of(good),
        SlimeSample(1.0, {"foo": 1}),
    ]
    episodes = rollout_log._episodes_of([samples])  # nested groups as Slime may hand them
    assert len(episodes) == 2


def test_episode_reward_in_metadata_wins_over_the_padded_sample_reward():
    no_reward = real_trajectory().to_dict()
    no_reward.update(reward=None, stop_reason="max_turns")
    sample = sample_of(
        Trajectory.from_dict(no_reward), reward=0.0, reward_observed=True
    )  # even if a writer got this wrong, None stays None
    assert episode_of_sample(sample).reward is None


def test_metrics_by_kind_count_zero_for_episodes_without_them():
    with_error = EpisodeStats(
        "e", 0.0, "completed", {"tool_errors": 1.0, "tool_errors/not_found": 1.0, "parse_errors/invalid_json": 2.0}
    )
    clean = EpisodeStats("e", 1.0, "completed", {"tool_errors": 0.0})
    metrics = aggregate([with_error, clean])
    assert metrics["openreward/e/tool_errors/not_found_mean"] == 0.5
    assert metrics["openreward/e/parse_errors/invalid_json_mean"] == 1.0
    assert metrics["openreward/e/reward_std"] == 0.5
    assert all(
        metrics[f"openreward/e/stop/{r.value}"] == (1.0 if r is StopReason.COMPLETED else 0.0) for r in StopReason
    )


def test_a_broken_hook_input_is_logged_not_raised(offline, caplog):
    args = argparse.Namespace(wandb_always_use_train_step=True)  # the step needs fields Slime always sets
    with caplog.at_level(logging.WARNING):
        assert log_rollout(0, args, [sample_of(real_trajectory())], None, 1.0) is False
    assert "not logged" in caplog.text


def test_a_group_of_samples_of_one_prompt_gives_pass_at_k():
    good = real_trajectory()
    wrong = Trajectory.from_dict({**good.to_dict(), "reward": 0.0})
    samples = [sample_of(good), sample_of(wrong), sample_of(infra_failure(), reward=0.0)]
    metrics = aggregate(rollout_log._episodes_of(samples))
    assert good.task.index != infra_failure().task.index
    assert metrics["openreward/addenv/pass@1"] == 0.5 and metrics["openreward/addenv/pass@2"] == 1.0
    assert metrics["openreward/addenv/tasks"] == 2.0  # the failed one's task has no scored sample: not in pass@k
    assert metrics["openreward/addenv/infra_failures"] == 1.0 and metrics["openreward/all/pass@1"] == 0.5
    failures = summarize(rollout_log._episodes_of(samples))["addenv"].failures
    assert failures == {"env_error": (1, "session died")}
    anonymous = [sample_of(good, index=None, task_label=None), sample_of(wrong, index=None, task_label=None)]
    assert not any("pass@" in key or "/tasks" in key for key in aggregate(rollout_log._episodes_of(anonymous)))

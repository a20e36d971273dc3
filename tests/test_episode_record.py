"""`EpisodeRecord`: the one reader and writer of what the hooks keep in `Sample.metadata`."""

from __future__ import annotations

import json
from types import SimpleNamespace

import attrs
import pytest

from observe_fixtures import real_trajectory
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.loop.trajectory import StopReason


def test_a_real_trajectory_round_trips_through_json_metadata() -> None:
    trajectory = real_trajectory()
    row = {"environment": "addenv", "split": "train", "index": 0, "task_spec": None, "variant": None, "task_hash": None}
    record = attrs.evolve(
        EpisodeRecord.of_trajectory(trajectory, row, segment=1, segments=2), resume={"ledger": [1, 2], "turn": 3}
    )
    metadata = json.loads(json.dumps(record.to_metadata(row)))  # what survives the trainer's data buffer
    assert EpisodeRecord.from_metadata(metadata) == record
    assert EpisodeRecord.from_metadata(json.dumps(metadata)) == record  # the cookbook's JSON-string form
    assert metadata["stop_reason"] == trajectory.stop_reason.value and metadata["task_hash"] is None  # row keys kept
    assert record.reward == trajectory.reward and record.trained_reward == trajectory.reward and not record.counted


def test_optional_keys_appear_only_when_set_and_are_cleared_when_unset() -> None:
    record = EpisodeRecord(environment="e", stop_reason=StopReason.COMPLETED, episode_reward=1.0, reward_observed=True)
    metadata = record.to_metadata()
    assert not {"resume", "transcript", "group_score", "dropped_segments", "group_scored"} & set(metadata)
    scored = attrs.evolve(record, group_scored=False, pointwise_reward=0.0).to_metadata(metadata)
    assert scored["group_scored"] is False and scored["pointwise_reward"] == 0.0  # falsy values are still written
    assert "resume" not in attrs.evolve(record, resume=None).to_metadata({**metadata, "resume": {"stale": True}})


def test_failures_and_placeholders_train_as_zero_and_log_as_no_reward() -> None:
    failed = EpisodeRecord(environment="e", stop_reason=StopReason.ENV_ERROR, episode_reward=1.0, reward_observed=True)
    assert failed.trained_reward == 0.0 and failed.reward is None and failed.infrastructure_failure
    placeholder = EpisodeRecord(
        environment="e",
        stop_reason=StopReason.CONTEXT_OVERFLOW,
        episode_reward=-1.0,
        reward_observed=True,
        placeholder=True,
    )
    assert placeholder.trained_reward == 0.0 and placeholder.reward == -1.0
    unobserved = EpisodeRecord(environment="e", stop_reason=StopReason.MAX_TURNS, episode_reward=None)
    assert unobserved.trained_reward == 0.0 and unobserved.reward is None


def test_foreign_and_older_samples() -> None:
    with pytest.raises(ValueError, match="not produced by openreward_rl's generate hook"):
        EpisodeRecord.from_metadata({"environment": "e"})
    assert EpisodeRecord.of_sample(SimpleNamespace(reward=1.0, metadata={"foo": 1})) is None
    assert EpisodeRecord.of_sample(SimpleNamespace(reward=1.0)) is None
    older = EpisodeRecord.of_sample(
        SimpleNamespace(
            reward=0.5, metadata={"environment": "e", "stop_reason": "completed", "index": 2, "split": "test"}
        )
    )
    assert (
        older is not None and older.reward == 0.5 and older.task_key == '["test", 2, null]'
    )  # no episode_reward key: the sample's reward

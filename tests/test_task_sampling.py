"""The online task sampler: the real dynamic filter records finished groups, and the skipping data source
built on a double of Slime's `RolloutDataSource` / `RolloutDataSourceWithBuffer` (written from
THUDM/slime 624b824 slime/rollout/data_source.py, not copied: `get_samples(n)` returns n prompt groups of
`n_samples_per_prompt` deep copies with increasing `group_index` / `index`, wrapping over the dataset;
the buffer is served first through `_get_samples_from_buffer`)."""

from __future__ import annotations

import collections
import copy
from types import SimpleNamespace
from typing import Any

import pytest

from doubles import slime_double
from openreward_rl.backends import filters, task_sampling
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.config import ConfigError, parse_config
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.loop.trajectory import StopReason


class RolloutDataSource:
    def __init__(self, args: Any) -> None:
        self.args = args
        self.samples = [
            slime_double.Sample(prompt=f"task {i}", metadata=task_row(TaskRef("Env", "train", index=i))["metadata"])
            for i in range(args.tasks)
        ]
        self.offset = self.group_index = self.index = 0

    def get_samples(self, num_samples: int) -> list[list[slime_double.Sample]]:
        prompts = []
        for _ in range(num_samples):
            prompts.append(self.samples[self.offset])
            self.offset = (self.offset + 1) % len(self.samples)
        groups = []
        for prompt in prompts:
            group = []
            for _ in range(self.args.n_samples_per_prompt):
                sample = copy.deepcopy(prompt)
                sample.group_index, sample.index = self.group_index, self.index
                self.index += 1
                group.append(sample)
            self.group_index += 1
            groups.append(group)
        return groups


class RolloutDataSourceWithBuffer(RolloutDataSource):
    def __init__(self, args: Any) -> None:
        super().__init__(args)
        self.buffer: list[list[slime_double.Sample]] = []

    def _get_samples_from_buffer(self, num_samples: int) -> list[list[slime_double.Sample]]:
        taken, self.buffer = self.buffer[:num_samples], self.buffer[num_samples:]
        return taken

    def get_samples(self, num_samples: int) -> list[list[slime_double.Sample]]:
        samples = self._get_samples_from_buffer(num_samples)
        return samples + super().get_samples(num_samples - len(samples)) if num_samples > len(samples) else samples


@pytest.fixture(autouse=True)
def sampling_config(tmp_path, monkeypatch) -> None:
    file = tmp_path / "train_config.yaml"
    file.write_text("environments:\n  Env: {}\ntask_sampling: {window: 2, floor: 0.1}\n")
    monkeypatch.setenv("OPENREWARD_RL_CONFIG", str(file))
    task_sampling.task_record.cache_clear()
    yield
    task_sampling.task_record.cache_clear()


def finished_group(
    index: int, rewards: list[float], stop: StopReason = StopReason.COMPLETED
) -> list[slime_double.Sample]:
    out = []
    for i, reward in enumerate(rewards):
        record = EpisodeRecord(
            environment="Env",
            stop_reason=stop,
            split="train",
            index=index,
            task_label=TaskRef("Env", "train", index=index).label,
            episode_reward=reward,
            reward_observed=True,
        )
        sample = slime_double.Sample(
            index=i,
            group_index=index,
            reward=reward,
            metadata=record.to_metadata(task_row(TaskRef("Env", "train", index=index))["metadata"]),
        )
        if stop.is_infrastructure_failure:
            sample.status, sample.remove_sample = slime_double.Sample.Status.ABORTED, True
        out.append(sample)
    return out


def source(tasks: int = 4, seed: int = 1) -> Any:
    cls = task_sampling.skipping_source(RolloutDataSourceWithBuffer)
    return cls(SimpleNamespace(tasks=tasks, n_samples_per_prompt=2, rollout_seed=seed))


def served(data_source: Any, batches: int, size: int = 4) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for _ in range(batches):
        groups = data_source.get_samples(size)
        assert len(groups) == size and all(len(g) == 2 for g in groups)
        counts.update(g[0].metadata["index"] for g in groups)
    return counts


def test_a_task_whose_recent_groups_had_no_spread_is_skipped_but_never_starves() -> None:
    args = SimpleNamespace(reward_key=None)
    for _ in range(2):
        filters.keep_informative_groups(args, finished_group(0, [1.0, 1.0]))  # always solved
        filters.keep_informative_groups(args, finished_group(1, [0.0, 1.0]))  # informative
    filters.keep_informative_groups(args, finished_group(2, [0.0, 0.0]))  # one zero-spread group: not yet
    counts = served(source(), batches=300)
    assert counts[1] > 250 and counts[2] > 250 and counts[3] > 250
    assert 0 < counts[0] < 0.25 * counts[1]  # skipped with probability 0.9, served at the floor


def test_a_task_that_gets_spread_again_is_served_again() -> None:
    args = SimpleNamespace(reward_key=None)
    for rewards in ([1.0, 1.0], [1.0, 1.0], [0.0, 1.0]):
        filters.keep_informative_groups(args, finished_group(0, rewards))
    assert not task_sampling.task_record().saturated(("Env", TaskRef("Env", "train", index=0).label))


def test_infrastructure_failures_are_not_recorded() -> None:
    args = SimpleNamespace(reward_key=None)
    for _ in range(3):
        filters.keep_informative_groups(args, finished_group(0, [0.0, 0.0], stop=StopReason.ENV_ERROR))
    assert not task_sampling.task_record().spread


def test_the_same_seed_serves_the_same_prompts() -> None:
    args = SimpleNamespace(reward_key=None)
    for _ in range(2):
        filters.keep_informative_groups(args, finished_group(0, [1.0, 1.0]))
        filters.keep_informative_groups(args, finished_group(1, [0.0, 0.0]))

    def order(seed: int) -> list[int]:
        data_source = source(seed=seed)
        return [g[0].metadata["index"] for _ in range(20) for g in data_source.get_samples(4)]

    assert order(7) == order(7) and order(7) != order(8)


def test_a_saturated_dataset_still_fills_the_batch_and_the_buffer_comes_first() -> None:
    args = SimpleNamespace(reward_key=None)
    for index in range(4):
        for _ in range(2):
            filters.keep_informative_groups(args, finished_group(index, [1.0, 1.0]))
    data_source = source()
    returned = finished_group(0, [0.0, 0.0])  # handed back by partial rollout: served first, not skipped
    data_source.buffer.append(returned)
    groups = data_source.get_samples(3)
    assert groups[0] is returned and len(groups) == 3
    assert served(data_source, batches=5) and data_source.skip_policy.skipped > 0


def test_task_sampling_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="floor: must be in"):
        parse_config({"environments": {"E": {}}, "task_sampling": {"floor": 0}})
    with pytest.raises(ConfigError, match="window: must be a positive"):
        parse_config({"environments": {"E": {}}, "task_sampling": {"window": 0}})
    assert parse_config({"environments": {"E": {}}}).task_sampling is None
    with pytest.raises(ValueError, match="no task starves"):
        task_sampling.SkipPolicy(task_sampling.TaskRecord(), floor=0.0)


def test_the_trainer_entry_points_build_on_the_trainers_own_data_source(monkeypatch) -> None:
    import sys
    import types

    for name in ("slime", "slime.rollout", "slime.rollout.data_source"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules["slime.rollout.data_source"].RolloutDataSourceWithBuffer = RolloutDataSourceWithBuffer  # type: ignore[attr-defined]
    task_sampling._built.cache_clear()
    try:
        built = task_sampling.SlimeDataSource(SimpleNamespace(tasks=2, n_samples_per_prompt=2, rollout_seed=3))
        assert isinstance(built, RolloutDataSourceWithBuffer) and built.skip_policy.floor == 0.1
        assert len(built.get_samples(3)) == 3
    finally:
        task_sampling._built.cache_clear()

"""An online task sampler for Slime's and Miles' `--data-source-path`: skip tasks whose recent groups taught nothing.

```
--data-source-path openreward_rl.backends.task_sampling.SlimeDataSource    # Miles: .MilesDataSource
--dynamic-sampling-filter-path openreward_rl.backends.filters.keep_informative_groups
```

The dynamic filter sees every finished group; it records each group's task and whether its rewards had
any spread (`record_group`). The data source is the trainer's own `RolloutDataSourceWithBuffer` (same
dataset, shuffling, buffer and checkpoint state) with one change in `get_samples`: a prompt group whose
task's last `window` recorded groups all had zero spread (every rollout scored the same: always solved
or never) is skipped with probability `1 - floor` and another prompt is drawn in its place. The floor
keeps every task in play (a task the policy stopped solving, or started to, is seen again and its
record refreshed); the draws use their own `random.Random(seed)`, so a run is repeatable. A group with
an infrastructure failure is not recorded (it says nothing about the task). After `max_draws` times the
requested number of draws without filling the batch the rest is taken unskipped: a saturated dataset
slows nothing down.

Both run in the trainer's rollout process (the rollout function, the filter and the data source share
it); the record is per process and not checkpointed: after a restart it is learned again.
"""

from __future__ import annotations

import collections
import functools
import importlib
import os
import random
import threading
from typing import Any

import attrs

from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.config import ConfigError, TaskSamplingSettings, load_config

__all__ = [
    "SlimeDataSource",
    "MilesDataSource",
    "SkipPolicy",
    "TaskRecord",
    "task_record",
    "record_group",
    "skipping_source",
    "task_key_of",
]


def task_key_of(sample: Any) -> tuple[str, str] | None:
    """The task a sample ran: (environment, `TaskRef.label`), from its metadata (rows of `openreward-rl prepare`)."""
    record = EpisodeRecord.of_sample(sample)
    if record is not None:
        key = record.task_key
        return None if key is None else (record.environment, key)
    from openreward_rl.env.tasks import task_from_metadata

    try:
        task = task_from_metadata(getattr(sample, "metadata", None) or {})
    except (ValueError, TypeError):
        return None
    return task.environment, task.label


@attrs.define
class TaskRecord:
    """Per task, whether each of its recent groups had reward spread (newest last), and its pass counts."""

    window: int = 2
    spread: dict[Any, collections.deque[bool]] = attrs.Factory(dict)
    groups: collections.Counter[Any] = attrs.Factory(collections.Counter)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False)

    def record(self, key: Any, had_spread: bool) -> None:
        with self._lock:
            self.spread.setdefault(key, collections.deque(maxlen=self.window)).append(had_spread)
            self.groups[key] += 1

    def saturated(self, key: Any) -> bool:
        """The task's last `window` groups all had zero spread."""
        with self._lock:
            recent = self.spread.get(key)
            return recent is not None and len(recent) == self.window and not any(recent)


@functools.cache
def task_record() -> TaskRecord:
    """This process's record (shared by the filter and the data source); its window from the config's
    `task_sampling` (2 where the config sets none or cannot be read)."""
    settings = _settings()
    return TaskRecord(window=settings.window if settings else 2)


def record_group(samples: list[Any], reason: str | None) -> None:
    """Record one finished group from the filter's verdict (`reason` None: kept, i.e. it had spread)."""
    if reason in ("aborted_member", "empty_group", "missing_reward", "single_rollout"):
        return
    key = task_key_of(samples[0])
    if key is not None:
        task_record().record(key, reason is None)


@attrs.define
class SkipPolicy:
    """Skips a saturated task's group with probability `1 - floor`, from its own seeded generator."""

    record: TaskRecord
    floor: float = 0.1
    seed: int = 0
    max_draws: int = 8
    skipped: int = 0
    _rng: random.Random = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if not 0.0 < self.floor <= 1.0:
            raise ValueError(f"the floor must be in (0, 1] so that no task starves, got {self.floor}")
        self._rng = random.Random(self.seed)

    def skip(self, key: Any) -> bool:
        if key is None or not self.record.saturated(key):
            return False
        if self._rng.random() < self.floor:
            return False
        self.skipped += 1
        return True

    def fill(self, draw: Any, count: int, key: Any = None) -> list[Any]:
        """`count` groups from `draw(n)` (the trainer's own get_samples), skipping saturated tasks;
        `key(sample)` names a group's task (default `task_key_of`)."""
        key = key or task_key_of
        out: list[Any] = []
        drawn = 0
        while len(out) < count:
            need = count - len(out)
            batch = draw(need)
            drawn += len(batch)
            if drawn > self.max_draws * count:
                out.extend(batch[:need])
                break
            out.extend(group for group in batch if not self.skip(key(group[0])))
        return out[:count]


def skipping_source(base: type[Any]) -> type:
    """`base` (a trainer's `RolloutDataSourceWithBuffer`) whose fresh prompts skip saturated tasks; the
    buffer (groups handed back by partial rollout) is served first and never skipped."""

    class SkippingDataSource(base):
        def __init__(self, args: Any) -> None:
            super().__init__(args)
            seed = getattr(args, "rollout_seed", 0) or 0
            settings = _settings()
            if settings is None:
                raise ConfigError(
                    "--data-source-path names openreward_rl's task sampler but the config sets no task_sampling"
                )
            self.skip_policy = SkipPolicy(task_record(), floor=settings.floor, seed=seed)

        def get_samples(self, num_samples: int) -> list[Any]:
            buffered = self._get_samples_from_buffer(num_samples)
            rest = num_samples - len(buffered)
            if rest == 0:
                return buffered
            fresh = super(base, self).get_samples  # the dataset draw below the buffer (RolloutDataSource.get_samples)
            return buffered + self.skip_policy.fill(fresh, rest)

    SkippingDataSource.__name__ = SkippingDataSource.__qualname__ = f"Skipping{base.__name__}"
    return SkippingDataSource


def _settings() -> TaskSamplingSettings | None:
    try:
        return load_config(os.environ.get("OPENREWARD_RL_CONFIG") or os.environ.get("TRAIN_CONFIG")).task_sampling
    except ConfigError:
        return None


@functools.cache
def _built(module: str) -> type:
    return skipping_source(importlib.import_module(module).RolloutDataSourceWithBuffer)


def SlimeDataSource(args: Any) -> Any:  # noqa: N802  (named like the class it builds; Slime calls `cls(args)`)
    """Slime's `RolloutDataSourceWithBuffer` (slime.rollout.data_source) skipping saturated tasks."""
    return _built("slime.rollout.data_source")(args)


def MilesDataSource(args: Any) -> Any:  # noqa: N802
    """Miles' `RolloutDataSourceWithBuffer` (miles.rollout.data_source) skipping saturated tasks."""
    return _built("miles.rollout.data_source")(args)

"""Slime/Miles rollout-log hooks: per-environment OpenReward metrics into WandB.

```
--custom-rollout-log-function-path openreward_rl.backends.rollout_log.log_rollout
--custom-eval-rollout-log-function-path openreward_rl.backends.rollout_log.log_eval_rollout
```

Both return False, so Slime's own logging still runs; ours is logged beside it, on Slime's
`rollout/step` (`eval/step`) axis, under `openreward/<environment>/...`
(`openreward_eval/<environment>/...`) plus `.../all/...` over every environment. A training rollout
also logs its learning signal under the config's estimator (`advantages.step_signal`):
`openreward/zero_spread_share` (groups without reward spread), `openreward/untrained_share` (episodes
whose advantages are all zero, failures included) and their counts, with a warning when the whole
batch trains nothing (with the dynamic filter on, groups without spread never reach it).

The adapters store an `EpisodeRecord` on each `sample.metadata` (see
`openreward_rl.backends._sample.record`), read back here with `EpisodeRecord.of_sample`. An episode
split at prefix breaks gives one sample per segment; only segment 0 is counted. The record's
`episode_reward` (None when none was observed) is preferred over `sample.reward`, which Slime needs
as a number. Split, index and variant name the task, so a group of samples of one prompt gives pass@k. The aggregation itself is
`openreward_rl.observe.metrics.aggregate`, shared with `openreward-rl eval`.

>>> from types import SimpleNamespace
>>> sample = SimpleNamespace(reward=0.0, metadata={"environment": "Org/Env", "split": "train", "index": 3,
...     "stop_reason": "timeout", "stop_detail": "tool call timed out", "episode_reward": None, "metrics": {"turns": 2}})
>>> episode = episode_of_sample(sample)
>>> episode.reward, episode.infrastructure_failure, episode.task, dict(episode.metrics)
(None, True, '["train", 3, null]', {'turns': 2.0})
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.observe.metrics import EpisodeStats, aggregate
from openreward_rl.observe.wandb_logging import WandbLogger

__all__ = ["episode_of_sample", "log_rollout", "log_eval_rollout", "rollout_step"]

logger = logging.getLogger(__name__)


def episode_of_sample(sample: Any) -> EpisodeStats | None:
    """The episode record of a Slime/Miles `Sample` the adapters filled; None for samples that are not ours."""
    record = EpisodeRecord.of_sample(sample)
    return None if record is None else _stats(record)


def _stats(record: EpisodeRecord) -> EpisodeStats:
    metrics = dict(record.metrics)
    if record.prefix_breaks:  # an Episode whose metrics leave it out
        metrics.setdefault("prefix_breaks", float(record.prefix_breaks))
    return EpisodeStats(
        environment=record.environment,
        reward=record.reward,
        stop_reason=record.stop_reason.value,
        metrics=metrics,
        finished=record.finished,
        task=record.task_key,
        stop_detail=record.stop_detail,
    )


def _episodes_of(samples: Iterable[Any]) -> list[EpisodeStats]:
    episodes = []
    for sample in samples:
        if isinstance(sample, (list, tuple)):  # nested groups
            episodes.extend(_episodes_of(sample))
            continue
        record = EpisodeRecord.of_sample(sample)
        if record is not None and record.counted:
            episodes.append(_stats(record))
    return episodes


def rollout_step(args: Any, rollout_id: int) -> int:
    """The x-axis value Slime logs a rollout at (`--wandb-always-use-train-step` counts train steps)."""
    if getattr(args, "wandb_always_use_train_step", False):
        return rollout_id * args.rollout_batch_size * args.n_samples_per_prompt // args.global_batch_size
    return rollout_id


# The per-process logger: Slime/Miles load these hooks into the rollout manager, one per process.
_LOGGER: WandbLogger | None = None


def _logger(args: Any) -> WandbLogger:
    global _LOGGER
    if _LOGGER is None:
        _LOGGER = WandbLogger(
            project=getattr(args, "wandb_project", None),
            group=getattr(args, "wandb_group", None),
            config=args,
            start_run=bool(getattr(args, "use_wandb", False)),
        )
    return _LOGGER


def log_rollout(
    rollout_id: int,
    args: Any,
    samples: Sequence[Any],
    rollout_extra_metrics: Mapping[str, Any] | None,
    rollout_time: float,
) -> bool:
    """`--custom-rollout-log-function-path`. Never raises; returns False (Slime still logs its own)."""
    try:
        metrics = aggregate(_episodes_of(samples), "openreward")
        if metrics:
            metrics["openreward/rollout_seconds"] = float(rollout_time)
            metrics.update(_signal_metrics(rollout_id, args, samples))
            _logger(args).log(metrics, step_key="rollout/step", step=rollout_step(args, rollout_id))
    except Exception as error:
        logger.warning(
            "openreward rollout metrics for rollout %s not logged: %s: %s", rollout_id, type(error).__name__, error
        )
    return False


def _signal_metrics(rollout_id: int, args: Any, samples: Sequence[Any]) -> dict[str, float]:
    """The rollout's learning signal (empty, with a warning, where it cannot be computed); warns when it trains nothing."""
    from openreward_rl.backends.advantages import settings_for, step_signal

    try:
        signal = step_signal(args, samples, settings_for(args))
    except Exception as error:
        logger.warning(
            "openreward zero-spread metrics for rollout %s not computed: %s: %s",
            rollout_id,
            type(error).__name__,
            error,
        )
        return {}
    message = signal.warning()
    if message:
        logger.warning("rollout %s: %s", rollout_id, message)
    return signal.metrics("openreward")


def log_eval_rollout(
    rollout_id: int, args: Any, data: Mapping[str, Any], extra_metrics: Mapping[str, Any] | None
) -> bool:
    """`--custom-eval-rollout-log-function-path`; `data` maps eval set names to {"rewards", "samples", ...}."""
    try:
        samples = [s for entry in data.values() if isinstance(entry, Mapping) for s in entry.get("samples") or ()]
        metrics = aggregate(_episodes_of(samples), "openreward_eval")
        if metrics:
            _logger(args).log(metrics, step_key="eval/step", step=rollout_step(args, rollout_id))
    except Exception as error:
        logger.warning(
            "openreward eval metrics for rollout %s not logged: %s: %s", rollout_id, type(error).__name__, error
        )
    return False

"""Difficulty-aware task selection from OpenReward's logged rollouts (`AsyncEnvironment.get_task_difficulty`).

The platform aggregates the rewards of logged rollouts per `(split, variant, task_index)`: mean, min,
max, the number of rollouts and response-length percentiles (characters). A task is dropped when

- its rollouts leave no spread: `max_reward - min_reward <= spread_tolerance` over at least
  `min_rollouts` rollouts. Every rollout scored the same (always solved, or never): a GRPO group on it
  is all but certain to have zero advantage, so sampling it spends episodes that teach nothing;
- its median response is longer than `max_response_chars` (when set): too long for the run's budget.

A task with fewer than `min_rollouts` logged rollouts (or none) is kept: not knowing is no reason to
drop it. The query filters (`model_name`, `min_model_params`, `max_model_params`, `training_stage`) are
the SDK's, so the statistics can come from a model like the one being trained. Kept tasks carry their
statistics into the rows' metadata (`difficulty`), which the online sampler uses as its starting point.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

import attrs

from openreward_rl.env.tasks import TaskRef
from openreward_rl.errors import ConfigError

__all__ = ["DifficultyQuery", "DifficultyRule", "DifficultySelection", "TRAINING_STAGES"]

TRAINING_STAGES = ("pretrained", "sft", "rl")


@attrs.frozen
class DifficultyQuery:
    """Which logged rollouts the statistics come from (the SDK's filters; None: all)."""

    model_name: str | None = None
    min_model_params: int | None = None
    max_model_params: int | None = None
    training_stage: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.training_stage is not None and self.training_stage not in TRAINING_STAGES:
            raise ConfigError(
                f"training stage must be one of {', '.join(TRAINING_STAGES)}, got {self.training_stage!r}"
            )

    def arguments(self) -> dict[str, Any]:
        return {k: v for k, v in attrs.asdict(self).items() if v is not None}


@attrs.frozen
class DifficultyRule:
    """When a task is dropped; `verdict` gives the reason, or None to keep it.

    >>> from types import SimpleNamespace as S
    >>> rule = DifficultyRule(min_rollouts=4, max_response_chars=1000)
    >>> rule.verdict(S(min_reward=1.0, max_reward=1.0, num_rollouts=8, response_chars=S(p50=10)))
    'no_spread'
    >>> rule.verdict(S(min_reward=1.0, max_reward=1.0, num_rollouts=2, response_chars=S(p50=10))) is None
    True
    >>> rule.verdict(S(min_reward=0.0, max_reward=1.0, num_rollouts=8, response_chars=S(p50=5000)))
    'too_long'
    """

    min_rollouts: int = 4
    spread_tolerance: float = 1e-6
    max_response_chars: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.min_rollouts < 2:
            raise ConfigError(f"min_rollouts must be at least 2 (one rollout shows no spread), got {self.min_rollouts}")

    def verdict(self, stats: Any) -> str | None:
        if stats is None or stats.num_rollouts < self.min_rollouts:
            return None
        if self.max_response_chars is not None and stats.response_chars.p50 > self.max_response_chars:
            return "too_long"
        if stats.max_reward - stats.min_reward <= self.spread_tolerance:
            return "no_spread"
        return None


def _summary(stats: Any) -> dict[str, Any]:
    return {
        "avg_reward": stats.avg_reward,
        "min_reward": stats.min_reward,
        "max_reward": stats.max_reward,
        "num_rollouts": stats.num_rollouts,
        "response_chars_p50": stats.response_chars.p50,
    }


@attrs.define
class DifficultySelection:
    """The `select` step of `list_tasks`: fetches each split's statistics once and drops what `rule` refuses.

    `dropped` counts the dropped tasks per (environment, split, reason); `stats` holds the kept tasks'
    statistics by `TaskRef.key`, for the rows' metadata.
    """

    query: DifficultyQuery = attrs.Factory(DifficultyQuery)
    rule: DifficultyRule = attrs.Factory(DifficultyRule)
    dropped: collections.Counter[tuple[str, str, str]] = attrs.Factory(collections.Counter)
    stats: dict[tuple[Any, ...], dict[str, Any]] = attrs.Factory(dict)

    async def __call__(self, environment: Any, name: str, split: str, refs: list[TaskRef]) -> list[TaskRef]:
        rows = await environment.get_task_difficulty(split=split, **self.query.arguments())
        by_task: Mapping[tuple[int, str | None], Any] = {
            (row.task_index, row.variant): row for row in rows if row.split in (None, split)
        }
        kept = []
        for ref in refs:
            stats = None if ref.index is None else by_task.get((ref.index, ref.variant), by_task.get((ref.index, None)))
            reason = self.rule.verdict(stats)
            if reason is not None:
                self.dropped[(name, split, reason)] += 1
                continue
            if stats is not None:
                self.stats[ref.key] = _summary(stats)
            kept.append(ref)
        return kept

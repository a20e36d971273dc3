"""How much of a step can train: groups without reward spread and episodes whose advantages are all zero.

A group (the episodes of one task) has *no reward spread* when fewer than two of its episodes were
scored or all scored the same: GRPO's episode advantages are then 0.0 for all of them. An episode
*trains nothing* when it has no advantage (an infrastructure failure) or every turn's advantage is
0.0 under the run's estimator; a step whose episodes all train nothing has a loss of exactly 0 and
leaves the weights as they were. The per-token estimators can still train a group without reward
spread (its turns' returns can differ), so the two shares are counted apart.

TRL's adapter, and the Slime and Miles hooks where they compute advantages, count them per step
(`openreward/zero_spread_share`, `openreward/untrained_share`) and warn when a step trains nothing.

>>> step = group_signal([1.0, 1.0], [[0.0], [0.0]]) + group_signal([1.0, 0.0], [[0.7], [-0.7]])
>>> step.zero_spread_share, step.untrained_share, step.trains_nothing
(0.5, 0.5, False)
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

__all__ = ["StepSignal", "group_signal", "trains_nothing"]

TOLERANCE = 1e-9  # spreads and advantages this small count as none (means of equal floats can differ in the last bit)


def trains_nothing(advantages: Sequence[float] | None) -> bool:
    """An episode with no advantage (a failure) or only zero ones."""
    return advantages is None or all(abs(a) <= TOLERANCE for a in advantages)


@attrs.frozen
class StepSignal:
    """Counts over a step's groups: groups, those without reward spread, episodes, those that train nothing."""

    groups: int = 0
    zero_spread_groups: int = 0
    episodes: int = 0
    untrained_episodes: int = 0

    def __add__(self, other: StepSignal) -> StepSignal:
        return StepSignal(*(a + b for a, b in zip(attrs.astuple(self), attrs.astuple(other))))

    @property
    def zero_spread_share(self) -> float:
        return self.zero_spread_groups / self.groups if self.groups else 0.0

    @property
    def untrained_share(self) -> float:
        return self.untrained_episodes / self.episodes if self.episodes else 0.0

    @property
    def trains_nothing(self) -> bool:
        """Every episode of the step trains nothing (a step with no episodes does not count)."""
        return self.episodes > 0 and self.untrained_episodes == self.episodes

    def metrics(self, prefix: str = "openreward") -> dict[str, float]:
        """`<prefix>/zero_spread_share`, `<prefix>/untrained_share` and the counts behind them."""
        return {
            f"{prefix}/zero_spread_share": self.zero_spread_share,
            f"{prefix}/untrained_share": self.untrained_share,
            f"{prefix}/zero_spread_groups": float(self.zero_spread_groups),
            f"{prefix}/untrained_episodes": float(self.untrained_episodes),
        }

    def warning(self) -> str | None:
        """The message for a step that trains nothing; None otherwise."""
        if not self.trains_nothing:
            return None
        return (
            f"this step trains nothing: {self.zero_spread_groups} of {self.groups} groups have no reward spread and all "
            f"{self.episodes} episodes have zero advantage (or failed), so the loss is 0 and the weights do not change"
        )


def group_signal(rewards: Sequence[float | None], advantages: Sequence[Sequence[float] | None]) -> StepSignal:
    """One group's counts from its episodes' rewards (None: a failure) and per-turn advantages."""
    if len(rewards) != len(advantages):
        raise ValueError(f"{len(rewards)} rewards for {len(advantages)} episodes")
    scored = [r for r in rewards if r is not None]
    no_spread = len(scored) < 2 or max(scored) - min(scored) <= TOLERANCE
    return StepSignal(1, int(no_spread), len(rewards), sum(trains_nothing(a) for a in advantages))

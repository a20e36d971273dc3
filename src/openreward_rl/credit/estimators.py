"""Advantage estimators over one group of episodes (the rollouts of one prompt): pure functions, no torch.

- `episode`: `(R_i - mean R) / (std R + eps)` over the group's episode rewards, the same value on every
  token of episode i (what Slime and Miles compute for GRPO).
- `turn`: turn t of episode i gets `(G_{i,t} - mu) / (sigma + eps)`, where `G_{i,t}` is its return
  (reward-to-go) and `mu`, `sigma` are the mean and standard deviation of the group's returns from the
  start, `G_{j,0}`, one value per episode. The baseline is one number per group: every episode counts
  once whatever its length, and no episode's baseline depends on how many turns it ran (see
  docs/training.md, "Credit", for why per-turn-position statistics are not used).
- `mix`: `w * turn + (1 - w) * episode`.

Episodes without returns (infrastructure failures, given as None) are left out of the statistics and
get no advantage (None): their samples are masked and never trained. A group with fewer than two
episodes with returns has no baseline: its episodes get 0.0 everywhere (nothing to compare with), as
GRPO gives a one-member group. `sigma` at or below `eps` is not divided by (the advantages are only
centred), so a group whose episodes all scored the same still ranks its turns by their returns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from openreward_rl.errors import ConfigError

__all__ = ["EPS", "episode_advantages", "turn_advantages", "mixed_advantages", "group_advantages", "token_advantages"]

EPS = 1e-6


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _scale(std: float, eps: float) -> float:
    return std + eps if std > eps else 1.0


def episode_advantages(rewards: Sequence[float | None], *, eps: float = EPS, std_normalization: bool = True) -> list[float | None]:
    """GRPO's group-normalised episode rewards; None stays None (no reward, no advantage). The one
    implementation of GRPO's group statistic: the trainer hooks, the fork normalisation and the viewer
    use it. `std_normalization=False` only centres (Slime without `--grpo-std-normalization`).

    >>> episode_advantages([1.0, 0.0, None])
    [0.7071057811879616, -0.7071057811879616, None]
    >>> episode_advantages([1.0, 0.0], std_normalization=False), episode_advantages([0.5])
    ([0.5, -0.5], [0.0])
    """
    present = [r for r in rewards if r is not None]
    if len(present) < 2:
        return [None if r is None else 0.0 for r in rewards]
    mean, std = _mean_std(present)
    scale = std + eps if std_normalization and std > 0 else 1.0
    return [None if r is None else (r - mean) / scale for r in rewards]


def turn_advantages(returns: Sequence[Sequence[float] | None], *, eps: float = EPS) -> list[list[float] | None]:
    """Per-turn advantages of a group: each turn's return against the group's returns from the start.

    >>> turn_advantages([[1.5, 1.0], [0.5], None])
    [[0.7071057811879616, 0.0], [-0.7071057811879616], None]
    """
    starts = [r[0] for r in returns if r]
    if any(r is not None and not r for r in returns):
        raise ValueError("an episode with returns must have at least one turn")
    if len(starts) < 2:
        return [None if r is None else [0.0] * len(r) for r in returns]
    mean, std = _mean_std(starts)
    scale = _scale(std, eps)
    return [None if r is None else [(g - mean) / scale for g in r] for r in returns]


def mixed_advantages(
    returns: Sequence[Sequence[float] | None], rewards: Sequence[float | None], weight: float, *, eps: float = EPS
) -> list[list[float] | None]:
    """`weight * turn + (1 - weight) * episode`, per turn.

    >>> mixed_advantages([[1.0, 1.0], [0.0]], [1.0, 0.0], 0.5)
    [[0.7071057811879616, 0.7071057811879616], [-0.7071057811879616]]
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"the mix weight must be in [0, 1], got {weight}")
    if len(returns) != len(rewards):
        raise ValueError(f"{len(returns)} returns for {len(rewards)} rewards")
    if any((g is None) != (r is None) for g, r in zip(returns, rewards)):
        raise ValueError("an episode has returns but no reward, or a reward but no returns")
    per_turn = turn_advantages(returns, eps=eps)
    per_episode = episode_advantages(rewards, eps=eps)
    return [None if t is None else [weight * a + (1.0 - weight) * e for a in t] for t, e in zip(per_turn, per_episode)]  # type: ignore[operator]


def group_advantages(
    estimator: str, returns: Sequence[Sequence[float] | None], rewards: Sequence[float | None], *, weight: float = 0.5, eps: float = EPS
) -> list[list[float] | None]:
    """Per-turn advantages of one group under `estimator` ("episode": the episode's value on every turn)."""
    if estimator == "turn":
        return turn_advantages(returns, eps=eps)
    if estimator == "mix":
        return mixed_advantages(returns, rewards, weight, eps=eps)
    if estimator == "episode":
        values = episode_advantages(rewards, eps=eps)
        return [None if v is None or g is None else [v] * len(g) for v, g in zip(values, returns)]
    raise ConfigError(f"unknown advantage estimator {estimator!r}; choose episode, turn or mix")


def token_advantages(advantages: Sequence[float], spans: Sequence[Sequence[int]], length: int) -> list[float]:
    """Per-token advantages of one response of `length` tokens: turn t's advantage on `spans[t]` = (start, end).
    Tokens in no span (none in a sample the hooks built) get 0.0; overlapping or out-of-range spans are a ValueError.

    >>> token_advantages([0.5, -1.0], [(0, 2), (2, 5)], 5)
    [0.5, 0.5, -1.0, -1.0, -1.0]
    """
    if len(advantages) != len(spans):
        raise ValueError(f"{len(advantages)} advantages for {len(spans)} spans")
    out = [0.0] * length
    previous_end = 0
    for (start, end), value in zip(spans, advantages):
        if not previous_end <= start <= end <= length:
            raise ValueError(f"span ({start}, {end}) overlaps the previous one or leaves the response of {length} tokens")
        out[start:end] = [float(value)] * (end - start)
        previous_end = end
    return out

"""Advantage estimators over one group of episodes (the rollouts of one prompt): pure functions, no torch.

Each estimator states its baseline, its scale, what that costs in bias, and a bound on |advantage| that
depends only on the group's shape (`advantage_bound`: how many episodes have returns and how many turns
each ran), never on the rewards. `n` is the number of episodes with returns, `M` the number of their turns.

- `episode` (the default): `(R_i - mean R) / (std R + eps)` over the group's episode rewards, the same
  value on every token of episode i (GRPO, as Slime and Miles compute it). Bound `(n - 1) / sqrt(n)`
  (a sample lies at most that many sample standard deviations from its sample's mean).
- `turn`: turn t of episode i gets `(G_{i,t} - mu) / S`, `G_{i,t}` its return (reward-to-go), `mu` the
  mean of the group's returns from the start, `G_{j,0}`, one per episode, and `S` the pooled spread of
  every turn's return about `mu`: `S**2 = sum_{j,t} (G_{j,t} - mu)**2 / (M - 1)`. The baseline is one
  number per group, counting each episode once whatever its length, so it depends on no episode's
  stopping turn (docs/training.md, "Credit"); as in GRPO, an episode's own return is in its baseline
  (a bias of order 1/n that shrinks the advantages, never flips them). Bound `sqrt(M - 1)` (one squared
  deviation is at most the sum of all). With one turn per episode, `S` is GRPO's std and `turn` equals
  `episode`.
- `turn_index`: turn t of episode i gets `(G_{i,t} - b_{i,t}) / S`, with a baseline per turn index,
  `b_{i,t}` the mean of `G_{j,t}` over the *other* episodes j (leave-one-out). An episode that stopped
  before turn t counts with `G_{j,t} = 0` (nothing more was earned after it ended: the value of its
  terminal state), so every baseline has all `n - 1` other episodes, whatever their lengths. The baseline
  of episode i uses only the other episodes (independent samples of the same policy), so it depends on
  none of episode i's own actions, its stopping turn included: the gradient is unbiased. `S` is the
  pooled spread of the residuals, `S**2 = sum_{j,t} (G_{j,t} - b_{j,t})**2 / (M - 1)`. Bound
  `sqrt(M - 1)`. With one turn per episode it equals `episode` as well.
- `mix`: `w * turn + (1 - w) * episode`. Bound `w * sqrt(M - 1) + (1 - w) * (n - 1) / sqrt(n)`.

The scales `S` (like GRPO's std) are one positive number per group: they change how much a group
weighs against the others (a group with little spread weighs more), never the sign or the order of
the advantages within a group. `clip`, where given, caps |advantage| at `clip` after the estimator
(the bound is then the smaller of the two); it changes the values it cuts, which is its bias.

Episodes without returns (infrastructure failures, given as None) are left out of the statistics and
get no advantage (None): their samples are masked and never trained. A group with fewer than two
episodes with returns has no baseline: its episodes get 0.0 everywhere (nothing to compare with), as
GRPO gives a one-member group. A scale at or below `eps` is not divided by (the advantages are only
centred), so a group whose episodes all scored the same still ranks its turns by their returns.

>>> returns = [[0.4, 0.6, 1.0], [0.3]]  # rewards [0.1, 0.1, 1.0] with gamma 0.5; G_0 spread 0.07
>>> [round(a, 2) for a in turn_advantages(returns)[0]], round(advantage_bound("turn", [3, 1]), 2)
([0.12, 0.62, 1.61], 1.73)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from openreward_rl.errors import ConfigError

__all__ = [
    "EPS",
    "advantage_bound",
    "episode_advantages",
    "turn_advantages",
    "turn_index_advantages",
    "mixed_advantages",
    "group_advantages",
    "token_advantages",
]

EPS = 1e-6


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _scale(std: float, eps: float) -> float:
    return std + eps if std > eps else 1.0


def _pooled_scale(residuals: Sequence[float], eps: float) -> float:
    """`sqrt(sum r**2 / (M - 1))` of the group's M residuals (M >= 2), as `_scale` divides by it."""
    return _scale(math.sqrt(math.fsum(r * r for r in residuals) / (len(residuals) - 1)), eps)


def _check_returns(returns: Sequence[Sequence[float] | None]) -> list[Sequence[float]]:
    if any(r is not None and not r for r in returns):
        raise ValueError("an episode with returns must have at least one turn")
    return [r for r in returns if r is not None]


def episode_advantages(
    rewards: Sequence[float | None], *, eps: float = EPS, std_normalization: bool = True
) -> list[float | None]:
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
    """Per-turn advantages of a group: each turn's return against the mean of the group's returns from the
    start, over the pooled spread of every turn's return about it (see the module docstring).

    >>> turn_advantages([[1.5, 1.0], [0.5], None])
    [[0.999998000004, 0.0], [-0.999998000004], None]
    """
    present = _check_returns(returns)
    if len(present) < 2:
        return [None if r is None else [0.0] * len(r) for r in returns]
    mean = math.fsum(r[0] for r in present) / len(present)
    scale = _pooled_scale([g - mean for r in present for g in r], eps)
    return [None if r is None else [(g - mean) / scale for g in r] for r in returns]


def turn_index_advantages(returns: Sequence[Sequence[float] | None], *, eps: float = EPS) -> list[list[float] | None]:
    """Per-turn advantages against a leave-one-out baseline per turn index (an episode that stopped earlier
    counts with return 0 there), over the pooled spread of the residuals (see the module docstring).

    >>> turn_index_advantages([[1.0, 1.0], [0.0]])
    [[0.8164959142616038, 0.8164959142616038], [-0.8164959142616038]]
    """
    present = _check_returns(returns)
    if len(present) < 2:
        return [None if r is None else [0.0] * len(r) for r in returns]
    others = len(present) - 1
    horizon = max(len(r) for r in present)
    totals = [math.fsum(r[t] for r in present if t < len(r)) for t in range(horizon)]
    residuals = [None if r is None else [g - (totals[t] - g) / others for t, g in enumerate(r)] for r in returns]
    scale = _pooled_scale([v for r in residuals if r is not None for v in r], eps)
    return [None if r is None else [v / scale for v in r] for r in residuals]


def mixed_advantages(
    returns: Sequence[Sequence[float] | None], rewards: Sequence[float | None], weight: float, *, eps: float = EPS
) -> list[list[float] | None]:
    """`weight * turn + (1 - weight) * episode`, per turn.

    >>> mixed_advantages([[1.0, 1.0], [0.0]], [1.0, 0.0], 0.5)
    [[0.7618005143922659, 0.7618005143922659], [-0.7618005143922659]]
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"the mix weight must be in [0, 1], got {weight}")
    if len(returns) != len(rewards):
        raise ValueError(f"{len(returns)} returns for {len(rewards)} rewards")
    if any((g is None) != (r is None) for g, r in zip(returns, rewards)):
        raise ValueError("an episode has returns but no reward, or a reward but no returns")
    per_turn = turn_advantages(returns, eps=eps)
    per_episode = episode_advantages(rewards, eps=eps)
    return [
        None if t is None or e is None else [weight * a + (1.0 - weight) * e for a in t]
        for t, e in zip(per_turn, per_episode)
    ]


def advantage_bound(
    estimator: str, turns: Sequence[int | None], *, weight: float = 0.5, clip: float | None = None
) -> float:
    """The largest |advantage| `estimator` can give a group whose episodes ran `turns[i]` turns (None: a
    failure, no returns): a function of the group's shape only (see the module docstring).

    >>> round(advantage_bound("episode", [3, 1, None]), 4), advantage_bound("turn", [3, 2]), advantage_bound("turn", [3, 2], clip=1.5)
    (0.7071, 2.0, 1.5)
    """
    present = [t for t in turns if t is not None]
    if len(present) < 2:
        return 0.0
    n, m = len(present), sum(present)
    grpo = (n - 1) / math.sqrt(n)
    pooled = math.sqrt(m - 1)
    bounds = {"episode": grpo, "turn": pooled, "turn_index": pooled, "mix": weight * pooled + (1.0 - weight) * grpo}
    if estimator not in bounds:
        raise ConfigError(f"unknown advantage estimator {estimator!r}; choose {', '.join(bounds)}")
    return bounds[estimator] if clip is None else min(bounds[estimator], clip)


def group_advantages(
    estimator: str,
    returns: Sequence[Sequence[float] | None],
    rewards: Sequence[float | None],
    *,
    weight: float = 0.5,
    clip: float | None = None,
    eps: float = EPS,
) -> list[list[float] | None]:
    """Per-turn advantages of one group under `estimator` ("episode": the episode's value on every turn),
    each capped at `clip` where given; |advantage| never exceeds `advantage_bound`."""
    if estimator == "turn":
        out = turn_advantages(returns, eps=eps)
    elif estimator == "turn_index":
        out = turn_index_advantages(returns, eps=eps)
    elif estimator == "mix":
        out = mixed_advantages(returns, rewards, weight, eps=eps)
    elif estimator == "episode":
        values = episode_advantages(rewards, eps=eps)
        out = [None if v is None or g is None else [v] * len(g) for v, g in zip(values, returns)]
    else:
        raise ConfigError(f"unknown advantage estimator {estimator!r}; choose episode, turn, turn_index or mix")
    if clip is None:
        return out
    if not clip > 0:
        raise ConfigError(f"clip must be positive, got {clip}")
    return [None if r is None else [max(-clip, min(clip, a)) for a in r] for r in out]


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
            raise ValueError(
                f"span ({start}, {end}) overlaps the previous one or leaves the response of {length} tokens"
            )
        out[start:end] = [float(value)] * (end - start)
        previous_end = end
    return out

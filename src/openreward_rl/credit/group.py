"""Per-token advantages of a group of finished `Trajectory`s: what a trainer that runs the episodes itself
(e.g. an embedded GRPO trainer) needs, with the same rules as the Slime and Miles hooks.

>>> from openreward_rl.config import AdvantageSettings
>>> from openreward_rl.engines.base import FinishReason
>>> from openreward_rl.loop.trajectory import StopReason, TokenSegment, Trajectory, Turn
>>> from openreward_rl.parsers.base import ParsedTurn
>>> from openreward_rl.task import TaskRef
>>> def run(rewards):
...     turns = [Turn(prompt_length=1 + 2 * t, sampled_ids=(7,), logprobs=(0.0,), finish_reason=FinishReason.STOP,
...                   parsed=ParsedTurn(content=""), rewards=(r,)) for t, r in enumerate(rewards)]
...     segment = TokenSegment(prompt_ids=[1], response_ids=[7, 9] * len(rewards), loss_mask=[1, 0] * len(rewards), rollout_logprobs=[0.0] * 2 * len(rewards))
...     return Trajectory(task=TaskRef("e", "train", index=0), segments=[segment], turns=turns, messages=[], step_rewards=list(rewards),
...                       reward=sum(rewards), stop_reason=StopReason.COMPLETED, finished=True)
>>> [[round(a, 3) for a in tokens] for tokens in group_token_advantages([run([0.5, 1.0]), run([0.0, 0.0])], AdvantageSettings("turn"))]
[[0.982, 0.982, 0.327, 0.327], [-0.982, -0.982, -0.982, -0.982]]
"""

from __future__ import annotations

from collections.abc import Sequence

from openreward_rl.config import AdvantageSettings
from openreward_rl.credit.estimators import episode_advantages, group_advantages, token_advantages
from openreward_rl.credit.returns import TurnCredit
from openreward_rl.credit.signal import StepSignal, group_signal
from openreward_rl.loop.trajectory import Trajectory

__all__ = ["group_token_advantages", "group_turn_advantages", "trajectory_group_signal"]


def group_turn_advantages(
    trajectories: Sequence[Trajectory], settings: AdvantageSettings, *, nonterminal_reward: float | None = None
) -> tuple[list[TurnCredit | None], list[list[float] | None]]:
    """Each trajectory's credit and per-turn advantages under `settings` (None for one that is not trained).
    The episode estimator uses `Trajectory.reward` (0.0 where none was observed, as the hooks train it)."""
    credits = [
        TurnCredit.of_trajectory(t, gamma=settings.gamma, nonterminal_reward=nonterminal_reward) for t in trajectories
    ]
    returns = [None if c is None else list(c.returns) for c in credits]
    rewards = [None if c is None else float(t.reward or 0.0) for c, t in zip(credits, trajectories)]
    return credits, group_advantages(
        settings.estimator, returns, rewards, weight=settings.mix_weight, clip=settings.clip
    )


def group_token_advantages(
    trajectories: Sequence[Trajectory], settings: AdvantageSettings, *, nonterminal_reward: float | None = None
) -> list[list[float] | None]:
    """One per-token advantage list per trajectory, over its training sequence's response (`response_ids`,
    the last segment); None for a trajectory that is not trained (an infrastructure failure, not
    token-exact). Turns of earlier segments (after a prefix break) count in the returns but have no
    tokens here."""
    credits, per_turn = group_turn_advantages(trajectories, settings, nonterminal_reward=nonterminal_reward)
    out: list[list[float] | None] = []
    for trajectory, credit, advantages in zip(trajectories, credits, per_turn):
        if credit is None or advantages is None:
            out.append(None)
            continue
        last = len(trajectory.segments) - 1
        chosen = [(span[1:], a) for span, a in zip(credit.spans, advantages) if span[0] == last]
        out.append(token_advantages([a for _, a in chosen], [s for s, _ in chosen], len(trajectory.response_ids)))
    return out


def trajectory_group_signal(
    trajectories: Sequence[Trajectory],
    settings: AdvantageSettings,
    rewards: Sequence[float | None],
    *,
    nonterminal_reward: float | None = None,
) -> StepSignal:
    """Whether the group has reward spread (over `rewards`, the ones trained) and which episodes train
    nothing under `settings` (`credit.signal`). For `episode`, the advantages are GRPO's over `rewards`."""
    if settings.per_token:
        _, per_turn = group_turn_advantages(trajectories, settings, nonterminal_reward=nonterminal_reward)
    else:
        per_turn = [None if a is None else [a] for a in episode_advantages(rewards)]
    return group_signal(rewards, per_turn)

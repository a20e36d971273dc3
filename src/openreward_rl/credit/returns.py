"""Per-turn rewards and returns of an episode, and where each turn's tokens lie in its training sample.

An environment gives a reward per tool call; a turn's reward is the sum of its calls' rewards (the
config's `nonterminal_reward`, when the environment did not finish the episode, is added to the last
turn, as the episode reducer appends it as one more step). A turn's return is its reward-to-go:
`G_t = r_t + gamma * G_{t+1}`. Each reward sits on the token where its turn ended (the last token
the model sampled that turn); each turn's span runs from its first sampled token up to the next
turn's first sampled token, so the environment's reply after a turn (loss mask 0) belongs to it.

An infrastructure failure (aborted, env_error, timeout) has no returns: `TurnCredit.of_trajectory`
gives None, and no estimator turns that into an advantage (see `credit.estimators`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from openreward_rl.loop.trajectory import Trajectory

__all__ = ["TurnCredit", "reward_to_go", "turn_rewards", "turn_spans", "token_rewards"]


def reward_to_go(rewards: Sequence[float], gamma: float = 1.0) -> list[float]:
    """`G_t = r_t + gamma * G_{t+1}` for every turn t.

    >>> reward_to_go([0.1, 0.0, 1.0], gamma=0.5)
    [0.35, 0.5, 1.0]
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


def turn_rewards(trajectory: Trajectory, nonterminal_reward: float | None = None) -> list[float]:
    """One reward per turn: the sum of its tool calls' rewards; `nonterminal_reward` added to the
    last turn when the environment did not finish the episode."""
    rewards = [math.fsum(turn.rewards) for turn in trajectory.turns]
    if rewards and not trajectory.finished and nonterminal_reward is not None:
        rewards[-1] += nonterminal_reward
    return rewards


def turn_spans(trajectory: Trajectory) -> list[tuple[int, int, int]]:
    """`(segment, start, end)` per turn: the turn's tokens in `segments[segment].response_ids`, from its
    first sampled token to the next turn's first sampled token in the same segment (or the segment's end).

    A turn belongs to the first segment, from the current one on, whose context holds its sampled ids
    at its prompt length (a new segment starts at each prefix break). ValueError when a turn is found
    in none: the trajectory is not token-exact and its spans cannot be placed.
    """
    starts: list[tuple[int, int]] = []
    segment = 0
    for index, turn in enumerate(trajectory.turns):
        while segment < len(trajectory.segments):
            seg = trajectory.segments[segment]
            start = turn.prompt_length - len(seg.prompt_ids)
            sampled = list(turn.sampled_ids)
            if start >= 0 and seg.response_ids[start : start + len(sampled)] == sampled:
                starts.append((segment, start))
                break
            segment += 1
        else:
            raise ValueError(f"turn {index}'s sampled tokens are in no segment of the trajectory at its prompt length")
    spans = []
    for index, (segment, start) in enumerate(starts):
        following = starts[index + 1] if index + 1 < len(starts) else None
        if following is not None and following[0] == segment:
            end = following[1]
        else:
            end = len(trajectory.segments[segment].response_ids)
        spans.append((segment, start, end))
    return spans


def token_rewards(
    spans: Sequence[Sequence[int]], rewards: Sequence[float], length: int, *, ends: Sequence[int] | None = None
) -> list[float]:
    """A per-token reward vector of `length` (one segment's response): each turn's reward on its last
    sampled token (`ends[i]`, exclusive; default: the span's end), 0.0 elsewhere. `spans` are `(start, end)`.

    >>> token_rewards([(0, 3), (3, 6)], [0.5, 1.0], 6, ends=[2, 4])
    [0.0, 0.5, 0.0, 1.0, 0.0, 0.0]
    """
    out = [0.0] * length
    for index, ((start, end), reward) in enumerate(zip(spans, rewards, strict=True)):
        last = (ends[index] if ends is not None else end) - 1
        if not start <= last < length:
            raise ValueError(
                f"turn {index} ends at token {last}, outside its span [{start}, {end}) or the response ({length})"
            )
        out[last] += float(reward)
    return out


@attrs.frozen
class TurnCredit:
    """One episode's per-turn rewards, returns and token spans (`(segment, start, end)`; `sampled_ends`:
    where each turn's sampled tokens end, exclusive, so its reward sits at `sampled_ends[t] - 1`)."""

    rewards: tuple[float, ...]
    returns: tuple[float, ...]
    spans: tuple[tuple[int, int, int], ...]
    sampled_ends: tuple[int, ...]
    gamma: float = 1.0

    @classmethod
    def of_trajectory(
        cls, trajectory: Trajectory, *, gamma: float = 1.0, nonterminal_reward: float | None = None
    ) -> TurnCredit | None:
        """The episode's credit; None for an infrastructure failure or a trajectory that is not token-exact
        (no returns: such samples are never trained)."""
        if not trajectory.trainable or not trajectory.turns:
            return None
        rewards = turn_rewards(trajectory, nonterminal_reward)
        spans = turn_spans(trajectory)
        ends = tuple(start + len(turn.sampled_ids) for (_, start, _), turn in zip(spans, trajectory.turns, strict=True))
        return cls(tuple(rewards), tuple(reward_to_go(rewards, gamma)), tuple(spans), ends, gamma)

    def segment_token_rewards(self, segment: int, length: int) -> list[float]:
        """Per-token rewards of one segment's response (`length` tokens): each turn's reward at its last sampled token."""
        chosen = [i for i, span in enumerate(self.spans) if span[0] == segment]
        return token_rewards(
            [self.spans[i][1:] for i in chosen],
            [self.rewards[i] for i in chosen],
            length,
            ends=[self.sampled_ends[i] for i in chosen],
        )

"""The advantage estimators as pure functions (what an embedded trainer calls with a group's returns and spans)."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from openreward_rl.config import ADVANTAGE_ESTIMATORS, ConfigError, parse_config
from openreward_rl.credit.estimators import (
    advantage_bound,
    episode_advantages,
    group_advantages,
    mixed_advantages,
    token_advantages,
    turn_advantages,
    turn_index_advantages,
)
from openreward_rl.credit.returns import reward_to_go


def _first_turn_normalised(returns: list[list[float]]) -> list[list[float]]:
    """What the turn estimator computed before it had a bound: (G_t - mean G_0) / (std G_0 + 1e-6)."""
    starts = [r[0] for r in returns]
    mean = sum(starts) / len(starts)
    std = math.sqrt(sum((s - mean) ** 2 for s in starts) / (len(starts) - 1))
    return [[(g - mean) / (std + 1e-6) for g in r] for r in returns]


def _largest(advantages: list[list[float] | None]) -> float:
    return max(abs(a) for r in advantages if r is not None for a in r)


# The issue's group: rewards [0.1, 0.1, 1.0] with gamma 0.5 (returns 0.4, 0.6, 1.0) beside an episode whose
# return from the start is 0.3, so the group's returns from the start spread by 0.07.
ISSUE_RETURNS = [reward_to_go([0.1, 0.1, 1.0], gamma=0.5), [0.3]]
ISSUE_REWARDS = [1.2, 0.3]


def test_the_issue_group_was_unbounded_under_first_turn_statistics() -> None:
    # the case as the issue states it: G_0 spread 0.07, turn advantages 0.71, 3.54, 9.19
    assert ISSUE_RETURNS[0] == pytest.approx([0.4, 0.6, 1.0])
    assert math.sqrt(sum((s - 0.35) ** 2 for s in (0.4, 0.3))) == pytest.approx(0.0707, abs=1e-4)
    assert [round(a, 2) for a in _first_turn_normalised(ISSUE_RETURNS)[0]] == [0.71, 3.54, 9.19]


@pytest.mark.parametrize("estimator", ADVANTAGE_ESTIMATORS)
def test_no_estimator_exceeds_its_bound_on_the_issue_group(estimator: str) -> None:
    turns = [len(r) for r in ISSUE_RETURNS]
    advantages = group_advantages(estimator, ISSUE_RETURNS, ISSUE_REWARDS)
    assert _largest(advantages) <= advantage_bound(estimator, turns)
    assert _largest(advantages) < 2.0  # the former 9.19
    clipped = group_advantages(estimator, ISSUE_RETURNS, ISSUE_REWARDS, clip=0.5)
    assert _largest(clipped) <= advantage_bound(estimator, turns, clip=0.5) == 0.5


def test_the_turn_estimator_on_the_issue_group_divides_by_the_pooled_spread() -> None:
    # mean return from the start 0.35; deviations 0.05, 0.25, 0.65 and -0.05; pooled over M - 1 = 3
    scale = math.sqrt((0.05**2 + 0.25**2 + 0.65**2 + 0.05**2) / 3) + 1e-6
    expected = [[0.05 / scale, 0.25 / scale, 0.65 / scale], [-0.05 / scale]]
    got = turn_advantages(ISSUE_RETURNS)
    for row, want in zip(got, expected):
        assert row == pytest.approx(want)


@st.composite
def groups(draw: st.DrawFn) -> tuple[list[list[float] | None], list[float | None], float]:
    """A group of 1-8 episodes of 1-12 turns with rewards in [-1, 2], some of them failures (None)."""
    gamma = draw(st.floats(0.0, 1.0))
    size = draw(st.integers(1, 8))
    returns: list[list[float] | None] = []
    rewards: list[float | None] = []
    for _ in range(size):
        if draw(st.booleans()) and draw(st.booleans()):
            returns.append(None)
            rewards.append(None)
            continue
        per_turn = draw(st.lists(st.floats(-1.0, 2.0), min_size=1, max_size=12))
        returns.append(reward_to_go(per_turn, gamma))
        rewards.append(sum(per_turn))
    return returns, rewards, gamma


@settings(max_examples=300, deadline=None)
@given(groups(), st.sampled_from(ADVANTAGE_ESTIMATORS), st.floats(0.0, 1.0), st.one_of(st.none(), st.floats(0.1, 5.0)))
def test_no_estimator_exceeds_its_bound_on_any_group(group, estimator: str, weight: float, clip: float | None) -> None:
    returns, rewards, _ = group
    advantages = group_advantages(estimator, returns, rewards, weight=weight, clip=clip)
    bound = advantage_bound(estimator, [None if r is None else len(r) for r in returns], weight=weight, clip=clip)
    assert all((a is None) == (r is None) for a, r in zip(advantages, returns))
    for row, r in zip(advantages, returns):
        if row is not None:
            assert len(row) == len(r) and all(abs(a) <= bound + 1e-9 for a in row)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1.0, 2.0), min_size=2, max_size=8))
def test_with_one_turn_per_episode_every_estimator_is_grpo(rewards: list[float]) -> None:
    # Each estimator adds eps to its own scale, so they agree to about eps / spread: groups with no spread
    # (all 0) or a spread well above eps. ([0.0, 0.0039] differs by 1.3e-4 between turn_index and episode.)
    assume(max(rewards) == min(rewards) or statistics.pstdev(rewards) > 1e-2)
    returns = [[r] for r in rewards]
    grpo = episode_advantages(rewards)
    for estimator in ADVANTAGE_ESTIMATORS:
        got = [row[0] for row in group_advantages(estimator, returns, rewards)]  # type: ignore[index]
        assert got == pytest.approx(grpo, rel=1e-3, abs=1e-4), estimator


def test_the_turn_baseline_does_not_depend_on_how_many_turns_an_episode_ran() -> None:
    # verl#7244's warning: a baseline built from per-turn statistics changes with the episodes' lengths.
    # Ours is the group's returns from the start, one per episode: a trailing turn that earns nothing
    # changes no turn's distance from the baseline; only the group's one scale changes, by one factor for all.
    short = turn_advantages([[1.0, 0.5], [0.2]])
    padded = turn_advantages([[1.0, 0.5, 0.0, 0.0, 0.0], [0.2]])
    factor = padded[1][0] / short[1][0]
    assert factor > 0 and padded[0][:2] == pytest.approx([factor * a for a in short[0]])
    assert padded[0][2] == pytest.approx(factor * (0.0 - 0.6) / (0.2 - 0.6) * short[1][0])  # same baseline, 0.6
    pooled_mean = sum([1.0, 0.5, 0.0, 0.0, 0.0, 0.2]) / 6  # what pooling every turn would have subtracted
    assert padded[1][0] / padded[0][0] != pytest.approx((0.2 - pooled_mean) / (1.0 - pooled_mean))


def test_the_turn_index_baseline_leaves_the_episode_out_and_counts_stopped_ones_as_zero() -> None:
    returns = [[1.0, 0.8, 0.5], [0.4], [0.9, 0.2]]
    got = turn_index_advantages(returns)
    # baselines: the other episodes' returns at the same index, 0 where they had stopped
    residuals = [[1.0 - 0.65, 0.8 - 0.1, 0.5 - 0.0], [0.4 - 0.95], [0.9 - 0.7, 0.2 - 0.4]]
    scale = math.sqrt(sum(v * v for r in residuals for v in r) / 5) + 1e-6
    for row, want in zip(got, residuals):
        assert row == pytest.approx([v / scale for v in want])
    # episode 0's own later turns do not move its earlier baselines (only the group's one scale)
    longer = turn_index_advantages([[1.0, 0.8, 0.5, 0.5, 0.5], [0.4], [0.9, 0.2]])
    factor = longer[1][0] / got[1][0]
    assert longer[2] == pytest.approx([factor * a for a in got[2]])


def test_failures_are_left_out_and_get_no_advantage() -> None:
    with_failure = turn_advantages([[1.0], None, [0.0]])
    assert with_failure[1] is None and with_failure[0] == turn_advantages([[1.0], [0.0]])[0]
    assert turn_index_advantages([[1.0], None, [0.0]]) == [
        *turn_index_advantages([[1.0], [0.0]])[:1],
        None,
        *turn_index_advantages([[1.0], [0.0]])[1:],
    ]
    assert episode_advantages([1.0, None, 0.0])[1] is None
    assert group_advantages("episode", [[1.0, 1.0], None], [1.0, None]) == [
        [0.0, 0.0],
        None,
    ]  # one episode ran: no baseline


def test_a_group_without_spread_from_the_start_still_ranks_its_turns() -> None:
    # both episodes end with 1.0, but one earned it on its first turn: its second turn is below the baseline
    scale = math.sqrt(1.0 / 3) + 1e-6  # deviations 0, -1, 0, 0 pooled over M - 1 = 3
    assert turn_advantages([[1.0, 0.0], [1.0, 1.0]]) == [[0.0, -1.0 / scale], [0.0, 0.0]]
    assert turn_advantages([[1.0, 1.0], [1.0]]) == [[0.0, 0.0], [0.0]]  # no spread at all: centred, not divided


def test_mix_is_the_weighted_sum_and_checks_its_inputs() -> None:
    returns, rewards = [[1.0, 0.4], [0.0]], [1.0, 0.0]
    turn, episode = turn_advantages(returns), episode_advantages(rewards)
    mixed = mixed_advantages(returns, rewards, 0.3)
    assert mixed[0] == pytest.approx([0.3 * t + 0.7 * episode[0] for t in turn[0]])
    assert mixed_advantages(returns, rewards, 1.0) == turn
    with pytest.raises(ValueError, match="returns but no reward"):
        mixed_advantages([[1.0], None], [1.0, 0.0], 0.5)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        mixed_advantages(returns, rewards, 1.5)
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        group_advantages("grpo", returns, rewards)
    with pytest.raises(ValueError, match="clip must be positive"):
        group_advantages("turn", returns, rewards, clip=0.0)


def test_the_config_names_turn_index_and_clip_and_refuses_a_clip_on_episode() -> None:
    config = parse_config({"environments": {"E": {}}, "advantage": {"estimator": "turn_index", "clip": 3}})
    assert config.advantage.estimator == "turn_index" and config.advantage.clip == 3.0 and config.advantage.per_token
    with pytest.raises(ConfigError, match="advantage.clip: the episode estimator"):
        parse_config({"environments": {"E": {}}, "advantage": {"estimator": "episode", "clip": 3}})
    with pytest.raises(ConfigError, match="advantage.clip: must be a positive number"):
        parse_config({"environments": {"E": {}}, "advantage": {"estimator": "turn", "clip": -1}})


def test_token_advantages_fill_each_turns_span() -> None:
    assert token_advantages([1.0, -1.0], [(0, 2), (3, 4)], 5) == [1.0, 1.0, 0.0, -1.0, 0.0]
    with pytest.raises(ValueError, match="overlaps"):
        token_advantages([1.0, -1.0], [(0, 3), (2, 4)], 5)
    with pytest.raises(ValueError, match="2 advantages for 1 spans"):
        token_advantages([1.0, -1.0], [(0, 3)], 5)


def test_group_token_advantages_of_trajectories_leave_failures_out() -> None:
    from openreward_rl.config import AdvantageSettings
    from openreward_rl.credit.group import group_token_advantages
    from openreward_rl.engines.base import FinishReason
    from openreward_rl.env.tasks import TaskRef
    from openreward_rl.loop.episode import failed_trajectory
    from openreward_rl.loop.trajectory import StopReason, TokenSegment, Trajectory, Turn
    from openreward_rl.parsers.base import ParsedTurn

    def run(rewards: list[float]) -> Trajectory:
        turns = [
            Turn(
                prompt_length=1 + 3 * t,
                sampled_ids=(7, 8),
                logprobs=(0.0, 0.0),
                finish_reason=FinishReason.STOP,
                parsed=ParsedTurn(content=""),
                rewards=(r,),
            )
            for t, r in enumerate(rewards)
        ]
        segment = TokenSegment(
            prompt_ids=[1],
            response_ids=[7, 8, 9] * len(rewards),
            loss_mask=[1, 1, 0] * len(rewards),
            rollout_logprobs=[0.0] * 3 * len(rewards),
        )
        return Trajectory(
            task=TaskRef("e", "train", index=0),
            segments=[segment],
            turns=turns,
            messages=[],
            step_rewards=rewards,
            reward=sum(rewards),
            stop_reason=StopReason.MAX_TURNS,
        )

    failed = failed_trajectory(TaskRef("E", "train", index=0), StopReason.ENV_ERROR, "died")
    settings = AdvantageSettings("mix", gamma=0.5, mix_weight=0.5)
    with_failure = group_token_advantages(
        [run([0.1, 1.0]), failed, run([0.0, 0.1, 0.0])], settings, nonterminal_reward=-1.0
    )
    without = group_token_advantages([run([0.1, 1.0]), run([0.0, 0.1, 0.0])], settings, nonterminal_reward=-1.0)
    assert with_failure[1] is None and [with_failure[0], with_failure[2]] == without
    first = without[0]
    assert first is not None and len(first) == 6 and first[0] == first[2] != first[3]  # one value per turn span

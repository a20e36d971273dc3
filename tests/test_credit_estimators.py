"""The advantage estimators as pure functions (what an embedded trainer calls with a group's returns and spans)."""

from __future__ import annotations

import pytest

from openreward_rl.credit.estimators import episode_advantages, group_advantages, mixed_advantages, token_advantages, turn_advantages


def test_the_turn_baseline_does_not_depend_on_how_many_turns_an_episode_ran() -> None:
    # verl#7244's warning: a baseline built from per-turn statistics changes with the episodes' lengths.
    # Ours is the group's returns from the start, one per episode: a trailing turn that earns nothing
    # changes neither the other episodes' advantages nor the earlier turns of its own.
    short = turn_advantages([[1.0, 0.5], [0.2]])
    padded = turn_advantages([[1.0, 0.5, 0.0, 0.0, 0.0], [0.2]])
    assert padded[1] == short[1] and padded[0][:2] == short[0]
    pooled_mean = sum([1.0, 0.5, 0.0, 0.0, 0.0, 0.2]) / 6  # what pooling every turn would have subtracted
    assert padded[1][0] != pytest.approx(0.2 - pooled_mean)


def test_failures_are_left_out_and_get_no_advantage() -> None:
    with_failure = turn_advantages([[1.0], None, [0.0]])
    assert with_failure[1] is None and with_failure[0] == turn_advantages([[1.0], [0.0]])[0]
    assert episode_advantages([1.0, None, 0.0])[1] is None
    assert group_advantages("episode", [[1.0, 1.0], None], [1.0, None]) == [[0.0, 0.0], None]  # one episode ran: no baseline


def test_a_group_without_spread_from_the_start_still_ranks_its_turns() -> None:
    # both episodes end with 1.0, but one earned it on its first turn: centred, not divided by a zero std
    assert turn_advantages([[1.0, 0.0], [1.0, 1.0]]) == [[0.0, -1.0], [0.0, 0.0]]


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
    from openreward_rl.loop.episode import failed_trajectory
    from openreward_rl.env.tasks import TaskRef
    from openreward_rl.loop.trajectory import StopReason, TokenSegment, Trajectory, Turn
    from openreward_rl.parsers.base import ParsedTurn

    def run(rewards: list[float]) -> Trajectory:
        turns = [Turn(prompt_length=1 + 3 * t, sampled_ids=(7, 8), logprobs=(0.0, 0.0), finish_reason=FinishReason.STOP, parsed=ParsedTurn(content=""), rewards=(r,)) for t, r in enumerate(rewards)]
        segment = TokenSegment(prompt_ids=[1], response_ids=[7, 8, 9] * len(rewards), loss_mask=[1, 1, 0] * len(rewards), rollout_logprobs=[0.0] * 3 * len(rewards))
        return Trajectory(task={}, segments=[segment], turns=turns, messages=[], step_rewards=rewards, reward=sum(rewards), stop_reason=StopReason.MAX_TURNS)

    failed = failed_trajectory(TaskRef("E", "train", index=0), StopReason.ENV_ERROR, "died")
    settings = AdvantageSettings("mix", gamma=0.5, mix_weight=0.5)
    with_failure = group_token_advantages([run([0.1, 1.0]), failed, run([0.0, 0.1, 0.0])], settings, nonterminal_reward=-1.0)
    without = group_token_advantages([run([0.1, 1.0]), run([0.0, 0.1, 0.0])], settings, nonterminal_reward=-1.0)
    assert with_failure[1] is None and [with_failure[0], with_failure[2]] == without
    first = without[0]
    assert first is not None and len(first) == 6 and first[0] == first[2] != first[3]  # one value per turn span

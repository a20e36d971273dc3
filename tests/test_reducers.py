import math

import pytest

from openreward_rl.reducers import RewardPolicy, available_reducers, get_reducer


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("sum", 1.5),
        ("mean", 0.5),
        ("max", 1.0),
        ("min", -0.5),
        ("last", 1.0),
        ("discounted", 1.0 - 0.5 * 0.99 + 1.0 * 0.99**2),
    ],
)
def test_reductions(name: str, expected: float) -> None:
    assert math.isclose(get_reducer(name).reduce([1.0, -0.5, 1.0]), expected)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "last", "discounted"])
def test_no_reward_observed_is_none_not_zero(name: str) -> None:
    assert get_reducer(name).reduce([]) is None


def test_registry_lists_builtins_and_rejects_unknown() -> None:
    assert set(available_reducers()) >= {"sum", "mean", "max", "min", "last", "discounted"}
    with pytest.raises(ValueError, match="unknown reward reduction 'avg'"):
        get_reducer("avg")
    with pytest.raises(ValueError, match="gamma"):
        get_reducer("discounted", gamma=1.5)


def test_policy_nonterminal_and_clamp() -> None:
    policy = RewardPolicy(get_reducer("sum"), nonterminal_reward=-1.0, min_reward=-0.5, max_reward=1.0)
    assert policy.final_reward([2.0], finished=True) == 1.0
    assert policy.final_reward([0.2], finished=False) == -0.5  # 0.2 - 1.0 clamped at the floor
    assert policy.final_reward([], finished=False) == -0.5  # the nonterminal reward is an observed reward
    assert RewardPolicy(get_reducer("sum")).final_reward([], finished=False) is None
    with pytest.raises(ValueError, match="greater than"):
        RewardPolicy(get_reducer("sum"), min_reward=1.0, max_reward=0.0)

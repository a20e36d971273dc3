"""The `RewardReducer` protocol: per-step rewards -> one scalar, with "no reward observed" kept as None."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar, runtime_checkable

import attrs

from openreward_rl._registry import Registry

__all__ = ["RewardReducer", "RewardPolicy", "register_reducer", "get_reducer", "available_reducers"]


@runtime_checkable
class RewardReducer(Protocol):
    """How an episode's step rewards become its one reward (`reward_reduction` in the config).

    `reduce(rewards)` gets every reward the environment returned, in step order (plus the environment's
    `nonterminal_reward`, appended when the episode did not finish), and returns one number, or None
    when `rewards` is empty: "no reward observed" is never 0 (training counts such an episode as 0.0,
    an infrastructure failure is excluded). The result is then clamped to `min_reward`/`max_reward`
    (`RewardPolicy`). `name` names the reducer in logs. A reducer is built once per episode, by its
    class or factory, with no arguments (`discounted` alone gets `gamma` from the config's `discount`).

    Yours is any class with these two members: register it with `register_reducer` or name it in the
    config as `package.module:Class` or `path/to/file.py:Class` (examples/custom_reducer.py).
    """

    name: str

    def reduce(self, rewards: Sequence[float]) -> float | None: ...


_ReducerT = TypeVar("_ReducerT", bound=type)
_REGISTRY: Registry[Callable[..., RewardReducer]] = Registry(
    duplicate="a reward reducer named {name!r} is already registered",
    unknown="unknown reward reduction {name!r}; choose one of: {known}",
)


def register_reducer(name: str) -> Callable[[_ReducerT], _ReducerT]:
    """Class decorator: make a reducer available as `get_reducer(name)` and as `reward_reduction: name` in
    the config, once the module that registers it is imported (the config's `plugins:`); a name is
    registered once. examples/custom_reducer.py registers one; docs/training.md, "Your own reward reduction"."""
    return _REGISTRY.register(name)


def get_reducer(name: str, **options: float) -> RewardReducer:
    """A reducer: registered as `name`, or your own class (or factory) as `package.module:Class` or
    `path/to/file.py:Class`; `options` go to its constructor (e.g. `get_reducer("discounted", gamma=0.9)`).
    ValueError names an unknown or unfit one.

    >>> get_reducer("sum").reduce([0.5, 1.0])
    1.5
    >>> get_reducer("mean").reduce([]) is None
    True
    >>> get_reducer("openreward_rl.reducers.builtin:Max").reduce([0.5, 1.0])
    1.0
    """
    factory = _REGISTRY.resolve(name)
    if not callable(factory):
        raise ValueError(f"reward reduction {name!r} is {factory!r}, not a reducer class or factory")
    try:
        reducer = factory(**options)
    except TypeError as error:
        raise ValueError(f"bad options for reward reduction {name!r}: {error}") from None
    if not isinstance(reducer, RewardReducer):
        raise ValueError(
            f"reward reduction {name!r} built {type(reducer).__name__}, which lacks a `name` or a `reduce(rewards)` method"
        )
    return reducer


def available_reducers() -> list[str]:
    return _REGISTRY.names()


@attrs.frozen
class RewardPolicy:
    """How an episode's step rewards become its reward (the cookbook's per-environment settings).

    - `nonterminal_reward`: appended as one more step reward when the environment did not finish the
      episode (max turns, context overflow, truncation, no tool call); never for infrastructure failures.
    - `min_reward` / `max_reward`: clamp the reduced value (floor first, then ceiling).
    - No reward observed stays None; it is never silently 0.

    >>> policy = RewardPolicy(get_reducer("sum"), nonterminal_reward=-1.0, max_reward=1.0)
    >>> policy.final_reward([0.25, 0.5], finished=True), policy.final_reward([0.25], finished=False)
    (0.75, -0.75)
    >>> policy.final_reward([], finished=True) is None
    True
    """

    reducer: RewardReducer
    nonterminal_reward: float | None = None
    min_reward: float | None = None
    max_reward: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.min_reward is not None and self.max_reward is not None and self.min_reward > self.max_reward:
            raise ValueError(f"min_reward {self.min_reward} is greater than max_reward {self.max_reward}")

    def final_reward(self, step_rewards: Sequence[float], *, finished: bool) -> float | None:
        rewards = list(step_rewards)
        if not finished and self.nonterminal_reward is not None:
            rewards.append(self.nonterminal_reward)
        reward = self.reducer.reduce(rewards)
        return None if reward is None else self.clamp(reward)

    def clamp(self, reward: float) -> float:
        """`reward` within `min_reward`/`max_reward` (floor first, then ceiling); group scores use it too.

        >>> RewardPolicy(get_reducer("sum"), min_reward=0.0, max_reward=1.0).clamp(1.5)
        1.0
        """
        if self.min_reward is not None:
            reward = max(self.min_reward, reward)
        if self.max_reward is not None:
            reward = min(self.max_reward, reward)
        return reward

"""Reward reductions: per-step rewards -> one scalar, "no reward observed" kept distinct from 0."""

from openreward_rl.reducers import builtin  # noqa: F401  (the built-in reductions register themselves)
from openreward_rl.reducers.base import RewardPolicy, RewardReducer, available_reducers, get_reducer, register_reducer

__all__ = ["RewardPolicy", "RewardReducer", "available_reducers", "get_reducer", "register_reducer"]

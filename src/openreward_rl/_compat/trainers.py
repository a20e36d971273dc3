"""Slime's and Miles' rollout state, read where their hooks give no handle on it.

Slime (`slime/rollout/sglang_rollout.py`) and Miles' legacy rollout keep one `GenerateState` per process:
a `SingletonMeta` class whose instance lives in the metaclass's `_instances` dict. No version gate: the
trainers are installed from their checkouts (no version on the index), so the shape is checked at each read
and a class of another shape reads as "no state" (the hook then has no abort signal from it).
"""

from __future__ import annotations

from typing import Any

__all__ = ["singleton_instance", "has_singletons"]


def has_singletons(cls: Any) -> bool:
    """Whether `cls` is built by a `SingletonMeta` (an `_instances` dict) and has its instance built."""
    instances = getattr(cls, "_instances", None)
    return isinstance(instances, dict) and instances.get(cls) is not None


def singleton_instance(cls: Any) -> Any:
    """The one instance a `SingletonMeta` class holds, or None."""
    instances = getattr(cls, "_instances", None)
    return instances.get(cls) if isinstance(instances, dict) else None

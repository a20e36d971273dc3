"""Whether the trainer is aborting its rollout step, read from the trainer's own state.

Slime (`slime/rollout/sglang_rollout.py`) and Miles' legacy rollout (`miles/rollout/sglang_rollout.py`)
keep one `GenerateState` per process (a `SingletonMeta` class: the instance lives in the
metaclass's `_instances` dict) and set `state.aborted = True` before they POST `abort_all` to the
SGLang workers at the end of a rollout step, then reset it when the step ends. Miles' class-based
rollout passes its (non-singleton) `GenerateState` to a new-form generate as `input.state`.
"""

from __future__ import annotations

import sys
from typing import Any

from openreward_rl._compat import trainers
from openreward_rl.loop.resumable import AbortSignal

__all__ = ["singleton_abort_signal", "state_abort_signal", "SLIME_ROLLOUT_MODULE", "MILES_LEGACY_ROLLOUT_MODULE"]

SLIME_ROLLOUT_MODULE = "slime.rollout.sglang_rollout"
MILES_LEGACY_ROLLOUT_MODULE = "miles.rollout.sglang_rollout"


def singleton_abort_signal(module_name: str) -> AbortSignal | None:
    """A reader of `<module>.GenerateState`'s singleton `.aborted`; None where that module is not loaded
    or its state was never built (that rollout is not the one calling the hook, so its flag says nothing)."""
    cls = getattr(sys.modules.get(module_name), "GenerateState", None)
    if cls is None or not trainers.has_singletons(cls):
        return None

    def aborted() -> bool:
        return bool(getattr(trainers.singleton_instance(cls), "aborted", False))

    return aborted


def state_abort_signal(state: Any) -> AbortSignal | None:
    """A reader of `state.aborted` (Miles' `GenerateFnInput.state`); None when it has no such flag."""
    if state is None or not hasattr(state, "aborted"):
        return None
    return lambda: bool(state.aborted)

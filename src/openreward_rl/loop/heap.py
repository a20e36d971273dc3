"""The garbage collector in a process that keeps many episodes in flight (`settle_heap`).

CPython's cyclic collector runs a young collection every 700 new container objects and a full one
(every tracked object in the process) every so many young ones. A rollout process holds a large,
permanent heap (torch, transformers, the tokenizer and template, the HTTP clients: millions of
objects) and, per episode in flight, objects that live across awaits (coroutine frames, requests,
token lists). The more episodes in flight, the longer each of those lives in allocations, so the
more of them survive into the old generations and the more often full collections walk the whole
permanent heap: at 1,000 concurrent episodes over HTTP on 2 cores the collector took ~1.3 ms of
the episode process's ~2.5 ms per turn (15 full collections of ~0.4 s each in 45 s), against
~0.2 ms at 100 (docs/performance.md, section 4).

`settle_heap()` runs once per process, on its first episode (`run_episode` calls it): it collects,
moves everything alive then into the collector's permanent generation (`gc.freeze()`: built once
and kept for the life of the process, never walked again), and raises the two young generations'
thresholds to `GEN0_THRESHOLD` and `GEN1_THRESHOLD` (where lower): a collection of the middle
generation then comes every ~2.5M allocations instead of every 7,000, so an object that lives
across a few awaits (a request, a turn's token lists) is mostly freed by its reference count
before any collection walks it. At 2,000 concurrent episodes the collector's share fell from ~1.0
to ~0.3 ms per turn with the same peak RSS (docs/performance.md, section 4). Garbage is still
collected; the costs are that cyclic garbage made of objects alive at the first episode is never
freed (the state a process builds before its first episode is its lasting state), and that cyclic
garbage made later waits longer for its collection.
Set `OPENREWARD_RL_GC=keep` in the environment to leave the collector as it is.
"""

from __future__ import annotations

import gc
import os

__all__ = ["settle_heap", "GEN0_THRESHOLD", "GEN1_THRESHOLD", "GC_ENV"]

GEN0_THRESHOLD = 50_000  # CPython's default: 700
GEN1_THRESHOLD = 50  # CPython's default: 10
GC_ENV = "OPENREWARD_RL_GC"

_settled = False


def settle_heap() -> bool:
    """Freeze the heap built so far and raise the young thresholds, once per process; True when it
    did so now (False when done before, or when `OPENREWARD_RL_GC=keep`)."""
    global _settled
    if _settled or os.environ.get(GC_ENV, "").strip().lower() == "keep":
        return False
    _settled = True
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if young > 0:  # 0: automatic collection is off, and stays off
        gc.set_threshold(max(young, GEN0_THRESHOLD), max(middle, GEN1_THRESHOLD), old)
    return True

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
and kept for the life of the process, never walked again), and raises the young generation's
threshold to `GEN0_THRESHOLD` (if lower) so that fewer short-lived objects are walked and promoted.
Garbage is still collected as before; the cost is that cyclic garbage made of objects alive at the
first episode is never freed (the state a process builds before its first episode is its lasting
state), and up to `GEN0_THRESHOLD` container objects wait for their young collection.
Set `OPENREWARD_RL_GC=keep` in the environment to leave the collector as it is.
"""

from __future__ import annotations

import gc
import os

__all__ = ["settle_heap", "GEN0_THRESHOLD", "GC_ENV"]

GEN0_THRESHOLD = 10_000
GC_ENV = "OPENREWARD_RL_GC"

_settled = False


def settle_heap() -> bool:
    """Freeze the heap built so far and raise the young threshold, once per process; True when it
    did so now (False when done before, or when `OPENREWARD_RL_GC=keep`)."""
    global _settled
    if _settled or os.environ.get(GC_ENV, "").strip().lower() == "keep":
        return False
    _settled = True
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if 0 < young < GEN0_THRESHOLD:
        gc.set_threshold(GEN0_THRESHOLD, middle, old)
    return True

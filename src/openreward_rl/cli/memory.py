"""The C allocator's settings for the commands that train in this process (`sft`, `train --framework trl`).

glibc's malloc raises its mmap threshold to the size of each large block freed (up to 32 MiB), so after the first
training pass torch's layer-sized temporaries come from the heap, where freed ones stay resident (in as many arenas
as threads allocated them). A fixed threshold gives every block above it its own mapping, returned to the system
when freed. Measured on one GRPO pass of 4 episodes x 460 tokens of SmolLM2-135M (`tests/_grpo_step_memory.py`):
the process's peak fell from 3,980 to 3,301 MiB, the same loss (docs/performance.md, section 8).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["ALLOCATOR_SETTINGS", "return_freed_memory"]

# mallopt(3) parameters: M_TRIM_THRESHOLD (-1), M_MMAP_THRESHOLD (-3), M_ARENA_MAX (-8)
ALLOCATOR_SETTINGS = {-1: 64 * 1024, -3: 64 * 1024, -8: 2}


def return_freed_memory() -> bool:
    """Set glibc's malloc to hand freed large blocks back to the system (`ALLOCATOR_SETTINGS`); True where it took
    them, False on another C library or system (nothing changes there). Call it before the model loads."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(parameter, value) == 1 for parameter, value in ALLOCATOR_SETTINGS.items())

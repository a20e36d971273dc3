"""`loop.heap.settle_heap`: once per process, the heap alive at the first episode leaves the collector's
walks (`gc.freeze`) and the young thresholds rise; `OPENREWARD_RL_GC=keep` leaves the collector alone.
Each case runs in a fresh interpreter: the settings are process-wide and once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

SCRIPT = """
import gc, json
from openreward_rl.loop.heap import settle_heap
kept = [[i] for i in range(1000)]  # alive before the first episode
before = gc.get_threshold()
first, second = settle_heap(), settle_heap()
print(json.dumps({"before": before, "after": gc.get_threshold(), "first": first, "second": second, "frozen": gc.get_freeze_count()}))
"""


def run(extra_env: dict[str, str]) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "OPENREWARD_RL_GC"}
    env.update({"PYTHONPATH": str(SRC), **extra_env})
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_settles_once_freezing_the_heap_and_raising_the_young_thresholds() -> None:
    result = run({})
    assert result["first"] is True and result["second"] is False
    assert result["before"] == [700, 10, 10]
    assert result["after"] == [50_000, 50, 10]
    assert result["frozen"] > 1000  # at least the lists kept above, and the interpreter's own state


def test_keep_leaves_the_collector_alone() -> None:
    result = run({"OPENREWARD_RL_GC": "keep"})
    assert result["first"] is False and result["after"] == result["before"] and result["frozen"] == 0

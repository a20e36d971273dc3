"""examples/custom_context_policy.py, run as documented, prints what its policy does to a Corridor conversation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_context_policy.py"


def test_custom_context_policy_example_prints_the_rewritten_conversation() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLE.parents[1] / "src"), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("keep_key_lines at 80% of the budget (threshold 60%): rewrites the context")
    first_room = out[out.index("[1] tool (rewritten") : out.index("[2] tool")]
    assert "[kept lines] Carved above the door: THE EXIT KEY IS " in first_room and "tapestries" not in first_room
    newest = out[out.index("[3] tool (kept") :]
    assert "This is the last room." in newest and "tapestries" in newest  # the newest output stays whole

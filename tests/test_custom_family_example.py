"""examples/custom_family.py runs as documented: its family is picked by name and its episode is token-exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_family.py"


def test_custom_family_example_picks_its_family_and_matches_the_template():
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLE.parents[1] / "src"), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["family"] == "orca-calc" and result["parser"] == "hermes"
    assert result["stop_tokens"] == ["<|im_end|>"]
    assert result["stop_reason"] == "completed" and result["reward"] == 1.0
    assert result["calls_per_turn"] == [2, 1, 0]
    assert result["prefix_breaks"] == 0 and result["matches_template"] is True
    assert result["trained_tokens"] == result["sampled_tokens"] > 0


def test_a_config_names_the_example_family_by_file_or_by_the_name_its_plugin_registers():
    from openreward_rl.config import parse_config
    from openreward_rl.loop.rollout import choose_family

    by_file = parse_config({"environments": {"E": {}}, "model_family": f"{EXAMPLE}:ORCA_CALC"})
    by_name = parse_config({"environments": {"E": {}}, "plugins": [str(EXAMPLE)], "model_family": "orca-calc"})
    assert choose_family(by_file, "any/model", None) == choose_family(by_name, "any/model", None)
    assert choose_family(by_name, "any/model", None).name == "orca-calc"

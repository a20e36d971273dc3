"""examples/custom_reducer.py runs as documented: its reduction, named by class or by its registered name
in a config, gives the rewards it says; a name that is neither is refused when the config loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openreward_rl.config import ConfigError, parse_config

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_reducer.py"


def test_custom_reducer_example_runs_and_reduces_by_class_and_by_registered_name() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLE.parents[1] / "src"), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    rows = {r["episode"]: (r["by_class"], r["by_name"]) for r in map(json.loads, done.stdout.splitlines())}
    assert rows == {
        "one_step": (1.0, 1.0),
        "three_steps": (0.8, 0.8),  # 1.0 - 2 x 0.1
        "unfinished": (0.1, 0.0),  # by_name appends nonterminal_reward -0.5: 0.2 - 2 x 0.1
        "no_reward": (None, None),  # no reward observed stays None, never 0
    }


def test_a_config_names_the_reduction_by_the_name_its_plugin_registers() -> None:
    config = parse_config({"plugins": [str(EXAMPLE)], "environments": {"E": {"reward_reduction": "best_minus_steps"}}})
    assert (
        config.plugins == (str(EXAMPLE),)
        and config.environment("E").reward_policy().final_reward([0.5, 1.0], finished=True) == 0.9
    )
    with pytest.raises(
        ConfigError,
        match=r"reward_reduction: unknown reward reduction 'best_minus_step'; choose one of: best_minus_steps, discounted, ",
    ):
        parse_config({"plugins": [str(EXAMPLE)], "environments": {"E": {"reward_reduction": "best_minus_step"}}})

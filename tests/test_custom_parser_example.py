"""examples/custom_parser.py runs as documented and its made-up format parses as it says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_parser.py"


def test_custom_parser_example_runs_and_parses():
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLE.parents[1] / "src"), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    results = {r["sample"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert results["two_calls"]["calls"] == [
        {"name": "get_weather", "arguments": {"city": "Zürich", "days": 3}},
        {"name": "get_weather", "arguments": {"city": "Oslo"}},
    ]
    assert results["two_calls"]["content"] == "Let me look.\n\n\nDone."
    assert results["unknown_tool"] == {
        "sample": "unknown_tool",
        "content": "",
        "reasoning": None,
        "calls": [],
        "errors": ["unknown_tool"],
    }
    assert results["cut_off"]["calls"] == [] and results["cut_off"]["errors"] == ["unclosed_block"]
    assert results["in_reasoning"]["calls"] == [] and results["in_reasoning"]["errors"] == ["call_in_reasoning"]
    assert results["in_reasoning"]["content"] == "No tools needed."


def test_a_config_names_the_example_parser_by_file_or_by_the_name_its_plugin_registers():
    from openreward_rl.config import parse_config
    from openreward_rl.loop.rollout import choose_parser

    by_file = parse_config({"environments": {"E": {}}, "parser": f"{EXAMPLE}:AtCallParser"})
    by_name = parse_config({"environments": {"E": {}}, "plugins": [str(EXAMPLE)], "parser": "at_call"})
    for config in (by_file, by_name):
        parser = choose_parser(config, None, None)
        [call] = parser.parse('@@call get_weather\ncity = "Oslo"\n@@end').tool_calls
        assert parser.name == "at_call" and (call.name, call.arguments) == ("get_weather", {"city": "Oslo"})

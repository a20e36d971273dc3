"""The config's `episode:` for the example agent program (examples/own_agent/openai_tool_loop.py).

`build` runs it as a command, one process per episode, with OPENAI_BASE_URL / OPENAI_API_KEY pointing at
its episode's URL on the runner's token-recording endpoint; `build_in_process` awaits its `solve`
function in the runner's own event loop instead (no process per episode).

    episode: examples/own_agent/episode.py:build      # in the train config
"""

from __future__ import annotations

import sys
from pathlib import Path

from openreward_rl.agent_endpoint import SubprocessAgent, agent_episode_builder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from openai_tool_loop import solve  # noqa: E402

AGENT = Path(__file__).resolve().parent / "openai_tool_loop.py"
AGENT_TIMEOUT_S = 900.0  # bounds a hung program; on a 2-core CPU shared with other jobs one episode ran past 300 s

build = agent_episode_builder(SubprocessAgent([sys.executable, str(AGENT)]), agent_timeout=AGENT_TIMEOUT_S)
build_in_process = agent_episode_builder(solve, agent_timeout=AGENT_TIMEOUT_S)

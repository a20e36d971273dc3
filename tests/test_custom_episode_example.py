"""examples/custom_episode.py: a user-written Episode built from the library's blocks.

Runs through the config's runner (`Rollouts.from_config(..., episode=...)`, what eval and the training
hooks build) against the real local env server and the SGLang wire-format double. Qwen3's template drops an
earlier turn's <think> block once a later user message follows, so re-rendering after a thinking
turn and a nudge must show up as a counted prefix break and a second segment, never as a silent rewrite.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from openreward_rl import Rollouts, StopReason, TaskRef
from openreward_rl.assets import load_tokenizer
from openreward_rl.config import parse_config
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_episode.py"
spec = importlib.util.spec_from_file_location("custom_episode_example", EXAMPLE)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("think", "breaks", "named"),
    [("", 0, False), ("<think>\nplan\n</think>\n\n", 1, False), ("<think>\nplan\n</think>\n\n", 1, True)],
    ids=["no-think", "think", "think-named-in-config"],
)
async def test_rerendering_episode_counts_prefix_breaks(
    env_server, openreward_client, think: str, breaks: int, named: bool
) -> None:
    """`named`: the config's `episode: examples/custom_episode.py:ReRenderingEpisode.build` builds it, no argument given."""
    tokenizer = load_tokenizer("offline:qwen3")
    script = [
        ScriptedCompletion(text=think + '<tool_call>\n{"name": "list_suspects", "arguments": {}}\n</tool_call>'),
        ScriptedCompletion(text="Hmm."),
        ScriptedCompletion(text="I cannot tell."),
    ]
    config = parse_config(
        {
            "thinking": True,
            "nudge_message": "Tools, please.",
            "environments": {
                "WhoDunIt": {
                    "base_url": env_server.base_url,
                    "variant": "whodunit",
                    "nonterminal_reward": -0.5,
                    "max_turns": 5,
                }
            },
            **({"episode": f"{EXAMPLE}:ReRenderingEpisode.build"} if named else {}),
        }
    )
    async with SGLangTestServer(tokenizer, script=script) as sglang:
        engine = SGLangEngine(sglang.url)
        rollouts = Rollouts.from_config(
            config,
            engine=engine,
            tokenizer=tokenizer,
            client=openreward_client,
            model="Qwen/Qwen3-8B",
            max_new_tokens=256,
            **({} if named else {"episode": example.ReRenderingEpisode.build}),
        )
        assert rollouts.episode.__qualname__ == "ReRenderingEpisode.build"
        trajectory = await rollouts.run(TaskRef("WhoDunIt", "train", index=0))
        await engine.aclose()
    assert trajectory.stop_reason is StopReason.NO_TOOL_CALL
    # list_suspects gives no reward and the run never finished: the config's policy, applied by the runner, sets -0.5
    assert trajectory.step_rewards == [] and trajectory.reward == -0.5
    # the Episode was built from the config's settings: its nudge and the per-call token cap reached the model
    assert {"role": "user", "content": "Tools, please."} in trajectory.messages
    assert all(r.sampling_params["max_new_tokens"] == 256 for r in sglang.requests)
    assert trajectory.prefix_breaks == breaks and len(trajectory.segments) == breaks + 1
    # The last segment is exactly the last prompt sent plus the last sampled ids.
    last_request = sglang.requests[-1]
    assert trajectory.tokens == last_request.input_ids + list(trajectory.turns[-1].sampled_ids)


def test_example_runs_as_a_script() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=240, cwd=EXAMPLE.parents[1]
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    # The example's Episode never reduces its rewards: the config's policy, applied by the runner, gave the unfinished run -1.
    assert summary == {"stop_reason": "no_tool_call", "turns": 3, "prefix_breaks": 1, "segments": 2, "reward": -1.0}

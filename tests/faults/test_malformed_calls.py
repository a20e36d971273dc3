"""Hypothesis-generated model outputs through the hermes parser into real episodes (WhoDunIt on the
SDK's real `Server`, the real Qwen3 tokenizer, the SGLang /generate test double): whatever the
model writes, the episode ends with a typed stop reason, never crashes, never runs a call the
parser rejected, and never turns a model mistake into an infrastructure failure."""

from __future__ import annotations

import json

import pytest
from fault_harness import SAMPLING, EpisodeRun, assert_sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openreward import AsyncOpenReward

from openreward_rl import EpisodeSettings
from openreward_rl.env.local_server import LocalEnvServer
from openreward_rl.testing import ScriptedCompletion

pytestmark = pytest.mark.anyio

TOOL_NAMES = ["list_suspects", "interview", "inspect", "accuse"]
# Text without lone surrogates (the tokenizer cannot encode them) or the chat template's specials.
plain_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<|>"), max_size=40)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False) | plain_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(plain_text, inner, max_size=3),
    max_leaves=6,
)
name = st.sampled_from(TOOL_NAMES) | plain_text
arguments = (
    st.dictionaries(st.sampled_from(["suspect", "location", "who", "x"]) | plain_text, json_value, max_size=3)
    | json_value
)


@st.composite
def call_block(draw: st.DrawFn) -> str:
    body = {"name": draw(name), "arguments": draw(arguments)}
    if draw(st.booleans()):
        body.pop(draw(st.sampled_from(["name", "arguments"])))
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    mangle = draw(st.sampled_from(["none", "cut", "no_close", "no_open", "double", "garbage"]))
    if mangle == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    elif mangle == "garbage":
        text = draw(plain_text) + text + draw(plain_text)
    opener = "" if mangle == "no_open" else "<tool_call>\n"
    closer = "" if mangle == "no_close" else "\n</tool_call>"
    block = opener + text + closer
    return block + block if mangle == "double" else block


model_turn = st.lists(plain_text | call_block(), min_size=1, max_size=3).map("\n".join)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(turns=st.lists(model_turn, min_size=1, max_size=3))
async def test_random_model_output_never_breaks_an_episode(
    env_server: LocalEnvServer, fault_report, turns: list[str]
) -> None:
    client = AsyncOpenReward(api_key="local")
    try:
        run = EpisodeRun(client, env_server.base_url, env_server.variant_for("WhoDunIt"))
        episode_settings = EpisodeSettings(max_turns=3, on_no_tool_call="nudge", sampling_params=SAMPLING)
        trajectory, server = await run.run(
            [ScriptedCompletion(text=t) for t in turns] + [ScriptedCompletion(text="done")] * 3,
            environment="WhoDunIt",
            settings=episode_settings,
        )
    finally:
        await client.environments.aclose()
    fault_report.sample("hypothesis: malformed tool calls", trajectory)
    assert_sample(trajectory, infrastructure=False)
    for turn in trajectory.turns:
        executed = [r.call for r in turn.tool_results if r.call.name != "__terminal__"]
        assert all(call.name in TOOL_NAMES for call in executed)  # only calls the parser accepted ran
        assert all(isinstance(call.arguments, dict) for call in executed)
        assert executed == list(turn.parsed.tool_calls)[: len(executed)]
    assert len([r for r in server.requests if r.path == "/generate"]) == len(trajectory.turns)

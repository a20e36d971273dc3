"""The hermes parser (Qwen2.5, Qwen3 <= 2507, Hermes, Granite 4) on hand-written model output."""

from __future__ import annotations

import pytest

from openreward_rl.parsers import ParseErrorKind, get_parser

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {"name": "run", "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}},
    },
]
ONE = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "SF"}}\n</tool_call>'
TWO = ONE + '\n<tool_call>\n{"name": "run", "arguments": {"code": "x"}}\n</tool_call>'


def parse(text, **kwargs):
    return get_parser("hermes").parse(text, **kwargs)


def kinds(turn):
    return [e.kind for e in turn.errors]


def test_single_and_multiple_calls_with_content_before_and_after():
    turn = parse("Let me check.\n" + TWO + "\nBack soon.", tools=TOOLS)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("get_weather", {"city": "SF"}), ("run", {"code": "x"})]
    assert turn.content == "Let me check.\n\n\nBack soon."
    assert turn.errors == () and turn.reasoning is None
    assert len({c.id for c in turn.tool_calls}) == 2


def test_reasoning_is_split_and_calls_inside_it_are_not_executed():
    turn = parse("<think>\nmaybe " + ONE + "\n</think>\n\nNo tools needed.", tools=TOOLS)
    assert turn.tool_calls == () and turn.content == "No tools needed."
    assert turn.reasoning.startswith("maybe <tool_call>")
    assert kinds(turn) == [ParseErrorKind.CALL_IN_REASONING]
    assert not turn.has_tool_activity


def test_reasoning_opened_by_the_generation_prompt():
    prompt = "<|im_start|>assistant\n<think>\n"
    turn = parse("plan\n</think>\n\n" + ONE, tools=TOOLS, generation_prompt=prompt)
    assert turn.reasoning == "plan" and [c.name for c in turn.tool_calls] == ["get_weather"]
    unfinished = parse("still planning", generation_prompt=prompt, finish_reason="length")
    assert unfinished.reasoning == "still planning" and unfinished.tool_calls == () and unfinished.content == ""


def test_end_tag_inside_a_string_argument():
    code = "print('</tool_call>')\n<tool_call>"
    text = '<tool_call>\n{"name": "run", "arguments": {"code": "print(\'</tool_call>\')\\n<tool_call>"}}\n</tool_call>'
    turn = parse(text, tools=TOOLS)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("run", {"code": code})]
    assert turn.content == "" and turn.errors == ()


@pytest.mark.parametrize("cut", ["</tool_call>", "\n</tool_call>"])
def test_missing_closer_stop_versus_length(cut):
    text = TWO[: -len(cut)]
    stopped = parse(text, tools=TOOLS, finish_reason="stop")
    assert [c.name for c in stopped.tool_calls] == ["get_weather", "run"] and stopped.errors == ()
    assert [c.name for c in parse(text, tools=TOOLS).tool_calls] == ["get_weather", "run"]  # unknown finish: accepted
    for reason in ("length", "abort"):
        cut_off = parse(text, tools=TOOLS, finish_reason=reason)
        assert [c.name for c in cut_off.tool_calls] == ["get_weather"]
        assert kinds(cut_off) == [ParseErrorKind.UNCLOSED_BLOCK]


def test_truncated_json_is_unclosed_on_length_and_invalid_on_stop():
    text = ONE + '\n<tool_call>\n{"name": "run", "arguments": {"code": "pri'
    assert kinds(parse(text, finish_reason="length")) == [ParseErrorKind.UNCLOSED_BLOCK]
    assert kinds(parse(text, finish_reason="stop")) == [ParseErrorKind.INVALID_JSON]
    assert [c.name for c in parse(text, finish_reason="length").tool_calls] == ["get_weather"]


def test_arguments_as_string_parameters_key_and_ids():
    granite = '<tool_call>{"name": "run", "arguments": "{\\"code\\": \\"1\\"}", "id": "abc"}</tool_call>'
    turn = parse(granite)
    assert turn.tool_calls[0].arguments == {"code": "1"} and turn.tool_calls[0].id == "abc"
    assert parse('<tool_call>{"name": "run", "parameters": {"code": "2"}}</tool_call>').tool_calls[0].arguments == {
        "code": "2"
    }
    assert parse('<tool_call>{"name": "run"}</tool_call>').tool_calls[0].arguments == {}
    assert kinds(parse('<tool_call>{"name": "run", "arguments": "not json"}</tool_call>')) == [
        ParseErrorKind.INVALID_ARGUMENTS
    ]


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ('{"name": "nope", "arguments": {}}', ParseErrorKind.UNKNOWN_TOOL),
        ('{"arguments": {}}', ParseErrorKind.MISSING_NAME),
        ('{"name": 3, "arguments": {}}', ParseErrorKind.MISSING_NAME),
        ('{"name": "run", "arguments": [1]}', ParseErrorKind.INVALID_ARGUMENTS),
        ('["run"]', ParseErrorKind.MALFORMED_CALL),
        ('{"name": "run", "arguments": {}}}', ParseErrorKind.MALFORMED_CALL),
        ("{'name': 'run'}", ParseErrorKind.INVALID_JSON),
        ('{"name": "run", "arguments": {"x": NaN}}', ParseErrorKind.INVALID_JSON),
        ('{"name": "run", "arguments": {"x": 1e999}}', ParseErrorKind.INVALID_JSON),
        ("[" * 100_000, ParseErrorKind.INVALID_JSON),
    ],
)
def test_bad_calls_are_reported_not_raised(body, kind):
    turn = parse(f"<tool_call>\n{body}\n</tool_call>", tools=TOOLS)
    assert turn.tool_calls == () and kinds(turn) == [kind]
    assert turn.has_tool_activity


def test_a_bad_block_does_not_swallow_the_next_call():
    turn = parse("<tool_call>\n{bad json}\n</tool_call>\n" + ONE, tools=TOOLS)
    assert [c.name for c in turn.tool_calls] == ["get_weather"] and kinds(turn) == [ParseErrorKind.INVALID_JSON]


def test_non_ascii_arguments_survive_unescaped():
    turn = parse(
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich 東京 🚀", "e": "\\u00e9"}}\n</tool_call>'
    )
    call = turn.tool_calls[0]
    assert call.arguments == {"city": "Zürich 東京 🚀", "e": "é"}
    assert call.arguments_json() == '{"city": "Zürich 東京 🚀", "e": "é"}'

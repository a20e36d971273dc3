"""The seed_oss parser on hand-written Seed-OSS output, in the layout its official chat template
(ByteDance-Seed/Seed-OSS-36B-Instruct) writes a call turn: `<seed:think>` reasoning, then each call as
`<seed:tool_call>\\n<function=NAME>\\n<parameter=KEY>VALUE</parameter>\\n…</function>\\n</seed:tool_call>`."""

from __future__ import annotations

import pytest

from openreward_rl.parsers import ParseErrorKind, get_parser

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"}},
        },
    },
}
SEARCH = {"name": "search", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}
TOOLS = [WEATHER, SEARCH]


def call(name: str, **values: str) -> str:
    parameters = "".join(f"<parameter={key}>{value}</parameter>\n" for key, value in values.items())
    return f"\n<seed:tool_call>\n<function={name}>\n{parameters}</function>\n</seed:tool_call>"


def summary(turn):
    return [(c.name, c.arguments) for c in turn.tool_calls]


def test_reasoning_content_and_two_calls_as_the_template_writes_them():
    text = (
        "\n<seed:think>I need the weather.</seed:think>\nLet me check.\n"
        + call("get_weather", city="San Francisco", days="3")
        + call("search", query="x")
    )
    turn = get_parser("seed_oss").parse(text, tools=TOOLS)
    assert summary(turn) == [("get_weather", {"city": "San Francisco", "days": 3}), ("search", {"query": "x"})]
    assert turn.reasoning == "I need the weather." and turn.content == "Let me check."
    assert turn.errors == ()


def test_values_are_kept_as_written_and_typed_by_the_schema():
    """No newline is stripped (the template writes none around a value); a string the schema wants stays
    a string ("0042"), an integer is decoded; a value over several lines keeps its newlines."""
    turn = get_parser("seed_oss").parse(call("get_weather", zip="0042", days="7", city="\ntwo\nlines\n"), tools=TOOLS)
    assert summary(turn) == [("get_weather", {"zip": "0042", "days": 7, "city": "\ntwo\nlines\n"})]


def test_a_forgotten_wrapper_is_accepted_as_qwen3_coder_accepts_it():
    """A bare `<function=…>` block (the model left out `<seed:tool_call>`) is still a call; a value keeps
    the newlines Qwen's layout puts around it (Seed's template writes none, so none is stripped)."""
    turn = get_parser("seed_oss").parse(
        "<function=search>\n<parameter=query>\nx\n</parameter>\n</function>", tools=TOOLS
    )
    assert summary(turn) == [("search", {"query": "\nx\n"})]
    assert summary(
        get_parser("qwen3_coder").parse(
            "<function=search>\n<parameter=query>\nx\n</parameter>\n</function>", tools=TOOLS
        )
    ) == [("search", {"query": "x"})]


def test_end_tag_inside_a_value_does_not_end_it():
    turn = get_parser("seed_oss").parse(call("search", query="print('</parameter>')"), tools=TOOLS)
    assert summary(turn) == [("search", {"query": "print('</parameter>')"})]


@pytest.mark.parametrize("cut", [True, False])
def test_missing_closer_stop_vs_length(cut: bool):
    text = call("search", query="x").removesuffix("</seed:tool_call>")
    turn = get_parser("seed_oss").parse(text, tools=TOOLS, finish_reason="length" if cut else "stop")
    if cut:
        assert turn.tool_calls == () and [e.kind for e in turn.errors] == [ParseErrorKind.UNCLOSED_BLOCK]
    else:
        assert summary(turn) == [("search", {"query": "x"})]


def test_call_inside_reasoning_is_not_executed_and_unknown_tool_is_reported():
    rehearsal = "<seed:think>maybe" + call("search", query="x") + "</seed:think>\nNo call."
    turn = get_parser("seed_oss").parse(rehearsal, tools=TOOLS)
    assert turn.tool_calls == () and ParseErrorKind.CALL_IN_REASONING in [e.kind for e in turn.errors]
    unknown = get_parser("seed_oss").parse(call("web_search", query="x"), tools=TOOLS)
    assert unknown.tool_calls == () and [e.kind for e in unknown.errors] == [ParseErrorKind.UNKNOWN_TOOL]

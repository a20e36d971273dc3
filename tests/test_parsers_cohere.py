"""The cohere parser on hand-written Command R7B / Command A output, in the layout their official chat
template writes: a call turn `<|START_THINKING|>plan<|END_THINKING|><|START_ACTION|>[…]<|END_ACTION|>`, an
answer `<|START_RESPONSE|>…<|END_RESPONSE|>`."""

from __future__ import annotations

import json

import pytest

from openreward_rl.parsers import ParseErrorKind, get_parser

SEARCH = {
    "type": "function",
    "function": {"name": "search", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
}
ADD = {
    "name": "add",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
}
TOOLS = [SEARCH, ADD]


def action(*calls: tuple[str, dict], first_id: int = 0) -> str:
    items = ",\n\n    ".join(
        json.dumps({"tool_call_id": str(first_id + n), "tool_name": name, "parameters": arguments})
        for n, (name, arguments) in enumerate(calls)
    )
    return f"<|START_ACTION|>[\n    {items}\n\n]<|END_ACTION|>"


def summary(turn):
    return [(c.name, c.arguments) for c in turn.tool_calls]


def test_plan_and_two_calls_in_one_action():
    text = "<|START_THINKING|>I will search, then add.<|END_THINKING|>" + action(
        ("search", {"query": "x"}), ("add", {"a": 1, "b": 2}), first_id=3
    )
    turn = get_parser("cohere").parse(text, tools=TOOLS)
    assert summary(turn) == [("search", {"query": "x"}), ("add", {"a": 1, "b": 2})]
    assert turn.reasoning == "I will search, then add." and turn.content == "" and turn.errors == ()
    assert len({c.id for c in turn.tool_calls}) == 2  # ids of their own, not the template's index


def test_an_answer_is_the_text_between_the_response_markers():
    turn = get_parser("cohere").parse("<|START_RESPONSE|>The answer is 6.<|END_RESPONSE|>", tools=TOOLS)
    assert turn.content == "The answer is 6." and turn.tool_calls == () and turn.reasoning is None


def test_the_closer_inside_an_argument_string_does_not_end_the_list():
    turn = get_parser("cohere").parse(action(("search", {"query": "say <|END_ACTION|> please"})), tools=TOOLS)
    assert summary(turn) == [("search", {"query": "say <|END_ACTION|> please"})]


@pytest.mark.parametrize("cut", [True, False])
def test_missing_closer_stop_vs_length(cut: bool):
    text = action(("search", {"query": "x"})).removesuffix("<|END_ACTION|>")
    turn = get_parser("cohere").parse(text, tools=TOOLS, finish_reason="length" if cut else "stop")
    if cut:
        assert turn.tool_calls == () and [e.kind for e in turn.errors] == [ParseErrorKind.UNCLOSED_BLOCK]
    else:
        assert summary(turn) == [("search", {"query": "x"})]
    half = get_parser("cohere").parse(
        '<|START_ACTION|>[{"tool_name": "search", "parame', tools=TOOLS, finish_reason="length"
    )
    assert half.tool_calls == () and [e.kind for e in half.errors] == [ParseErrorKind.UNCLOSED_BLOCK]


def test_unknown_tools_bad_json_and_calls_inside_the_plan_are_reported():
    unknown = get_parser("cohere").parse(
        action(("web_search", {"query": "x"}), ("search", {"query": "y"})), tools=TOOLS
    )
    assert summary(unknown) == [("search", {"query": "y"})] and [e.kind for e in unknown.errors] == [
        ParseErrorKind.UNKNOWN_TOOL
    ]
    broken = get_parser("cohere").parse("<|START_ACTION|>[{tool_name: search}]<|END_ACTION|>Then.", tools=TOOLS)
    assert (
        broken.tool_calls == ()
        and [e.kind for e in broken.errors] == [ParseErrorKind.INVALID_JSON]
        and broken.content == "Then."
    )
    not_a_list = get_parser("cohere").parse(
        '<|START_ACTION|>{"tool_name": "search", "parameters": {}}<|END_ACTION|>', tools=TOOLS
    )
    assert not_a_list.tool_calls == () and [e.kind for e in not_a_list.errors] == [ParseErrorKind.MALFORMED_CALL]
    rehearsal = get_parser("cohere").parse(
        "<|START_THINKING|>maybe "
        + action(("search", {"query": "x"}))
        + "<|END_THINKING|><|START_RESPONSE|>No.<|END_RESPONSE|>",
        tools=TOOLS,
    )
    assert rehearsal.tool_calls == () and ParseErrorKind.CALL_IN_REASONING in [e.kind for e in rehearsal.errors]

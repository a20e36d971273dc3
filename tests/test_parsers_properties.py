"""Property: no registered parser raises on any text, tool list, prompt or finish reason, and each
always returns a well-formed ParsedTurn. Iterates `available_parsers()`, so every format module
(group B's included once merged) is covered."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openreward_rl.parsers import ParsedTurn, ParseError, ToolCall, available_parsers, get_parser

# Markers of every format, so that generated text reaches deep into each parser.
MARKERS = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    "<|python_tag|>",
    "<|python_start|>",
    "<|python_end|>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    "<function_calls>",
    "</function_calls>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "[THINK]",
    "[/THINK]",
    "<|tool_call>",
    "<tool_call|>",
    '<|"|>',
    "<|channel>",
    "<channel|>",
    "call:",
    "<start_function_call>",
    "<escape>",
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|call|>",
    "<|return|>",
    " to=functions.",
    "analysis",
    "commentary",
    "final",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜DSML｜",
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<minimax:tool_call>",
    "<invoke name=",
    "<|open|>",
    "<|sep|>",
    "<|close|>",
    '{"name": "f", "arguments": {',
    '"parameters": ',
    "get_weather",
    "f(",
    "x=1",
    "1e999",
    "NaN",
    "{",
    "}",
    "[",
    "]",
    '"',
    "'",
    ",",
    ";",
    ":",
    "=",
    ">",
    "\n",
    " ",
    "é東🚀",
    "\\",
]
texts = st.lists(st.one_of(st.sampled_from(MARKERS), st.text(max_size=8)), max_size=40).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
tool_lists = st.one_of(
    st.none(),
    st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["f", "get_weather", "search", ""]), "parameters": json_values}
            ),
            st.fixed_dictionaries(
                {
                    "type": st.just("function"),
                    "function": st.dictionaries(st.sampled_from(["name", "parameters"]), json_values),
                }
            ),
            st.dictionaries(st.text(max_size=4), json_values, max_size=2),
        ),
        max_size=3,
    ),
)
finish_reasons = st.sampled_from([None, "stop", "length", "abort"])
prompts = st.one_of(
    st.just(""),
    st.sampled_from(["<|im_start|>assistant\n<think>\n", "<|start|>assistant", "[THINK]", "<|channel>"]),
    texts,
)


@pytest.mark.parametrize("parser_name", available_parsers())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts, tools=tool_lists, prompt=prompts, finish_reason=finish_reasons)
def test_parsers_never_raise_and_return_a_parsed_turn(parser_name, text, tools, prompt, finish_reason):
    turn = get_parser(parser_name).parse(text, tools=tools, generation_prompt=prompt, finish_reason=finish_reason)
    assert isinstance(turn, ParsedTurn)
    assert isinstance(turn.content, str) and (turn.reasoning is None or isinstance(turn.reasoning, str))
    for call in turn.tool_calls:
        assert isinstance(call, ToolCall) and call.name and isinstance(call.arguments, dict) and call.id
        json.loads(json.dumps(call.arguments, allow_nan=False))  # executable calls carry strict JSON
    assert all(isinstance(error, ParseError) and isinstance(error.message, str) for error in turn.errors)
    turn_again = get_parser(parser_name).parse(text, tools=tools, generation_prompt=prompt, finish_reason=finish_reason)
    assert [(c.name, c.arguments) for c in turn_again.tool_calls] == [(c.name, c.arguments) for c in turn.tool_calls]


@pytest.mark.parametrize("parser_name", available_parsers())
@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=200), finish_reason=finish_reasons)
def test_parsers_never_raise_on_arbitrary_unicode(parser_name, text, finish_reason):
    assert isinstance(get_parser(parser_name).parse(text, finish_reason=finish_reason), ParsedTurn)


@pytest.mark.parametrize("parser_name", available_parsers())
@pytest.mark.parametrize(
    "nasty", ["[" * 50_000, "{" * 50_000, "<|tool_call>call:f" + "{a:" * 5000, "<tool_call>" * 5000]
)
def test_parsers_survive_pathological_nesting(parser_name, nasty):
    assert isinstance(get_parser(parser_name).parse(nasty, tools=[{"name": "f"}], finish_reason="stop"), ParsedTurn)

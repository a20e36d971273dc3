"""The qwen3_coder, llama3_json, pythonic, mistral, gemma4 and gpt_oss parsers on hand-written model
output in each format, covering the pitfalls docs/parsers.md lists per format."""

from __future__ import annotations

import pytest

from openreward_rl.parsers import ParseErrorKind, get_parser
from tool_schemas import bare_tool, function_tool

WEATHER = function_tool(
    "get_weather",
    {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "zip": {"type": "string"},
        "limit": {"type": ["integer", "null"]},
        "ratio": {"anyOf": [{"type": "number"}, {"type": "string"}]},
        "flags": {"type": "object"},
    },
)
SEARCH = bare_tool("search", {"query": {"type": "string"}})
TOOLS = [WEATHER, SEARCH]


def kinds(turn):
    return [e.kind for e in turn.errors]


def summary(turn):
    return [(c.name, c.arguments) for c in turn.tool_calls]


# --- qwen3_coder ---------------------------------------------------------------------------------

QWEN_XML_TWO = (
    "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n"
    "<parameter=query>\nx\n</parameter>\n</function>\n</tool_call>\nDone."
)


def test_qwen3_coder_two_calls_and_content_around_them():
    turn = get_parser("qwen3_coder").parse(QWEN_XML_TWO, tools=TOOLS)
    assert summary(turn) == [("get_weather", {"city": "San Francisco", "days": 3}), ("search", {"query": "x"})]
    assert turn.content == "Let me check.\n\n\nDone."  # all non-call text, as written
    assert turn.errors == ()


def test_qwen3_coder_values_follow_the_schema():
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=zip>\n0042\n</parameter>\n<parameter=days>\n7\n</parameter>\n"
        "<parameter=limit>\nNone\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n"
        '<parameter=flags>\n{"a": [1, "b"]}\n</parameter>\n<parameter=city>\n  two\nlines \n</parameter>\n'
        "</function>\n</tool_call>"
    )
    (call,) = get_parser("qwen3_coder").parse(text, tools=TOOLS).tool_calls
    assert call.arguments == {
        "zip": "0042",
        "days": 7,
        "limit": None,
        "ratio": 0.5,
        "flags": {"a": [1, "b"]},
        "city": "  two\nlines ",
    }


def test_qwen3_coder_value_failing_its_schema_runs_raw_with_a_warning():
    text = "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>"
    turn = get_parser("qwen3_coder").parse(text, tools=TOOLS)
    (call,) = turn.tool_calls
    assert call.arguments == {"days": "three"}
    (warning,) = turn.errors
    assert warning.kind is ParseErrorKind.INVALID_ARGUMENTS and warning.call_id == call.id and "days" in warning.message


def test_qwen3_coder_without_schema_decodes_numbers_and_keeps_words():
    text = "<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n<parameter=s>\nhi\n</parameter>\n</function>\n</tool_call>"
    assert summary(get_parser("qwen3_coder").parse(text)) == [("f", {"n": 3, "s": "hi"})]


def test_qwen3_coder_end_tag_inside_a_value_does_not_end_it():
    code = "print('</parameter>')\nprint('</function></tool_call>')"
    text = f"<tool_call>\n<function=run>\n<parameter=code>\n{code}\n</parameter>\n</function>\n</tool_call>"
    assert summary(get_parser("qwen3_coder").parse(text)) == [("run", {"code": code})]


@pytest.mark.parametrize("cut", ["\n</tool_call>", "</function>\n</tool_call>"])
def test_qwen3_coder_missing_closer_stop_vs_length(cut):
    text = QWEN_XML_TWO.split("\nDone.")[0]
    text = text[: -len(cut)]
    parser = get_parser("qwen3_coder")
    stopped = parser.parse(text, tools=TOOLS, finish_reason="stop")
    assert [c.name for c in stopped.tool_calls] == ["get_weather", "search"] and stopped.errors == ()
    cut_off = parser.parse(text, tools=TOOLS, finish_reason="length")
    assert [c.name for c in cut_off.tool_calls] == ["get_weather"]  # the complete first call is kept
    assert kinds(cut_off) == [ParseErrorKind.UNCLOSED_BLOCK]


def test_qwen3_coder_call_inside_reasoning_is_not_executed():
    text = "<tool_call>\n<function=search>\n<parameter=query>\na\n</parameter>\n</function>\n</tool_call></think>\n\nNo call."
    turn = get_parser("qwen3_coder").parse(text, tools=TOOLS, generation_prompt="<|im_start|>assistant\n<think>\n")
    assert turn.tool_calls == () and turn.content == "No call."
    assert kinds(turn) == [ParseErrorKind.CALL_IN_REASONING]


def test_qwen3_coder_unknown_tool_and_malformed_block_are_reported():
    text = "<tool_call>\n<function=nope>\n</function>\n</tool_call>\n<tool_call>\nnot xml\n</tool_call>"
    turn = get_parser("qwen3_coder").parse(text, tools=TOOLS)
    assert turn.tool_calls == ()
    assert kinds(turn) == [ParseErrorKind.UNKNOWN_TOOL, ParseErrorKind.MALFORMED_CALL]
    assert turn.errors[0].tool_name == "nope"


def test_qwen3_coder_non_ascii():
    text = '<tool_call>\n<function=search>\n<parameter=query>\ncafé "naïve" 東京 🚀\n</parameter>\n</function>\n</tool_call>'
    (call,) = get_parser("qwen3_coder").parse(text, tools=TOOLS).tool_calls
    assert call.arguments == {"query": 'café "naïve" 東京 🚀'}
    assert "東京" in call.arguments_json()


# --- llama3_json ----------------------------------------------------------------------------------


def test_llama3_tagged_calls_separated_by_semicolons():
    text = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "SF"}}; {"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}'
    turn = get_parser("llama3_json").parse(text, tools=TOOLS)
    assert summary(turn) == [
        ("get_weather", {"city": "SF"}),
        ("search", {"query": "x"}),
    ]  # string arguments decoded once


def test_llama3_content_before_and_after_the_tag():
    text = 'Checking.<|python_tag|>{"name": "search", "parameters": {"query": "}"}} then more'
    turn = get_parser("llama3_json").parse(text, tools=TOOLS)
    assert summary(turn) == [("search", {"query": "}"})]
    assert turn.content == "Checking. then more"


def test_llama3_bare_json_policy():
    parser = get_parser("llama3_json")
    call = '{"name": "search", "parameters": {"query": "x"}}'
    assert summary(parser.parse(call, tools=TOOLS)) == [("search", {"query": "x"})]
    assert summary(
        parser.parse(f'{call};{{"type": "function", "name": "get_weather", "parameters": {{}}}}', tools=TOOLS)
    ) == [
        ("search", {"query": "x"}),
        ("get_weather", {}),
    ]
    for answer, tools in [
        (call, None),  # no tool list: never a call
        ('{"name": "Ada", "parameters": {"age": 3}}', TOOLS),  # not an offered tool
        ('{"name": "search", "parameters": {}, "note": 1}', TOOLS),  # extra key
        (f"Here: {call}", TOOLS),  # not the whole answer
        ('{"answer": 42}', TOOLS),
    ]:
        turn = parser.parse(answer, tools=tools)
        assert turn.tool_calls == () and turn.errors == () and turn.content == answer


def test_llama3_builtin_tool_and_code_interpreter():
    parser = get_parser("llama3_json")
    turn = parser.parse('<|python_tag|>brave_search.call(query="gold price")', tools=[{"name": "brave_search"}])
    assert summary(turn) == [("brave_search", {"query": "gold price"})]
    turn = parser.parse("<|python_tag|>print(1 + 1)", tools=[{"name": "code_interpreter"}])
    assert summary(turn) == [("code_interpreter", {"code": "print(1 + 1)"})]


def test_llama3_truncated_second_call_keeps_the_first():
    text = '<|python_tag|>{"name": "search", "parameters": {"query": "a"}};{"name": "search", "parameters": {"que'
    parser = get_parser("llama3_json")
    turn = parser.parse(text, tools=TOOLS, finish_reason="length")
    assert summary(turn) == [("search", {"query": "a"})] and kinds(turn) == [ParseErrorKind.UNCLOSED_BLOCK]
    assert kinds(parser.parse(text, tools=TOOLS, finish_reason="stop")) == [ParseErrorKind.INVALID_JSON]


def test_llama3_rejects_non_finite_numbers_and_reports_unknown_tools():
    turn = get_parser("llama3_json").parse(
        '<|python_tag|>{"name": "search", "parameters": {"n": 1e999}};{"name": "x", "parameters": {}}', tools=TOOLS
    )
    assert turn.tool_calls == ()
    assert ParseErrorKind.INVALID_JSON in kinds(turn)


# --- pythonic -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrap",
    [
        lambda s: s,
        lambda s: f"<|python_start|>{s}<|python_end|>",
        lambda s: f"<|tool_call_start|>{s}<|tool_call_end|>",
    ],
)
def test_pythonic_call_lists(wrap):
    text = wrap(
        "[get_weather(city='SF', days=3), search(query=\"x\", flags={'fresh': True, 'n': None}, tags=('a', \"b\"))]"
    )
    turn = get_parser("pythonic").parse(text)
    assert summary(turn) == [
        ("get_weather", {"city": "SF", "days": 3}),
        ("search", {"query": "x", "flags": {"fresh": True, "n": None}, "tags": ["a", "b"]}),
    ]


def test_pythonic_olmo3_lines_lfm2_json_and_content():
    parser = get_parser("pythonic")
    turn = parser.parse('Sure.<function_calls>get_weather(city="Paris")\nsearch(query=null)</function_calls> ok')
    assert summary(turn) == [("get_weather", {"city": "Paris"}), ("search", {"query": None})]
    assert turn.content == "Sure. ok"
    turn = parser.parse('<|tool_call_start|>[{"name": "search", "arguments": {"query": "x"}}]<|tool_call_end|>')
    assert summary(turn) == [("search", {"query": "x"})]


@pytest.mark.parametrize(
    "bad",
    [
        "[f(x=1e999)]",
        "[f(x=-1e999)]",
        "[f(x=float('nan'))]",
        "[f(1)]",
        "[f(**kw)]",
        "[f(x=__import__('os'))]",
        "[f(x={1: 2})]",
    ],
)
def test_pythonic_rejects_what_is_not_a_literal_call(bad):
    turn = get_parser("pythonic").parse(bad)
    assert turn.tool_calls == () and kinds(turn) == [ParseErrorKind.MALFORMED_CALL]


def test_pythonic_prose_stays_content_and_truncation_keeps_complete_calls():
    parser = get_parser("pythonic")
    assert parser.parse("[see(x=1)] is how you'd write it").content == "[see(x=1)] is how you'd write it"
    turn = parser.parse("[search(query='a'), search(query='b", tools=TOOLS, finish_reason="length")
    assert summary(turn) == [("search", {"query": "a"})] and kinds(turn) == [ParseErrorKind.UNCLOSED_BLOCK]
    turn = parser.parse("<|python_start|>[search(query='a')]", tools=TOOLS, finish_reason="stop")
    assert summary(turn) == [("search", {"query": "a"})]


def test_pythonic_end_tag_in_string_and_non_ascii():
    turn = get_parser("pythonic").parse(
        "<|python_start|>[search(query='<|python_end|> 東京')]<|python_end|>", tools=TOOLS
    )
    # The wrapper's closer is found string-aware (issue 13): quoted in an argument, it is text.
    assert summary(turn) == [("search", {"query": "<|python_end|> 東京"})] and turn.errors == ()
    # A closer outside any string still ends the block: the incomplete list is reported, never guessed at.
    turn = get_parser("pythonic").parse("<|python_start|>[search(query='x')<|python_end|>]", tools=TOOLS)
    assert turn.tool_calls == () and kinds(turn) == [ParseErrorKind.MALFORMED_CALL]
    turn = get_parser("pythonic").parse("[search(query='東京 🚀')]", tools=TOOLS)
    assert summary(turn) == [("search", {"query": "東京 🚀"})]


# --- mistral --------------------------------------------------------------------------------------


def test_mistral_v3_json_array_with_ids():
    text = '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "SF"}, "id": "abcDEF123"}, {"name": "search", "arguments": {"query": "x"}, "id": "call_1"}]'
    turn = get_parser("mistral").parse(text, tools=TOOLS)
    assert summary(turn) == [("get_weather", {"city": "SF"}), ("search", {"query": "x"})]
    assert turn.tool_calls[0].id == "abcDEF123"
    assert turn.tool_calls[1].id != "call_1" and len(turn.tool_calls[1].id) == 9 and turn.tool_calls[1].id.isalnum()


def test_mistral_v11_call_ids_and_v13_reasoning():
    parser = get_parser("mistral")
    turn = parser.parse(
        '[TOOL_CALLS]get_weather[CALL_ID]abcDEF123[ARGS]{"city": "SF"}[TOOL_CALLS]search[CALL_ID]xyzXYZ789[ARGS]{"query": "x"}',
        tools=TOOLS,
    )
    assert [(c.name, c.id) for c in turn.tool_calls] == [("get_weather", "abcDEF123"), ("search", "xyzXYZ789")]
    turn = parser.parse(
        '[THINK]Need [TOOL_CALLS]x[/THINK]Okay.[TOOL_CALLS]search[ARGS]{"query": "[TOOL_CALLS]"}', tools=TOOLS
    )
    assert turn.reasoning == "Need [TOOL_CALLS]x" and turn.content == "Okay."
    assert summary(turn) == [("search", {"query": "[TOOL_CALLS]"})]
    assert kinds(turn) == [ParseErrorKind.CALL_IN_REASONING]


def test_mistral_truncation_and_unknown_tools():
    parser = get_parser("mistral")
    text = '[TOOL_CALLS] [{"name": "search", "arguments": {"query": "a"}}, {"name": "search", "arguments": {"qu'
    turn = parser.parse(text, tools=TOOLS, finish_reason="length")
    assert summary(turn) == [("search", {"query": "a"})] and kinds(turn) == [ParseErrorKind.UNCLOSED_BLOCK]
    turn = parser.parse(
        '[TOOL_CALLS]search[ARGS]{"query": "a"}[TOOL_CALLS]other[ARGS]{"q": ', tools=TOOLS, finish_reason="length"
    )
    assert summary(turn) == [("search", {"query": "a"})] and kinds(turn) == [ParseErrorKind.UNCLOSED_BLOCK]
    turn = parser.parse("[TOOL_CALLS]other[ARGS]{}", tools=TOOLS)
    assert kinds(turn) == [ParseErrorKind.UNKNOWN_TOOL]


# --- gemma4 ---------------------------------------------------------------------------------------


def test_gemma4_calls_nested_values_and_string_with_closer():
    text = (
        "<|channel>thought\nplan it<channel|>Sure."
        '<|tool_call>call:get_weather{city:<|"|>S, F<|"|>,days:3}<tool_call|>'
        '<|tool_call>call:search{filters:{max:3,tags:[<|"|>a<|"|>,<|"|>b<|"|>]},query:<|"|>café "best" <tool_call|><|"|>}<tool_call|>'
    )
    turn = get_parser("gemma4").parse(text)
    assert turn.reasoning == "plan it" and turn.content == "Sure."
    assert summary(turn) == [
        ("get_weather", {"city": "S, F", "days": 3}),
        ("search", {"filters": {"max": 3, "tags": ["a", "b"]}, "query": 'café "best" <tool_call|>'}),
    ]


def test_gemma4_truncation_reasoning_and_errors():
    parser = get_parser("gemma4")
    complete = '<|tool_call>call:search{query:<|"|>a<|"|>}'
    assert summary(parser.parse(complete, tools=TOOLS, finish_reason="stop")) == [("search", {"query": "a"})]
    assert kinds(parser.parse(complete, tools=TOOLS, finish_reason="length")) == [ParseErrorKind.UNCLOSED_BLOCK]
    assert kinds(parser.parse('<|tool_call>call:search{query:<|"|>a', finish_reason="length")) == [
        ParseErrorKind.UNCLOSED_BLOCK
    ]
    assert kinds(parser.parse("<|tool_call>call:search{n:1e999}<tool_call|>")) == [ParseErrorKind.INVALID_ARGUMENTS]
    turn = parser.parse('<|channel>thought\n<|tool_call>call:search{query:<|"|>a<|"|>}<tool_call|><channel|>no')
    assert turn.tool_calls == () and kinds(turn) == [ParseErrorKind.CALL_IN_REASONING] and turn.content == "no"
    assert kinds(parser.parse("<|tool_call>call:nope{}<tool_call|>", tools=TOOLS)) == [ParseErrorKind.UNKNOWN_TOOL]


def test_function_gemma_variant():
    turn = get_parser("gemma4").parse("<start_function_call>call:search{query:<escape>x<escape>}<end_function_call>")
    assert summary(turn) == [("search", {"query": "x"})]


# --- gpt_oss --------------------------------------------------------------------------------------


def test_gpt_oss_recipient_in_channel_or_role_header():
    parser = get_parser("gpt_oss")
    in_channel = '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"SF"}'
    in_role = '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"SF"}'
    for text in (in_channel, in_role):
        turn = parser.parse(text, tools=TOOLS, finish_reason="stop")
        assert turn.reasoning == "Need weather." and summary(turn) == [("get_weather", {"city": "SF"})]
        assert turn.content == "" and turn.errors == ()


def test_gpt_oss_final_preamble_and_several_calls():
    text = (
        "<|channel|>commentary<|message|>Checking both.<|end|>"
        '<|start|>assistant to=functions.search<|channel|>commentary json<|message|>{"query": "a"}<|call|>'
        '<|start|>assistant to=functions.search<|channel|>commentary<|message|>{"query": "<|end|>?"}<|call|>'
        "<|start|>assistant<|channel|>final<|message|>Done, 東京."
    )
    turn = get_parser("gpt_oss").parse(text, tools=TOOLS)
    assert [c.arguments["query"] for c in turn.tool_calls][0] == "a"
    assert turn.content.startswith("Checking both.") and turn.content.endswith("Done, 東京.")


def test_gpt_oss_analysis_channel_calls_are_executed_and_mentions_are_not():
    parser = get_parser("gpt_oss")
    turn = parser.parse('<|channel|>analysis to=functions.search code<|message|>{"query": "a"}', tools=TOOLS)
    assert summary(turn) == [("search", {"query": "a"})]
    turn = parser.parse(
        '<|channel|>analysis<|message|>I could send to=functions.search {"query": 1}<|end|><|start|>assistant<|channel|>final<|message|>No.'
    )
    assert turn.tool_calls == () and turn.content == "No." and kinds(turn) == [ParseErrorKind.CALL_IN_REASONING]


def test_gpt_oss_truncation_unknown_tools_and_plain_text():
    parser = get_parser("gpt_oss")
    text = '<|channel|>commentary to=functions.search <|constrain|>json<|message|>{"query": "a"}'
    assert summary(parser.parse(text, tools=TOOLS, finish_reason="stop")) == [("search", {"query": "a"})]
    assert kinds(parser.parse(text, tools=TOOLS, finish_reason="length")) == [ParseErrorKind.UNCLOSED_BLOCK]
    assert kinds(parser.parse(text.replace("search", "nope"), tools=TOOLS)) == [ParseErrorKind.UNKNOWN_TOOL]
    assert kinds(parser.parse(text[:-3], tools=TOOLS)) == [ParseErrorKind.INVALID_JSON]
    assert parser.parse("just text").content == "just text"
    assert parser.parse("<|channel|>anal", finish_reason="length").tool_calls == ()
    assert (
        parser.parse("<|channel|>analysis<|message|>unfinished thought", finish_reason="length").reasoning
        == "unfinished thought"
    )

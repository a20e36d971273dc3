"""Tool-call parsers, group B: DeepSeek V3/V3.1/V3.2/V4/V4.1, Kimi K2/K3, GLM-4.5/4.7, MiniMax-M2.

Each format has a writer below that produces the exact text the model emits (special tokens
written literally, the final stop token removed), following each format's grammar as docs/parsers.md gives it (the model's own template or encoder).
The same behaviours are then checked for every format: single and several calls, content around
calls, reasoning, truncation (stop versus length), end tags inside string values, non-ASCII,
schema coercion, unknown tools. Format-specific tests follow. Round trips through real chat
templates live in test_parser_roundtrip_deepseek_kimi_glm_minimax.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from openreward_rl.parsers import ParseErrorKind, get_parser
from tool_schemas import bare_tool, function_tool

TOOLS = [
    function_tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}, required=["city"]),
    function_tool("search", {"query": {"type": "string"}, "filters": {"type": "object"}}, required=["query"]),
    bare_tool("run_code", {"code": {"type": "string"}}),
]

Args = dict[str, Any]
Call = tuple[str, Args]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _raw(value: Any) -> str:
    return value if isinstance(value, str) else _json(value)


# ---------------------------------------------------------------------------- writers (one per format)


def write_deepseek_v3(calls: list[Call]) -> str:
    body = "\n".join(
        f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{_json(args)}\n```<｜tool▁call▁end｜>"
        for name, args in calls
    )
    return f"<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>"


def write_deepseek_v31(calls: list[Call]) -> str:
    body = "".join(f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{_json(args)}<｜tool▁call▁end｜>" for name, args in calls)
    return f"<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>"


def _dsml(calls: list[Call], block: str, space: str = "") -> str:
    d = "｜DSML｜" + space
    invokes = []
    for name, args in calls:
        params = "\n".join(
            f'<{d}parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">{_raw(v)}</{d}parameter>'
            for k, v in args.items()
        )
        invokes.append(f'<{d}invoke name="{name}">\n{params}\n</{d}invoke>')
    return f"<{d}{block}>\n" + "\n".join(invokes) + f"\n</{d}{block}>"


def write_deepseek_v32(calls: list[Call]) -> str:
    return _dsml(calls, "function_calls")


def write_deepseek_v4(calls: list[Call]) -> str:
    return _dsml(calls, "tool_calls")


def write_deepseek_v41(calls: list[Call]) -> str:
    return _dsml(calls, "calls", space=" ")


def write_kimi_k2(calls: list[Call]) -> str:
    body = "".join(
        f"<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>{_json(args)}<|tool_call_end|>"
        for i, (name, args) in enumerate(calls)
    )
    return f"<|tool_calls_section_begin|>{body}<|tool_calls_section_end|>"


def _k3_type(value: Any) -> str:
    return {str: "string", bool: "boolean", int: "number", float: "number", dict: "object", list: "array"}.get(
        type(value), "null"
    )


def write_kimi_k3(calls: list[Call]) -> str:
    out = []
    for i, (name, args) in enumerate(calls, start=1):
        arguments = "".join(
            f'<|open|>argument key="{k}" type="{_k3_type(v)}"<|sep|>{_raw(v)}<|close|>argument<|sep|>'
            for k, v in args.items()
        )
        out.append(f'<|open|>call tool="{name}" index="{i}"<|sep|>{arguments}<|close|>call<|sep|>')
    return "<|open|>tools<|sep|>" + "".join(out) + "<|close|>tools<|sep|>"


def write_glm45(calls: list[Call]) -> str:
    return "\n".join(
        f"<tool_call>{name}\n"
        + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_raw(v)}</arg_value>\n" for k, v in args.items())
        + "</tool_call>"
        for name, args in calls
    )


def write_glm47(calls: list[Call]) -> str:
    return "".join(
        f"<tool_call>{name}"
        + "".join(f"<arg_key>{k}</arg_key><arg_value>{_raw(v)}</arg_value>" for k, v in args.items())
        + "</tool_call>"
        for name, args in calls
    )


def write_minimax_m2(calls: list[Call]) -> str:
    invokes = "".join(
        f'<invoke name="{name}">\n'
        + "".join(f'<parameter name="{k}">{_raw(v)}</parameter>\n' for k, v in args.items())
        + "</invoke>\n"
        for name, args in calls
    )
    return f"<minimax:tool_call>\n{invokes}</minimax:tool_call>"


@attrs.frozen
class Format:
    parser: str
    write: Callable[[list[Call]], str]
    closers: tuple[str, ...]  # closers a stop string may have eaten at the very end, innermost last
    think: tuple[str, str] = ("<think>", "</think>")

    def __str__(self) -> str:
        return self.write.__name__.removeprefix("write_")


FORMATS = [
    Format("deepseek_v3", write_deepseek_v3, ("<｜tool▁calls▁end｜>", "<｜tool▁call▁end｜>")),
    Format("deepseek_v31", write_deepseek_v31, ("<｜tool▁calls▁end｜>", "<｜tool▁call▁end｜>")),
    Format("deepseek_v32", write_deepseek_v32, ("</｜DSML｜function_calls>", "</｜DSML｜invoke>")),
    Format("deepseek_v4", write_deepseek_v4, ("</｜DSML｜tool_calls>", "</｜DSML｜invoke>")),
    Format("deepseek_v4", write_deepseek_v41, ("</｜DSML｜ calls>", "</｜DSML｜ invoke>")),
    Format("kimi_k2", write_kimi_k2, ("<|tool_calls_section_end|>", "<|tool_call_end|>")),
    Format(
        "kimi_k3",
        write_kimi_k3,
        ("<|close|>tools<|sep|>", "<|close|>call<|sep|>"),
        ("<|open|>think<|sep|>", "<|close|>think<|sep|>"),
    ),
    Format("glm45", write_glm45, ("</tool_call>",)),
    Format("glm47", write_glm47, ("</tool_call>",)),
    Format("minimax_m2", write_minimax_m2, ("</minimax:tool_call>", "</invoke>")),
]
EACH = pytest.mark.parametrize("fmt", FORMATS, ids=str)

WEATHER: Call = ("get_weather", {"city": "San Francisco", "days": 3})
SEARCH: Call = ("search", {"query": "x", "filters": {"tags": ["a", "b"], "max": 3}})


def strip_closers(text: str, closers: tuple[str, ...]) -> str:
    """The text without the closers at its very end (what a stop string leaves)."""
    changed = True
    while changed:
        changed = False
        text = text.rstrip()
        for closer in closers:
            if text.endswith(closer):
                text = text[: -len(closer)]
                changed = True
    return text


def calls_of(turn: Any) -> list[Call]:
    return [(c.name, c.arguments) for c in turn.tool_calls]


def kinds(turn: Any) -> list[ParseErrorKind]:
    return [e.kind for e in turn.errors]


# ---------------------------------------------------------------------------- shared behaviour


@EACH
def test_single_call(fmt: Format) -> None:
    turn = get_parser(fmt.parser).parse(fmt.write([WEATHER]), tools=TOOLS, finish_reason="stop")
    assert calls_of(turn) == [WEATHER]
    assert turn.content == "" and turn.errors == () and turn.reasoning is None


@EACH
def test_several_calls_in_order(fmt: Format) -> None:
    turn = get_parser(fmt.parser).parse(fmt.write([WEATHER, SEARCH, WEATHER]), tools=TOOLS, finish_reason="stop")
    assert calls_of(turn) == [WEATHER, SEARCH, WEATHER]
    assert turn.errors == ()
    assert len({c.id for c in turn.tool_calls}) == 3


@EACH
def test_content_before_and_after_calls_is_kept_in_order(fmt: Format) -> None:
    text = "Let me check.\n" + fmt.write([WEATHER]) + "\nThen: " + fmt.write([SEARCH]) + "\nDone."
    turn = get_parser(fmt.parser).parse(text, tools=TOOLS, finish_reason="stop")
    assert calls_of(turn) == [WEATHER, SEARCH]
    assert turn.content == "Let me check.\n\nThen: \nDone."


@EACH
def test_plain_answer_has_no_calls(fmt: Format) -> None:
    turn = get_parser(fmt.parser).parse("The answer is 42.", tools=TOOLS, finish_reason="stop")
    assert turn.content == "The answer is 42." and turn.tool_calls == () and turn.errors == ()


@EACH
def test_reasoning_then_call(fmt: Format) -> None:
    opener, closer = fmt.think
    text = f"{opener}\nI need the weather.\n{closer}\n\n" + fmt.write([WEATHER])
    turn = get_parser(fmt.parser).parse(text, tools=TOOLS, finish_reason="stop")
    assert turn.reasoning == "I need the weather."
    assert calls_of(turn) == [WEATHER] and turn.errors == ()


@EACH
def test_reasoning_opened_by_the_generation_prompt(fmt: Format) -> None:
    opener, closer = fmt.think
    parser = get_parser(fmt.parser)
    turn = parser.parse(
        f"Plan.{closer}Sure. " + fmt.write([WEATHER]), tools=TOOLS, generation_prompt=f"<prompt>{opener}"
    )
    assert (turn.reasoning, turn.content, calls_of(turn)) == ("Plan.", "Sure.", [WEATHER])
    unfinished = parser.parse("still thinking", generation_prompt=f"<prompt>{opener}", finish_reason="length")
    assert (unfinished.reasoning, unfinished.content, unfinished.tool_calls) == ("still thinking", "", ())


@EACH
def test_call_inside_closed_reasoning_is_never_executed(fmt: Format) -> None:
    opener, closer = fmt.think
    text = f"{opener}Maybe {fmt.write([SEARCH])}?{closer}The answer is 4."
    turn = get_parser(fmt.parser).parse(text, tools=TOOLS, finish_reason="stop")
    assert turn.tool_calls == ()
    assert kinds(turn) == [ParseErrorKind.CALL_IN_REASONING]
    assert turn.content == "The answer is 4."
    assert not turn.has_tool_activity


@EACH
def test_missing_final_closers_accepted_on_stop(fmt: Format) -> None:
    text = strip_closers(fmt.write([WEATHER, SEARCH]), fmt.closers)
    assert text != fmt.write([WEATHER, SEARCH]).rstrip()
    turn = get_parser(fmt.parser).parse(text, tools=TOOLS, finish_reason="stop")
    assert calls_of(turn) == [WEATHER, SEARCH] and turn.errors == ()


@EACH
def test_missing_final_closers_on_length_are_never_executed(fmt: Format) -> None:
    text = strip_closers(fmt.write([WEATHER, SEARCH]), fmt.closers)
    turn = get_parser(fmt.parser).parse(text, tools=TOOLS, finish_reason="length")
    assert calls_of(turn) == [WEATHER]
    assert kinds(turn) == [ParseErrorKind.UNCLOSED_BLOCK]
    assert turn.has_tool_activity


@EACH
@pytest.mark.parametrize("finish_reason", ["length", "abort"])
def test_second_call_cut_off_keeps_the_first(fmt: Format, finish_reason: str) -> None:
    full = fmt.write([WEATHER, ("run_code", {"code": "print('a long program text')"})])
    cut = full[: full.index("a long program") + 6]
    turn = get_parser(fmt.parser).parse(cut, tools=TOOLS, finish_reason=finish_reason)
    assert calls_of(turn) == [WEATHER]
    assert kinds(turn) == [ParseErrorKind.UNCLOSED_BLOCK]


@EACH
def test_every_prefix_of_two_calls_never_yields_a_partial_call(fmt: Format) -> None:
    """Truncation at any character: only complete calls, never a repaired one, and never an exception."""
    full = fmt.write([WEATHER, SEARCH])
    parser = get_parser(fmt.parser)
    for end in range(len(full)):
        turn = parser.parse(full[:end], tools=TOOLS, finish_reason="length")
        assert calls_of(turn) in ([], [WEATHER], [WEATHER, SEARCH]), (end, full[:end])


@EACH
def test_value_cut_off_by_a_stop_is_not_repaired(fmt: Format) -> None:
    full = fmt.write([WEATHER, ("run_code", {"code": "print('a long program text')"})])
    cut = full[: full.index("a long program") + 6]
    turn = get_parser(fmt.parser).parse(cut, tools=TOOLS, finish_reason="stop")
    assert calls_of(turn) == [WEATHER]
    assert len(turn.errors) == 1 and turn.errors[0].kind in (ParseErrorKind.MALFORMED_CALL, ParseErrorKind.INVALID_JSON)


END_TAGS = (
    "</arg_value></tool_call><|tool_call_end|><｜tool▁call▁end｜>```</｜DSML｜parameter></｜DSML｜invoke>"
    "</parameter></invoke><|close|>argument<|sep|><|close|>call<|sep|>"
)


@EACH
def test_end_tags_inside_a_string_value(fmt: Format) -> None:
    code = f"print('{END_TAGS}')\n  # keep whitespace  \n"
    calls = [("run_code", {"code": code}), WEATHER]
    turn = get_parser(fmt.parser).parse(fmt.write(calls) + "\nok", tools=TOOLS, finish_reason="stop")
    assert calls_of(turn) == calls
    assert turn.content == "ok" and turn.errors == ()


@EACH
def test_non_ascii_values(fmt: Format) -> None:
    call = ("search", {"query": "café « 東京 » 🌧️ naïve", "filters": {"ville": "Zürich"}})
    turn = get_parser(fmt.parser).parse("Voilà. " + fmt.write([call]), tools=TOOLS, finish_reason="stop")
    assert calls_of(turn) == [call] and turn.content == "Voilà."


@EACH
def test_unknown_tool_is_reported_not_dropped(fmt: Format) -> None:
    text = fmt.write([("delete_everything", {"path": "/"}), WEATHER])
    turn = get_parser(fmt.parser).parse(text, tools=TOOLS, finish_reason="stop")
    assert calls_of(turn) == [WEATHER]
    assert kinds(turn) == [ParseErrorKind.UNKNOWN_TOOL]
    assert turn.errors[0].tool_name == "delete_everything"
    assert "get_weather" in turn.errors[0].message


@EACH
def test_without_tools_any_name_is_accepted(fmt: Format) -> None:
    call = ("anything", {"path": "/tmp"})
    assert calls_of(get_parser(fmt.parser).parse(fmt.write([call]))) == [call]


@EACH
def test_zero_argument_call(fmt: Format) -> None:
    turn = get_parser(fmt.parser).parse(fmt.write([("ping", {})]), finish_reason="stop")
    assert calls_of(turn) == [("ping", {})] and turn.errors == ()


@EACH
def test_garbage_never_raises(fmt: Format) -> None:
    parser = get_parser(fmt.parser)
    full = fmt.write([WEATHER, SEARCH])
    names = {t.get("function", t)["name"] for t in TOOLS}
    for text in (full[::-1], full.replace(">", ""), full.replace('"', ""), full * 2 + full[: len(full) // 2], "<" * 50):
        for finish_reason in ("stop", "length", None):
            turn = parser.parse(text, tools=TOOLS, finish_reason=finish_reason)
            # a well-formed turn whatever the input: only known tools are called, with dict arguments
            assert isinstance(turn.content, str) and all(
                isinstance(c.arguments, dict) and c.name in names for c in turn.tool_calls
            )
    for text in (full[::-1], "<" * 50):  # nothing in these is a call
        assert parser.parse(text, tools=TOOLS, finish_reason="stop").tool_calls == ()


# ---------------------------------------------------------------------------- raw values and the schema


RAW_FORMATS = [f for f in FORMATS if f.parser in ("glm45", "glm47", "minimax_m2")]
RAW = pytest.mark.parametrize("fmt", RAW_FORMATS, ids=str)


def _raw_call(fmt: Format, name: str, raw_args: dict[str, str]) -> str:
    return fmt.write([(name, raw_args)])  # strings are written as-is: exactly the model's raw text


SCHEMA_TOOLS = [
    bare_tool(
        "typed",
        {
            "n": {"type": "integer"},
            "label": {"type": "string"},
            "maybe": {"type": ["integer", "null"]},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "flag": {"type": "boolean"},
            "obj": {"type": "object"},
            "ratio": {"type": "number"},
        },
    )
]


@RAW
@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("n", "42", 42),
        ("label", "123_456", "123_456"),
        ("label", "0042", "0042"),
        ("label", "  padded \n", "  padded \n"),
        ("maybe", "None", None),
        ("maybe", "null", None),
        ("maybe", "7", 7),
        ("either", "7", 7),
        ("either", "123_456", "123_456"),
        ("flag", "True", True),
        ("flag", "false", False),
        ("obj", '{"a": [1, 2]}', {"a": [1, 2]}),
        ("ratio", "0.5", 0.5),
        ("n", "9223372036854775807", 9223372036854775807),
    ],
)
def test_raw_values_are_coerced_with_the_schema(fmt: Format, key: str, raw: str, expected: Any) -> None:
    turn = get_parser(fmt.parser).parse(_raw_call(fmt, "typed", {key: raw}), tools=SCHEMA_TOOLS, finish_reason="stop")
    assert turn.errors == ()
    assert turn.tool_calls[0].arguments == {key: expected}
    assert type(turn.tool_calls[0].arguments[key]) is type(expected)


@RAW
@pytest.mark.parametrize(
    ("key", "raw"), [("n", "9223372036854775808"), ("n", "forty-two"), ("flag", "yes"), ("obj", "{not json")]
)
def test_value_that_cannot_satisfy_the_schema_is_kept_raw_and_reported(fmt: Format, key: str, raw: str) -> None:
    turn = get_parser(fmt.parser).parse(_raw_call(fmt, "typed", {key: raw}), tools=SCHEMA_TOOLS, finish_reason="stop")
    assert calls_of(turn) == [("typed", {key: raw})]
    assert kinds(turn) == [ParseErrorKind.INVALID_ARGUMENTS]
    assert turn.errors[0].call_id == turn.tool_calls[0].id and key in turn.errors[0].message


@RAW
def test_without_a_schema_number_like_text_is_decoded_but_names_stay_strings(fmt: Format) -> None:
    turn = get_parser(fmt.parser).parse(
        _raw_call(fmt, "free", {"a": "3", "b": "SF", "c": "[1, 2]"}), finish_reason="stop"
    )
    assert turn.tool_calls[0].arguments == {"a": 3, "b": "SF", "c": [1, 2]}


def test_duplicate_argument_makes_the_call_ambiguous() -> None:
    text = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>A</arg_value><arg_key>city</arg_key><arg_value>B</arg_value></tool_call>"
    turn = get_parser("glm47").parse(text, tools=TOOLS)
    assert turn.tool_calls == () and kinds(turn) == [ParseErrorKind.MALFORMED_CALL]


# ---------------------------------------------------------------------------- DeepSeek specifics


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        ("deepseek_v3", write_deepseek_v3([WEATHER]).replace("｜", "|")),
        ("deepseek_v3", write_deepseek_v3([WEATHER]).replace("▁", "_")),
        ("deepseek_v31", write_deepseek_v31([WEATHER]).replace("｜", "|")),
        ("deepseek_v31", write_deepseek_v31([WEATHER]).replace("▁", " ")),
        ("deepseek_v32", write_deepseek_v32([WEATHER]).replace("｜", "|")),
        ("deepseek_v4", write_deepseek_v4([WEATHER]).replace("｜DSML｜", "|DSML|")),
        ("deepseek_v4", write_deepseek_v41([WEATHER]).replace("｜", "|")),
    ],
)
def test_ascii_look_alikes_of_full_width_markers_are_plain_text(parser: str, text: str) -> None:
    turn = get_parser(parser).parse(text, tools=TOOLS, finish_reason="stop")
    assert turn.tool_calls == () and turn.errors == ()
    assert turn.content == text


def test_dsml_string_flag_and_schema() -> None:
    d = "｜DSML｜"
    text = (
        f'<{d}function_calls>\n<{d}invoke name="typed">\n'
        f'<{d}parameter name="label" string="false">123</{d}parameter>\n'
        f'<{d}parameter name="either" string="true">7</{d}parameter>\n'
        f'<{d}parameter name="n" string="true">7</{d}parameter>\n'
        f'<{d}parameter name="obj" string="false">{{"k": "v"}}</{d}parameter>\n'
        f'<{d}parameter name="free" string="false">[1, "x"]</{d}parameter>\n'
        f'<{d}parameter name="free_text" string="true">true</{d}parameter>\n'
        f"</{d}invoke>\n</{d}function_calls>"
    )
    turn = get_parser("deepseek_v32").parse(text, tools=SCHEMA_TOOLS)
    assert turn.errors == ()
    # label: the schema says string; either: the model said string and the schema allows it;
    # n: the schema says integer although the model said string; free*: no schema, the flag decides.
    assert turn.tool_calls[0].arguments == {
        "label": "123",
        "either": "7",
        "n": 7,
        "obj": {"k": "v"},
        "free": [1, "x"],
        "free_text": "true",
    }


def test_dsml_v32_parser_does_not_take_v4_blocks() -> None:
    text = write_deepseek_v4([WEATHER])
    assert get_parser("deepseek_v32").parse(text).tool_calls == ()
    assert calls_of(get_parser("deepseek_v4").parse(text)) == [WEATHER]


def test_dsml_v4_self_closing_and_json_bodies() -> None:
    d = "｜DSML｜"
    text = (
        f'Working.\n\n<{d}tool_calls>\n<{d}invoke name="ping"/>\n'
        f'<{d}invoke name="search">\n{{"query": "</{d}invoke> in JSON", "filters": {{}}}}\n</{d}invoke>\n</{d}tool_calls>'
    )
    turn = get_parser("deepseek_v4").parse(text, tools=TOOLS + [{"name": "ping", "parameters": {}}])
    assert calls_of(turn) == [("ping", {}), ("search", {"query": f"</{d}invoke> in JSON", "filters": {}})]
    assert turn.content == "Working." and turn.errors == ()


def test_dsml_v41_spaced_tags_and_block_less_invokes() -> None:
    d = "｜DSML｜ "
    text = f'Sure.\n<{d}invoke name="get_weather">\n<{d}parameter name="city" string="true">Oslo</{d}parameter>\n</{d}invoke>'
    turn = get_parser("deepseek_v4").parse(text, tools=TOOLS)
    assert calls_of(turn) == [("get_weather", {"city": "Oslo"})] and turn.content == "Sure."
    assert get_parser("deepseek_v32").parse(text).tool_calls == ()


def test_dsml_v4_block_inside_unclosed_reasoning_ends_it() -> None:
    turn = get_parser("deepseek_v4").parse(
        "I will look it up.\n\n" + write_deepseek_v4([WEATHER]), generation_prompt="<｜Assistant｜><think>"
    )
    assert turn.reasoning == "I will look it up." and calls_of(turn) == [WEATHER] and turn.errors == ()
    v32 = get_parser("deepseek_v32").parse(
        "I will look it up.\n\n" + write_deepseek_v32([WEATHER]), generation_prompt="<｜Assistant｜><think>"
    )
    assert v32.tool_calls == () and kinds(v32) == [ParseErrorKind.CALL_IN_REASONING]


def test_deepseek_v3_arguments_given_as_a_json_string_are_decoded_once() -> None:
    text = write_deepseek_v3([WEATHER]).replace(_json(WEATHER[1]), _json(_json(WEATHER[1])))
    assert calls_of(get_parser("deepseek_v3").parse(text)) == [WEATHER]
    literal = write_deepseek_v31([("echo", {"text": '{"a": 1}'})])
    assert calls_of(get_parser("deepseek_v31").parse(literal)) == [("echo", {"text": '{"a": 1}'})]


def test_deepseek_invalid_json_is_reported_and_the_next_call_kept() -> None:
    text = write_deepseek_v31([WEATHER, SEARCH]).replace(_json(WEATHER[1]), '{"city": "SF",}')
    turn = get_parser("deepseek_v31").parse(text, tools=TOOLS)
    assert calls_of(turn) == [SEARCH] and kinds(turn) == [ParseErrorKind.INVALID_JSON]


def test_deepseek_r1_opener_in_the_prompt_and_emitted_by_the_model() -> None:
    parser = get_parser("deepseek_v3")
    for prompt, text in (
        ("<｜Assistant｜><think>\n", "hmm\n</think>\n\nHi"),
        ("<｜Assistant｜>", "<think>\nhmm\n</think>\n\nHi"),
    ):
        turn = parser.parse(text, generation_prompt=prompt)
        assert (turn.reasoning, turn.content) == ("hmm", "Hi")


# ---------------------------------------------------------------------------- Kimi specifics


def _kimi(call_id: str, args: Args) -> str:
    return (
        f"<|tool_calls_section_begin|><|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{_json(args)}"
        "<|tool_call_end|><|tool_calls_section_end|>"
    )


@pytest.mark.parametrize(
    ("call_id", "name"),
    [
        ("functions.get_weather:0", "get_weather"),
        ("functions.get_weather:17", "get_weather"),
        ("get_weather:3", "get_weather"),
        ("functions_get_weather_4", "get_weather"),
    ],
)
def test_kimi_k2_keeps_the_native_id(call_id: str, name: str) -> None:
    turn = get_parser("kimi_k2").parse(_kimi(call_id, {"city": "SF"}), tools=TOOLS)
    assert [(c.name, c.id) for c in turn.tool_calls] == [(name, call_id)]


@pytest.mark.parametrize("call_id", ["3", "call00003"])
def test_kimi_k2_name_less_id_inferred_only_when_one_tool_fits(call_id: str) -> None:
    turn = get_parser("kimi_k2").parse(_kimi(call_id, {"city": "SF", "days": 2}), tools=TOOLS)
    assert [(c.name, c.id) for c in turn.tool_calls] == [("get_weather", call_id)]
    ambiguous = [
        {"name": "a", "parameters": {"properties": {"x": {}}}},
        {"name": "b", "parameters": {"properties": {"x": {}}}},
    ]
    turn = get_parser("kimi_k2").parse(_kimi(call_id, {"x": 1}), tools=ambiguous)
    assert turn.tool_calls == () and kinds(turn) == [ParseErrorKind.MISSING_NAME]
    assert turn.errors[0].call_id == call_id
    assert kinds(get_parser("kimi_k2").parse(_kimi(call_id, {"x": 1}))) == [ParseErrorKind.MISSING_NAME]


def test_kimi_k2_section_inside_unclosed_thinking_ends_it() -> None:
    text = "<think>I should check." + write_kimi_k2([WEATHER])
    turn = get_parser("kimi_k2").parse(text, tools=TOOLS)
    assert turn.reasoning == "I should check." and calls_of(turn) == [WEATHER] and turn.errors == ()


def test_kimi_k2_singular_section_marker() -> None:
    text = write_kimi_k2([WEATHER]).replace("tool_calls_section", "tool_call_section")
    assert calls_of(get_parser("kimi_k2").parse(text, tools=TOOLS)) == [WEATHER]


def test_kimi_k3_declared_types() -> None:
    text = (
        '<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|>'
        '<|open|>argument key="s" type="string"<|sep|>42<|close|>argument<|sep|>'
        '<|open|>argument key="n" type="number"<|sep|>4.5<|close|>argument<|sep|>'
        '<|open|>argument key="b" type="boolean"<|sep|>false<|close|>argument<|sep|>'
        '<|open|>argument key="z" type="null"<|sep|>null<|close|>argument<|sep|>'
        '<|open|>argument key="a" type="array"<|sep|>[1, "two"]<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|>"
    )
    turn = get_parser("kimi_k3").parse(text)
    assert turn.tool_calls[0].arguments == {"s": "42", "n": 4.5, "b": False, "z": None, "a": [1, "two"]}
    assert turn.errors == ()


def test_kimi_k3_declared_type_that_does_not_hold_is_reported() -> None:
    text = write_kimi_k3([("f", {"n": 1})]).replace(">1<", ">one<")
    turn = get_parser("kimi_k3").parse(text)
    assert turn.tool_calls[0].arguments == {"n": "one"} and kinds(turn) == [ParseErrorKind.INVALID_ARGUMENTS]


# ---------------------------------------------------------------------------- GLM and MiniMax specifics


def test_glm_end_tags_in_value_followed_by_content_mentioning_them() -> None:
    text = (
        "<tool_call>run_code<arg_key>code</arg_key><arg_value>x = '</arg_value>'</arg_value></tool_call>"
        "Note: the tag </arg_value> closes values."
    )
    turn = get_parser("glm47").parse(text, tools=TOOLS)
    assert calls_of(turn) == [("run_code", {"code": "x = '</arg_value>'"})]
    assert turn.content == "Note: the tag </arg_value> closes values."


def test_glm_name_with_spaces_is_malformed() -> None:
    turn = get_parser("glm45").parse('<tool_call>{"name": "get_weather"}</tool_call>', tools=TOOLS)
    assert turn.tool_calls == () and kinds(turn) == [ParseErrorKind.MALFORMED_CALL]


def test_minimax_interleaved_thinking_is_all_reasoning() -> None:
    text = "first thought\n</think>\n\nChecking.\n<think>\nsecond thought\n</think>\n\n" + write_minimax_m2([WEATHER])
    turn = get_parser("minimax_m2").parse(text, tools=TOOLS, generation_prompt="]~b]ai\n<think>\n")
    assert turn.reasoning == "first thought\n\nsecond thought"
    assert turn.content == "Checking." and calls_of(turn) == [WEATHER] and turn.errors == ()


def test_minimax_rehearsed_call_in_later_thinking_is_not_executed() -> None:
    text = "a</think><think>try " + write_minimax_m2([SEARCH]) + "</think>" + write_minimax_m2([WEATHER])
    turn = get_parser("minimax_m2").parse(text, tools=TOOLS, generation_prompt="<think>\n")
    assert calls_of(turn) == [WEATHER] and kinds(turn) == [ParseErrorKind.CALL_IN_REASONING]

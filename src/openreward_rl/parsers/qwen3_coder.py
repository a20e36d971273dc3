"""Qwen XML tool calls: Qwen3-Coder, Qwen3.5 / 3.6 / 3.8, MiMo, Step-3.5.

    <think>…</think>
    Let me check.
    <tool_call>
    <function=get_weather>
    <parameter=city>
    San Francisco
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

Values are raw text: exactly one leading and one trailing newline are removed, then each value is
converted with the tool's JSON schema (`schema.coerce_value`): `3` is an integer only when the
schema says so. Without a schema, numbers, literals and JSON objects/arrays are decoded and
everything else stays a string. A value that fails its schema is passed on as the raw string (the
environment validates arguments and tells the model), and an INVALID_ARGUMENTS error carrying the
executed call's `call_id` records it: such an error is a warning, not a dropped call.

A `</parameter>` inside a value (`print('</parameter>')`) does not end it: a value ends at the
first `</parameter>` followed by the next `<parameter=` or by `</function>` (or by the end of a turn
that stopped). The same rule ends a function at `</function>` followed by `</tool_call>`.

>>> turn = Qwen3CoderParser().parse(
...     "<tool_call>\\n<function=add>\\n<parameter=a>\\n1\\n</parameter>\\n</function>\\n</tool_call>",
...     tools=[{"name": "add", "parameters": {"properties": {"a": {"type": "integer"}}}}])
>>> turn.tool_calls[0].name, turn.tool_calls[0].arguments
('add', {'a': 1})
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.parsers.base import ParsedTurn, ParseError, ParseErrorKind, ToolCall, register_parser, tool_schema
from openreward_rl.parsers.common import (
    add_result,
    find_structural_closer,
    forgotten_closer,
    is_cut_off,
    join_content,
    repaired_closer_note,
    scan_blocks,
    skip_spaces,
    split_turn_reasoning,
    unclosed_error,
    validate_call,
    value_scan_pattern,
)
from openreward_rl.parsers.schema import coerce_arguments

__all__ = ["Qwen3CoderParser"]

_FUNCTION_OPEN = "<function="
_FUNCTION_CLOSE = "</function>"
_PARAM_OPEN = "<parameter="
_PARAM_CLOSE = "</parameter>"
_VALUE_SCAN = value_scan_pattern(_PARAM_CLOSE, (_PARAM_OPEN, _FUNCTION_CLOSE))


@functools.cache
def _call_start(tool_open: str) -> re.Pattern[str]:
    return re.compile(rf"(?:{re.escape(tool_open)}\s*)?<function=")


@functools.cache
def _value_boundary(tool_open: str, tool_close: str) -> re.Pattern[str]:
    """What can only follow a finished value: the next parameter on a line of its own, or the function's
    end followed by the next call or by the end of the text. (Both on a line of their own: the caller
    checks the newline before the match.)"""
    opened, closed = re.escape(tool_open), re.escape(tool_close)
    return re.compile(rf"<parameter=(?P<key>[^>\n]+)>\n|</function>\s*(?:{closed}\s*)?(?={opened}|<function=|\Z)")


def _strip_one_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


class _Truncated(Exception):
    """The block ends before its closer."""


class _Malformed(Exception):
    pass


@register_parser("qwen3_coder")
class Qwen3CoderParser:
    name = "qwen3_coder"
    # the format's wrappers; a subclass with other wrappers (Seed-OSS) sets these
    tool_open, tool_close = "<tool_call>", "</tool_call>"
    think_open, think_close = "<think>", "</think>"
    strip_value_newlines = True  # the template writes each value between newlines

    def __init__(self, *, tool_call_ends_reasoning: bool = True) -> None:
        """`tool_call_ends_reasoning`: a call inside never-closed reasoning, as `HermesParser` takes it."""
        self.tool_call_ends_reasoning = tool_call_ends_reasoning

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn:
        # A call opens with `<tool_call>`; a bare `<function=` (wrapper forgotten) is accepted too.
        openers = (self.tool_open, _FUNCTION_OPEN)
        errors: list[ParseError] = []
        split = split_turn_reasoning(
            text,
            generation_prompt=generation_prompt,
            call_openers=openers,
            errors=errors,
            open_tag=self.think_open,
            close_tag=self.think_close,
            opener_ends_reasoning=self.tool_call_ends_reasoning,
            call_start=_call_start(self.tool_open),
            call_closers=(self.tool_close,),
        )
        calls: list[ToolCall] = []
        body = split.rest
        content = scan_blocks(
            body, openers, lambda start, _opener: self._parse_block(body, start, tools, finish_reason, calls, errors)
        )
        return ParsedTurn(
            content=join_content(content), reasoning=split.reasoning, tool_calls=tuple(calls), errors=tuple(errors)
        )

    def _parse_block(
        self,
        body: str,
        start: int,
        tools: Sequence[Mapping[str, Any]] | None,
        finish_reason: str | None,
        calls: list[ToolCall],
        errors: list[ParseError],
    ) -> int:
        wrapped = body.startswith(self.tool_open, start)
        cursor = skip_spaces(body, start + len(self.tool_open)) if wrapped else start
        name: str | None = None
        try:
            name, raw_arguments, cursor, repaired, schema = self._parse_function(body, cursor, finish_reason, tools)
        except _Truncated:
            errors.append(unclosed_error(body[start:], tool_name=name))
            return len(body)
        except _Malformed as problem:
            close = body.find(self.tool_close, start)
            stop = len(body) if close < 0 else close + len(self.tool_close)
            errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, str(problem), raw=body[start:stop]))
            return stop
        after = skip_spaces(body, cursor)
        if wrapped and body.startswith(self.tool_close, after):
            cursor = after + len(self.tool_close)
        elif wrapped and after >= len(body) and is_cut_off(finish_reason):
            errors.append(unclosed_error(body[start:], tool_name=name))
            return len(body)
        raw = body[start:cursor]
        arguments, problems = coerce_arguments(raw_arguments, schema)
        result = validate_call(name, arguments, tools=tools, raw=raw)
        add_result(result, calls, errors)
        if repaired and isinstance(result, ToolCall):
            errors.append(repaired_closer_note(_PARAM_CLOSE, raw=raw, tool_name=result.name, call_id=result.id))
        if problems and isinstance(result, ToolCall):  # executed with the raw text; recorded as a warning
            message = "; ".join(problems) + " (passed on as raw text)"
            errors.append(
                ParseError(ParseErrorKind.INVALID_ARGUMENTS, message, raw=raw, tool_name=name, call_id=result.id)
            )
        return cursor

    def _parse_function(
        self, body: str, cursor: int, finish_reason: str | None, tools: Sequence[Mapping[str, Any]] | None
    ) -> tuple[str, dict[str, str], int, bool, Mapping[str, Any] | None]:
        """Parse `<function=NAME>…</function>`; return the name, the raw values, the index after it,
        whether a forgotten `</parameter>` was restored, and the tool's parameter schema."""
        if not body.startswith(_FUNCTION_OPEN, cursor):
            if cursor >= len(body):
                raise _Truncated
            raise _Malformed(f"expected <function=NAME> after {self.tool_open}")
        name_end = body.find(">", cursor)
        newline = body.find("\n", cursor)
        if name_end < 0:
            raise _Truncated if is_cut_off(finish_reason) or newline < 0 else _Malformed("unterminated <function=")
        if 0 <= newline < name_end:
            raise _Malformed("a function name must end with '>' on its line")
        name = body[cursor + len(_FUNCTION_OPEN) : name_end].strip()
        cursor = name_end + 1
        raw_arguments: dict[str, str] = {}
        repaired = False
        schema = tool_schema(tools, name)
        cut_off = is_cut_off(finish_reason)

        def real_boundary(match: re.Match[str]) -> bool:
            if body[match.start() - 1] != "\n":
                return False
            if match.group("key") is not None:  # the next parameter: one the tool declares, not given yet
                key = match.group("key").strip()
                declared = (schema or {}).get("properties")
                return key not in raw_arguments and (not isinstance(declared, Mapping) or key in declared)
            return not (cut_off and match.end() == len(body))  # a cut text may end inside a value

        while True:
            cursor = skip_spaces(body, cursor)
            if body.startswith(_FUNCTION_CLOSE, cursor):
                return name, raw_arguments, cursor + len(_FUNCTION_CLOSE), repaired, schema
            if cursor >= len(body):
                if cut_off:
                    raise _Truncated
                return name, raw_arguments, cursor, repaired, schema  # the stop string swallowed the closers
            if not body.startswith(_PARAM_OPEN, cursor):
                raise _Malformed(f"unexpected text in function {name!r}: {body[cursor : cursor + 40]!r}")
            key_end = body.find(">", cursor)
            if key_end < 0:
                if is_cut_off(finish_reason):
                    raise _Truncated
                raise _Malformed("unterminated <parameter=")
            key = body[cursor + len(_PARAM_OPEN) : key_end].strip()
            value_start = key_end + 1
            boundary = _value_boundary(self.tool_open, self.tool_close)
            repair, closer_from, _ = forgotten_closer(
                body, value_start, _PARAM_CLOSE, boundary, _VALUE_SCAN, real_boundary
            )
            if repair is not None:  # `</parameter>` was forgotten: the value ends at the line before the structure
                close = cursor = repair.start() - 1
                repaired = True
            else:
                # No closer lies before `closer_from`: the structural closer is searched from there.
                close = (
                    -1
                    if closer_from < 0
                    else find_structural_closer(body, _PARAM_CLOSE, closer_from, (_PARAM_OPEN, _FUNCTION_CLOSE))
                )
                if close >= 0:
                    cursor = close + len(_PARAM_CLOSE)
                elif is_cut_off(finish_reason):
                    raise _Truncated
                else:
                    close = cursor = len(body)  # the turn stopped inside the last value: take it whole
            if key in raw_arguments:
                raise _Malformed(f"parameter {key!r} given twice")
            value = body[value_start:close]
            raw_arguments[key] = _strip_one_newline(value) if self.strip_value_newlines else value

"""Mistral tool calls, every tokenizer version.

    v3 / v7:  [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "SF"}, "id": "abcDEF123"}]
    v11:      [TOOL_CALLS]get_weather[CALL_ID]abcDEF123[ARGS]{"city": "SF"}[TOOL_CALLS]search[CALL_ID]…
    v13+:     [THINK]reasoning[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "SF"}[TOOL_CALLS]search[ARGS]…

`[TOOL_CALLS]` followed by `[` is the JSON-array form; followed by a name, the name/`[ARGS]` form.
Reasoning is `[THINK]…[/THINK]` (Magistral 2506/2507 wrote text `<think>` tags: accepted too).

Call ids: Mistral templates require exactly 9 ASCII letters or digits. The model's id is kept when
it has that shape; otherwise (or when there is none) a compliant id is generated.
In a JSON array cut off by the length limit, the complete calls before the cut are kept.

>>> turn = MistralParser().parse('[TOOL_CALLS]add[CALL_ID]abcDEF123[ARGS]{"a": 1}')
>>> turn.tool_calls[0].name, turn.tool_calls[0].arguments, turn.tool_calls[0].id
('add', {'a': 1}, 'abcDEF123')
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.parsers.base import ParsedTurn, ParseError, ParseErrorKind, ToolCall, register_parser
from openreward_rl.parsers.common import (
    JsonValueError,
    add_result,
    calls_in_reasoning,
    decode_json_prefix,
    is_cut_off,
    join_content,
    loads_json_strict,
    scan_blocks,
    skip_spaces,
    split_reasoning,
    unclosed_error,
    validate_call,
)

__all__ = ["MistralParser", "mistral_call_id"]

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_VALID_ID = re.compile(r"[A-Za-z0-9]{9}")


def mistral_call_id(candidate: Any) -> str | None:
    """`candidate` when it is a valid Mistral call id (9 ASCII letters/digits), else None.

    >>> mistral_call_id("abcDEF123"), mistral_call_id("call_1")
    ('abcDEF123', None)
    """
    return candidate if isinstance(candidate, str) and _VALID_ID.fullmatch(candidate) else None


def _decode_arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return loads_json_strict(value)
        except JsonValueError:
            return value
    return value


@register_parser("mistral")
class MistralParser:
    name = "mistral"

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn:
        if "[THINK]" in text or "[/THINK]" in text or "[THINK]" in generation_prompt:
            split = split_reasoning(
                text,
                generation_prompt=generation_prompt,
                open_tag="[THINK]",
                close_tag="[/THINK]",
                call_openers=(TOOL_CALLS,),
            )
        else:
            split = split_reasoning(text, generation_prompt=generation_prompt, call_openers=(TOOL_CALLS,))
        errors = calls_in_reasoning(split.reasoning, (TOOL_CALLS,))
        calls: list[ToolCall] = []
        body = split.rest

        def parse_block(start: int, opener: str) -> int:
            cursor = skip_spaces(body, start + len(opener))
            if body.startswith("[", cursor) and not body.startswith(TOOL_CALLS, cursor):
                return self._json_array(body, cursor, tools, finish_reason, calls, errors)
            return self._named_call(body, start, cursor, tools, finish_reason, calls, errors)

        content = scan_blocks(body, (TOOL_CALLS,), parse_block)
        return ParsedTurn(
            content=join_content(content), reasoning=split.reasoning, tool_calls=tuple(calls), errors=tuple(errors)
        )

    @staticmethod
    def _json_array(
        body: str,
        cursor: int,
        tools: Sequence[Mapping[str, Any]] | None,
        finish_reason: str | None,
        calls: list[ToolCall],
        errors: list[ParseError],
    ) -> int:
        """`[{…}, {…}]`, decoded element by element so that a cut keeps the complete calls."""
        start = cursor
        cursor = skip_spaces(body, cursor + 1)
        if body.startswith("]", cursor):
            return cursor + 1
        while True:
            try:
                payload, end = decode_json_prefix(body, cursor)
            except JsonValueError as error:
                if is_cut_off(finish_reason):
                    errors.append(unclosed_error(body[start:]))
                else:
                    errors.append(
                        ParseError(
                            ParseErrorKind.INVALID_JSON, f"tool calls are not valid JSON: {error}", raw=body[start:]
                        )
                    )
                return len(body)
            raw = body[cursor:end]
            if isinstance(payload, dict):
                call_id = mistral_call_id(payload.get("id"))
                arguments = _decode_arguments(payload.get("arguments", payload.get("parameters", {})))
                add_result(
                    validate_call(payload.get("name"), arguments, tools=tools, raw=raw, call_id=call_id), calls, errors
                )
            else:
                errors.append(
                    ParseError(ParseErrorKind.MALFORMED_CALL, "each tool call must be a JSON object", raw=raw)
                )
            cursor = skip_spaces(body, end)
            if body.startswith(",", cursor):
                cursor = skip_spaces(body, cursor + 1)
            elif body.startswith("]", cursor):
                return cursor + 1
            elif cursor >= len(body):
                if is_cut_off(finish_reason):
                    errors.append(unclosed_error(body[start:]))
                return len(body)  # stopped right after the last element: the calls are complete
            else:
                errors.append(
                    ParseError(
                        ParseErrorKind.MALFORMED_CALL, "expected ',' or ']' in the tool call list", raw=body[start:]
                    )
                )
                return cursor

    @staticmethod
    def _named_call(
        body: str,
        start: int,
        cursor: int,
        tools: Sequence[Mapping[str, Any]] | None,
        finish_reason: str | None,
        calls: list[ToolCall],
        errors: list[ParseError],
    ) -> int:
        """`NAME[CALL_ID]ID[ARGS]{…}` (v11) or `NAME[ARGS]{…}` (v13+)."""
        args_at = body.find(ARGS, cursor)
        next_call = body.find(TOOL_CALLS, cursor)
        if args_at < 0 or 0 <= next_call < args_at:
            stop = len(body) if next_call < 0 else next_call
            if next_call < 0 and is_cut_off(finish_reason):
                errors.append(unclosed_error(body[start:]))
            else:
                errors.append(
                    ParseError(ParseErrorKind.MALFORMED_CALL, "a tool call has no [ARGS] marker", raw=body[start:stop])
                )
            return stop
        header = body[cursor:args_at]
        name, _, raw_id = header.partition(CALL_ID)
        call_id = mistral_call_id(raw_id.strip())
        json_start = skip_spaces(body, args_at + len(ARGS))
        try:
            arguments, end = decode_json_prefix(body, json_start)
        except JsonValueError as error:
            stop = len(body) if next_call < 0 else next_call
            if is_cut_off(finish_reason) and next_call < 0:
                errors.append(unclosed_error(body[start:], tool_name=name.strip()))
            else:
                errors.append(
                    ParseError(
                        ParseErrorKind.INVALID_JSON,
                        f"arguments are not valid JSON: {error}",
                        raw=body[start:stop],
                        tool_name=name.strip(),
                    )
                )
            return stop
        add_result(
            validate_call(name, _decode_arguments(arguments), tools=tools, raw=body[start:end], call_id=call_id),
            calls,
            errors,
        )
        return end

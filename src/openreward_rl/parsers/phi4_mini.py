"""Phi-4-mini tool calls: a JSON list of calls between `<|tool_call|>` and `<|/tool_call|>`.

    <|tool_call|>[{"name": "calculator", "arguments": {"expression": "1 + 1"}}]<|/tool_call|>

The format the `phi-4-mini-format` family states (families/phi.py); Microsoft's chat template writes no
call. The list is decoded string-aware, so a `<|/tool_call|>` inside an argument string does not end it.
A list the length limit cut off is UNCLOSED_BLOCK and never executed; after a stop, a missing closer is
accepted. Text outside the list is the content.

>>> turn = Phi4MiniParser().parse('<|tool_call|>[{"name": "add", "arguments": {"a": 1}}]<|/tool_call|>')
>>> turn.tool_calls[0].name, turn.tool_calls[0].arguments
('add', {'a': 1})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.parsers.base import ParsedTurn, ParseError, ParseErrorKind, register_parser
from openreward_rl.parsers.common import (
    JsonValueError,
    add_result,
    decode_json_prefix,
    is_cut_off,
    join_content,
    scan_blocks,
    skip_spaces,
    unclosed_error,
    validate_call,
)

__all__ = ["Phi4MiniParser"]

CALL_OPEN, CALL_CLOSE = "<|tool_call|>", "<|/tool_call|>"


@register_parser("phi4_mini")
class Phi4MiniParser:
    name = "phi4_mini"

    def parse(self, text: str, *, tools: Sequence[Mapping[str, Any]] | None = None, generation_prompt: str = "", finish_reason: str | None = None) -> ParsedTurn:
        errors: list[ParseError] = []
        calls: list = []
        content = scan_blocks(text, (CALL_OPEN,), lambda start, _opener: self._parse_list(text, start, tools, finish_reason, calls, errors))
        return ParsedTurn(content=join_content(content).strip(), reasoning=None, tool_calls=tuple(calls), errors=tuple(errors))

    def _parse_list(
        self, body: str, start: int, tools: Sequence[Mapping[str, Any]] | None, finish_reason: str | None, calls: list, errors: list[ParseError]
    ) -> int:
        cursor = skip_spaces(body, start + len(CALL_OPEN))
        if cursor >= len(body) and is_cut_off(finish_reason):
            errors.append(unclosed_error(body[start:]))
            return len(body)
        try:
            items, end = decode_json_prefix(body, cursor)
        except JsonValueError as error:
            close = body.find(CALL_CLOSE, start)
            if close < 0 and is_cut_off(finish_reason):
                errors.append(unclosed_error(body[start:]))
                return len(body)
            stop = len(body) if close < 0 else close + len(CALL_CLOSE)
            errors.append(ParseError(ParseErrorKind.INVALID_JSON, f"the tool-call list is not JSON: {error}", raw=body[start:stop]))
            return stop
        after = skip_spaces(body, end)
        if body.startswith(CALL_CLOSE, after):
            end = after + len(CALL_CLOSE)
        elif after >= len(body) and is_cut_off(finish_reason):
            errors.append(unclosed_error(body[start:]))
            return len(body)
        raw = body[start:end]
        for item in items if isinstance(items, list) else [items]:
            if not isinstance(item, Mapping):
                errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, "each call must be a JSON object", raw=raw))
                continue
            add_result(validate_call(item.get("name"), item.get("arguments", {}), tools=tools, raw=raw), calls, errors)
        return end

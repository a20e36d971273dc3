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
    add_result,
    decode_tagged_json,
    join_content,
    scan_blocks,
    validate_call,
)

__all__ = ["Phi4MiniParser"]

CALL_OPEN, CALL_CLOSE = "<|tool_call|>", "<|/tool_call|>"


@register_parser("phi4_mini")
class Phi4MiniParser:
    name = "phi4_mini"

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn:
        errors: list[ParseError] = []
        calls: list = []
        content = scan_blocks(
            text,
            (CALL_OPEN,),
            lambda start, _opener: self._parse_list(text, start, tools, finish_reason, calls, errors),
        )
        return ParsedTurn(
            content=join_content(content).strip(), reasoning=None, tool_calls=tuple(calls), errors=tuple(errors)
        )

    def _parse_list(
        self,
        body: str,
        start: int,
        tools: Sequence[Mapping[str, Any]] | None,
        finish_reason: str | None,
        calls: list,
        errors: list[ParseError],
    ) -> int:
        block = decode_tagged_json(body, start, CALL_OPEN, CALL_CLOSE, finish_reason, errors, "tool-call list")
        if isinstance(block, int):
            return block
        items, raw, end = block.value, block.raw, block.end
        for item in items if isinstance(items, list) else [items]:
            if not isinstance(item, Mapping):
                errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, "each call must be a JSON object", raw=raw))
                continue
            add_result(validate_call(item.get("name"), item.get("arguments", {}), tools=tools, raw=raw), calls, errors)
        return end

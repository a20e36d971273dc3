"""Cohere Command R7B / Command A tool calls: a JSON list between action markers.

    <|START_THINKING|>I will call the calculator.<|END_THINKING|><|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": "calculator", "parameters": {"expression": "1 + 1"}}
    ]<|END_ACTION|>

An answer is `<|START_RESPONSE|>…<|END_RESPONSE|>`: the markers are dropped from the content. The
`tool_call_id` is the template's running index of the call in the conversation (it writes tool results
against it); the call gets an id of its own, as every parser gives. The list is decoded string-aware, so
an `<|END_ACTION|>` inside an argument string does not end it. A list the length limit cut off before
`<|END_ACTION|>` is UNCLOSED_BLOCK and never executed; after a stop, a missing closer is accepted.

>>> turn = CohereParser().parse('<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "add", "parameters": {"a": 1}}]<|END_ACTION|>')
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
    split_turn_reasoning,
    validate_call,
)

__all__ = ["CohereParser"]

ACTION_OPEN, ACTION_CLOSE = "<|START_ACTION|>", "<|END_ACTION|>"
THINK_OPEN, THINK_CLOSE = "<|START_THINKING|>", "<|END_THINKING|>"
RESPONSE_MARKERS = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")


@register_parser("cohere")
class CohereParser:
    name = "cohere"

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn:
        errors: list[ParseError] = []
        split = split_turn_reasoning(
            text,
            generation_prompt=generation_prompt,
            call_openers=(ACTION_OPEN,),
            errors=errors,
            open_tag=THINK_OPEN,
            close_tag=THINK_CLOSE,
        )
        calls: list = []
        body = split.rest
        content = scan_blocks(
            body,
            (ACTION_OPEN,),
            lambda start, _opener: self._parse_action(body, start, tools, finish_reason, calls, errors),
        )
        answer = join_content(content)
        for marker in RESPONSE_MARKERS:
            answer = answer.replace(marker, "")
        return ParsedTurn(
            content=answer.strip(), reasoning=split.reasoning, tool_calls=tuple(calls), errors=tuple(errors)
        )

    def _parse_action(
        self,
        body: str,
        start: int,
        tools: Sequence[Mapping[str, Any]] | None,
        finish_reason: str | None,
        calls: list,
        errors: list[ParseError],
    ) -> int:
        block = decode_tagged_json(body, start, ACTION_OPEN, ACTION_CLOSE, finish_reason, errors, "action list")
        if isinstance(block, int):
            return block
        items, raw, end = block.value, block.raw, block.end
        if not isinstance(items, list):
            errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, "an action must be a JSON list of calls", raw=raw))
            return end
        for item in items:
            if not isinstance(item, Mapping):
                errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, "each action must be a JSON object", raw=raw))
                continue
            add_result(
                validate_call(item.get("tool_name"), item.get("parameters", {}), tools=tools, raw=raw), calls, errors
            )
        return end

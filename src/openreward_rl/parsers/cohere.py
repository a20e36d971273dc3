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
    JsonValueError,
    add_result,
    decode_json_prefix,
    is_cut_off,
    join_content,
    scan_blocks,
    skip_spaces,
    split_turn_reasoning,
    unclosed_error,
    validate_call,
)

__all__ = ["CohereParser"]

ACTION_OPEN, ACTION_CLOSE = "<|START_ACTION|>", "<|END_ACTION|>"
THINK_OPEN, THINK_CLOSE = "<|START_THINKING|>", "<|END_THINKING|>"
RESPONSE_MARKERS = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")


@register_parser("cohere")
class CohereParser:
    name = "cohere"

    def parse(self, text: str, *, tools: Sequence[Mapping[str, Any]] | None = None, generation_prompt: str = "", finish_reason: str | None = None) -> ParsedTurn:
        errors: list[ParseError] = []
        split = split_turn_reasoning(
            text, generation_prompt=generation_prompt, call_openers=(ACTION_OPEN,), errors=errors, open_tag=THINK_OPEN, close_tag=THINK_CLOSE
        )
        calls: list = []
        body = split.rest
        content = scan_blocks(body, (ACTION_OPEN,), lambda start, _opener: self._parse_action(body, start, tools, finish_reason, calls, errors))
        answer = join_content(content)
        for marker in RESPONSE_MARKERS:
            answer = answer.replace(marker, "")
        return ParsedTurn(content=answer.strip(), reasoning=split.reasoning, tool_calls=tuple(calls), errors=tuple(errors))

    def _parse_action(
        self, body: str, start: int, tools: Sequence[Mapping[str, Any]] | None, finish_reason: str | None, calls: list, errors: list[ParseError]
    ) -> int:
        cursor = skip_spaces(body, start + len(ACTION_OPEN))
        if cursor >= len(body) and is_cut_off(finish_reason):
            errors.append(unclosed_error(body[start:]))
            return len(body)
        try:
            items, end = decode_json_prefix(body, cursor)
        except JsonValueError as error:
            close = body.find(ACTION_CLOSE, start)
            if close < 0 and is_cut_off(finish_reason):
                errors.append(unclosed_error(body[start:]))
                return len(body)
            stop = len(body) if close < 0 else close + len(ACTION_CLOSE)
            errors.append(ParseError(ParseErrorKind.INVALID_JSON, f"the action list is not JSON: {error}", raw=body[start:stop]))
            return stop
        after = skip_spaces(body, end)
        if body.startswith(ACTION_CLOSE, after):
            end = after + len(ACTION_CLOSE)
        elif after >= len(body) and is_cut_off(finish_reason):
            errors.append(unclosed_error(body[start:]))
            return len(body)
        raw = body[start:end]
        if not isinstance(items, list):
            errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, "an action must be a JSON list of calls", raw=raw))
            return end
        for item in items:
            if not isinstance(item, Mapping):
                errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, "each action must be a JSON object", raw=raw))
                continue
            add_result(validate_call(item.get("tool_name"), item.get("parameters", {}), tools=tools, raw=raw), calls, errors)
        return end

"""Hermes JSON tool calls: Qwen2.5, Qwen3 (<= 2507), Hermes, Granite 4, Nemotron.

    <think>…</think>
    Let me check.
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "SF"}}
    </tool_call>

Each call's JSON is decoded string-aware, so a `</tool_call>` inside an argument string does not end
the block. Text outside calls is kept, in order, as content.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.parsers.base import ParsedTurn, ParseError, ParseErrorKind, ToolCall, register_parser
from openreward_rl.parsers.common import (
    JsonValueError,
    decode_json_prefix,
    is_cut_off,
    join_content,
    loads_json_strict,
    scan_blocks,
    split_turn_reasoning,
    unclosed_error,
    validate_call,
)

__all__ = ["HermesParser"]

_CALL_START = re.compile(r"<tool_call>\s*\{")


def _decode_arguments(value: Any) -> Any:
    if isinstance(value, str):  # Granite writes the arguments as a JSON string: decode exactly once
        try:
            return loads_json_strict(value)
        except JsonValueError:
            return value
    return value


@register_parser("hermes")
class HermesParser:
    name = "hermes"
    open_tag = "<tool_call>"
    close_tag = "</tool_call>"

    def __init__(self, *, tool_call_ends_reasoning: bool = True) -> None:
        """`tool_call_ends_reasoning`: in a reasoning block that is never closed (the generation
        prompt pre-fills `<think>`), a tool call ends the reasoning and is executed, as vLLM's
        Qwen3 reasoning parser and llama.cpp do; False reports it CALL_IN_REASONING instead."""
        self.tool_call_ends_reasoning = tool_call_ends_reasoning

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
            call_openers=(self.open_tag,),
            errors=errors,
            opener_ends_reasoning=self.tool_call_ends_reasoning,
            call_start=_CALL_START,
            call_closers=(self.close_tag,),
        )
        calls: list[ToolCall] = []
        body = split.rest
        content = scan_blocks(
            body,
            (self.open_tag,),
            lambda start, opener: self._parse_block(body, start + len(opener), tools, finish_reason, calls, errors),
        )
        return ParsedTurn(
            content=join_content(content), reasoning=split.reasoning, tool_calls=tuple(calls), errors=tuple(errors)
        )

    def _parse_block(
        self,
        body: str,
        json_start: int,
        tools: Sequence[Mapping[str, Any]] | None,
        finish_reason: str | None,
        calls: list[ToolCall],
        errors: list[ParseError],
    ) -> int:
        """Parse one block whose JSON starts at `json_start`; return where scanning resumes."""
        index = json_start
        while index < len(body) and body[index].isspace():
            index += 1
        try:
            payload, end = decode_json_prefix(body, index)
        except JsonValueError as error:
            close = body.find(self.close_tag, json_start)
            stop = len(body) if close < 0 else close + len(self.close_tag)
            raw = body[json_start:stop]
            if close < 0 and is_cut_off(finish_reason):
                errors.append(unclosed_error(raw))
            else:
                errors.append(
                    ParseError(ParseErrorKind.INVALID_JSON, f"the tool call is not valid JSON: {error}", raw=raw)
                )
            return stop
        after = end
        while after < len(body) and body[after].isspace():
            after += 1
        raw = body[json_start:after]
        if body.startswith(self.close_tag, after):
            stop = after + len(self.close_tag)
        elif after >= len(body) and not is_cut_off(finish_reason):
            stop = after  # the closer was consumed as a stop string
        elif after >= len(body):
            errors.append(unclosed_error(raw))
            return after
        else:
            close = body.find(self.close_tag, after)
            stop = len(body) if close < 0 else close + len(self.close_tag)
            errors.append(
                ParseError(
                    ParseErrorKind.MALFORMED_CALL,
                    "unexpected text after the tool call's JSON",
                    raw=body[json_start:stop],
                )
            )
            return stop
        if not isinstance(payload, dict):
            errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, "a tool call must be a JSON object", raw=raw))
            return stop
        arguments = payload.get("arguments", payload.get("parameters", {}))
        call_id = payload.get("id") if isinstance(payload.get("id"), str) else None
        call = validate_call(payload.get("name"), _decode_arguments(arguments), tools=tools, raw=raw, call_id=call_id)
        if isinstance(call, ToolCall):
            calls.append(call)
        else:
            errors.append(call)
        return stop

"""Llama 3.1 / 3.2 / 3.3 JSON tool calls.

    <|python_tag|>{"name": "get_weather", "parameters": {"city": "SF"}}
    <|python_tag|>{"name": "a", "parameters": {}};{"name": "b", "arguments": {}}
    <|python_tag|>brave_search.call(query="gold price")        (3.1 built-in tools)

The arguments key is `parameters` (`arguments` is accepted; a JSON-string value is decoded once).
After `<|python_tag|>`, text that is neither JSON nor `tool.call(...)` is raw code for Llama's
built-in `code_interpreter`, and becomes a `code_interpreter` call with `{"code": ...}` (reported as
an unknown tool unless the environment offers one).

Bare JSON policy: Llama's own chat template renders a call as a bare `{"name": …, "parameters": …}`
without the tag, but a bare JSON object is also a normal answer. Without the tag, the completion is
a call only when *all* of it is one or more `;`-separated objects whose keys are exactly `name`,
`parameters` (or `arguments`) and optionally `"type": "function"`, each naming a tool in `tools`.
Anything else, including any bare JSON when `tools` is not given, stays content. A bare answer
cut off by the length limit that begins `{"name": "<offered tool>"` is reported UNCLOSED_BLOCK.

>>> tools = [{"name": "get_weather", "parameters": {}}]
>>> LlamaJsonParser().parse('{"name": "get_weather", "parameters": {"city": "SF"}}', tools=tools).tool_calls[0].arguments
{'city': 'SF'}
>>> LlamaJsonParser().parse('{"name": "Ada", "parameters": {}}', tools=tools).content
'{"name": "Ada", "parameters": {}}'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.parsers.base import ParsedTurn, ParseError, ParseErrorKind, ToolCall, register_parser, tool_names
from openreward_rl.parsers.common import (
    JsonValueError,
    add_result,
    calls_in_reasoning,
    decode_json_prefix,
    find_unquoted,
    is_cut_off,
    join_content,
    loads_json_strict,
    skip_spaces,
    split_reasoning,
    unclosed_error,
    validate_call,
)
from openreward_rl.parsers.pythonic import PythonCallError, parse_python_calls

__all__ = ["LlamaJsonParser"]

PYTHON_TAG = "<|python_tag|>"
_BARE_CALL_START = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]+)"')
_CALL_KEYS = {"name", "parameters", "arguments", "type"}


def _arguments_of(payload: Mapping[str, Any]) -> Any:
    arguments = payload.get("parameters", payload.get("arguments", {}))
    if isinstance(arguments, str):
        try:
            return loads_json_strict(arguments)
        except JsonValueError:
            return arguments
    return arguments


def _is_call_shape(payload: Any) -> bool:
    if not isinstance(payload, dict) or "name" not in payload or not set(payload) <= _CALL_KEYS:
        return False
    if ("parameters" in payload) == ("arguments" in payload):
        return False
    return payload.get("type", "function") == "function"


@register_parser("llama3_json")
class LlamaJsonParser:
    name = "llama3_json"

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn:
        split = split_reasoning(text, generation_prompt=generation_prompt, call_openers=(PYTHON_TAG, "{"))
        errors = calls_in_reasoning(split.reasoning, (PYTHON_TAG,))
        calls: list[ToolCall] = []
        body = split.rest
        # String-aware: a tag quoted inside a call's JSON argument is text (an untagged call is checked first).
        bare = self._bare_calls(body, tools) if body.lstrip().startswith("{") else None
        tag = -1 if bare is not None else find_unquoted(body, (PYTHON_TAG,))[0]
        if tag < 0:
            if bare is None:
                if is_cut_off(finish_reason) and self._starts_offered_call(body, tools):
                    errors.append(unclosed_error(body.strip()))
                    return ParsedTurn(content="", reasoning=split.reasoning, errors=tuple(errors))
                return ParsedTurn(content=body.strip(), reasoning=split.reasoning, errors=tuple(errors))
            for payload, raw in bare:
                add_result(validate_call(payload["name"], _arguments_of(payload), tools=tools, raw=raw), calls, errors)
            return ParsedTurn(content="", reasoning=split.reasoning, tool_calls=tuple(calls), errors=tuple(errors))
        content = [body[:tag]]
        position = tag
        while position < len(body):
            if body.startswith(PYTHON_TAG, position):
                position = skip_spaces(body, position + len(PYTHON_TAG))
            if body.startswith("{", position):
                position = self._json_call(body, position, tools, finish_reason, calls, errors)
            else:
                self._python_call(body[position:], tools, finish_reason, calls, errors)
                position = len(body)
                break
            after = skip_spaces(body, position)
            if body.startswith(";", after):
                position = skip_spaces(body, after + 1)
            elif body.startswith(PYTHON_TAG, after):
                position = after
            else:
                content.append(body[position:])  # text after the calls
                break
        return ParsedTurn(
            content=join_content(content), reasoning=split.reasoning, tool_calls=tuple(calls), errors=tuple(errors)
        )

    @staticmethod
    def _starts_offered_call(body: str, tools: Sequence[Mapping[str, Any]] | None) -> bool:
        """A cut-off bare answer that begins like a call to an offered tool (and is not valid JSON)."""
        match = _BARE_CALL_START.match(body)
        offered = tool_names(tools) or set()
        if match is None or match.group(1) not in offered:
            return False
        try:
            decode_json_prefix(body, skip_spaces(body, 0))
        except JsonValueError:
            return True
        return False

    @staticmethod
    def _bare_calls(body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[tuple[dict[str, Any], str]] | None:
        """The calls of an untagged completion, when it is unambiguously nothing but calls (see module doc)."""
        offered = tool_names(tools)
        if not offered or not body.lstrip().startswith("{"):
            return None
        found: list[tuple[dict[str, Any], str]] = []
        position = skip_spaces(body, 0)
        while True:
            try:
                payload, end = decode_json_prefix(body, position)
            except JsonValueError:
                return None
            if not _is_call_shape(payload) or payload["name"] not in offered:
                return None
            found.append((payload, body[position:end]))
            position = skip_spaces(body, end)
            if position >= len(body):
                return found
            if not body.startswith(";", position):
                return None
            position = skip_spaces(body, position + 1)

    @staticmethod
    def _json_call(
        body: str,
        position: int,
        tools: Sequence[Mapping[str, Any]] | None,
        finish_reason: str | None,
        calls: list[ToolCall],
        errors: list[ParseError],
    ) -> int:
        try:
            payload, end = decode_json_prefix(body, position)
        except JsonValueError as error:
            raw = body[position:]
            if is_cut_off(finish_reason):
                errors.append(unclosed_error(raw))
            else:
                errors.append(
                    ParseError(ParseErrorKind.INVALID_JSON, f"the tool call is not valid JSON: {error}", raw=raw)
                )
            return len(body)
        raw = body[position:end]
        if not isinstance(payload, dict):
            errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, "a tool call must be a JSON object", raw=raw))
        else:
            add_result(validate_call(payload.get("name"), _arguments_of(payload), tools=tools, raw=raw), calls, errors)
        return end

    @staticmethod
    def _python_call(
        source: str,
        tools: Sequence[Mapping[str, Any]] | None,
        finish_reason: str | None,
        calls: list[ToolCall],
        errors: list[ParseError],
    ) -> None:
        """`brave_search.call(query="x")` (a built-in tool), else raw code for `code_interpreter`."""
        stripped = source.strip()
        if not stripped:
            if is_cut_off(finish_reason):
                errors.append(unclosed_error(source))
            else:
                errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, "nothing follows <|python_tag|>", raw=source))
            return
        try:
            pairs = parse_python_calls(stripped)
        except PythonCallError:
            pairs = []
        if len(pairs) == 1 and pairs[0][0].endswith(".call"):
            name, arguments = pairs[0]
            add_result(validate_call(name[: -len(".call")], arguments, tools=tools, raw=source), calls, errors)
        elif is_cut_off(finish_reason):
            errors.append(unclosed_error(source, tool_name="code_interpreter"))
        else:
            add_result(validate_call("code_interpreter", {"code": stripped}, tools=tools, raw=source), calls, errors)

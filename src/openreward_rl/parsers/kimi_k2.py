"""Kimi K2 / K2.5 / K2.6 tool calls: the function name lives in the native call id.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "SF"}<|tool_call_end|><|tool_calls_section_end|>

The native id (`functions.<name>:<idx>`, idx a conversation-global counter) is kept as the
`ToolCall.id`, so the chat template renders it back unchanged. Accepted id shapes:

- `functions.<name>:<idx>` and `<name>:<idx>`;
- `functions_<name>_<idx>`, which K2 writes after a client sanitised earlier ids;
- ids that carry no name (a bare counter `3`, `call00003`, `call_abc`): the name is inferred
  only when exactly one offered tool accepts the argument keys (all keys are properties and all
  required properties are present); otherwise the call is reported as MISSING_NAME.

The singular section marker `<|tool_call_section_begin|>` is accepted too. Reasoning is
`<think>…</think>` (K2.5+ pre-fill the opener); a tool section opened inside an unclosed
`<think>` ends the reasoning, as in the reference parser, while a section inside a closed
`<think>…</think>` is a rehearsal (CALL_IN_REASONING).

>>> from openreward_rl.parsers import get_parser
>>> text = ('<|tool_calls_section_begin|><|tool_call_begin|>functions.add:7<|tool_call_argument_begin|>'
...         '{"a": 1}<|tool_call_end|><|tool_calls_section_end|>')
>>> call = get_parser("kimi_k2").parse(text).tool_calls[0]
>>> call.name, call.id
('add', 'functions.add:7')
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.parsers._sections import (
    SectionedParser,
    Sections,
    call_list_section,
    finish_json_call,
    missing_marker,
)
from openreward_rl.parsers._xmlish import TurnBuilder, decode_json_object
from openreward_rl.parsers.base import register_parser, tool_schema

__all__ = ["KimiK2Parser", "name_from_call_id"]

SECTION_BEGINS = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
SECTION_ENDS = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"

_NATIVE_ID = re.compile(r"(?:functions\.)?(?P<name>[^\s:]+):(?P<index>\d+)")
_SANITISED_ID = re.compile(r"functions_(?P<name>\S+)_(?P<index>\d+)")


def name_from_call_id(call_id: str) -> str | None:
    """The function name a Kimi call id carries, or None for ids that carry none.

    >>> name_from_call_id("functions.get_weather:0"), name_from_call_id("get_weather:12")
    ('get_weather', 'get_weather')
    >>> name_from_call_id("functions_read_file_3"), name_from_call_id("3"), name_from_call_id("call00003")
    ('read_file', None, None)
    """
    for pattern in (_NATIVE_ID, _SANITISED_ID):
        match = pattern.fullmatch(call_id)
        if match:
            return match.group("name")
    return None


def _infer_name(arguments: Any, tools: Sequence[Mapping[str, Any]] | None) -> str | None:
    """The only offered tool whose schema accepts these argument keys, if exactly one does."""
    if not tools or not isinstance(arguments, dict):
        return None
    keys = set(arguments)
    matches = []
    for tool in tools:
        spec = tool["function"] if isinstance(tool.get("function"), Mapping) else tool
        name = spec.get("name")
        if not isinstance(name, str):
            continue  # a tool with no name is never called
        schema = tool_schema(tools, name) or {}
        properties = set(schema.get("properties") or {})
        required = set(schema.get("required") or ())
        if keys <= properties and required <= keys:
            matches.append(name)
    return matches[0] if len(matches) == 1 else None


def _parse_call(text: str, index: int, builder: TurnBuilder) -> int:
    raw_start = index - len(CALL_BEGIN)
    limit = text.find(CALL_END, index)
    argument_begin = text.find(ARGUMENT_BEGIN, index, len(text) if limit < 0 else limit)
    if argument_begin < 0:
        return missing_marker(
            text, builder, raw_start=raw_start, close_at=limit, call_end=CALL_END, missing=ARGUMENT_BEGIN
        )
    call_id = text[index:argument_begin].strip()
    json_start = argument_begin + len(ARGUMENT_BEGIN)
    name = name_from_call_id(call_id)
    if name is None:
        decoded = decode_json_object(text, json_start)
        name = _infer_name(decoded[0] if decoded else None, builder.tools)
    return finish_json_call(
        text, json_start, builder, call_end=CALL_END, name=name, call_id=call_id or None, raw_start=raw_start
    )


_parse_section = call_list_section(section_end=SECTION_ENDS, call_begin=CALL_BEGIN, parse_call=_parse_call)


@register_parser("kimi_k2")
class KimiK2Parser(SectionedParser):
    name = "kimi_k2"
    grammar = Sections((*SECTION_BEGINS, CALL_BEGIN), SECTION_BEGINS, _parse_section)
    opener_ends_reasoning = True

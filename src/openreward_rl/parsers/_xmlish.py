"""Shared machinery for the marker-delimited formats (DeepSeek, Kimi, GLM, MiniMax).

Not a format itself (the leading underscore keeps it out of auto-discovery). It holds:

- `TurnBuilder`: collects content, calls and errors for one turn, and owns the policies every
  format here shares (truncation, unknown tools, schema coercion of raw values).
- `find_value_end`: where a raw text value ends when its own end tag may occur inside it.
- `RawValue` + `coerce_raw_arguments`: raw text values, optionally typed by the format
  (DSML `string=`, Kimi K3 `type=`), turned into JSON values with the tool's schema.
- `split_turn_reasoning`: the reasoning split plus the calls-inside-reasoning policy.

Policies (documented in docs/parsers.md):

- A closer that is missing at the very end of the text is accepted when the turn ended on a
  stop (`finish_reason` "stop" or unknown); when it was cut off ("length" or "abort") the
  unfinished call is reported as UNCLOSED_BLOCK and never executed. Only a call's own closer
  and its section's closer may be missing: a value or JSON body that is itself unfinished is
  never repaired.
- A raw value that cannot satisfy its schema is kept, raw, in the call (the environment gives
  the authoritative validation error), and an INVALID_ARGUMENTS error naming the call's id is
  recorded so that the problem is visible in metrics.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.parsers.base import ParsedTurn, ParseError, ParseErrorKind, ToolCall, tool_schema
from openreward_rl.parsers.common import join_content, split_turn_reasoning, validate_call
from openreward_rl.parsers.schema import CoercionError, coerce_each, coerce_value

__all__ = [
    "INT64_MIN",
    "INT64_MAX",
    "RawValue",
    "TurnBuilder",
    "coerce_raw_arguments",
    "cut_off",
    "decode_json_object",
    "find_value_end",
    "split_turn_reasoning",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_JSON = json.JSONDecoder()
_NOT_JSON = object()
_SCHEMA_TYPE_KEYS = ("type", "anyOf", "oneOf", "enum")


def cut_off(finish_reason: str | None) -> bool:
    """True when the turn was cut off, so a missing closer means an unfinished call.

    >>> cut_off("length"), cut_off("abort"), cut_off("stop"), cut_off(None)
    (True, True, False, False)
    """
    return finish_reason in ("length", "abort")


def find_value_end(
    text: str,
    start: int,
    closers: str | Sequence[str],
    *,
    followers: Sequence[str],
    boundaries: Sequence[str],
) -> tuple[int, int] | None:
    """(index, length) of the closer that ends a raw value starting at `start`, or None if none does.

    The value's own end tag may occur inside the value (`print('</arg_value>')`). The closer is
    the last occurrence of one of `closers` that (a) is followed, after optional whitespace, by one
    of `followers` or by the end of the text, and (b) lies before the next structural boundary
    (the next opener of a sibling element, one of `boundaries`). If no occurrence lies before the
    boundary (the boundary text itself sits inside the value), the first qualifying one after it is used.

    >>> text = "<v>a</v> b</v><k>x</k><v>c</v>"
    >>> index, length = find_value_end(text, 3, "</v>", followers=("<k>",), boundaries=("<k>",))
    >>> text[3:index]
    'a</v> b'
    """
    options = (closers,) if isinstance(closers, str) else tuple(closers)

    def next_closer(position: int) -> tuple[int, int]:
        found = [(i, len(c)) for c in options if (i := text.find(c, position)) >= 0]
        return min(found) if found else (-1, 0)

    def qualifies(index: int, length: int) -> bool:
        after = index + length
        while after < len(text) and text[after].isspace():
            after += 1
        return after >= len(text) or any(text.startswith(f, after) for f in followers)

    found = [b for b in (text.find(m, start) for m in boundaries) if b >= 0]
    boundary = min(found) if found else len(text)
    best: tuple[int, int] | None = None
    index, length = next_closer(start)
    while index >= 0:
        if index >= boundary and best is not None:
            break
        if qualifies(index, length):
            best = (index, length)
            if index >= boundary:
                break
        index, length = next_closer(index + 1)
    return best


def decode_json_object(text: str, start: int) -> tuple[Any, int] | None:
    """A JSON value starting at `start` (after whitespace) and the index after it, or None.

    Decoding is string-aware, so end markers inside JSON strings do not end the value.

    >>> decode_json_object(' {"code": "</tool_call>"} tail', 0)
    ({'code': '</tool_call>'}, 25)
    """
    while start < len(text) and text[start].isspace():
        start += 1
    try:
        return _JSON.raw_decode(text, start)
    except (json.JSONDecodeError, RecursionError):
        return None


@attrs.frozen
class RawValue:
    """An untyped argument value as written, with the type the format itself declares, if any.

    `declared` is a JSON-schema type name ("string", "number", "boolean", "null", "object",
    "array", "integer"), "json" (any JSON value: DSML `string="false"`), or None when the format
    carries no type (GLM, MiniMax).
    """

    text: str
    declared: str | None = None


def _has_type_info(schema: Mapping[str, Any] | None) -> bool:
    return schema is not None and any(key in schema for key in _SCHEMA_TYPE_KEYS)


def _allows_string(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "string" or (isinstance(kind, list) and "string" in kind):
        return True
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key) or ():
            if isinstance(option, Mapping) and (not _has_type_info(option) or _allows_string(option)):
                return True
    enum = schema.get("enum") or ()
    return bool(enum) and any(isinstance(option, str) for option in enum)


def _matches(value: Any, schema: Mapping[str, Any]) -> bool:
    """Whether a decoded JSON value has a type the schema allows (types, anyOf/oneOf, enum)."""
    if "enum" in schema and value in (schema.get("enum") or ()):
        return True
    names = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
        type(None): "null",
    }
    kind = names.get(type(value))
    allowed = schema.get("type")
    allowed = [allowed] if isinstance(allowed, str) else list(allowed or ())
    if kind in allowed or (kind == "integer" and "number" in allowed):
        return True
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key) or ():
            if isinstance(option, Mapping) and (not _has_type_info(option) or _matches(value, option)):
                return True
    return False


def _overflows_int64(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not INT64_MIN <= value <= INT64_MAX
    if isinstance(value, dict):
        return any(_overflows_int64(v) for v in value.values())
    if isinstance(value, list):
        return any(_overflows_int64(v) for v in value)
    return False


def _coerce_one(raw: RawValue, schema: Any) -> Any:
    """Raises CoercionError when the value cannot be what the schema (or declared type) asks (a
    schema that is not a mapping counts as none)."""
    if not isinstance(schema, Mapping):
        schema = None
    if raw.declared == "json":  # DSML string="false": the text is a JSON value
        try:
            decoded = json.loads(raw.text)
        except (json.JSONDecodeError, RecursionError):
            decoded = _NOT_JSON
        if decoded is not _NOT_JSON and (not _has_type_info(schema) or _matches(decoded, schema)):
            if _overflows_int64(decoded):
                raise CoercionError(f"integer outside the int64 range: {raw.text[:80]!r}")
            return decoded
        if not _has_type_info(schema):
            raise CoercionError(f"not a JSON value: {raw.text[:80]!r}")
    if _has_type_info(schema):
        assert schema is not None
        if raw.declared == "string" and _allows_string(schema):
            return raw.text  # the model said "string" and the schema allows it: keep "3" as "3"
        value = coerce_value(raw.text, schema)
    elif raw.declared == "string":
        return raw.text
    elif raw.declared is not None:
        value = coerce_value(raw.text, {"type": raw.declared})
    else:
        value = coerce_value(raw.text, None)
    if _overflows_int64(value):
        raise CoercionError(f"integer outside the int64 range: {raw.text[:80]!r}")
    return value


def coerce_raw_arguments(
    raw_arguments: Mapping[str, RawValue], parameters_schema: Mapping[str, Any] | None
) -> tuple[dict[str, Any], list[str]]:
    """Coerce raw values with each property's schema; failures keep the raw text and are listed.

    >>> schema = {"properties": {"n": {"type": "integer"}, "zip": {"type": "string"}}}
    >>> coerce_raw_arguments({"n": RawValue("3"), "zip": RawValue("02139")}, schema)
    ({'n': 3, 'zip': '02139'}, [])
    >>> coerce_raw_arguments({"n": RawValue("9223372036854775808")}, schema)[1]
    ["argument 'n': integer outside the int64 range: '9223372036854775808'"]
    """
    return coerce_each(raw_arguments, parameters_schema, _coerce_one, raw_text=lambda raw: raw.text)


class TurnBuilder:
    """Collects one turn's content pieces, calls and errors, in order.

    >>> turn = TurnBuilder(tools=None, finish_reason="stop")
    >>> turn.add_content("Checking. ")
    >>> _ = turn.add_call("f", {"a": 1}, raw="f(a=1)", call_id="id1")
    >>> turn.build(reasoning=None)
    ParsedTurn(content='Checking.', reasoning=None, tool_calls=(ToolCall(name='f', arguments={'a': 1}, id='id1'),), errors=())
    """

    def __init__(self, *, tools: Sequence[Mapping[str, Any]] | None, finish_reason: str | None) -> None:
        self.tools = tools
        self.finish_reason = finish_reason
        self.truncated = cut_off(finish_reason)
        self._content: list[str] = []
        self._calls: list[ToolCall] = []
        self.errors: list[ParseError] = []  # public: the reasoning split appends to it

    def add_content(self, text: str) -> None:
        self._content.append(text)

    def add_error(
        self, kind: ParseErrorKind, message: str, raw: str, *, tool_name: str | None = None, call_id: str | None = None
    ) -> None:
        self.errors.append(ParseError(kind, message, raw=raw, tool_name=tool_name, call_id=call_id))

    def add_unclosed(self, raw: str, what: str = "tool call", *, tool_name: str | None = None) -> None:
        self.add_error(
            ParseErrorKind.UNCLOSED_BLOCK,
            f"the {what} was cut off by the length limit and is not executed",
            raw,
            tool_name=tool_name,
        )

    def add_call(self, name: Any, arguments: Any, *, raw: str, call_id: str | None = None) -> ToolCall | None:
        """Validate and keep a call whose arguments are already JSON values."""
        result = validate_call(name, arguments, tools=self.tools, raw=raw, call_id=call_id)
        if isinstance(result, ToolCall):
            self._calls.append(result)
            return result
        self.errors.append(result)
        return None

    def add_raw_call(
        self, name: str, raw_arguments: Mapping[str, RawValue], *, raw: str, call_id: str | None = None
    ) -> ToolCall | None:
        """Coerce raw values with the tool's schema, then validate and keep the call."""
        arguments, problems = coerce_raw_arguments(raw_arguments, tool_schema(self.tools, name.strip()))
        call = self.add_call(name, arguments, raw=raw, call_id=call_id)
        if call is not None:
            for problem in problems:
                self.add_error(
                    ParseErrorKind.INVALID_ARGUMENTS,
                    f"{problem}; the raw text was passed to {call.name!r} unchanged",
                    raw,
                    tool_name=call.name,
                    call_id=call.id,
                )
        return call

    def build(self, reasoning: str | None) -> ParsedTurn:
        return ParsedTurn(
            content=join_content(self._content),
            reasoning=reasoning,
            tool_calls=tuple(self._calls),
            errors=tuple(self.errors),
        )

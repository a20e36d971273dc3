"""Convert raw text values (Qwen XML, GLM, MiniMax, DSML, Kimi K3) to JSON values with the tool's schema."""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["CoercionError", "coerce_value", "coerce_arguments", "coerce_each"]

_Raw = TypeVar("_Raw")

_INT = re.compile(r"-?(0|[1-9][0-9]*)")
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_PY_LITERALS = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}


class CoercionError(ValueError):
    pass


def _types(schema: Mapping[str, Any] | None) -> list[Any]:
    if not schema:
        return []
    kind = schema.get("type")
    if isinstance(kind, list):
        return kind
    if kind is not None:
        return [kind]
    options: list[Any] = []
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key) or ():
            if isinstance(option, Mapping):
                options.extend(_types(option) or ["any"])
    if "enum" in schema:
        options.append("enum")
    return options


def _as_json(raw: str) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        value = ast.literal_eval(raw)  # older templates write Python literals
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise CoercionError(f"not a JSON value: {raw[:80]!r}") from None
    return json.loads(json.dumps(value))


def _coerce_as(kind: Any, raw: str, schema: Mapping[str, Any]) -> Any:
    text = raw.strip()
    if kind == "string":
        return raw
    if kind == "integer":
        if _INT.fullmatch(text):
            return int(text)
        raise CoercionError(f"not an integer: {raw[:80]!r}")
    if kind == "number":
        if _NUMBER.fullmatch(text):
            value = float(text) if any(c in text for c in ".eE") else int(text)
            if isinstance(value, float) and not math.isfinite(value):
                raise CoercionError(f"not a finite number: {raw[:80]!r}")
            return value
        raise CoercionError(f"not a number: {raw[:80]!r}")
    if kind == "boolean":
        if text in ("true", "True"):
            return True
        if text in ("false", "False"):
            return False
        raise CoercionError(f"not a boolean: {raw[:80]!r}")
    if kind == "null":
        if text in ("null", "None"):
            return None
        raise CoercionError(f"not null: {raw[:80]!r}")
    if kind in ("object", "array"):
        value = _as_json(text)
        if (kind == "object") != isinstance(value, dict) or (kind == "array") != isinstance(value, list):
            raise CoercionError(f"not an {kind}: {raw[:80]!r}")
        return value
    if kind == "enum":
        for option in schema.get("enum") or ():
            if isinstance(option, str) and option == raw:
                return option
            if not isinstance(option, str) and text == json.dumps(option):
                return option
        raise CoercionError(f"not one of the enum values: {raw[:80]!r}")
    return _coerce_untyped(raw)


def _coerce_untyped(raw: str) -> Any:
    text = raw.strip()
    if text in _PY_LITERALS:
        return _PY_LITERALS[text]
    if text[:1] in "[{" or _NUMBER.fullmatch(text):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return raw
    return raw


def coerce_value(raw: str, schema: Mapping[str, Any] | None) -> Any:
    """A raw text value as the JSON value the schema asks for.

    Strings stay strings, number-like strings included, unless the schema says otherwise.
    Raises `CoercionError` when the schema's type cannot be met; the caller keeps the raw value.

    >>> coerce_value("3", {"type": "integer"}), coerce_value("3", {"type": "string"})
    (3, '3')
    >>> coerce_value("123_456", {"type": ["integer", "string"]})
    '123_456'
    """
    kinds = _types(schema)
    if not kinds:
        return _coerce_untyped(raw)
    # Try the strictest types first so that "3" for ["integer", "string"] becomes 3.
    order = {
        "null": 0,
        "boolean": 1,
        "integer": 2,
        "number": 3,
        "object": 4,
        "array": 5,
        "enum": 6,
        "any": 7,
        "string": 8,
    }
    last_error: CoercionError | None = None
    for kind in sorted(kinds, key=lambda k: order.get(k, 7)):
        try:
            return _coerce_as(kind, raw, schema or {})
        except CoercionError as error:
            last_error = error
    assert last_error is not None
    raise last_error


def coerce_arguments(
    raw_arguments: Mapping[str, str], parameters_schema: Mapping[str, Any] | None
) -> tuple[dict[str, Any], list[str]]:
    """Coerce every raw argument with its property schema. Returns the values and coercion problems.

    A value whose coercion fails is kept as its raw string, and the problem is reported.
    """
    return coerce_each(raw_arguments, parameters_schema, coerce_value, raw_text=lambda raw: raw)


def coerce_each(
    raw_arguments: Mapping[str, _Raw],
    parameters_schema: Mapping[str, Any] | None,
    coerce: Callable[[_Raw, Any], Any],
    *,
    raw_text: Callable[[_Raw], str],
) -> tuple[dict[str, Any], list[str]]:
    """`coerce(raw, property schema)` for every raw argument; where it raises CoercionError the value
    is `raw_text(raw)` and the problem is listed. Returns the values and the problems."""
    properties = (parameters_schema or {}).get("properties") or {}
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, raw in raw_arguments.items():
        schema = properties.get(key) if isinstance(properties, Mapping) else None
        try:
            values[key] = coerce(raw, schema)
        except CoercionError as error:
            values[key] = raw_text(raw)
            problems.append(f"argument {key!r}: {error}")
    return values, problems

"""Pythonic tool calls: Llama 3.2 light / Llama 4 / ToolACE, LFM2, Olmo 3.

    [get_weather(city="SF", days=3), search(query='x', filters={'fresh': True})]
    <|python_start|>[get_weather(city="SF")]<|python_end|>          (Llama 4)
    <|tool_call_start|>[get_weather(city="SF")]<|tool_call_end|>      (LFM2; a JSON list also works)
    <function_calls>get_weather(city="Paris")
    search(query="x")</function_calls>                                 (Olmo 3, one call per line)

The call list is read with `ast` (never evaluated). Arguments must be literals: strings, numbers,
`True`/`False`/`None` (or JSON's `true`/`false`/`null`), lists, tuples and dicts with string keys.
Non-finite numbers (`1e999`, `float('nan')`), positional arguments and `**kwargs` make the call
malformed. Without a wrapper, the completion (after reasoning) is a call list only when all of it is
one; a Python list mentioned inside an answer stays content.

>>> turn = PythonicParser().parse('[get_weather(city="SF", days=3)]')
>>> turn.tool_calls[0].name, turn.tool_calls[0].arguments
('get_weather', {'city': 'SF', 'days': 3})
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.parsers.base import ParsedTurn, ParseError, ParseErrorKind, ToolCall, register_parser
from openreward_rl.parsers.common import (
    JsonValueError,
    add_result,
    call_in_reasoning_error,
    find_unquoted,
    is_cut_off,
    join_content,
    loads_json_strict,
    scan_blocks,
    split_reasoning,
    unclosed_error,
    validate_call,
)

__all__ = ["PythonicParser", "PythonCallError", "parse_python_calls", "complete_prefix_calls"]

# opener -> (closer, whether calls are one per line instead of a list)
_WRAPPERS: dict[str, tuple[str, bool]] = {
    "<|python_start|>": ("<|python_end|>", False),
    "<|tool_call_start|>": ("<|tool_call_end|>", False),
    "<function_calls>": ("</function_calls>", True),
}
_LOOKS_LIKE_CALL_LIST = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_JSON_LITERALS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


class PythonCallError(ValueError):
    """Python call syntax that is not a list of literal-argument calls."""


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise PythonCallError(f"non-finite number {ast.unparse(node)[:40]}")
            return value
        raise PythonCallError(f"unsupported literal of type {type(value).__name__}")
    if isinstance(node, ast.Name) and node.id in _JSON_LITERALS:
        return _JSON_LITERALS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _literal(node.operand)
        if isinstance(operand, bool) or not isinstance(operand, (int, float)):
            raise PythonCallError("a sign applies to numbers only")
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        result: dict[str, Any] = {}
        for key, value_node in zip(node.keys, node.values):
            if key is None:
                raise PythonCallError("'**' inside a dict literal is not a literal")
            key_value = _literal(key)
            if not isinstance(key_value, str):
                raise PythonCallError("dict keys must be strings")
            result[key_value] = _literal(value_node)
        return result
    raise PythonCallError(f"not a literal: {ast.unparse(node)[:60]}")


def _dotted_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted_name(node.value)}.{node.attr}"
    raise PythonCallError("a call must name a function")


def _call(node: ast.AST) -> tuple[str, dict[str, Any]]:
    if not isinstance(node, ast.Call):
        raise PythonCallError("expected a function call")
    name = _dotted_name(node.func)
    if node.args:
        raise PythonCallError(f"{name}: positional arguments are not allowed; name every argument")
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise PythonCallError(f"{name}: '**' arguments are not allowed")
        arguments[keyword.arg] = _literal(keyword.value)
    return name, arguments


def _escape_raw_newlines(source: str) -> str:
    """Escape newlines written raw inside quoted strings (LFM2's template writes `'` + value + `'`)."""
    out: list[str] = []
    quote = ""
    escaped = False
    for char in source:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
            elif char == "\n":
                out.append("\\n")
                continue
        elif char in "'\"":
            quote = char
        out.append(char)
    return "".join(out)


def parse_python_calls(source: str, *, one_per_line: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """`[f(a=1), g()]` (or one call per line) as (name, arguments) pairs; raises `PythonCallError`.

    >>> parse_python_calls("[f(a=1, b=[True, None]), g()]")
    [('f', {'a': 1, 'b': [True, None]}), ('g', {})]
    >>> try:
    ...     parse_python_calls("[f(x=1e999)]")
    ... except PythonCallError as error:
    ...     print(error)
    non-finite number 1e309
    """
    try:
        if one_per_line:
            lines = [line for line in source.splitlines() if line.strip()]
            return [_call(ast.parse(line.strip(), mode="eval").body) for line in lines]
        try:
            tree = ast.parse(source.strip(), mode="eval").body
        except SyntaxError:
            repaired = _escape_raw_newlines(source.strip())
            if repaired == source.strip():
                raise
            tree = ast.parse(repaired, mode="eval").body
        if isinstance(tree, ast.Call):
            return [_call(tree)]
        if not isinstance(tree, ast.List):
            raise PythonCallError("expected a list of calls")
        return [_call(item) for item in tree.elts]
    except PythonCallError:
        raise
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as error:
        raise PythonCallError(f"not valid Python call syntax: {type(error).__name__}") from None


def complete_prefix_calls(source: str, *, attempts: int = 64) -> list[tuple[str, dict[str, Any]]]:
    """The complete calls at the start of a call list that was cut off: `[a(x=1), b(y=` -> `[a(x=1)]`.

    A call counts as complete only when the model went on past it (a `,` follows): the last call
    before a cut is never executed, as with every other format. Tries closing the list after each
    of the last `attempts` closing parentheses, longest first.

    >>> complete_prefix_calls("[a(x=1), b(y=")
    [('a', {'x': 1})]
    """
    body = source.rstrip()
    end = len(body)
    for _ in range(attempts):
        end = body.rfind(")", 0, end)
        if end < 0:
            break
        if not body[end + 1 :].lstrip().startswith(","):
            continue
        try:
            return parse_python_calls(body[: end + 1] + "]")
        except PythonCallError:
            continue
    return []


def _json_calls(source: str) -> list[tuple[Any, Any]] | None:
    """LFM2 also writes a JSON list of {"name", "arguments"} inside its wrapper."""
    try:
        value = loads_json_strict(source)
    except JsonValueError:
        return None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(item, dict) for item in items):
        return None
    return [(item.get("name"), item.get("arguments", item.get("parameters", {}))) for item in items]


@register_parser("pythonic")
class PythonicParser:
    name = "pythonic"

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn:
        split = split_reasoning(text, generation_prompt=generation_prompt, call_openers=(*_WRAPPERS, "["))
        errors: list[ParseError] = []
        calls: list[ToolCall] = []
        if split.reasoning and self._mentions_calls(split.reasoning):
            errors.append(call_in_reasoning_error(split.reasoning))
        body = split.rest

        def parse_wrapper(start: int, opener: str) -> int:
            closer, one_per_line = _WRAPPERS[opener]
            inner_start = start + len(opener)
            end, _ = find_unquoted(body, (closer,), inner_start, quotes="'\"")
            if end < 0:
                if is_cut_off(finish_reason):
                    if not one_per_line:
                        for name, arguments in complete_prefix_calls(body[inner_start:]):
                            add_result(validate_call(name, arguments, tools=tools, raw=body[start:]), calls, errors)
                    errors.append(unclosed_error(body[start:]))
                    return len(body)
                end, position = len(body), len(body)
            else:
                position = end + len(closer)
            self._add_calls(body[inner_start:end], one_per_line, body[start:position], tools, calls, errors)
            return position

        content = scan_blocks(body, tuple(_WRAPPERS), parse_wrapper)
        bare = "".join(content).strip()
        if len(content) == 1 and _LOOKS_LIKE_CALL_LIST.match(bare):  # no wrapper anywhere
            return self._parse_bare(bare, split.reasoning, tools, finish_reason, errors)
        return self._turn(content, split.reasoning, calls, errors)

    @staticmethod
    def _mentions_calls(reasoning: str) -> bool:
        return any(opener in reasoning for opener in _WRAPPERS) or bool(_LOOKS_LIKE_CALL_LIST.match(reasoning.strip()))

    @staticmethod
    def _turn(content: list[str], reasoning: str | None, calls: list[ToolCall], errors: list[ParseError]) -> ParsedTurn:
        return ParsedTurn(
            content=join_content(content), reasoning=reasoning, tool_calls=tuple(calls), errors=tuple(errors)
        )

    def _parse_bare(
        self,
        bare: str,
        reasoning: str | None,
        tools: Sequence[Mapping[str, Any]] | None,
        finish_reason: str | None,
        errors: list[ParseError],
    ) -> ParsedTurn:
        """The whole answer is `[name(...), ...]`: calls, or content when it is not a call list."""
        calls: list[ToolCall] = []
        try:
            pairs = parse_python_calls(bare)
        except PythonCallError as error:
            if is_cut_off(finish_reason) and not bare.endswith("]"):
                for name, arguments in complete_prefix_calls(bare):  # keep the calls before the cut
                    add_result(validate_call(name, arguments, tools=tools, raw=bare), calls, errors)
                errors.append(unclosed_error(bare))
                return self._turn([], reasoning, calls, errors)
            if bare.endswith("]"):
                errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, str(error), raw=bare))
                return self._turn([], reasoning, calls, errors)
            return self._turn([bare], reasoning, calls, errors)  # prose that happens to start with "[x("
        for name, arguments in pairs:
            add_result(validate_call(name, arguments, tools=tools, raw=bare), calls, errors)
        return self._turn([], reasoning, calls, errors)

    @staticmethod
    def _add_calls(
        source: str,
        one_per_line: bool,
        raw: str,
        tools: Sequence[Mapping[str, Any]] | None,
        calls: list[ToolCall],
        errors: list[ParseError],
    ) -> None:
        pairs: list[tuple[Any, Any]] | None = _json_calls(source) if source.lstrip().startswith(("[{", "{")) else None
        if pairs is None:
            try:
                pairs = list(parse_python_calls(source, one_per_line=one_per_line))
            except PythonCallError as error:
                errors.append(ParseError(ParseErrorKind.MALFORMED_CALL, str(error), raw=raw))
                return
        for name, arguments in pairs:
            add_result(validate_call(name, arguments, tools=tools, raw=raw), calls, errors)

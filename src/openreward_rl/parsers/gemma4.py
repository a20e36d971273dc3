"""Gemma 4 tool calls in Gemma's object notation (and FunctionGemma's variant).

    <|channel>thought
    reasoning<channel|><|tool_call>call:get_weather{city:<|"|>SF<|"|>,days:3}<tool_call|>
    <start_function_call>call:get_weather{city:<escape>SF<escape>}<end_function_call>   (FunctionGemma)

Object notation: keys are bare (a `<|"|>`-quoted key is accepted), strings sit between `<|"|>`
special tokens (so a `<tool_call|>` inside a string cannot end the call), numbers use Python
formatting, `true`/`false`/`null` (and Python's `True`/`False`/`None`) are literals, and objects
and lists nest. Non-finite numbers (`inf`, `nan`, `1e999`) make the call invalid. Any other bare
word is read as a string.

Reasoning is the `<|channel>thought\\n…<channel|>` block; calls inside it are never executed.

>>> turn = Gemma4Parser().parse('<|tool_call>call:add{a:1,b:<|"|>x, y<|"|>}<tool_call|>')
>>> turn.tool_calls[0].name, turn.tool_calls[0].arguments
('add', {'a': 1, 'b': 'x, y'})
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.parsers.base import ParsedTurn, ParseError, ParseErrorKind, ToolCall, register_parser
from openreward_rl.parsers.common import (
    add_result,
    calls_in_reasoning,
    is_cut_off,
    join_content,
    scan_blocks,
    skip_spaces,
    split_reasoning,
    unclosed_error,
    validate_call,
)

__all__ = ["Gemma4Parser", "GemmaSyntax", "GEMMA4", "FUNCTION_GEMMA", "parse_gemma_object"]

_MAX_DEPTH = 64
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


@attrs.frozen
class GemmaSyntax:
    call_open: str
    call_close: str
    quote: str


GEMMA4 = GemmaSyntax("<|tool_call>", "<tool_call|>", '<|"|>')
FUNCTION_GEMMA = GemmaSyntax("<start_function_call>", "<end_function_call>", "<escape>")
_REASONING_OPEN = "<|channel>"
_REASONING_CLOSE = "<channel|>"


class GemmaSyntaxError(ValueError):
    def __init__(self, message: str, *, at_end: bool = False) -> None:
        super().__init__(message)
        self.at_end = at_end  # the text ended inside the value: truncation, not a syntax error


class _Reader:
    def __init__(self, text: str, position: int, quote: str) -> None:
        self.text = text
        self.position = position
        self.quote = quote

    def fail(self, message: str) -> GemmaSyntaxError:
        return GemmaSyntaxError(message, at_end=self.position >= len(self.text))

    def value(self, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise self.fail("arguments nest too deeply")
        self.position = skip_spaces(self.text, self.position)
        text = self.text
        if self.position >= len(text):
            raise self.fail("the value is missing")
        if text.startswith(self.quote, self.position):
            return self.string()
        if text[self.position] == "{":
            return self.object(depth + 1)
        if text[self.position] == "[":
            return self.array(depth + 1)
        return self.bare()

    def string(self) -> str:
        start = self.position + len(self.quote)
        end = self.text.find(self.quote, start)
        if end < 0:
            self.position = len(self.text)
            raise self.fail("a string is not closed")
        self.position = end + len(self.quote)
        return self.text[start:end]

    def bare(self) -> Any:
        start = self.position
        text = self.text
        while self.position < len(text) and text[self.position] not in ",}]":
            if text.startswith(self.quote, self.position):
                raise self.fail("a quote inside a bare value")
            self.position += 1
        token = text[start : self.position].strip()
        if self.position >= len(text):
            raise self.fail("the object is not closed")
        if token in _LITERALS:
            return _LITERALS[token]
        if _NUMBER.fullmatch(token):
            if any(c in token for c in ".eE"):
                number = float(token)
                if not math.isfinite(number):
                    raise self.fail(f"non-finite number {token[:40]}")
                return number
            if len(token) > 4000:
                raise self.fail("an integer with too many digits")
            return int(token)
        if token.lower().lstrip("+-") in ("inf", "infinity", "nan"):
            raise self.fail(f"non-finite number {token}")
        if not token:
            raise self.fail("the value is missing")
        return token

    def key(self) -> str:
        self.position = skip_spaces(self.text, self.position)
        if self.text.startswith(self.quote, self.position):
            name = self.string()
        else:
            colon = self.text.find(":", self.position)
            if colon < 0:
                self.position = len(self.text)
                raise self.fail("a key has no ':'")
            name = self.text[self.position : colon].strip()
            if not name or any(c in name for c in ",{}[]"):
                raise self.fail(f"not a key: {name[:40]!r}")
            self.position = colon
        self.position = skip_spaces(self.text, self.position)
        if not self.text.startswith(":", self.position):
            raise self.fail("expected ':' after a key")
        self.position += 1
        return name

    def object(self, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}

        def member() -> None:
            name = self.key()
            result[name] = self.value(depth)

        self.items("}", member)
        return result

    def array(self, depth: int) -> list[Any]:
        result: list[Any] = []
        self.items("]", lambda: result.append(self.value(depth)))
        return result

    def items(self, closer: str, read_item: Callable[[], None]) -> None:
        """Read the comma-separated items of the object or array opening at `position`, up to `closer`."""
        self.position += 1  # "{" or "["
        self.position = skip_spaces(self.text, self.position)
        if self.text.startswith(closer, self.position):
            self.position += 1
            return
        while True:
            read_item()
            self.position = skip_spaces(self.text, self.position)
            if self.text.startswith(",", self.position):
                self.position += 1
            elif self.text.startswith(closer, self.position):
                self.position += 1
                return
            else:
                raise self.fail(f"expected ',' or '{closer}'")


def parse_gemma_object(text: str, start: int = 0, *, quote: str = GEMMA4.quote) -> tuple[dict[str, Any], int]:
    """Read the `{…}` object at `text[start]`; return it and the index after it. Raises `GemmaSyntaxError`.

    >>> parse_gemma_object('{a:[1,2.5,true],b:{c:<|"|>}<|"|>}}')
    ({'a': [1, 2.5, True], 'b': {'c': '}'}}, 34)
    """
    reader = _Reader(text, start, quote)
    if not text.startswith("{", start):
        raise reader.fail("expected '{'")
    return reader.object(1), reader.position


@register_parser("gemma4")
class Gemma4Parser:
    name = "gemma4"

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn:
        split = split_reasoning(
            text,
            generation_prompt=generation_prompt,
            open_tag=_REASONING_OPEN,
            close_tag=_REASONING_CLOSE,
            call_openers=(GEMMA4.call_open, FUNCTION_GEMMA.call_open),
        )
        reasoning = split.reasoning
        if reasoning is not None and reasoning.startswith("thought"):
            reasoning = reasoning[len("thought") :].strip()
        # The dialect is the one whose call opener comes first: the other's markers quoted in a string are text.
        gemma4_at, function_gemma_at = text.find(GEMMA4.call_open), text.find(FUNCTION_GEMMA.call_open)
        syntax = (
            FUNCTION_GEMMA if function_gemma_at >= 0 and (gemma4_at < 0 or function_gemma_at < gemma4_at) else GEMMA4
        )
        errors = calls_in_reasoning(reasoning, (syntax.call_open,))
        calls: list[ToolCall] = []
        body = split.rest
        content = scan_blocks(
            body,
            (syntax.call_open,),
            lambda start, _opener: self._parse_call(body, start, syntax, tools, finish_reason, calls, errors),
        )
        return ParsedTurn(
            content=join_content(content), reasoning=reasoning, tool_calls=tuple(calls), errors=tuple(errors)
        )

    @staticmethod
    def _parse_call(
        body: str,
        start: int,
        syntax: GemmaSyntax,
        tools: Sequence[Mapping[str, Any]] | None,
        finish_reason: str | None,
        calls: list[ToolCall],
        errors: list[ParseError],
    ) -> int:
        cursor = skip_spaces(body, start + len(syntax.call_open))
        brace = body.find("{", cursor)
        close = body.find(syntax.call_close, cursor)
        skip_to = len(body) if close < 0 else close + len(syntax.call_close)
        if not body.startswith("call:", cursor) or brace < 0 or 0 <= close < brace:
            if brace < 0 and close < 0 and is_cut_off(finish_reason):
                errors.append(unclosed_error(body[start:]))
            else:
                errors.append(
                    ParseError(ParseErrorKind.MALFORMED_CALL, "expected call:NAME{…}", raw=body[start:skip_to])
                )
            return skip_to
        name = body[cursor + len("call:") : brace].strip()
        try:
            arguments, end = parse_gemma_object(body, brace, quote=syntax.quote)
        except GemmaSyntaxError as error:
            if error.at_end and is_cut_off(finish_reason):
                errors.append(unclosed_error(body[start:], tool_name=name))
            else:
                errors.append(
                    ParseError(
                        ParseErrorKind.INVALID_ARGUMENTS,
                        f"arguments of {name!r}: {error}",
                        raw=body[start:skip_to],
                        tool_name=name,
                    )
                )
            return skip_to
        after = skip_spaces(body, end)
        if body.startswith(syntax.call_close, after):
            end = after + len(syntax.call_close)
        elif after >= len(body):
            if is_cut_off(finish_reason):
                errors.append(unclosed_error(body[start:], tool_name=name))
                return len(body)
        else:
            errors.append(
                ParseError(
                    ParseErrorKind.MALFORMED_CALL,
                    "unexpected text after the arguments",
                    raw=body[start:skip_to],
                    tool_name=name,
                )
            )
            return skip_to
        add_result(validate_call(name, arguments, tools=tools, raw=body[start:end]), calls, errors)
        return end

"""The `ToolParser` protocol: model text -> content, reasoning, tool calls and structured errors.

A parser never raises on model output. Everything it cannot turn into an executable call
becomes a `ParseError`, which the episode reports back to the model (and counts in metrics).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs

from openreward_rl._registry import Registry

__all__ = [
    "ParseErrorKind",
    "ParseError",
    "ToolCall",
    "ParsedTurn",
    "ToolParser",
    "register_parser",
    "get_parser",
    "available_parsers",
    "tool_names",
    "tool_schema",
]


class ParseErrorKind(str, enum.Enum):
    """Why a piece of model output is not an executable tool call."""

    INVALID_JSON = "invalid_json"
    UNCLOSED_BLOCK = "unclosed_block"  # the closing marker is missing and the turn was cut off
    MISSING_NAME = "missing_name"
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"  # arguments are not an object, or fail schema coercion
    MALFORMED_CALL = "malformed_call"  # the call's structure does not match the format
    CALL_IN_REASONING = "call_in_reasoning"  # a call written inside reasoning; never executed
    # A note, not a failure: a closer the model forgot was restored where the structure left no
    # doubt, and the call (whose id the note carries) ran. Counted in metrics, never sent to the model.
    REPAIRED_CLOSER = "repaired_closer"


@attrs.frozen
class ParseError:
    kind: ParseErrorKind
    message: str
    raw: str = ""
    tool_name: str | None = None
    call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "message": self.message,
            "raw": self.raw,
            "tool_name": self.tool_name,
            "call_id": self.call_id,
        }


@attrs.frozen
class ToolCall:
    """One executable call. `id` is the format's own call id where it has one, else a generated one."""

    name: str
    arguments: dict[str, Any]
    id: str

    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)

    def to_openai(self) -> dict[str, Any]:
        """The Chat Completions shape chat templates render (arguments as an object)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@attrs.frozen
class ParsedTurn:
    content: str
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    errors: tuple[ParseError, ...] = ()

    @property
    def has_tool_activity(self) -> bool:
        """True when the model tried to call a tool, successfully or not."""
        return bool(self.tool_calls) or any(e.kind is not ParseErrorKind.CALL_IN_REASONING for e in self.errors)


@runtime_checkable
class ToolParser(Protocol):
    """Parses one assistant turn's decoded text (special tokens kept, final stop token removed).

    `tools` are the OpenAI-format tool specs offered to the model (flat or nested); a parser uses
    them to report unknown tools and to coerce raw values with the tool's JSON schema.
    `generation_prompt` is the text the chat template appended before the model's turn: a reasoning
    opener there (`<think>`) means the completion starts inside reasoning.
    `finish_reason` is "stop", "length" or "abort": a call cut off by the length limit is never executed.

    Optional: a `tool_preamble` attribute, for a chat template that drops `tools`
    (`families.tool_preamble.parser_preamble`): a `ToolPreamble` that teaches this parser's calls, or
    None where its replies need no call syntax taught (the reply is the call). Without it, the model
    family's preamble applies where this is the family's own parser (or a subclass of it), and none otherwise.
    """

    name: str

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn: ...


_ParserT = TypeVar("_ParserT", bound=type)
_REGISTRY: Registry[Callable[[], ToolParser]] = Registry(
    duplicate="a tool parser named {name!r} is already registered",
    unknown="unknown tool parser {name!r}; registered parsers: {known}",
)


def register_parser(name: str) -> Callable[[_ParserT], _ParserT]:
    """Class decorator: make a parser available as `get_parser(name)`.

    >>> @register_parser("shout")
    ... class ShoutParser:
    ...     name = "shout"
    ...     def parse(self, text, *, tools=None, generation_prompt="", finish_reason=None):
    ...         return ParsedTurn(content=text.upper())
    >>> get_parser("shout").parse("hi").content
    'HI'
    """
    return _REGISTRY.register(name)


def get_parser(name: str) -> ToolParser:
    """A new instance of the parser `name`: registered, or your own class as `package.module:Class` or
    `path/to/file.py:Class` (built with no arguments). ValueError names an unknown or unfit one.

    >>> get_parser("openreward_rl.parsers.hermes:HermesParser").name
    'hermes'
    >>> get_parser("hermes3")
    Traceback (most recent call last):
    ...
    ValueError: unknown tool parser 'hermes3'; registered parsers: ...; or name your own as package.module:attribute or path/to/file.py:attribute
    """
    factory = _REGISTRY.resolve(name)
    if not callable(factory):
        raise ValueError(f"tool parser {name!r} is {factory!r}, not a parser class")
    parser = factory()
    if not isinstance(parser, ToolParser):
        raise ValueError(
            f"tool parser {name!r} built {type(parser).__name__}, which lacks a `name` or a `parse` method"
        )
    return parser


def available_parsers() -> list[str]:
    return _REGISTRY.names()


def _function_spec(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    function = tool.get("function")
    return function if isinstance(function, Mapping) else tool


def tool_names(tools: Sequence[Mapping[str, Any]] | None) -> set[str] | None:
    """Names of the offered tools (flat or nested OpenAI shape); None when no tool list was given."""
    if tools is None:
        return None
    return {str(_function_spec(t).get("name")) for t in tools}


def tool_schema(tools: Sequence[Mapping[str, Any]] | None, name: str) -> Mapping[str, Any] | None:
    """The JSON schema of the tool's parameters, if the tool is offered and has one."""
    for tool in tools or ():
        spec = _function_spec(tool)
        if spec.get("name") == name:
            params = spec.get("parameters")
            return params if isinstance(params, Mapping) else None
    return None

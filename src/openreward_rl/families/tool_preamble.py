"""Tool preambles: the tool schemas written into the system prompt for a template that drops `tools`.

Some chat templates render no tools at all (SmolLM2's plain ChatML, DeepSeek-V3.1's): a model served
with them never learns which tools exist. A family whose call format is known declares a
`ToolPreamble`; when its template drops `tools`, the episode puts the preamble's text into the system
message (after the configured system prompt), so the first prompt shows every tool in the family's
own call format. The preamble is part of the rendered prompt, so the trajectory records it exactly as
the model saw it.

The preamble teaches a call syntax, so it follows the configured parser (`parser_preamble`): a parser
may declare its own (`tool_preamble`: a `ToolPreamble`, or None where its replies need no call syntax,
as where the reply is the call); otherwise the family's preamble goes only with the family's own
parser (or a subclass of it), since it teaches calls in that parser's format.

`example=True` adds one worked call of the first tool, with placeholder arguments derived from its
schema: a small model that has never seen the format copies its shape (config `tool_call_example`).

>>> tools = [{"type": "function", "function": {"name": "read_order", "description": "Read an order.",
...           "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}}}]
>>> print(HERMES_PREAMBLE.render(tools, example=True))
# Tools
<BLANKLINE>
You can call these tools:
<tools>
{"type": "function", "function": {"name": "read_order", "description": "Read an order.", "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}}}
</tools>
<BLANKLINE>
To call a tool, write one JSON object with its name and arguments, for example:
<tool_call>
{"name": "read_order", "arguments": {"order": 1}}
</tool_call>
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

__all__ = [
    "HERMES_PREAMBLE",
    "JsonTagPreamble",
    "ToolPreamble",
    "example_arguments",
    "needs_no_preamble",
    "parser_preamble",
    "reads_family_calls",
]


class ToolPreamble(Protocol):
    """Writes tool schemas, and how to call them, in one family's call format."""

    def render(self, tools: Sequence[Mapping[str, Any]], *, example: bool) -> str: ...

    def call_text(self, name: str, arguments: Mapping[str, Any]) -> str:
        """One call as the model writes it in this format."""
        ...


def _placeholder(schema: Mapping[str, Any]) -> Any:
    if schema.get("enum"):
        return schema["enum"][0]
    kind: Any = schema.get("type")  # JSON: a name, a list of names, or absent
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    return {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}, "null": None}.get(kind, "text")


def example_arguments(tool: Mapping[str, Any]) -> dict[str, Any]:
    """Placeholder arguments for `tool` (an OpenAI function tool): each required parameter, a value of its type.

    >>> example_arguments({"function": {"parameters": {"properties": {"city": {"type": "string"},
    ...     "days": {"type": "integer"}, "unit": {"enum": ["C", "F"]}}, "required": ["city", "unit"]}}})
    {'city': 'text', 'unit': 'C'}
    """
    parameters = tool.get("function", tool).get("parameters") or {}
    properties = parameters.get("properties") or {}
    required = parameters.get("required") or list(properties)
    return {name: _placeholder(properties.get(name) or {}) for name in required}


@attrs.frozen
class JsonTagPreamble:
    """Tools as JSON lines between `tools_open`/`tools_close`; a call as `{"name", "arguments"}` JSON
    between `call_open`/`call_close` (Hermes / Qwen2.5's format)."""

    tools_open: str
    tools_close: str
    call_open: str
    call_close: str

    def call_text(self, name: str, arguments: Mapping[str, Any]) -> str:
        call = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
        return f"{self.call_open}\n{call}\n{self.call_close}"

    def render(self, tools: Sequence[Mapping[str, Any]], *, example: bool) -> str:
        schemas = "\n".join(json.dumps(dict(tool), ensure_ascii=False) for tool in tools)
        if example and tools:
            how, call = (
                "for example",
                self.call_text(tools[0].get("function", tools[0]).get("name", ""), example_arguments(tools[0])),
            )
        else:  # the shape alone, its slots named (not valid JSON, so never mistaken for a call)
            how, call = (
                "in this form",
                f'{self.call_open}\n{{"name": <tool name>, "arguments": <arguments as a JSON object>}}\n{self.call_close}',
            )
        return "\n".join(
            [
                "# Tools",
                "",
                "You can call these tools:",
                self.tools_open,
                schemas,
                self.tools_close,
                "",
                f"To call a tool, write one JSON object with its name and arguments, {how}:",
                call,
            ]
        )


HERMES_PREAMBLE = JsonTagPreamble("<tools>", "</tools>", "<tool_call>", "</tool_call>")


def needs_no_preamble(parser: Any) -> bool:
    """Whether `parser` declares that its replies need no call syntax taught (`tool_preamble = None`:
    the reply is the call, so the first prompt needs neither call instructions nor the tool list)."""
    return hasattr(parser, "tool_preamble") and parser.tool_preamble is None


def reads_family_calls(parser: Any, family: Any) -> bool:
    """Whether `parser` reads the calls of `family`'s own parser: it is that parser, or a subclass of it."""
    from openreward_rl.parsers import get_parser

    return family is not None and isinstance(parser, type(get_parser(family.parser)))


def parser_preamble(parser: Any, family: Any) -> ToolPreamble | None:
    """The preamble that teaches `parser`'s calls on `family`'s template (None: none does).

    The parser's own where it declares one (its `tool_preamble` attribute, None included), else the
    family's where `parser` reads the family parser's calls (`reads_family_calls`); a parser of another
    format gets none, since the family's preamble would teach the model calls that parser does not read.

    >>> from types import SimpleNamespace
    >>> from openreward_rl.parsers import get_parser
    >>> chatml = SimpleNamespace(parser="hermes", tool_preamble=HERMES_PREAMBLE)
    >>> parser_preamble(get_parser("hermes"), chatml) is HERMES_PREAMBLE
    True
    >>> parser_preamble(get_parser("pythonic"), chatml) is None
    True
    >>> parser_preamble(SimpleNamespace(name="reply_as_call", tool_preamble=None), chatml) is None
    True
    """
    if hasattr(parser, "tool_preamble"):
        return parser.tool_preamble
    return family.tool_preamble if reads_family_calls(parser, family) else None

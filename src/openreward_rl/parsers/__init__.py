"""Tool-call and reasoning parsers, one per model family's output format.

>>> from openreward_rl.parsers import get_parser
>>> turn = get_parser("hermes").parse('<tool_call>\\n{"name": "add", "arguments": {"a": 1}}\\n</tool_call>')
>>> turn.tool_calls[0].name, turn.tool_calls[0].arguments
('add', {'a': 1})
"""

from openreward_rl.parsers import _builtin  # noqa: F401  (the built-in formats register themselves)
from openreward_rl.parsers.base import (
    ParsedTurn,
    ParseError,
    ParseErrorKind,
    ToolCall,
    ToolParser,
    available_parsers,
    get_parser,
    register_parser,
)

__all__ = [
    "ParsedTurn",
    "ParseError",
    "ParseErrorKind",
    "ToolCall",
    "ToolParser",
    "available_parsers",
    "get_parser",
    "register_parser",
]

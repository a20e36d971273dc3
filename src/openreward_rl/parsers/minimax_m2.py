"""MiniMax-M2 tool calls: XML invokes with raw-text parameters, coerced with the tool's schema.

    <think>
    Need the weather.
    </think>

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">SF</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    </minimax:tool_call>

- Values are raw text, kept exactly (no stripping); the tool's schema decides `3` versus `"3"`.
- Thinking is interleaved: the generation prompt opens `<think>`, and a turn may hold further
  `<think>…</think>` blocks between content and calls. All of them are returned as reasoning
  (joined by a blank line, in order) so the history can keep them; calls inside any of them are
  never executed (CALL_IN_REASONING).

>>> from openreward_rl.parsers import get_parser
>>> text = ('<minimax:tool_call>\\n<invoke name="add">\\n<parameter name="a">1</parameter>\\n'
...         '</invoke>\\n</minimax:tool_call>')
>>> tools = [{"type": "function", "function": {"name": "add", "parameters": {"properties": {"a": {"type": "integer"}}}}}]
>>> get_parser("minimax_m2").parse(text, tools=tools).tool_calls[0].arguments
{'a': 1}
"""

from __future__ import annotations

import re

from openreward_rl.parsers._invoke import InvokeGrammar
from openreward_rl.parsers._sections import SectionedParser
from openreward_rl.parsers.base import register_parser

__all__ = ["MiniMaxM2Parser"]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

GRAMMAR = InvokeGrammar(
    block_openers=("<minimax:tool_call>",),
    block_closers=("</minimax:tool_call>",),
    invoke_openers=("<invoke",),
    invoke_tag=re.compile(r'<invoke(?P<attrs>(?:\s+[\w-]+="[^"]*")*)\s*>'),
    invoke_closers=("</invoke>",),
    param_openers=("<parameter",),
    param_tag=re.compile(r'<parameter(?P<attrs>(?:\s+[\w-]+="[^"]*")*)\s*>'),
    param_closers=("</parameter>",),
    name_attribute="name",
    key_attribute="name",
)


@register_parser("minimax_m2")
class MiniMaxM2Parser(SectionedParser):
    name = "minimax_m2"
    grammar = GRAMMAR
    open_tag = THINK_OPEN
    close_tag = THINK_CLOSE
    interleaved_reasoning = True

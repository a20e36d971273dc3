"""Kimi K3 "XTML" tool calls: `<|open|>`/`<|close|>`/`<|sep|>` tags with typed arguments.

    <|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>SF<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>

- `type` is string, number, boolean, null, object or array: a string stays raw, the others are
  JSON text. The tool's schema, when it types the argument, has the last word.
- `index` is 1-based per message and is not an id: each call gets a generated id.
- Attribute values (the tool name, argument keys) are XML-escaped: `&amp;`, `&lt;`, `&gt;`,
  `&quot;`, `&apos;` and numeric references are unescaped. Values between tags are raw text.
- Reasoning is `<|open|>think<|sep|>…<|close|>think<|sep|>`, the opener pre-filled in the
  generation prompt. A call inside reasoning is never executed.

>>> from openreward_rl.parsers import get_parser
>>> text = ('<|open|>tools<|sep|><|open|>call tool="add" index="1"<|sep|><|open|>argument key="a" type="number"<|sep|>'
...         '1<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>')
>>> get_parser("kimi_k3").parse(text).tool_calls[0].arguments
{'a': 1}
"""

from __future__ import annotations

import re

from openreward_rl.parsers._invoke import InvokeGrammar
from openreward_rl.parsers._sections import SectionedParser
from openreward_rl.parsers.base import register_parser

__all__ = ["KimiK3Parser"]

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"
THINK_OPEN = f"{OPEN}think{SEP}"
THINK_CLOSE = f"{CLOSE}think{SEP}"
_TYPES = {"string", "number", "boolean", "null", "object", "array", "integer"}
_O, _S = re.escape(OPEN), re.escape(SEP)

GRAMMAR = InvokeGrammar(
    block_openers=(f"{OPEN}tools{SEP}",),
    block_closers=(f"{CLOSE}tools{SEP}",),
    invoke_openers=(f"{OPEN}call ",),
    invoke_tag=re.compile(rf'{_O}call(?P<attrs>(?:\s+[\w-]+="[^"]*")*)\s*{_S}'),
    invoke_closers=(f"{CLOSE}call{SEP}",),
    param_openers=(f"{OPEN}argument ",),
    param_tag=re.compile(rf'{_O}argument(?P<attrs>(?:\s+[\w-]+="[^"]*")*)\s*{_S}'),
    param_closers=(f"{CLOSE}argument{SEP}",),
    name_attribute="tool",
    key_attribute="key",
    declared_type=lambda found: found.get("type") if found.get("type") in _TYPES else None,
    section_name="tools block",
    xml_escaped_attributes=True,
)


@register_parser("kimi_k3")
class KimiK3Parser(SectionedParser):
    name = "kimi_k3"
    grammar = GRAMMAR
    open_tag = THINK_OPEN
    close_tag = THINK_CLOSE

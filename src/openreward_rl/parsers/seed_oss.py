"""ByteDance Seed-OSS tool calls: Qwen3-Coder's `<function=…>` grammar in Seed's own wrappers.

    <seed:think>…</seed:think>
    <seed:tool_call>
    <function=get_weather>
    <parameter=city>San Francisco</parameter>
    <parameter=days>3</parameter>
    </function>
    </seed:tool_call>

As the official template (ByteDance-Seed/Seed-OSS-36B-Instruct) writes a call: each value directly
between `<parameter=NAME>` and `</parameter>`, no newlines around it, so nothing is stripped; values
are raw text converted with the tool's JSON schema, as in `qwen3_coder` (the template writes a
non-string value with Jinja's `string` filter). Reasoning is `<seed:think>…</seed:think>`.

>>> turn = SeedOssParser().parse(
...     "<seed:tool_call>\\n<function=add>\\n<parameter=a>1</parameter>\\n</function>\\n</seed:tool_call>",
...     tools=[{"name": "add", "parameters": {"properties": {"a": {"type": "integer"}}}}])
>>> turn.tool_calls[0].name, turn.tool_calls[0].arguments
('add', {'a': 1})
"""

from __future__ import annotations

from openreward_rl.parsers.base import register_parser
from openreward_rl.parsers.qwen3_coder import Qwen3CoderParser

__all__ = ["SeedOssParser"]


@register_parser("seed_oss")
class SeedOssParser(Qwen3CoderParser):
    name = "seed_oss"
    tool_open, tool_close = "<seed:tool_call>", "</seed:tool_call>"
    think_open, think_close = "<seed:think>", "</seed:think>"
    strip_value_newlines = False

"""DeepSeek V4 and V4.1 tool calls: DSML (grammar in `_dsml`).

- V4: `<｜DSML｜tool_calls>` … `</｜DSML｜tool_calls>`; zero-argument tools may be self-closing
  `<｜DSML｜invoke name="x"/>`; an invoke body may be a bare JSON object.
- V4.1: a space after `｜DSML｜` in every tag (`<｜DSML｜ calls>`, `<｜DSML｜ invoke name="…">`,
  `<｜DSML｜ parameter …>`), and invokes may appear without the outer block.

Reasoning is `<think>…</think>` as the encoder writes it; a tool block that opens inside an
unclosed `<think>` ends the reasoning (the reference parsers do the same), while a block inside
a closed `<think>…</think>` is a rehearsal and is never executed.

>>> from openreward_rl.parsers import get_parser
>>> text = '<｜DSML｜ calls>\\n<｜DSML｜ invoke name="ping"/>\\n</｜DSML｜ calls>'
>>> get_parser("deepseek_v4").parse(text).tool_calls[0].name
'ping'
"""

from __future__ import annotations

from openreward_rl.parsers._dsml import dsml_grammar
from openreward_rl.parsers.base import register_parser
from openreward_rl.parsers.deepseek_v32 import DeepSeekV32Parser

__all__ = ["DeepSeekV4Parser"]


@register_parser("deepseek_v4")
class DeepSeekV4Parser(DeepSeekV32Parser):
    name = "deepseek_v4"
    grammar = dsml_grammar(("tool_calls", "calls"), bare_invokes=True)
    opener_ends_reasoning = True

"""DeepSeek V3.2 tool calls: DSML inside `<｜DSML｜function_calls>` (grammar in `_dsml`).

Reasoning is `<think>…</think>`, the opener pre-filled in the generation prompt when thinking.
A call inside reasoning is never executed.

>>> from openreward_rl.parsers import get_parser
>>> text = ('<｜DSML｜function_calls>\\n<｜DSML｜invoke name="add">\\n'
...         '<｜DSML｜parameter name="a" string="false">1</｜DSML｜parameter>\\n'
...         '</｜DSML｜invoke>\\n</｜DSML｜function_calls>')
>>> get_parser("deepseek_v32").parse(text).tool_calls[0].arguments
{'a': 1}
"""

from __future__ import annotations

from openreward_rl.parsers._dsml import dsml_grammar
from openreward_rl.parsers._sections import SectionedParser
from openreward_rl.parsers.base import register_parser

__all__ = ["DeepSeekV32Parser"]

_GRAMMAR = dsml_grammar(("function_calls",), bare_invokes=False)


@register_parser("deepseek_v32")
class DeepSeekV32Parser(SectionedParser):
    name = "deepseek_v32"
    grammar = _GRAMMAR

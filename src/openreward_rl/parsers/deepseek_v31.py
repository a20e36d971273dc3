"""DeepSeek V3.1 tool calls: like V3 without the `function` word and without the code fence.

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "SF"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Reasoning is `<think>…</think>` with the opener (thinking) or the closer (not thinking) in the
generation prompt. V3.1 calls tools only in non-thinking mode; a call inside reasoning is never executed.

>>> from openreward_rl.parsers import get_parser
>>> text = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{"a": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
>>> get_parser("deepseek_v31").parse(text, generation_prompt="<｜Assistant｜></think>").tool_calls[0].name
'add'
"""

from __future__ import annotations

from openreward_rl.parsers._sections import (
    SectionedParser,
    Sections,
    call_list_section,
    finish_json_call,
    missing_marker,
)
from openreward_rl.parsers._xmlish import TurnBuilder
from openreward_rl.parsers.base import register_parser
from openreward_rl.parsers.deepseek_v3 import CALL_BEGIN, CALL_END, SECTION_BEGIN, SECTION_END, SEP

__all__ = ["DeepSeekV31Parser"]


def _parse_call(text: str, index: int, builder: TurnBuilder) -> int:
    raw_start = index - len(CALL_BEGIN)
    limit = text.find(CALL_END, index)
    sep = text.find(SEP, index, len(text) if limit < 0 else limit)
    if sep < 0:
        return missing_marker(text, builder, raw_start=raw_start, close_at=limit, call_end=CALL_END, missing=SEP)
    name = text[index:sep].strip()
    return finish_json_call(
        text, sep + len(SEP), builder, call_end=CALL_END, name=name, call_id=None, raw_start=raw_start
    )


_parse_section = call_list_section(section_end=SECTION_END, call_begin=CALL_BEGIN, parse_call=_parse_call)


@register_parser("deepseek_v31")
class DeepSeekV31Parser(SectionedParser):
    name = "deepseek_v31"
    grammar = Sections((SECTION_BEGIN, CALL_BEGIN), (SECTION_BEGIN,), _parse_section)

"""DeepSeek V3 / V3-0324 / R1 / R1-0528 tool calls: full-width token markers around a fenced JSON body.

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "SF"}
    ```<｜tool▁call▁end｜>
    <｜tool▁call▁begin｜>function<｜tool▁sep｜>search
    ```json
    {"query": "x"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

`｜` is U+FF5C and `▁` is U+2581: ASCII look-alikes (`<|tool▁calls▁begin|>`) are plain text.
The JSON body is decoded string-aware, so markers inside argument strings do not end the call.
Reasoning is `<think>…</think>`; R1 puts the opener in the generation prompt.

>>> from openreward_rl.parsers import get_parser
>>> text = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\\n```json\\n"
...         '{"a": 1}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
>>> get_parser("deepseek_v3").parse(text).tool_calls[0].arguments
{'a': 1}
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

__all__ = ["DeepSeekV3Parser", "SECTION_BEGIN", "SECTION_END", "CALL_BEGIN", "CALL_END", "SEP"]

SECTION_BEGIN = "<｜tool▁calls▁begin｜>"
SECTION_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_FENCE_OPEN = "```json"
_FENCE_CLOSE = "```"


def _parse_call(text: str, index: int, builder: TurnBuilder) -> int:
    raw_start = index - len(CALL_BEGIN)
    limit = text.find(CALL_END, index)
    bounded = len(text) if limit < 0 else limit
    sep = text.find(SEP, index, bounded)
    fence = text.find(_FENCE_OPEN, sep, bounded) if sep >= 0 else -1
    if sep < 0 or fence < 0:
        missing = SEP if sep < 0 else "```json fence"
        return missing_marker(text, builder, raw_start=raw_start, close_at=limit, call_end=CALL_END, missing=missing)
    name = text[sep + len(SEP) : fence].strip()
    return finish_json_call(
        text,
        fence + len(_FENCE_OPEN),
        builder,
        call_end=CALL_END,
        name=name,
        call_id=None,
        raw_start=raw_start,
        fence=_FENCE_CLOSE,
    )


_parse_section = call_list_section(section_end=SECTION_END, call_begin=CALL_BEGIN, parse_call=_parse_call)


@register_parser("deepseek_v3")
class DeepSeekV3Parser(SectionedParser):
    name = "deepseek_v3"
    grammar = Sections((SECTION_BEGIN, CALL_BEGIN), (SECTION_BEGIN,), _parse_section)

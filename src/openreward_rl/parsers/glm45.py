"""GLM-4.5 / 4.6 tool calls: `<tool_call>NAME` then `<arg_key>`/`<arg_value>` pairs, one block per call.

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>SF</arg_value>
    <arg_key>days</arg_key>
    <arg_value>3</arg_value>
    </tool_call>

- Whitespace between tags is ignored (so GLM-4.7's compact form parses too); whitespace inside
  `<arg_value>` is significant and kept.
- Values are raw text: strings as written, everything else JSON. The tool's schema decides, so
  `123_456` stays a string unless the schema says integer.
- A `</arg_value>` (or `</tool_call>`) inside a value does not end it: the value ends at the last
  `</arg_value>` before the next `<arg_key>`/`<tool_call>` that is followed by `<arg_key>`,
  `</tool_call>` or the end of the text.
- GLM calls have no ids: each call gets a generated one.
- Reasoning is `<think>…</think>`, emitted by the model (4.5/4.6) or opened by the generation
  prompt (4.7, 5.x). A call inside reasoning is never executed.

>>> from openreward_rl.parsers import get_parser
>>> text = "<tool_call>add\\n<arg_key>a</arg_key>\\n<arg_value>1</arg_value>\\n</tool_call>"
>>> get_parser("glm45").parse(text).tool_calls[0].arguments
{'a': 1}
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from openreward_rl.parsers._sections import SectionedParser, Sections
from openreward_rl.parsers._xmlish import RawValue, TurnBuilder, find_value_end
from openreward_rl.parsers.base import ParseErrorKind, register_parser, tool_schema
from openreward_rl.parsers.common import forgotten_closer, repaired_closer_note, skip_spaces, value_scan_pattern

__all__ = ["Glm45Parser", "CALL_OPEN", "CALL_CLOSE"]

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"
# What can only follow a finished value: the next key/value pair, or the call's end followed by the
# next call (a valid name, then a key or its end) or by the end of the text.
_VALUE_BOUNDARY = re.compile(
    r"<arg_key>(?P<key>[^<>]*)</arg_key>\s*<arg_value>"
    r"|</tool_call>(?=\s*(?:<tool_call>[^<>\s{}]+\s*(?:<arg_key>|</tool_call>)|\Z))"
)
_VALUE_SCAN = value_scan_pattern(
    VALUE_CLOSE, (KEY_OPEN, CALL_CLOSE, CALL_OPEN)
)  # CALL_OPEN: a boundary of `find_value_end`


def _skip_call(text: str, index: int) -> int:
    close = text.find(CALL_CLOSE, index)
    return len(text) if close < 0 else close + len(CALL_CLOSE)


def _broken(text: str, start: int, index: int, builder: TurnBuilder, name: str | None, problem: str) -> int:
    if builder.truncated and CALL_CLOSE not in text[index:]:
        builder.add_unclosed(text[start:], tool_name=name)
        return len(text)
    end = _skip_call(text, index)
    builder.add_error(ParseErrorKind.MALFORMED_CALL, problem, text[start:end], tool_name=name)
    return end


def parse_glm_call(text: str, index: int, builder: TurnBuilder) -> int:
    """Parse one call whose name starts at `index` (just after `<tool_call>`); return the index after it."""
    start = index - len(CALL_OPEN)
    markers = [i for m in (KEY_OPEN, CALL_CLOSE) if (i := text.find(m, index)) >= 0]
    name_end = min(markers) if markers else len(text)
    name = text[index:name_end].strip()
    if name_end == len(text) and builder.truncated:
        builder.add_unclosed(text[start:], tool_name=name or None)
        return len(text)
    if not name or any(c.isspace() or c in "<>{}" for c in name):
        end = _skip_call(text, index)
        builder.add_error(
            ParseErrorKind.MISSING_NAME if not name else ParseErrorKind.MALFORMED_CALL,
            "the tool call has no valid function name",
            text[start:end],
        )
        return end
    arguments: dict[str, RawValue] = {}
    repaired = False

    def real_boundary(match: re.Match[str]) -> bool:
        if match.group("key") is not None:  # the next pair: a key the tool declares, not given yet
            key = match.group("key").strip()
            declared = (tool_schema(builder.tools, name) or {}).get("properties")
            return key not in arguments and (not isinstance(declared, Mapping) or key in declared)
        return not (builder.truncated and match.end() == len(text))  # a cut text may end inside a value

    index = name_end
    while True:
        index = skip_spaces(text, index)
        if text.startswith(CALL_CLOSE, index):
            end = index + len(CALL_CLOSE)
            break
        if index >= len(text):
            if builder.truncated:
                builder.add_unclosed(text[start:], tool_name=name)
                return index
            end = index  # </tool_call> was consumed as a stop string
            break
        if not text.startswith(KEY_OPEN, index):
            return _broken(text, start, index, builder, name, "unexpected text inside the tool call")
        key_end = text.find(KEY_CLOSE, index)
        if key_end < 0:
            return _broken(text, start, index, builder, name, "an <arg_key> has no closing tag")
        key = text[index + len(KEY_OPEN) : key_end].strip()
        index = skip_spaces(text, key_end + len(KEY_CLOSE))
        if not text.startswith(VALUE_OPEN, index):
            return _broken(text, start, index, builder, name, f"argument {key!r} has no <arg_value>")
        value_start = index + len(VALUE_OPEN)
        repair, closer_from, head_first = forgotten_closer(
            text, value_start, VALUE_CLOSE, _VALUE_BOUNDARY, _VALUE_SCAN, real_boundary
        )
        if repair is None and closer_from < 0:
            value_end = None
        elif repair is None:
            # When the closer came before any head, the closers and boundaries `find_value_end` looks
            # for all lie after it: searching from there gives the same end without a second pass.
            value_end = find_value_end(
                text,
                value_start if head_first else closer_from,
                VALUE_CLOSE,
                followers=(KEY_OPEN, CALL_CLOSE),
                boundaries=(KEY_OPEN, CALL_OPEN),
            )
        else:  # `</arg_value>` was forgotten: the value ends before the layout and the structure
            end_at = repair.start()
            while end_at > value_start and text[end_at - 1].isspace():
                end_at -= 1
            value_end = (end_at, 0)
            repaired = True
        if value_end is None:
            return _broken(text, start, value_start, builder, name, f"argument {key!r} has no closing </arg_value>")
        if key in arguments:
            end = _skip_call(text, value_end[0])
            builder.add_error(
                ParseErrorKind.MALFORMED_CALL, f"argument {key!r} is given twice", text[start:end], tool_name=name
            )
            return end
        arguments[key] = RawValue(text[value_start : value_end[0]])
        index = value_end[0] + value_end[1]
    call = builder.add_raw_call(name, arguments, raw=text[start:end])
    if repaired and call is not None:
        builder.errors.append(
            repaired_closer_note(VALUE_CLOSE, raw=text[start:end], tool_name=call.name, call_id=call.id)
        )
    return end


@register_parser("glm45")
class Glm45Parser(SectionedParser):
    name = "glm45"
    grammar = Sections((CALL_OPEN,), (CALL_OPEN,), parse_glm_call)

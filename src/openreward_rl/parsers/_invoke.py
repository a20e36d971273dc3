"""The invoke/parameter grammar shared by DSML (DeepSeek V3.2/V4/V4.1), MiniMax-M2 and Kimi K3.

All three write a block of invokes, each a named call holding named raw-text parameters:

    BLOCK_OPEN
      INVOKE_OPEN(name)  PARAM_OPEN(key[, type]) raw value PARAM_CLOSE ...  INVOKE_CLOSE
      ...
    BLOCK_CLOSE

An `InvokeGrammar` names each dialect's tags. Shared rules:

- whitespace between tags is ignored; whitespace inside a value is kept exactly;
- a parameter's own closer inside its value does not end it: the value ends at the last closer
  before the next parameter or invoke opener that is followed by a structural tag;
- a repeated parameter name makes the call ambiguous: it is reported (MALFORMED_CALL), not executed;
- only a call's own closer and its block's closer may be missing at the end of the text (see
  `_xmlish` for the stop/length policy).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import attrs

from openreward_rl.parsers._xmlish import RawValue, TurnBuilder, decode_json_object, find_value_end
from openreward_rl.parsers.base import ParseErrorKind
from openreward_rl.parsers.common import skip_spaces

__all__ = ["InvokeGrammar", "attributes", "unescape_xml"]

_ATTRIBUTE = re.compile(r'([\w-]+)="([^"]*)"')
_XML_ENTITY = re.compile(r"&(?:(amp|lt|gt|quot|apos)|#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6}));")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


def _entity(match: re.Match[str]) -> str:
    name, decimal, hexadecimal = match.groups()
    if name:
        return _NAMED[name]
    code = int(decimal) if decimal else int(hexadecimal, 16)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF or code == 0:
        return match.group(0)  # not a character: kept as written
    return chr(code)


def unescape_xml(text: str) -> str:
    """Replace XML's five named entities and numeric character references; anything else is kept.

    >>> unescape_xml("a&amp;b &lt;x&gt; &quot;q&quot; &#233;&#x1F680; &copy; &#0;")
    'a&b <x> "q" é🚀 &copy; &#0;'
    """
    return _XML_ENTITY.sub(_entity, text) if "&" in text else text


def attributes(text: str, *, xml_escaped: bool = False) -> dict[str, str]:
    """`key="value"` pairs of a tag, in order; `xml_escaped` values have their XML entities unescaped.

    >>> attributes(' name="city" string="true"')
    {'name': 'city', 'string': 'true'}
    >>> attributes(' key="a&amp;b &quot;c&quot;"', xml_escaped=True)
    {'key': 'a&b "c"'}
    """
    if xml_escaped:
        return {key: unescape_xml(value) for key, value in _ATTRIBUTE.findall(text)}
    return {key: value for key, value in _ATTRIBUTE.findall(text)}


@attrs.frozen
class InvokeGrammar:
    """One dialect's tags. `invoke_tag`/`param_tag` must define the groups `attrs` (and `self_closing`)."""

    block_openers: tuple[str, ...]
    block_closers: tuple[str, ...]
    invoke_openers: tuple[str, ...]  # prefixes that start an invoke tag
    invoke_tag: re.Pattern[str]
    invoke_closers: tuple[str, ...]
    param_openers: tuple[str, ...]  # prefixes that start a parameter tag
    param_tag: re.Pattern[str]
    param_closers: tuple[str, ...]
    name_attribute: str
    key_attribute: str
    declared_type: Callable[[dict[str, str]], str | None] = lambda _attrs: None
    json_bodies: bool = False  # an invoke body may be a bare JSON object of arguments
    bare_invokes: bool = False  # invokes outside a block are calls too
    xml_escaped_attributes: bool = False  # attribute values (names, keys) are XML-escaped (Kimi K3)
    section_name: str = "tool-call block"

    @property
    def section_openers(self) -> tuple[str, ...]:
        return self.block_openers + (self.invoke_openers if self.bare_invokes else ())

    @property
    def call_openers(self) -> tuple[str, ...]:
        return self.block_openers + self.invoke_openers

    def parse_section(self, text: str, index: int, builder: TurnBuilder) -> int:
        """Called just after a section opener (see `_sections.scan_sections`)."""
        if self.bare_invokes:
            for opener in self.invoke_openers:
                if text.startswith(opener, index - len(opener)):
                    return self.parse_invoke(text, index - len(opener), builder)
        return self._parse_block(text, index, builder)

    def _parse_block(self, text: str, index: int, builder: TurnBuilder) -> int:
        block_start = index
        invokes = 0
        while True:
            index = skip_spaces(text, index)
            closer = _starting(text, index, self.block_closers)
            if closer:
                return index + len(closer)
            if index >= len(text):
                if invokes == 0:
                    if builder.truncated:
                        builder.add_unclosed(text[block_start:], self.section_name)
                    else:
                        builder.add_error(
                            ParseErrorKind.MALFORMED_CALL, f"the {self.section_name} holds no call", text[block_start:]
                        )
                return index  # a missing block closer after complete invokes is accepted
            invokes += 1
            if _starting(text, index, self.invoke_openers):
                index = self.parse_invoke(text, index, builder)
                continue
            stop = _first(text, index, self.invoke_openers + self.block_closers)
            builder.add_error(
                ParseErrorKind.MALFORMED_CALL, f"unexpected text inside the {self.section_name}", text[index:stop]
            )
            index = stop

    def _after_invoke(self, text: str, index: int) -> int:
        found = [(i, len(c)) for c in self.invoke_closers if (i := text.find(c, index)) >= 0]
        if not found:
            return len(text)
        i, length = min(found)
        return i + length

    def parse_invoke(self, text: str, start: int, builder: TurnBuilder) -> int:
        """Parse one invoke starting at `start` (at its opener); return the index after it."""
        tag = self.invoke_tag.match(text, start)
        if tag is None:
            return self._broken(text, start, start, builder, None, "the call's opening tag is malformed")
        name = attributes(tag.group("attrs"), xml_escaped=self.xml_escaped_attributes).get(self.name_attribute)
        if name is None:
            end = self._after_invoke(text, tag.end())
            builder.add_error(
                ParseErrorKind.MISSING_NAME, f"the call has no {self.name_attribute}= attribute", text[start:end]
            )
            return end
        if "self_closing" in tag.groupdict() and tag.group("self_closing"):
            builder.add_call(name, {}, raw=text[start : tag.end()])
            return tag.end()
        index = skip_spaces(text, tag.end())
        if self.json_bodies and text.startswith("{", index):
            return self._finish_json_invoke(text, start, index, name, builder)
        arguments: dict[str, RawValue] = {}
        while True:
            index = skip_spaces(text, index)
            closer = _starting(text, index, self.invoke_closers)
            if closer:
                end = index + len(closer)
                break
            if index >= len(text):
                if builder.truncated:
                    builder.add_unclosed(text[start:], tool_name=name)
                    return index
                end = index  # the call's closer was consumed as a stop string
                break
            parameter = self.param_tag.match(text, index)
            if parameter is None:
                return self._broken(text, start, index, builder, name, "unexpected text inside the call")
            value_end = find_value_end(
                text,
                parameter.end(),
                self.param_closers,
                followers=self.param_openers + self.invoke_closers,
                boundaries=self.param_openers + self.invoke_openers,
            )
            if value_end is None:
                if builder.truncated:
                    builder.add_unclosed(text[start:], tool_name=name)
                else:
                    builder.add_error(
                        ParseErrorKind.MALFORMED_CALL,
                        "a parameter value has no closing tag",
                        text[start:],
                        tool_name=name,
                    )
                return len(text)
            found = attributes(parameter.group("attrs"), xml_escaped=self.xml_escaped_attributes)
            key = found.get(self.key_attribute)
            if key is None or key in arguments:
                end = self._after_invoke(text, index)
                problem = (
                    f"parameter {key!r} is given twice"
                    if key is not None
                    else f"a parameter has no {self.key_attribute}="
                )
                builder.add_error(ParseErrorKind.MALFORMED_CALL, problem, text[start:end], tool_name=name)
                return end
            arguments[key] = RawValue(text[parameter.end() : value_end[0]], self.declared_type(found))
            index = value_end[0] + value_end[1]
        builder.add_raw_call(name, arguments, raw=text[start:end])
        return end

    def _broken(self, text: str, start: int, index: int, builder: TurnBuilder, name: str | None, problem: str) -> int:
        """Report a structurally broken call; a tag cut off by the length limit is UNCLOSED_BLOCK."""
        if builder.truncated and not any(c in text[index:] for c in self.invoke_closers):
            builder.add_unclosed(text[start:], tool_name=name)
            return len(text)
        end = self._after_invoke(text, index)
        builder.add_error(ParseErrorKind.MALFORMED_CALL, problem, text[start:end], tool_name=name)
        return end

    def _finish_json_invoke(self, text: str, start: int, json_start: int, name: str, builder: TurnBuilder) -> int:
        decoded = decode_json_object(text, json_start)
        if decoded is None:
            closed = any(c in text[json_start:] for c in self.invoke_closers)
            end = self._after_invoke(text, json_start)
            if not closed and builder.truncated:
                builder.add_unclosed(text[start:], tool_name=name)
            else:
                builder.add_error(
                    ParseErrorKind.INVALID_JSON,
                    "the call's JSON body is not valid JSON",
                    text[start:end],
                    tool_name=name,
                )
            return end
        arguments, after = decoded
        index = skip_spaces(text, after)
        closer = _starting(text, index, self.invoke_closers)
        if closer:
            end = index + len(closer)
        elif index >= len(text) and not builder.truncated:
            end = index
        elif index >= len(text):
            builder.add_unclosed(text[start:], tool_name=name)
            return index
        else:
            end = self._after_invoke(text, index)
            builder.add_error(
                ParseErrorKind.MALFORMED_CALL,
                "unexpected text after the call's JSON body",
                text[start:end],
                tool_name=name,
            )
            return end
        builder.add_call(name, arguments, raw=text[start:end])
        return end


def _starting(text: str, index: int, markers: Sequence[str]) -> str | None:
    return next((m for m in markers if text.startswith(m, index)), None)


def _first(text: str, index: int, markers: Sequence[str]) -> int:
    found = [i for m in markers if (i := text.find(m, index)) >= 0]
    return min(found) if found else len(text)

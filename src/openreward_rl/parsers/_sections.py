"""The turn and section loop shared by the marker formats, and the JSON-bodied call used by DeepSeek V3/V3.1 and Kimi K2.

A turn's text (after reasoning) is content with tool-call sections in it:

    content  SECTION_BEGIN  call call ...  SECTION_END  content ...

`scan_sections` walks the text, hands every section to a format's section parser and keeps the
text between sections as content, in order. Formats without an outer section (GLM) treat each
call as its own section. `parse_sectioned_turn` is a whole turn: reasoning split, then sections;
each marker format's `parse` calls it with its markers and its section parser.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, ClassVar, Protocol

import attrs

from openreward_rl.parsers._xmlish import TurnBuilder, decode_json_object, split_turn_reasoning
from openreward_rl.parsers.base import ParsedTurn, ParseErrorKind
from openreward_rl.parsers.common import NOT_A_BLOCK, calls_in_reasoning, scan_blocks, skip_spaces

__all__ = [
    "SectionParser",
    "Sections",
    "SectionGrammar",
    "SectionedParser",
    "parse_sectioned_turn",
    "scan_sections",
    "finish_json_call",
    "parse_call_list",
    "call_list_section",
    "missing_marker",
]

SectionParser = Callable[[str, int, TurnBuilder], int]
"""(text, index just after the section opener, builder) -> index where scanning resumes."""

CallParser = Callable[[str, int, TurnBuilder], int]
"""(text, index just after the call opener, builder) -> index after the call (its closer included)."""


class SectionGrammar(Protocol):
    """Where a marker format's calls start and how one section is read (`Sections`, `InvokeGrammar`)."""

    @property
    def call_openers(self) -> tuple[str, ...]: ...  # markers that start a call, for the reasoning split
    @property
    def section_openers(self) -> tuple[str, ...]: ...  # markers that start a section of the answer

    def parse_section(self, text: str, index: int, builder: TurnBuilder) -> int: ...


@attrs.frozen
class Sections:
    """A `SectionGrammar` from its markers and section parser."""

    call_openers: tuple[str, ...]
    section_openers: tuple[str, ...]
    section_parser: SectionParser

    def parse_section(self, text: str, index: int, builder: TurnBuilder) -> int:
        return self.section_parser(text, index, builder)


class SectionedParser:
    """A marker format's parser: a subclass names its `grammar` (and reasoning tags/policy); `parse` is shared."""

    name: ClassVar[str]
    grammar: ClassVar[SectionGrammar]
    open_tag: ClassVar[str] = "<think>"
    close_tag: ClassVar[str] = "</think>"
    opener_ends_reasoning: ClassVar[bool] = False
    interleaved_reasoning: ClassVar[bool] = False

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn:
        grammar = self.grammar
        return parse_sectioned_turn(
            text,
            tools=tools,
            generation_prompt=generation_prompt,
            finish_reason=finish_reason,
            call_openers=grammar.call_openers,
            section_openers=grammar.section_openers,
            parse_section=grammar.parse_section,
            open_tag=self.open_tag,
            close_tag=self.close_tag,
            opener_ends_reasoning=self.opener_ends_reasoning,
            interleaved_reasoning=self.interleaved_reasoning,
        )


def scan_sections(text: str, openers: tuple[str, ...], parse_section: SectionParser, builder: TurnBuilder) -> None:
    """Keep the text outside sections as content; parse each section that starts with one of `openers`."""
    for piece in scan_blocks(text, openers, lambda start, opener: parse_section(text, start + len(opener), builder)):
        builder.add_content(piece)


def parse_sectioned_turn(
    text: str,
    *,
    tools: Sequence[Mapping[str, Any]] | None,
    generation_prompt: str,
    finish_reason: str | None,
    call_openers: Sequence[str],
    section_openers: tuple[str, ...],
    parse_section: SectionParser,
    open_tag: str = "<think>",
    close_tag: str = "</think>",
    opener_ends_reasoning: bool = False,
    interleaved_reasoning: bool = False,
) -> ParsedTurn:
    """Parse one turn of a marker format: the reasoning split (see `split_turn_reasoning` for the
    calls-inside-reasoning policy and `opener_ends_reasoning`), then the sections of the rest.

    With `interleaved_reasoning` (MiniMax-M2), closed reasoning blocks later in the turn are
    reasoning too: all blocks are returned joined by a blank line, in order, and calls inside any
    of them are reported CALL_IN_REASONING, never executed.
    """
    builder = TurnBuilder(tools=tools, finish_reason=finish_reason)
    split = split_turn_reasoning(
        text,
        generation_prompt=generation_prompt,
        call_openers=call_openers,
        errors=builder.errors,
        open_tag=open_tag,
        close_tag=close_tag,
        opener_ends_reasoning=opener_ends_reasoning,
    )
    reasoning, rest = split.reasoning, split.rest
    if not interleaved_reasoning:
        scan_sections(rest, section_openers, parse_section, builder)
        return builder.build(reasoning)
    # Later closed reasoning blocks are found by the same scan as the sections, so a reasoning tag
    # quoted inside a call's arguments is text, never a block.
    later: list[str] = []

    def parse_block(start: int, opener: str) -> int:
        if opener != open_tag:
            return parse_section(rest, start + len(opener), builder)
        closed = rest.find(close_tag, start)
        if closed < 0:
            return NOT_A_BLOCK  # an unclosed later opener is text
        block = rest[start + len(open_tag) : closed]
        builder.errors.extend(calls_in_reasoning(block, call_openers))
        later.append(block.strip())
        return closed + len(close_tag)

    for piece in scan_blocks(rest, (*section_openers, open_tag), parse_block):
        builder.add_content(piece)
    pieces = [p for p in (reasoning, *later) if p]
    return builder.build("\n\n".join(pieces) if pieces else reasoning)


def parse_call_list(
    text: str,
    index: int,
    builder: TurnBuilder,
    *,
    section_name: str,
    section_end: str | tuple[str, ...],
    call_begin: str,
    parse_call: CallParser,
) -> int:
    """Parse `call call ... SECTION_END` (whitespace allowed between); return the index after the section.

    `section_end` may list several spellings; any of them ends the section where a call could start
    (never inside a call's arguments, where a quoted one is text)."""
    ends = (section_end,) if isinstance(section_end, str) else section_end
    section_start = index
    calls_seen = 0
    while True:
        index = skip_spaces(text, index)
        for end in ends:
            if text.startswith(end, index):
                return index + len(end)
        if index >= len(text):
            if calls_seen == 0:
                if builder.truncated:
                    builder.add_unclosed(text[section_start:], section_name)
                else:
                    builder.add_error(
                        ParseErrorKind.MALFORMED_CALL, f"the {section_name} holds no tool call", text[section_start:]
                    )
            return index  # a missing section closer after complete calls is accepted
        if text.startswith(call_begin, index):
            index = parse_call(text, index + len(call_begin), builder)
            calls_seen += 1
            continue
        # Text inside the section that is not a call: report it and resynchronise on the next marker.
        stops = [i for i in (text.find(call_begin, index), *(text.find(e, index) for e in ends)) if i >= 0]
        stop = min(stops) if stops else len(text)
        builder.add_error(ParseErrorKind.MALFORMED_CALL, f"unexpected text inside the {section_name}", text[index:stop])
        calls_seen += 1  # the section was not empty; do not report it again as such
        index = stop


def call_list_section(
    *,
    section_end: str | tuple[str, ...],
    call_begin: str,
    parse_call: CallParser,
    section_name: str = "tool-call section",
) -> SectionParser:
    """The section parser of a format whose sections are `call call ... SECTION_END` (see `parse_call_list`)."""
    return partial(
        parse_call_list,
        section_name=section_name,
        section_end=section_end,
        call_begin=call_begin,
        parse_call=parse_call,
    )


def missing_marker(
    text: str, builder: TurnBuilder, *, raw_start: int, close_at: int, call_end: str, missing: str
) -> int:
    """Report a call that lacks its `missing` marker; return the index where scanning resumes.

    `close_at` is where the call's `call_end` closer is (-1: none). A call cut off before any
    closer is UNCLOSED_BLOCK; otherwise the call, up to its closer, is MALFORMED_CALL.
    """
    if close_at < 0 and builder.truncated:
        builder.add_unclosed(text[raw_start:])
        return len(text)
    end = len(text) if close_at < 0 else close_at + len(call_end)
    builder.add_error(ParseErrorKind.MALFORMED_CALL, f"the tool call has no {missing}", text[raw_start:end])
    return end


def finish_json_call(
    text: str,
    json_start: int,
    builder: TurnBuilder,
    *,
    call_end: str,
    name: str | None,
    call_id: str | None,
    raw_start: int,
    fence: str = "",
) -> int:
    """Decode a call's JSON arguments at `json_start`, expect `[fence] call_end`, keep or report the call."""
    decoded = decode_json_object(text, json_start)
    if decoded is None:
        close = text.find(call_end, json_start)
        if close < 0:
            raw = text[raw_start:]
            if builder.truncated:
                builder.add_unclosed(raw, tool_name=name)
            else:
                builder.add_error(
                    ParseErrorKind.INVALID_JSON,
                    "the tool call's arguments are not valid JSON",
                    raw,
                    tool_name=name,
                    call_id=call_id,
                )
            return len(text)
        raw = text[raw_start : close + len(call_end)]
        builder.add_error(
            ParseErrorKind.INVALID_JSON,
            "the tool call's arguments are not valid JSON",
            raw,
            tool_name=name,
            call_id=call_id,
        )
        return close + len(call_end)
    arguments, after = decoded
    index = skip_spaces(text, after)
    if fence and text.startswith(fence, index):
        index = skip_spaces(text, index + len(fence))
    if text.startswith(call_end, index):
        end = index + len(call_end)
    elif index >= len(text) and not builder.truncated:
        end = index  # the closer was consumed as the stop string
    elif index >= len(text):
        builder.add_unclosed(text[raw_start:], tool_name=name)
        return index
    else:
        close = text.find(call_end, index)
        end = len(text) if close < 0 else close + len(call_end)
        builder.add_error(
            ParseErrorKind.MALFORMED_CALL,
            "unexpected text after the tool call's arguments",
            text[raw_start:end],
            tool_name=name,
            call_id=call_id,
        )
        return end
    if isinstance(arguments, str):  # arguments written as a JSON string: decode exactly once
        inner = decode_json_object(arguments, 0)
        if inner is not None and isinstance(inner[0], dict) and skip_spaces(arguments, inner[1]) == len(arguments):
            arguments = inner[0]
    builder.add_call(name, arguments, raw=text[raw_start:end], call_id=call_id)
    return end

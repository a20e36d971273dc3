"""gpt-oss (OpenAI Harmony) messages: channels, recipients and tool calls.

The completion after the prompt `<|start|>assistant` is one or more messages:

    <|channel|>analysis<|message|>Need weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"SF"}
    <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"SF"}

- `analysis` messages are reasoning; `final` messages and `commentary` messages without a recipient
  (user-visible preambles) are content, in order, one message per line.
- A message whose header names a recipient (in the role part or after the channel) is a tool call;
  `functions.NAME` calls tool NAME, any other recipient (`browser.search`, `python`) is used as the
  tool name as written. The content type may be `<|constrain|>json`, ` json`, or absent.
- Policy for calls on the analysis channel: they are executed. In Harmony the recipient is part of
  the message header (special tokens), so a header with `to=functions.X` is an addressed call, not
  reasoning prose; about half of real gpt-oss calls use the analysis channel. Text that merely
  mentions `to=functions.` inside an analysis body is reasoning and is reported CALL_IN_REASONING.
- `<|call|>` is a stop token and is normally stripped, so a call that reaches the end of the text is
  complete when the turn stopped, and UNCLOSED_BLOCK (not executed) when the length limit cut it.
- Text outside any message (no Harmony markers) is content. Call ids are generated (Harmony has none).

>>> turn = GptOssParser().parse('<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant'
...     '<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 1}')
>>> turn.reasoning, turn.tool_calls[0].name, turn.tool_calls[0].arguments
('Need it.', 'add', {'a': 1})
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.parsers.base import ParsedTurn, ParseError, ParseErrorKind, ToolCall, register_parser
from openreward_rl.parsers.common import (
    JsonValueError,
    add_result,
    call_in_reasoning_error,
    decode_json_prefix,
    is_cut_off,
    loads_json_strict,
    skip_spaces,
    unclosed_error,
    validate_call,
)

__all__ = ["GptOssParser"]

START = "<|start|>"
MESSAGE = "<|message|>"
CHANNEL = "<|channel|>"
_TERMINATORS = ("<|end|>", "<|call|>", "<|return|>")
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL_NAME = re.compile(re.escape(CHANNEL) + r"\s*([A-Za-z_]*)")
_HEADER_START = re.compile(r"\s*(assistant\s*$|(assistant)?\s*to=)")
_HEADER_ENDS = (START, MESSAGE, *_TERMINATORS)


def _next_marker(text: str, markers: Sequence[str], start: int) -> tuple[int, str]:
    best, which = -1, ""
    for marker in markers:
        found = text.find(marker, start)
        if found >= 0 and (best < 0 or found < best):
            best, which = found, marker
    return best, which


def _json_body(text: str, start: int) -> tuple[Any, int] | None:
    """A call body's JSON value and where it ends, read string-aware; None when it is not JSON."""
    index = skip_spaces(text, start)
    if index >= len(text) or text[index] not in "{[":
        return None
    try:
        return decode_json_prefix(text, index)
    except JsonValueError:
        return None


def _open_header(generation_prompt: str) -> str:
    """The header text the prompt already opened (after its last `<|start|>assistant`), if any."""
    start = generation_prompt.rfind(START)
    if start < 0:
        return ""
    tail = generation_prompt[start + len(START) :]
    if any(marker in tail for marker in (MESSAGE, *_TERMINATORS)):
        return ""
    return tail


@register_parser("gpt_oss")
class GptOssParser:
    name = "gpt_oss"

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn:
        opened = _open_header(generation_prompt)
        full = (opened if opened.strip() not in ("", "assistant") else "") + text
        content: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        position = 0
        while position < len(full):
            if full.startswith(START, position):
                position += len(START)
            message_at, marker = _next_marker(full, _HEADER_ENDS, position)
            if marker != MESSAGE:  # text that is not a message header
                stop = len(full) if message_at < 0 else message_at
                self._stray(full[position:stop], finish_reason, content, errors)
                position = stop + (len(marker) if marker in _TERMINATORS else 0)
                if position == stop and not full.startswith(START, position):
                    break  # defensive: never loop without progress
                continue
            header = full[position:message_at]
            body_start = message_at + len(MESSAGE)
            # A call's JSON body is read string-aware: Harmony markers quoted in an argument are text.
            decoded = _json_body(full, body_start) if _RECIPIENT.search(header) else None
            json_end = decoded[1] if decoded else body_start
            end, terminator = _next_marker(full, (*_TERMINATORS, START), json_end)
            body = full[body_start : len(full) if end < 0 else end]
            if decoded and full[json_end : len(full) if end < 0 else end].strip():
                decoded = None  # text after the JSON: the whole body is decoded (and rejected) below
            position = len(full) if end < 0 else end + (len(terminator) if terminator in _TERMINATORS else 0)
            self._message(header, body, end < 0, finish_reason, tools, content, reasoning, calls, errors, decoded)
        joined_reasoning = "\n".join(reasoning) if reasoning else None
        if joined_reasoning and "to=functions." in joined_reasoning:
            errors.append(call_in_reasoning_error(joined_reasoning))
        visible = "\n".join(part.strip() for part in content if part.strip())  # one line per message
        return ParsedTurn(content=visible, reasoning=joined_reasoning, tool_calls=tuple(calls), errors=tuple(errors))

    @staticmethod
    def _stray(segment: str, finish_reason: str | None, content: list[str], errors: list[ParseError]) -> None:
        """Text outside a message body: plain text, or a header the turn ended in."""
        if CHANNEL in segment or _HEADER_START.match(segment):
            recipient = _RECIPIENT.search(segment)
            if recipient and is_cut_off(finish_reason):
                errors.append(unclosed_error(segment, tool_name=recipient.group(1)))
            elif recipient:
                errors.append(
                    ParseError(ParseErrorKind.MALFORMED_CALL, "a tool call header without a message", raw=segment)
                )
            return  # an empty or cut-off header carries no text
        content.append(segment)

    @staticmethod
    def _message(
        header: str,
        body: str,
        unterminated: bool,
        finish_reason: str | None,
        tools: Sequence[Mapping[str, Any]] | None,
        content: list[str],
        reasoning: list[str],
        calls: list[ToolCall],
        errors: list[ParseError],
        decoded: tuple[Any, int] | None = None,
    ) -> None:
        channel_match = _CHANNEL_NAME.search(header)
        channel = channel_match.group(1) if channel_match else ""
        recipient_match = _RECIPIENT.search(header)
        if recipient_match is None or recipient_match.group(1) == "assistant":
            if channel == "analysis":
                reasoning.append(body.strip())
            else:  # final, a commentary preamble, or an unnamed channel: user-visible text
                content.append(body)
            return
        recipient = recipient_match.group(1)
        name = recipient[len("functions.") :] if recipient.startswith("functions.") else recipient
        raw = header + MESSAGE + body
        if unterminated and is_cut_off(finish_reason):
            errors.append(unclosed_error(raw, tool_name=name))
            return
        try:
            arguments = decoded[0] if decoded else loads_json_strict(body) if body.strip() else {}
        except JsonValueError as error:
            errors.append(
                ParseError(ParseErrorKind.INVALID_JSON, f"arguments of {name!r}: {error}", raw=raw, tool_name=name)
            )
            return
        add_result(validate_call(name, arguments, tools=tools, raw=raw), calls, errors)

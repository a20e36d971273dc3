"""Building blocks shared by the format parsers: reasoning split, call ids, call validation."""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.parsers.base import ParseError, ParseErrorKind, ToolCall, tool_names

__all__ = [
    "ReasoningSplit",
    "split_reasoning",
    "new_call_id",
    "validate_call",
    "JsonValueError",
    "decode_json_prefix",
    "loads_json_strict",
    "skip_spaces",
    "is_cut_off",
    "unclosed_error",
    "TaggedJson",
    "decode_tagged_json",
    "call_in_reasoning_error",
    "calls_in_reasoning",
    "scan_blocks",
    "NOT_A_BLOCK",
    "join_content",
    "add_result",
    "find_structural_closer",
    "find_unquoted",
    "forgotten_closer",
    "ValueScan",
    "value_scan_pattern",
    "repaired_closer_note",
    "split_turn_reasoning",
]


@attrs.frozen
class ReasoningSplit:
    reasoning: str | None  # None: the turn had no reasoning block
    rest: str  # the text after the reasoning block (content and calls)
    complete: bool  # False: the reasoning block was never closed


def _opens_inside(generation_prompt: str, open_tag: str, close_tag: str) -> bool:
    opened = generation_prompt.rfind(open_tag)
    return opened >= 0 and generation_prompt.rfind(close_tag) < opened


def _first_of(text: str, markers: Sequence[str], start: int = 0) -> int:
    found = [i for m in markers if (i := text.find(m, start)) >= 0]
    return min(found) if found else -1


def split_reasoning(
    text: str,
    *,
    generation_prompt: str = "",
    open_tag: str = "<think>",
    close_tag: str = "</think>",
    call_openers: Sequence[str] = (),
) -> ReasoningSplit:
    """Split `<think>…</think>`-style reasoning from the rest of a completion.

    The opener may sit in the generation prompt (Qwen3.5, DeepSeek-R1, GLM-4.7): then the completion
    starts inside reasoning, and a completion without the closer is all reasoning.

    A closer with no opener before it also means the opener was pre-filled by a prompt we were not
    shown, unless a call opener (`call_openers`) comes before it: then the closer is quoted inside a
    call's argument (`print('</think>')`) and is content, not structure. A prompt that itself ends
    with the closer (DeepSeek V3.1 `</think>`, GLM `<think></think>`) has no reasoning to split.

    >>> split_reasoning("<think>\\nhmm\\n</think>\\n\\nHello")
    ReasoningSplit(reasoning='hmm', rest='Hello', complete=True)
    >>> split_reasoning("still thinking", generation_prompt="<|im_start|>assistant\\n<think>\\n")
    ReasoningSplit(reasoning='still thinking', rest='', complete=False)
    >>> split_reasoning('<tool_call>{"a": "</think>"}</tool_call>', call_openers=["<tool_call>"]).reasoning is None
    True
    """
    body = text
    if _opens_inside(generation_prompt, open_tag, close_tag):
        inside = True
    else:
        stripped = text.lstrip()
        inside = stripped.startswith(open_tag)
        if inside:
            body = stripped[len(open_tag) :]
        elif (closed_at := text.find(close_tag)) >= 0 and not generation_prompt.rstrip().endswith(close_tag):
            # Unless an opener or a call comes first: then the closer is quoted in a call or in content.
            inside = _first_of(text[:closed_at], (open_tag, *call_openers)) < 0
    if not inside:
        return ReasoningSplit(reasoning=None, rest=text.strip(), complete=True)
    end = body.find(close_tag)
    if end < 0:
        return ReasoningSplit(reasoning=body.strip(), rest="", complete=False)
    return ReasoningSplit(reasoning=body[:end].strip(), rest=body[end + len(close_tag) :].strip(), complete=True)


def split_turn_reasoning(
    text: str,
    *,
    generation_prompt: str,
    call_openers: Sequence[str],
    errors: list[ParseError],
    open_tag: str = "<think>",
    close_tag: str = "</think>",
    opener_ends_reasoning: bool = False,
    call_start: re.Pattern[str] | None = None,
    call_closers: Sequence[str] = (),
) -> ReasoningSplit:
    """Split reasoning from the rest, applying the calls-inside-reasoning policy.

    A call opener inside a closed reasoning block is a rehearsal: it is reported as
    CALL_IN_REASONING and never executed. In a block that is never closed, when
    `opener_ends_reasoning` (the policy of vLLM's Qwen3 and Kimi K2 reasoning parsers and of
    llama.cpp), the first call start ends the reasoning and the calls after it are parsed;
    otherwise the calls are reported as CALL_IN_REASONING too. `call_start` is what counts as a
    call start (default: any of `call_openers`); Qwen XML asks for `<tool_call>` followed by
    `<function=`, so that a bare mention of `<tool_call>` in the reasoning does not end it.
    """
    split = split_reasoning(
        text, generation_prompt=generation_prompt, open_tag=open_tag, close_tag=close_tag, call_openers=call_openers
    )
    if split.reasoning is None:
        return split
    if split.complete and opener_ends_reasoning and call_start is not None and call_closers:
        # A call started before the closer and did not end before it: the closer is quoted in that
        # call's arguments, so the block was never closed and the call ends it.
        closed_at = text.find(close_tag)
        match = call_start.search(text, 0, closed_at)
        if match and _first_of(text[match.start() : closed_at], call_closers) < 0:
            reasoning = text[: match.start()].strip()
            reasoning = reasoning[len(open_tag) :].strip() if reasoning.startswith(open_tag) else reasoning
            return ReasoningSplit(reasoning=reasoning, rest=text[match.start() :].strip(), complete=True)
    if not split.complete and opener_ends_reasoning:
        if call_start is not None:
            match = call_start.search(split.reasoning)
            first = match.start() if match else -1
        else:
            first = _first_of(split.reasoning, call_openers)
        if first >= 0:
            return ReasoningSplit(
                reasoning=split.reasoning[:first].strip(), rest=split.reasoning[first:], complete=True
            )
    errors.extend(calls_in_reasoning(split.reasoning, call_openers))
    return split


def new_call_id() -> str:
    """A 9-character alphanumeric id: valid for every chat template, Mistral's included."""
    return uuid.uuid4().hex[:9]


def validate_call(
    name: Any,
    arguments: Any,
    *,
    tools: Sequence[Mapping[str, Any]] | None,
    raw: str,
    call_id: str | None = None,
) -> ToolCall | ParseError:
    """Turn a decoded (name, arguments) pair into a `ToolCall`, or say why it is not one."""
    if not isinstance(name, str) or not name.strip():
        return ParseError(ParseErrorKind.MISSING_NAME, "the tool call has no function name", raw=raw, call_id=call_id)
    name = name.strip()
    if not isinstance(arguments, dict):
        return ParseError(
            ParseErrorKind.INVALID_ARGUMENTS,
            f"arguments of {name!r} must be a JSON object, got {type(arguments).__name__}",
            raw=raw,
            tool_name=name,
            call_id=call_id,
        )
    known = tool_names(tools)
    if known is not None and name not in known:
        offered = ", ".join(sorted(known)) or "none"
        return ParseError(
            ParseErrorKind.UNKNOWN_TOOL,
            f"unknown tool {name!r}; available tools: {offered}",
            raw=raw,
            tool_name=name,
            call_id=call_id,
        )
    return ToolCall(name=name, arguments=arguments, id=call_id or new_call_id())


# --- Additions shared by the group A parsers (JSON decoding, truncation policy, standard errors) ---


class JsonValueError(ValueError):
    """Model JSON that is not acceptable: malformed, too deeply nested, or with a non-finite number."""


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise JsonValueError(f"non-finite number {text[:40]!r}")
    return value


def _no_constant(name: str) -> Any:
    raise JsonValueError(f"non-finite number {name!r}")


_STRICT_DECODER = json.JSONDecoder(parse_float=_finite_float, parse_constant=_no_constant)


def decode_json_prefix(text: str, start: int = 0) -> tuple[Any, int]:
    """Decode the JSON value that starts at `text[start]` (string-aware); return it and where it ends.

    NaN, Infinity and numbers that overflow to infinity (`1e999`) are rejected: arguments must
    survive a round trip through strict JSON. Raises `JsonValueError`, never anything else.

    >>> decode_json_prefix('{"code": "print(\\'</tool_call>\\')"}</tool_call>')
    ({'code': "print('</tool_call>')"}, 33)
    >>> try:
    ...     decode_json_prefix('{"x": 1e999}')
    ... except JsonValueError as error:
    ...     print(error)
    non-finite number '1e999'
    """
    try:
        return _STRICT_DECODER.raw_decode(text, start)
    except JsonValueError:
        raise
    except json.JSONDecodeError as error:
        raise JsonValueError(f"{error.msg} at offset {error.pos - start}") from None
    except (ValueError, RecursionError) as error:  # RecursionError: absurdly deep nesting
        raise JsonValueError(f"cannot decode JSON: {type(error).__name__}") from None


def loads_json_strict(text: str) -> Any:
    """`json.loads` with the rules of `decode_json_prefix` and no trailing text allowed (whitespace aside)."""
    stripped = text.strip()
    value, end = decode_json_prefix(stripped, 0)
    if end != len(stripped):
        raise JsonValueError(f"unexpected text after the JSON value at offset {end}")
    return value


_SPACES = re.compile(r"\s*")


def skip_spaces(text: str, index: int) -> int:
    """The first index at or after `index` that is not whitespace.

    >>> skip_spaces("a \\n\\tb", 1), skip_spaces("ab", 1), skip_spaces("a  ", 1)
    (4, 1, 3)
    """
    if index >= len(text) or not text[index].isspace():
        return index
    index += 1  # one separator (a newline between tags) is the common case: no regex for it
    if index >= len(text) or not text[index].isspace():
        return index
    return _SPACES.match(text, index).end()  # type: ignore[union-attr]  # always matches


def is_cut_off(finish_reason: str | None) -> bool:
    """Whether the turn ended before the model finished (length limit or abort).

    A block whose closing marker is missing is accepted when the turn ended on a stop (the stop
    string swallowed the closer) and reported `UNCLOSED_BLOCK`, never executed, when it was cut off.
    """
    return finish_reason in ("length", "abort")


def unclosed_error(raw: str, *, tool_name: str | None = None, what: str = "tool call") -> ParseError:
    """The error for a block that the length limit (or an abort) cut off before its closer."""
    return ParseError(
        ParseErrorKind.UNCLOSED_BLOCK,
        f"the {what} was cut off before its closing marker and is not executed",
        raw=raw,
        tool_name=tool_name,
    )


@attrs.frozen
class TaggedJson:
    """A JSON value read between an opener and an optional closer: the value, the block's text, where it ends."""

    value: Any
    raw: str
    end: int


def decode_tagged_json(
    body: str, start: int, opener: str, closer: str, finish_reason: str | None, errors: list[ParseError], what: str
) -> TaggedJson | int:
    """The JSON value after `opener` (at `start`), then `closer` where it follows: a `TaggedJson`; or, once the
    reason it cannot be read is in `errors` (cut off before its closer, or not JSON), the index to scan on from.

    >>> errors = []
    >>> decode_tagged_json('<a>[{"x": 1}]</a> rest', 0, "<a>", "</a>", "stop", errors, "call list")
    TaggedJson(value=[{'x': 1}], raw='<a>[{"x": 1}]</a>', end=17)
    >>> decode_tagged_json("<a>[oops]</a>", 0, "<a>", "</a>", "stop", errors, "call list"), errors[0].message
    (13, 'the call list is not JSON: Expecting value at offset 1')
    """
    cursor = skip_spaces(body, start + len(opener))
    if cursor >= len(body) and is_cut_off(finish_reason):
        errors.append(unclosed_error(body[start:]))
        return len(body)
    try:
        value, end = decode_json_prefix(body, cursor)
    except JsonValueError as error:
        close = body.find(closer, start)
        if close < 0 and is_cut_off(finish_reason):
            errors.append(unclosed_error(body[start:]))
            return len(body)
        stop = len(body) if close < 0 else close + len(closer)
        errors.append(ParseError(ParseErrorKind.INVALID_JSON, f"the {what} is not JSON: {error}", raw=body[start:stop]))
        return stop
    after = skip_spaces(body, end)
    if body.startswith(closer, after):
        end = after + len(closer)
    elif after >= len(body) and is_cut_off(finish_reason):
        errors.append(unclosed_error(body[start:]))
        return len(body)
    return TaggedJson(value, body[start:end], end)


def call_in_reasoning_error(reasoning: str) -> ParseError:
    """The error for a tool call written inside reasoning: reported, never executed."""
    return ParseError(ParseErrorKind.CALL_IN_REASONING, "a tool call inside reasoning is not executed", raw=reasoning)


def calls_in_reasoning(reasoning: str | None, openers: Sequence[str]) -> list[ParseError]:
    """`[call_in_reasoning_error(reasoning)]` when the reasoning holds one of `openers`, else `[]`.

    >>> [error.kind.value for error in calls_in_reasoning("maybe <tool_call>", ["<tool_call>"])]
    ['call_in_reasoning']
    >>> calls_in_reasoning(None, ["<tool_call>"])
    []
    """
    if reasoning and any(opener in reasoning for opener in openers):
        return [call_in_reasoning_error(reasoning)]
    return []


NOT_A_BLOCK = -1  # returned by a `scan_blocks` block parser: the opener is text, not a block


def scan_blocks(body: str, openers: Sequence[str], parse_block: Callable[[int, str], int]) -> list[str]:
    """Walk `body` for blocks that start with one of `openers`; return the text outside them, in order.

    `parse_block(start, opener)` handles the block at `body[start]` and returns the index where
    scanning resumes (at least `start + 1` is used, so scanning always moves on), or `NOT_A_BLOCK`
    when the opener there is text after all. Scanning resumes after a block, so openers quoted
    inside a block's arguments are never seen. The result has exactly one piece when `body` holds no block.

    >>> scan_blocks("a[x]b[y]", ("[",), lambda start, opener: start + 3)
    ['a', 'b', '']
    >>> text = "a[x]b[y"
    >>> scan_blocks(text, ("[",), lambda start, opener: start + 3 if "]" in text[start:] else NOT_A_BLOCK)
    ['a', 'b[y']
    """
    content: list[str] = []
    position = search = 0
    while True:
        hits = [(i, opener) for opener in openers if (i := body.find(opener, search)) >= 0]
        if not hits:
            content.append(body[position:])
            return content
        start, opener = min(hits)
        resume = parse_block(start, opener)
        if resume == NOT_A_BLOCK:
            search = start + len(opener)
            continue
        content.append(body[position:start])
        position = search = max(resume, start + 1)


def join_content(parts: Sequence[str]) -> str:
    """All non-call text, in order and as written (separators between calls included), with the
    outer whitespace removed: the policy of every built-in parser.

    >>> join_content(["Let me check.\\n", "\\n", "Done. "])
    'Let me check.\\n\\nDone.'
    """
    return "".join(parts).strip()


def add_result(result: ToolCall | ParseError, calls: list[ToolCall], errors: list[ParseError]) -> None:
    """Append a `validate_call` result to the calls or to the errors."""
    if isinstance(result, ToolCall):
        calls.append(result)
    else:
        errors.append(result)


def find_structural_closer(text: str, closer: str, start: int, followers: Sequence[str]) -> int:
    """Index of the first `closer` at or after `start` that is followed (after whitespace) by one
    of `followers` or by the end of the text; -1 when there is none.

    This is how raw-text values (Qwen XML, GLM, MiniMax) end: a closer that appears inside a value,
    such as `print('</parameter>')`, is not followed by the next structural marker and is skipped.

    >>> text = "<p>print('</p>')</p>\\n</f>"
    >>> find_structural_closer(text, "</p>", 3, ["<p>", "</f>"])
    16
    """
    position = text.find(closer, start)
    while position >= 0:
        after = skip_spaces(text, position + len(closer))
        if after >= len(text) or any(text.startswith(follower, after) for follower in followers):
            return position
        position = text.find(closer, position + 1)
    return -1


@functools.lru_cache(maxsize=64)
def _unquoted_pattern(markers: tuple[str, ...], quotes: str) -> re.Pattern[str]:
    strings = [rf"{re.escape(q)}(?:[^{re.escape(q)}\\]|\\.)*+{re.escape(q)}" for q in quotes]
    wanted = "|".join(re.escape(m) for m in sorted(markers, key=len, reverse=True))
    return re.compile("|".join(strings) + f"|(?P<marker>{wanted})", re.DOTALL)


def find_unquoted(text: str, markers: Sequence[str], start: int = 0, *, quotes: str = '"') -> tuple[int, str]:
    """(index, marker) of the first of `markers` at or after `start` that is not inside a quoted
    string (backslash escapes honoured), or (-1, "") when there is none.

    This is how a wrapper's closer is found around JSON or Python source: a marker quoted in a
    string argument is content. A quote that is never closed does not hide what follows it.

    >>> find_unquoted('f(a="<|end|>") <|end|>', ["<|end|>"])
    (15, '<|end|>')
    >>> find_unquoted("don't <|end|>", ["<|end|>"], quotes="'\\"")
    (6, '<|end|>')
    """
    if len(markers) == 1:
        marker = markers[0]
        first = text.find(marker, start)
        if first < 0:
            return -1, ""
    else:
        found = [(i, m) for m in markers if (i := text.find(m, start)) >= 0]
        if not found:
            return -1, ""
        first, marker = min(found)
    for quote in quotes:
        if text.find(quote, start, first) >= 0:
            break
    else:
        return first, marker  # no quote before it: it cannot be inside a string
    for match in _unquoted_pattern(tuple(markers), quotes).finditer(text, start):
        if match.group("marker") is not None:
            return match.start(), match.group("marker")
    return -1, ""


def value_scan_pattern(closer: str, heads: Sequence[str]) -> re.Pattern[str]:
    """The pattern `forgotten_closer` scans a value with: its `closer` or any of `heads` (built once per format)."""
    return re.compile("|".join(re.escape(m) for m in sorted((closer, *heads), key=len, reverse=True)))


ValueScan = tuple[re.Match[str] | None, int, bool]
"""What `forgotten_closer` found, as a plain tuple (one is made per parsed value, so it stays cheap):
(repair: the structure the value ends before when its closer was forgotten, else None;
closer_from: the first closer after the value's start, -1 when there is none;
head_first: whether a head came before that closer)."""


def forgotten_closer(
    text: str,
    start: int,
    closer: str,
    boundary: re.Pattern[str],
    scan: re.Pattern[str],
    accept: Callable[[re.Match[str]], bool] = lambda match: True,
) -> ValueScan:
    """Whether a raw value that starts at `start` lost its `closer`, and where it then ends.

    `boundary` matches structure that only follows a finished value (the next parameter on a line
    of its own, the call's end followed by the next call or by the end of the text). `scan`
    (`value_scan_pattern`) matches the closer or the literal texts that boundary matches (and any
    other structure the caller cares about) start with. A
    boundary with no `closer` at all between `start` and it means the closer was forgotten:
    otherwise the value would swallow the next parameter or call. `accept` vets each match (for
    example: the next parameter's name is one the tool declares). The caller records the repair
    (`repaired_closer_note`).

    One pass finds the first closer or head; when that is the closer (the usual case), there is
    nothing to repair and `closer_from` lets the caller's closer search start there instead of
    scanning the value again.

    >>> boundary = re.compile(r"<p=(\\w+)>")
    >>> scan = value_scan_pattern("</p>", ["<p="])
    >>> forgotten_closer("1<p=b>2</p></f>", 0, "</p>", boundary, scan)[0].start()
    1
    >>> forgotten_closer("1</p><p=b>2</p>", 0, "</p>", boundary, scan)
    (None, 1, False)
    """
    first = scan.search(text, start)
    if first is None:
        return None, -1, False
    if first.group() == closer:
        return None, first.start(), False
    closer_at = text.find(closer, first.start())
    limit = len(text) if closer_at < 0 else closer_at
    for match in boundary.finditer(text, first.start(), limit):
        if accept(match):
            return match, closer_at, True
    return None, closer_at, True


def repaired_closer_note(closer: str, *, raw: str, tool_name: str, call_id: str) -> ParseError:
    """The note that a forgotten `closer` was restored in the executed call `call_id`."""
    return ParseError(
        ParseErrorKind.REPAIRED_CLOSER,
        f"a missing {closer} was restored where the structure left no doubt; the call ran",
        raw=raw,
        tool_name=tool_name,
        call_id=call_id,
    )

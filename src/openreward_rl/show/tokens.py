"""The token view: a training sequence split by loss mask, sampled tokens coloured by rollout log-prob.

>>> from openreward_rl.loop.trajectory import TokenSegment
>>> segment = TokenSegment([1, 2], [3, 4, 5], [1, 1, 0], [-0.1, -0.2, 0.0])
>>> [(s.kind, s.start, s.end) for s in mask_spans(segment)]
[('prompt', 0, 2), ('trained', 2, 4), ('context', 4, 5)]
>>> class Chars:  # a tokenizer whose token i is the letter chr(96 + i)
...     def decode(self, ids, skip_special_tokens=False):
...         return "".join(chr(96 + i) for i in ids)
>>> [(p.start, p.end, p.text) for p in pieces(Chars(), [3, 4, 5], 2)]
[(2, 3, 'c'), (3, 4, 'd'), (4, 5, 'e')]
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import attrs

from openreward_rl.families.token_text import decode_ids
from openreward_rl.loop.trajectory import TokenSegment
from openreward_rl.show.style import confidence_colour

__all__ = ["Span", "Piece", "mask_spans", "pieces", "token_view_html"]


@attrs.frozen
class Span:
    """A run of tokens: "prompt" (the first prompt), "trained" (mask 1) or "context" (mask 0)."""

    kind: str
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


def mask_spans(segment: TokenSegment) -> list[Span]:
    spans = [Span("prompt", 0, len(segment.prompt_ids))] if segment.prompt_ids else []
    offset = len(segment.prompt_ids)
    start = 0
    for position in range(1, len(segment.loss_mask) + 1):
        if position == len(segment.loss_mask) or segment.loss_mask[position] != segment.loss_mask[start]:
            kind = "trained" if segment.loss_mask[start] else "context"
            spans.append(Span(kind, offset + start, offset + position))
            start = position
    return spans


@attrs.frozen
class Piece:
    """Tokens `start`–`end` (positions in the sequence) and their text."""

    start: int
    end: int
    text: str


def pieces(tokenizer: Any, ids: Sequence[int], offset: int = 0, *, left: int | None = None) -> list[Piece]:
    """`ids` cut into the shortest runs that decode to whole characters (a token holding half of a
    multi-byte character is joined with the next). Each run is decoded after the token before it (for
    the first run: `left`, the token before `ids`, if any) and that token's text removed, so
    tokenizers that drop a leading space at the start of a decode (SentencePiece) keep it.

    >>> class SentencePieceLike:  # "_" is a space, dropped at the start of a decode
    ...     words = {1: "_The", 2: "_cat", 3: "_sat"}
    ...     def decode(self, ids, skip_special_tokens=False):
    ...         return "".join(self.words[i] for i in ids).replace("_", " ").removeprefix(" ")
    >>> "|".join(p.text for p in pieces(SentencePieceLike(), [1, 2, 3]))
    'The| cat| sat'
    >>> "|".join(p.text for p in pieces(SentencePieceLike(), [2, 3], left=1))
    ' cat| sat'
    """
    out: list[Piece] = []
    start = 0
    for end in range(1, len(ids) + 1):
        text = decode_ids(tokenizer, ids[start:end])
        previous = ids[start - 1] if start > 0 else left
        if previous is not None:
            before = decode_ids(tokenizer, [previous])
            joined = decode_ids(tokenizer, [previous, *ids[start:end]])
            if joined.startswith(before):
                text = joined[len(before) :]
        if text.endswith("\ufffd") and end < len(ids):
            continue
        out.append(Piece(offset + start, offset + end, text))
        start = end
    return out


def _logprob_title(logprob: float, start: int, end: int) -> str:
    where = f"token {start}" if end - start == 1 else f"tokens {start}–{end - 1}"
    return f"logprob {logprob:.3f} · {where}"


def token_view_html(segment: TokenSegment, tokenizer: Any = None) -> str:
    """The sequence as nested spans: one per mask span (class span-<kind>), and inside trained spans
    one per piece (class tok) with its summed rollout log-prob as colour and title."""
    esc = html.escape
    ids = segment.context()
    prompt_length = len(segment.prompt_ids)
    parts = ['<div class="tokens">']
    for span in mask_spans(segment):
        label = f"{span.kind}: tokens {span.start}–{span.end}, {span.length} tokens"
        if tokenizer is None:
            body = f"[{label}]\n"
            if span.kind == "trained":
                logprobs = segment.rollout_logprobs[span.start - prompt_length : span.end - prompt_length]
                body = f"[{label}; rollout logprob mean {sum(logprobs) / len(logprobs):.3f}, min {min(logprobs):.3f}]\n"
            parts.append(f'<span class="span-{span.kind}" title="{esc(label)}">{esc(body)}</span>')
            continue
        if span.kind != "trained":
            parts.append(
                f'<span class="span-{span.kind}" title="{esc(label)}">{esc(decode_ids(tokenizer, ids[span.start : span.end]))}</span>'
            )
            continue
        inner = []
        for piece in pieces(
            tokenizer, ids[span.start : span.end], span.start, left=ids[span.start - 1] if span.start else None
        ):
            logprob = sum(segment.rollout_logprobs[piece.start - prompt_length : piece.end - prompt_length])
            inner.append(
                f'<span class="tok" data-logprob="{logprob:.4f}" style="background: {confidence_colour(logprob)}" '
                f'title="{esc(_logprob_title(logprob, piece.start, piece.end))}">{esc(piece.text)}</span>'
            )
        parts.append(f'<span class="span-trained" title="{esc(label)}">{"".join(inner)}</span>')
    parts.append("</div>")
    return "".join(parts)

"""Making tool output safe to put in front of the model: valid text, no stray control characters,
and no more tokens than the budget allows."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["clean_tool_text", "has_lone_surrogate", "TRUNCATION_MARKER"]

TRUNCATION_MARKER = "\n[... tool output truncated: it exceeded {limit} tokens]"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Generous upper bound of characters per token, used to avoid tokenizing megabytes to keep a few thousand tokens.
_CHARS_PER_TOKEN_BOUND = 16


def clean_tool_text(text: str, renderer: Any, max_tokens: int | None) -> tuple[str, bool]:
    """Return (safe text, whether it was truncated).

    Lone surrogates become U+FFFD, C0 control characters other than tab/newline/carriage-return
    are dropped, and text over `max_tokens` tokens is cut there with a marker.
    """
    safe = _CONTROL.sub("", _SURROGATE.sub("\ufffd", text))
    if max_tokens is None:
        return safe, False
    truncated = False
    if len(safe) > max_tokens * _CHARS_PER_TOKEN_BOUND:
        safe, truncated = safe[: max_tokens * _CHARS_PER_TOKEN_BOUND], True
    if truncated or len(safe) > max_tokens:
        ids = renderer.encode(safe)
        if len(ids) > max_tokens:
            safe, truncated = renderer.decode(ids[:max_tokens]), True
    if truncated:
        safe += TRUNCATION_MARKER.format(limit=max_tokens)
    return safe, truncated


def has_lone_surrogate(value: Any) -> bool:
    r"""True when a string in `value` (nested dicts, lists and keys included) holds a lone UTF-16 surrogate,
    which cannot be encoded as UTF-8.

    >>> has_lone_surrogate({"path": ["ok", "bad \ud800"]}), has_lone_surrogate({"path": "fine"})
    (True, False)
    """
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, Mapping):
        return any(has_lone_surrogate(k) or has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_lone_surrogate(v) for v in value)
    return False

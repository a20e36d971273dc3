"""Rules by which a family's chat template rewrites history that the episode keeps as the model saw it.

The episode never re-renders: the context holds the prompts and the sampled ids as they were. Where a
template writes an earlier turn differently once the conversation goes on, the family states the rule
as a `HistoryRule`: a map from the episode's ids to the template's, exact on ids, that the start-up
check (`families.probe`) applies before its token-for-token comparison. A rule only ever removes the
block it names, at the place it names.

>>> from openreward_rl.assets import load_tokenizer
>>> rule = DroppedBlock("<|im_start|>assistant\\n", "<think>\\n\\n</think>\\n\\n", "why")
>>> tokenizer = load_tokenizer("offline:qwen3")
>>> text = "<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\nA<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n"
>>> tokenizer.decode(rule(tokenizer, tokenizer.encode(text)))
'<|im_start|>assistant\\nA<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import attrs

__all__ = ["DroppedBlock", "HistoryRule", "ReasoningBeforeLastUser"]


class HistoryRule(Protocol):
    """(tokenizer, the episode's ids) -> the ids the chat template writes for the same conversation."""

    def __call__(self, tokenizer: Any, ids: list[int]) -> list[int]: ...


@attrs.frozen
class DroppedBlock:
    """The template drops `block` where it follows `header` in history; after the last `header` (the
    generation prompt the model is answering, or the conversation's last assistant turn) it stays.
    `why` says which template and when."""

    header: str
    block: str
    why: str

    def __call__(self, tokenizer: Any, ids: list[int]) -> list[int]:
        header = list(tokenizer.encode(self.header, add_special_tokens=False))
        block = list(tokenizer.encode(self.block, add_special_tokens=False))
        starts = [i for i in range(len(ids)) if ids[i : i + len(header)] == header]
        last = starts[-1] if starts else len(ids)
        out: list[int] = []
        i = 0
        while i < len(ids):
            if i < last and ids[i : i + len(header)] == header:
                out += header
                i += len(header)
                if ids[i : i + len(block)] == block:
                    i += len(block)
                continue
            out.append(ids[i])
            i += 1
        return out

    def __str__(self) -> str:
        return self.why


@attrs.frozen
class ReasoningBeforeLastUser:
    """The template keeps reasoning only after the last user message: in each assistant turn before it,
    the reasoning block right after `assistant` (`opener` … `closer`) is written as `replacement` (""
    drops it). A user message that starts with `tool_reply` is a tool reply (Qwen3.5 wraps tool results
    in a user turn) and does not count; `also_after`: other text after which an assistant turn opens without
    `assistant` (DeepSeek-V3.2 continues after `</function_results>`). Exact on ids: nothing is re-encoded but the markers; with
    `as_text`, the turns before the last user message are rewritten as text and re-encoded (MiniMax M2,
    where removing the block moves a token boundary), the rest kept id for id. `why` says which template.

    >>> from openreward_rl.assets import load_tokenizer
    >>> rule = ReasoningBeforeLastUser("<|im_start|>user\\n", "<|im_start|>assistant\\n", "<think>", "</think>\\n\\n", "why")
    >>> tokenizer = load_tokenizer("offline:qwen3")
    >>> text = "<|im_start|>assistant\\n<think>\\nR\\n</think>\\n\\nA<|im_end|>\\n<|im_start|>user\\nQ<|im_end|>\\n<|im_start|>assistant\\n"
    >>> tokenizer.decode(rule(tokenizer, tokenizer.encode(text)))
    '<|im_start|>assistant\\nA<|im_end|>\\n<|im_start|>user\\nQ<|im_end|>\\n<|im_start|>assistant\\n'
    """

    user: str
    assistant: str
    opener: str
    closer: str
    why: str
    tool_reply: str = ""
    replacement: str = ""
    as_text: bool = False
    also_after: tuple[str, ...] = ()

    def __call__(self, tokenizer: Any, ids: list[int]) -> list[int]:
        if self.as_text:
            return self._on_text(tokenizer, ids)

        def enc(text: str) -> list[int]:
            return list(tokenizer.encode(text, add_special_tokens=False)) if text else []

        user, opener, closer, reply, instead = map(
            enc, (self.user, self.opener, self.closer, self.tool_reply, self.replacement)
        )
        headers = [enc(h) for h in (self.assistant, *self.also_after)]
        last = _last_user(ids, user, reply)
        if last is None:
            return list(ids)
        out: list[int] = []
        i = 0
        while i < last:
            header = next((h for h in headers if _at(ids, h, i) and _at(ids, opener, i + len(h))), None)
            if header is not None:
                close = next((j for j in range(i + len(header), last) if _at(ids, closer, j)), None)
                if close is None:  # an unclosed block before a user message: not this rule's to rewrite
                    return list(ids)
                out += header + instead
                i = close + len(closer)
            else:
                out.append(ids[i])
                i += 1
        return out + list(ids[last:])

    def _on_text(self, tokenizer: Any, ids: list[int]) -> list[int]:
        text = tokenizer.decode(ids)
        starts = [m.start() for m in re.finditer(re.escape(self.user), text) if m.end() < len(text)]
        starts = [s for s in starts if not (self.tool_reply and text.startswith(self.tool_reply, s + len(self.user)))]
        if not starts:
            return list(ids)
        head, tail = text[: starts[-1]], text[starts[-1] :]
        block = re.escape(self.assistant) + re.escape(self.opener) + ".*?" + re.escape(self.closer)
        head = re.sub(block, lambda _: self.assistant + self.replacement, head, flags=re.S)
        kept = len(tokenizer.encode(tail, add_special_tokens=False))
        return list(tokenizer.encode(head, add_special_tokens=False)) + list(ids[len(ids) - kept :])

    def __str__(self) -> str:
        return self.why


def _at(ids: list[int], pattern: list[int], index: int) -> bool:
    return bool(pattern) and ids[index : index + len(pattern)] == pattern


def _last_user(ids: list[int], user: list[int], reply: list[int]) -> int | None:
    """Where the last user message (not a tool reply) opens; an opener that ends `ids` is a sampled stop
    token (GLM's `<|user|>`), not a message."""
    starts = [
        i
        for i in range(len(ids))
        if _at(ids, user, i) and i + len(user) < len(ids) and not _at(ids, reply, i + len(user))
    ]
    return starts[-1] if starts else None

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

from typing import Any, Protocol

import attrs

__all__ = ["DroppedBlock", "HistoryRule"]


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

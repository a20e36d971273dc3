"""How a family marks reasoning in its turns (`ThinkingMarkers`), so `train_thinking=False` can mask it.

>>> THINK_TAGS.opener, THINK_TAGS.closer
(('<think>',), ('</think>',))
"""

from __future__ import annotations

from typing import Any

import attrs

from openreward_rl.errors import ModelFamilyError

__all__ = ["ThinkingMarkers", "THINK_TAGS"]


@attrs.frozen
class ThinkingMarkers:
    """Token strings that open and close the model's reasoning, e.g. `<think>` … `</think>`, or
    gpt-oss's `<|channel|>analysis<|message|>` … `<|end|>`. Each is a sequence of tokenizer tokens."""

    opener: tuple[str, ...]
    closer: tuple[str, ...]

    def ids(self, tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(opener ids, closer ids); ModelFamilyError when a marker is not in the tokenizer's vocabulary."""
        found = []
        for marker in (self.opener, self.closer):
            ids = tokenizer.convert_tokens_to_ids(list(marker))
            if any(not isinstance(i, int) or i == tokenizer.unk_token_id for i in ids):
                raise ModelFamilyError(f"the tokenizer has no token(s) {list(marker)} for the reasoning markers")
            found.append(tuple(ids))
        return found[0], found[1]


THINK_TAGS = ThinkingMarkers(("<think>",), ("</think>",))

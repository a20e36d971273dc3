"""Bridges from the `renderers` package (Prime Intellect, Apache-2.0): hand-written per family, proven here.

`renderers` ships a `bridge_to_next_turn` per family that extends `prompt + sampled` with the next
messages without re-rendering sampled tokens. Where its output equals the official chat template's
render token for token (tests/test_families_*.py), a family uses it; the first prompt still comes
from the official template itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.families.plain_text_encoder import PlainTextEncoder
from openreward_rl.families.token_text import decode_ids

__all__ = ["RenderersBridge", "renderers_bridge"]


_SHORT = 64  # texts up to this many characters are template scaffolding, worth remembering
_REMEMBERED = 4096  # answers kept per kind; short tool replies vary, so the memo starts over when full


class _TokenizerView:
    """The tokenizer as a renderer sees it: the same ids, without the repeat work.

    - Short texts (the scaffolding a bridge encodes on every call: "\\n", "assistant\\n", the header
      it scans for) and marker ids are remembered: pure functions of their arguments for one
      tokenizer, each otherwise a full trip through transformers (~25 us).
    - Longer plain ASCII texts (tool replies) go through `PlainTextEncoder` where the tokenizer is one
      it knows, else through the tokenizer.
    - `decode` skips transformers' per-id input checks (`token_text.decode_ids`: the same text).
    - It offers no `__call__`, so renderers do not ask for character offsets: they then encode the
      same joined text with `encode` (same ids, renderers' documented fallback) and leave
      `is_content` empty, which no bridge here reads. Offsets cost more than the encode itself.

    Answers are copies: a caller that extends a list cannot change a later answer.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._wrapped = tokenizer
        self._plain = PlainTextEncoder.for_tokenizer(tokenizer)
        self._encoded: dict[tuple[str, bool], list[int]] = {}
        self._converted: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name == "__call__":
            raise AttributeError(name)
        return getattr(self._wrapped, name)

    def encode(self, text: Any, add_special_tokens: bool = True, **kwargs: Any) -> Any:
        if kwargs or not isinstance(text, str):
            return self._wrapped.encode(text, add_special_tokens=add_special_tokens, **kwargs)
        if len(text) > _SHORT:
            ids = self._plain.encode(text) if self._plain is not None and not add_special_tokens else None
            return ids if ids is not None else self._wrapped.encode(text, add_special_tokens=add_special_tokens)
        key = (text, add_special_tokens)
        ids = self._encoded.get(key)
        if ids is None:
            _make_room(self._encoded)
            ids = self._encoded[key] = list(self._wrapped.encode(text, add_special_tokens=add_special_tokens))
        return list(ids)

    def decode(self, ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> Any:
        if kwargs or not isinstance(ids, list):
            return self._wrapped.decode(ids, skip_special_tokens=skip_special_tokens, **kwargs)
        return decode_ids(self._wrapped, ids, skip_special_tokens=skip_special_tokens)

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if not isinstance(tokens, str):
            return self._wrapped.convert_tokens_to_ids(tokens)
        if tokens not in self._converted:
            _make_room(self._converted)
            self._converted[tokens] = self._wrapped.convert_tokens_to_ids(tokens)
        return self._converted[tokens]


def _make_room(memo: dict[Any, Any]) -> None:
    if len(memo) >= _REMEMBERED:
        memo.clear()


@attrs.define(eq=False)
class RenderersBridge:
    """Wraps one `renderers.Renderer`; returns only the ids after `context + sampled`."""

    renderer: Any

    def bridge(self, *, context_ids: Sequence[int], sampled_ids: Sequence[int], new_messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> list[int] | None:  # fmt: skip
        context = context_ids if type(context_ids) is list else list(context_ids)  # O(context): copied only if need be
        sampled = list(sampled_ids)
        extended = self.renderer.bridge_to_next_turn(
            context, sampled, [dict(m) for m in new_messages], tools=list(tools) if tools else None
        )
        if extended is None:
            return None
        ids = extended.token_ids
        known = len(context)
        if ids[known : known + len(sampled)] != sampled or ids[:known] != context:
            return None  # it closed a turn the model left open: not ours to keep
        return list(ids[known + len(sampled) :])


def renderers_bridge(config_class: str, **config: Any) -> Callable[[Any, Mapping[str, Any]], RenderersBridge]:
    """A `ModelFamily.bridge_factory` building the renderer of `renderers.<config_class>` (e.g. "Llama3RendererConfig").

    A template kwarg the config declares as one (its `_template_fields`: `enable_thinking`, Kimi K2.5's
    `thinking`, Gemma 4's `preserve_thinking`, ...) is passed on, so both agree."""

    def build(tokenizer: Any, template_kwargs: Mapping[str, Any]) -> RenderersBridge:
        import renderers

        config_type = getattr(renderers, config_class)
        settings = dict(config)
        template_fields = getattr(config_type, "_template_fields", frozenset({"enable_thinking"}))  # the config's chat-template kwargs
        for key, value in template_kwargs.items():
            if key in template_fields:
                settings[key] = value
        return RenderersBridge(renderers.create_renderer(_TokenizerView(tokenizer), config_type(**settings)))

    return build

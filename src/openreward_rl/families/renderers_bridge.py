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

__all__ = ["RenderersBridge", "renderers_bridge"]


_SHORT = 64  # texts up to this many characters are template scaffolding, worth remembering
_REMEMBERED = 4096  # answers kept per kind; short tool replies vary, so the memo starts over when full


class _ScaffoldMemo:
    """The tokenizer as a renderer sees it, remembering the answers for short texts.

    A renderer's bridge encodes its scaffolding ("\\n", "assistant\\n", the header it scans for),
    probes for offset support (`tokenizer("a", return_offsets_mapping=True)`) and looks up marker
    ids on every call; each is a full trip through transformers (~25 us). Those are pure functions
    of their arguments for one tokenizer, so the first answer is the answer: the ids are the same,
    only the repeat work is gone. Tool replies and other long texts go straight through; what it
    hands out is a copy, so a caller that extends a list cannot change a later answer.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._wrapped = tokenizer
        self._encoded: dict[tuple[str, bool], list[int]] = {}
        self._called: dict[tuple[str, tuple[tuple[str, Any], ...]], Any] = {}
        self._converted: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    def encode(self, text: Any, add_special_tokens: bool = True, **kwargs: Any) -> Any:
        if kwargs or not isinstance(text, str) or len(text) > _SHORT:
            return self._wrapped.encode(text, add_special_tokens=add_special_tokens, **kwargs)
        key = (text, add_special_tokens)
        ids = self._encoded.get(key)
        if ids is None:
            _make_room(self._encoded)
            ids = self._encoded[key] = list(self._wrapped.encode(text, add_special_tokens=add_special_tokens))
        return list(ids)  # a fresh list: callers may extend what they get

    def __call__(self, text: Any, **kwargs: Any) -> Any:
        plain_arguments = all(isinstance(v, (bool, int, str, type(None))) for v in kwargs.values())
        if not isinstance(text, str) or len(text) > _SHORT or not plain_arguments:
            return self._wrapped(text, **kwargs)
        key = (text, tuple(sorted(kwargs.items())))
        encoding = self._called.get(key)
        if encoding is None:
            _make_room(self._called)
            encoding = self._called[key] = self._wrapped(text, **kwargs)
        return _fresh(encoding)

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


def _fresh(encoding: Any) -> Any:
    """A copy of a remembered `BatchEncoding` whose lists a caller may change without touching the memo."""
    copied = {key: list(value) if isinstance(value, list) else value for key, value in encoding.items()}
    try:
        return type(encoding)(copied, encoding=encoding.encodings, n_sequences=encoding.n_sequences)
    except (AttributeError, TypeError):  # not a transformers BatchEncoding: a plain mapping will do
        return copied


@attrs.define(eq=False)
class RenderersBridge:
    """Wraps one `renderers.Renderer`; returns only the ids after `context + sampled`."""

    renderer: Any

    def bridge(
        self,
        *,
        context_ids: Sequence[int],
        sampled_ids: Sequence[int],
        new_messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int] | None:
        extended = self.renderer.bridge_to_next_turn(
            list(context_ids), list(sampled_ids), [dict(m) for m in new_messages], tools=list(tools) if tools else None
        )
        if extended is None:
            return None
        ids = list(extended.token_ids)
        prefix = len(context_ids) + len(sampled_ids)
        if ids[:prefix] != [*context_ids, *sampled_ids]:
            return None  # it closed a turn the model left open: not ours to keep
        return ids[prefix:]


def renderers_bridge(config_class: str, **config: Any) -> Callable[[Any, Mapping[str, Any]], RenderersBridge]:
    """A `ModelFamily.bridge_factory` building the renderer of `renderers.<config_class>` (e.g. "Llama3RendererConfig").

    A template kwarg the config also has (`enable_thinking`) is passed on, so both agree."""

    def build(tokenizer: Any, template_kwargs: Mapping[str, Any]) -> RenderersBridge:
        import renderers

        config_type = getattr(renderers, config_class)
        settings = dict(config)
        if "enable_thinking" in template_kwargs and "enable_thinking" in config_type.model_fields:
            settings["enable_thinking"] = bool(template_kwargs["enable_thinking"])
        return RenderersBridge(renderers.create_renderer(_ScaffoldMemo(tokenizer), config_type(**settings)))

    return build

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

from openreward_rl._compat import renderers as compat_renderers
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


# Renderers whose bridge reads the earlier prompt only after its last stop token and a tool reply's
# text only as one encoded "\n" + text + "\n" run (audited: renderers.qwen3.Qwen3Renderer.bridge_to_next_turn,
# its scan_reasoning/prompt_ends_in_reasoning, trim_to_turn_close and _render_tool), as (module, class).
# tests/test_renderers_splice.py checks the shortcut against the whole-context bridge on the real tokenizer.
_AUDITED = frozenset({("renderers.qwen3", "Qwen3Renderer")})
_PROBE = "probe"  # the stand-in tool reply whose encoded run is replaced by the real reply's


@attrs.define(eq=False)
class RenderersBridge:
    """Wraps one `renderers.Renderer`; returns only the ids after `context + sampled`.

    For an audited renderer (`_AUDITED`) two shortcuts give the same ids with less work per turn:
    the renderer sees the prompt from its last stop token on (what it reads of the prompt: whether
    the assistant header there opened a reasoning block), not the whole context it would copy
    several times; and a lone tool reply is rendered as a short stand-in (`_PROBE`) whose encoded
    run `"\n" + probe + "\n"` is then replaced by the reply's (the one place its text goes), instead
    of renderers' per-token bookkeeping over the whole reply. Where the stand-in's run cannot be
    found once, the renderer gets the whole context and the real reply."""

    renderer: Any
    encoder: Any = None  # the tokenizer (view) the renderer encodes with; needed for the reply shortcut
    _audited: bool = attrs.field(init=False)
    _stops: frozenset[int] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        kind = type(self.renderer)
        self._audited = (kind.__module__, kind.__qualname__) in _AUDITED and self.encoder is not None
        self._stops = frozenset(self.renderer.get_stop_token_ids()) if self._audited else frozenset()

    def bridge(
        self,
        *,
        context_ids: Sequence[int],
        sampled_ids: Sequence[int],
        new_messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int] | None:
        context = context_ids if type(context_ids) is list else list(context_ids)  # O(context): copied only if need be
        sampled = list(sampled_ids)
        messages = [dict(m) for m in new_messages]
        if not self._audited:
            return self._whole(context, sampled, messages, tools)
        reply = messages[0].get("content") if len(messages) == 1 and messages[0].get("role") == "tool" else None
        if not isinstance(reply, str):
            return self._whole(context[_last_stop(context, self._stops) :], sampled, messages, tools)
        ids = self._whole(
            context[_last_stop(context, self._stops) :], sampled, [{**messages[0], "content": _PROBE}], tools
        )
        if ids is None:
            return None  # nothing the renderer refuses here depends on a tool reply's text
        probe = self._run(_PROBE)
        at = _find_once(ids, probe)
        if at < 0:
            return self._whole(context, sampled, messages, tools)
        return [*ids[:at], *self._run(reply), *ids[at + len(probe) :]]

    def _run(self, text: str) -> list[int]:
        """The ids of a tool reply's run, encoded as the renderer encodes it (one pass over the joined text)."""
        return list(self.encoder.encode("\n" + text + "\n", add_special_tokens=False))

    def _whole(
        self,
        context: list[int],
        sampled: list[int],
        messages: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int] | None:
        extended = self.renderer.bridge_to_next_turn(context, sampled, messages, tools=list(tools) if tools else None)
        if extended is None:
            return None
        ids = extended.token_ids
        known = len(context)
        if ids[known : known + len(sampled)] != sampled or ids[:known] != context:
            return None  # it closed a turn the model left open: not ours to keep
        return list(ids[known + len(sampled) :])


def _last_stop(ids: list[int], stops: frozenset[int]) -> int:
    """The index of the last id in `stops` (0 when none is)."""
    for index in range(len(ids) - 1, -1, -1):
        if ids[index] in stops:
            return index
    return 0


def _find_once(ids: list[int], run: list[int]) -> int:
    """Where `run` starts in `ids`, if it occurs exactly once; else -1."""
    found, width = -1, len(run)
    for index in range(len(ids) - width + 1):
        if ids[index : index + width] == run:
            if found >= 0:
                return -1
            found = index
    return found


def renderers_bridge(config_class: str, **config: Any) -> Callable[[Any, Mapping[str, Any]], RenderersBridge]:
    """A `ModelFamily.bridge_factory` building the renderer of `renderers.<config_class>` (e.g. "Llama3RendererConfig").

    A template kwarg the config declares as one (its `_template_fields`: `enable_thinking`, Kimi K2.5's
    `thinking`, Gemma 4's `preserve_thinking`, ...) is passed on, so both agree."""

    def build(tokenizer: Any, template_kwargs: Mapping[str, Any]) -> RenderersBridge:
        import renderers

        config_type = getattr(renderers, config_class)
        settings = dict(config)
        template_fields = compat_renderers.template_fields(config_type)  # the config's chat-template kwargs
        for key, value in template_kwargs.items():
            if key in template_fields:
                settings[key] = value
        view = _TokenizerView(tokenizer)
        return RenderersBridge(renderers.create_renderer(view, config_type(**settings)), encoder=view)

    return build

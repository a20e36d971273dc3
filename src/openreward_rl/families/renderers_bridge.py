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
        return RenderersBridge(renderers.create_renderer(tokenizer, config_type(**settings)))

    return build

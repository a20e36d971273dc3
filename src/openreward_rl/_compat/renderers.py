"""The renderers package's config classes: which chat-template kwargs a config takes (`_template_fields`)."""

from __future__ import annotations

from typing import Any

from openreward_rl._compat._gate import Gate, Internal

__all__ = ["GATE", "template_fields"]


def _internals() -> list[Internal]:
    import renderers

    return [
        Internal(
            "renderers.RendererConfig._template_fields",
            lambda: isinstance(
                getattr(renderers.Llama3RendererConfig, "_template_fields", None), frozenset | set | tuple
            ),
        )
    ]


GATE = Gate("renderers", ">=0.1.12,<0.2", _internals)


def template_fields(config_type: Any) -> frozenset[str]:
    """The chat-template kwargs `config_type` declares as its own (`enable_thinking` where it declares none)."""
    return frozenset(getattr(config_type, "_template_fields", frozenset({"enable_thinking"})))

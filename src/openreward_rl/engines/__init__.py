"""Inference engines behind one protocol: SGLang over HTTP, embedded transformers (continuous batching or waves), OpenAI-compatible chat."""

from typing import TYPE_CHECKING, Any

from openreward_rl.engines.base import (
    AttachesEpisode,
    ContextLengthError,
    EncodedIds,
    Engine,
    EngineError,
    EngineRequestError,
    FinishReason,
    Generation,
    GenerationRequest,
)

if TYPE_CHECKING:  # the lazily loaded engines, for type checkers and editors
    from openreward_rl.engines.openai_chat import OpenAIChatEngine
    from openreward_rl.engines.sglang import SGLangEngine
    from openreward_rl.engines.transformers import TransformersEngine
    from openreward_rl.engines.waves import WaveEngine

__all__ = [
    "ContextLengthError",
    "EncodedIds",
    "Engine",
    "EngineError",
    "EngineRequestError",
    "FinishReason",
    "Generation",
    "GenerationRequest",
    "OpenAIChatEngine",
    "SGLangEngine",
    "AttachesEpisode",
    "TransformersEngine",
    "WaveEngine",
]

_LAZY = {
    "SGLangEngine": "openreward_rl.engines.sglang",
    "TransformersEngine": "openreward_rl.engines.transformers",
    "OpenAIChatEngine": "openreward_rl.engines.openai_chat",
    "WaveEngine": "openreward_rl.engines.waves",
}


def __getattr__(name: str) -> Any:
    # Engines load on first use, so importing the protocol does not import aiohttp/tenacity/torch.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

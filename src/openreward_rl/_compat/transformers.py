"""transformers internals the embedded engine, the wave decoder, the tokenizer helpers and the SGLang test
server rely on. Nothing here patches a class: each function changes or reads one object."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from openreward_rl._compat._gate import Gate, Internal

__all__ = [
    "GATE",
    "set_name_or_path",
    "cast_cache_to",
    "forget_batching_manager",
    "attention_implementation",
    "decodes_with_backend",
    "backend_tokenizer",
    "image_token_counts",
]


def _internals() -> list[Internal]:
    from transformers import PretrainedConfig
    from transformers.generation.continuous_batching import ContinuousBatchingManager, continuous_api
    from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    return [
        Internal("PretrainedConfig._name_or_path", lambda: "self._name_or_path" in inspect.getsource(PretrainedConfig)),
        Internal("PretrainedConfig._attn_implementation", lambda: hasattr(PretrainedConfig, "_attn_implementation")),
        Internal(
            "ContinuousBatchingManager._create_batch_processor()",
            lambda: callable(ContinuousBatchingManager._create_batch_processor),
        ),
        Internal(
            "the model's _cached_continuous_batching_manager",
            lambda: "_cached_continuous_batching_manager" in inspect.getsource(continuous_api),
        ),
        Internal(
            "TokenizersBackend._decode and ._tokenizer",
            lambda: callable(TokenizersBackend._decode) and "self._tokenizer" in inspect.getsource(TokenizersBackend),
        ),
        Internal(
            "Qwen2_5_VLProcessor._get_num_multimodal_tokens(image_sizes=)",
            lambda: "image_sizes" in inspect.signature(Qwen2_5_VLProcessor._get_num_multimodal_tokens).parameters,
        ),
    ]


GATE = Gate("transformers", ">=5.12.1,<6", _internals)


def set_name_or_path(model: Any, name: str) -> None:
    """Record `name` as the model's own (what a LoRA adapter's base_model_name_or_path and TRL's model card read)."""
    GATE.check()
    model.name_or_path = model.config._name_or_path = name


def cast_cache_to(manager: Any, dtype: Any) -> None:
    """Make the paged cache each batch processor of `manager` (a `ContinuousBatchingManager`) builds take
    keys and values in `dtype` (cast as they are stored)."""
    GATE.check()
    create = manager._create_batch_processor
    cast: set[int] = set()  # the caches already casting

    def create_casting() -> Any:
        processor = create()
        cache = processor.cache
        if id(cache) not in cast:
            update = cache.update

            def update_in_dtype(key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
                return update(key_states.to(dtype), value_states.to(dtype), *args, **kwargs)

            cache.update = update_in_dtype
            cast.add(id(cache))
        return processor

    manager._create_batch_processor = create_casting


def forget_batching_manager(model: Any) -> None:
    """Drop the continuous batching manager `model` caches for its next `generate_batch` (the engine keeps its own)."""
    vars(model).pop("_cached_continuous_batching_manager", None)


def attention_implementation(config: Any) -> str | None:
    """The attention kind a model was loaded with ("sdpa", "eager", ...), or None."""
    return getattr(config, "_attn_implementation", None)


def decodes_with_backend(kind: type) -> bool:
    """Whether tokenizers of class `kind` decode with their Rust backend alone (transformers' own `decode` and `_decode`)."""
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return False
    return (
        issubclass(kind, TokenizersBackend)
        and kind.decode is PreTrainedTokenizerBase.decode
        and kind._decode is TokenizersBackend._decode
    )


def backend_tokenizer(tokenizer: Any) -> Any:
    """A fast tokenizer's Rust `tokenizers.Tokenizer` (public `backend_tokenizer`, else its `_tokenizer`), or None."""
    return getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)


def image_token_counts(processor: Any, image_sizes: Sequence[tuple[int, int]]) -> list[int]:
    """How many image tokens `processor` expands each image of (height, width) into."""
    return [
        int(count) for count in processor._get_num_multimodal_tokens(image_sizes=list(image_sizes)).num_image_tokens
    ]

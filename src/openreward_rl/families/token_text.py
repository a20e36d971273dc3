"""Ids to text exactly as a transformers tokenizer's `decode` gives it, without its per-id input checks.

`PreTrainedTokenizerBase.decode` first walks every id to convert tensors and numpy values to Python
(`to_py_obj`): ~0.25 us an id, 2.5 ms for a 10k-token episode's response, more than the decode
itself. For a transformers `TokenizersBackend` whose `decode`/`_decode` are transformers' own and
that does not clean up spaces, the text is the Rust tokenizer's `decode` of the same ids; that is
called directly on a list of ints. Anything else goes through `tokenizer.decode`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["decode_ids"]


def decode_ids(tokenizer: Any, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
    """`tokenizer.decode(list(ids), skip_special_tokens=...)`, the same text.

    >>> from openreward_rl.assets import load_tokenizer
    >>> tokenizer = load_tokenizer("offline:qwen3")
    >>> ids = tokenizer.encode("<|im_start|>user\\nHi<|im_end|>", add_special_tokens=False)
    >>> decode_ids(tokenizer, ids) == tokenizer.decode(ids, skip_special_tokens=False)
    True
    """
    backend = _plain_backend(tokenizer)
    if backend is None:
        return tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)
    try:
        return backend.decode(ids if isinstance(ids, list) else list(ids), skip_special_tokens=skip_special_tokens)
    except TypeError:  # ids that are not Python ints (tensors, numpy): transformers converts them
        return tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


_checked: dict[type, bool] = {}


def _plain_backend(tokenizer: Any) -> Any:
    """The Rust tokenizer whose `decode` is this tokenizer's decode, or None."""
    kind = type(tokenizer)
    plain = _checked.get(kind)
    if plain is None:
        try:
            from transformers.tokenization_utils_base import PreTrainedTokenizerBase
            from transformers.tokenization_utils_tokenizers import TokenizersBackend
        except ImportError:
            plain = False
        else:
            plain = issubclass(kind, TokenizersBackend) and kind.decode is PreTrainedTokenizerBase.decode and kind._decode is TokenizersBackend._decode
        _checked[kind] = plain
    if not plain or getattr(tokenizer, "clean_up_tokenization_spaces", True):
        return None
    return tokenizer._tokenizer

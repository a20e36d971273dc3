"""Ids to text exactly as a transformers tokenizer's `decode` gives it, without its per-id input checks.

`PreTrainedTokenizerBase.decode` first walks every id to convert tensors and numpy values to Python
(`to_py_obj`): ~0.25 us an id, 2.5 ms for a 10k-token episode's response, more than the decode
itself. For a transformers `TokenizersBackend` whose `decode`/`_decode` are transformers' own and
that does not clean up spaces, the text is the Rust tokenizer's `decode` of the same ids; that is
called directly on a list of ints. Anything else goes through `tokenizer.decode`.

Where that Rust tokenizer is a byte-level BPE (its decoder exactly `ByteLevel`: GPT-2's, Qwen's, Llama
3's, DeepSeek's, GLM's, ...) and special tokens are kept, its decode is: each id's token string, each
character mapped back to its byte (a character outside the byte alphabet stays its UTF-8 bytes), the
bytes joined and read as UTF-8 with replacement. `ByteLevelText` does the same from a table of each
id's bytes, filled as ids are first seen: ~20 ns an id against ~90 in the Rust call. Text whose bytes
are not valid UTF-8 (the Rust decode then writes U+FFFD), and ids the table cannot place, go to the Rust
decode, so the text is the same in every case. tests/test_token_text.py compares both on real
tokenizers, on text and on random ids.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from openreward_rl._compat import transformers as compat_transformers
from openreward_rl.families.plain_text_encoder import _byte_level_alphabet, _settings

__all__ = ["decode_ids", "ByteLevelText"]


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
    listed = ids if isinstance(ids, list) else list(ids)
    if not skip_special_tokens:
        text = ByteLevelText.of(tokenizer, backend).decode(listed)
        if text is not None:
            return text
    try:
        return backend.decode(listed, skip_special_tokens=skip_special_tokens)
    except TypeError:  # ids that are not Python ints (tensors, numpy): transformers converts them
        return tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


_checked: dict[type, bool] = {}


def _plain_backend(tokenizer: Any) -> Any:
    """The Rust tokenizer whose `decode` is this tokenizer's decode, or None."""
    kind = type(tokenizer)
    plain = _checked.get(kind)
    if plain is None:
        plain = compat_transformers.decodes_with_backend(kind)
        _checked[kind] = plain
    if not plain or getattr(tokenizer, "clean_up_tokenization_spaces", True):
        return None
    return compat_transformers.backend_tokenizer(tokenizer)


_TO_BYTE = {
    character: byte for byte, character in _byte_level_alphabet().items()
}  # the inverse of the pre-tokenizer's map
_TO_LATIN1 = str.maketrans({character: chr(byte) for character, byte in _TO_BYTE.items()})
_ALPHABET = frozenset(_TO_BYTE)


def _decoded_bytes(token: str) -> bytes:
    """What the ByteLevel decoder writes for `token`: each alphabet character's byte, other characters' UTF-8."""
    if _ALPHABET.issuperset(token):
        return token.translate(_TO_LATIN1).encode("latin-1")
    return b"".join(bytes([_TO_BYTE[c]]) if c in _TO_BYTE else c.encode() for c in token)


class _IdBytes(dict):
    """id -> the bytes the decoder writes for it, looked up in the tokenizer the first time an id is seen."""

    def __init__(self, backend: Any, added: dict[int, bytes]) -> None:
        super().__init__(added)
        self._backend = backend

    def __missing__(self, token_id: Any) -> bytes:
        token = self._backend.id_to_token(token_id) if type(token_id) is int and token_id >= 0 else None
        if token is None:
            raise KeyError(token_id)  # not an id the model knows: the Rust decode decides
        self[token_id] = encoded = _decoded_bytes(token)
        return encoded


class ByteLevelText:
    """The Rust tokenizer's `decode(ids, skip_special_tokens=False)` for a byte-level BPE, from a table of ids' bytes.

    `ByteLevelText.of(tokenizer, backend)` gives the one for a tokenizer (kept while the tokenizer lives);
    `decode` returns None where the Rust decode must answer (see the module).
    """

    _by_tokenizer: weakref.WeakKeyDictionary[Any, ByteLevelText] = weakref.WeakKeyDictionary()

    def __init__(self, backend: Any) -> None:
        self._bytes: _IdBytes | None = None if backend is None else self._table(backend)

    @classmethod
    def of(cls, tokenizer: Any, backend: Any) -> ByteLevelText:
        try:
            found = cls._by_tokenizer.get(tokenizer)
        except TypeError:  # not weak-referenceable: no table kept for it
            return cls(None)
        if found is None:
            found = cls._by_tokenizer[tokenizer] = cls(backend)
        return found

    def decode(self, ids: list[int]) -> str | None:
        if self._bytes is None:
            return None
        try:
            return b"".join(map(self._bytes.__getitem__, ids)).decode()
        except (KeyError, UnicodeDecodeError):
            return None

    @staticmethod
    def _table(backend: Any) -> _IdBytes | None:
        """The id -> bytes table, or None where the tokenizer's decode is not exactly ByteLevel over BPE."""
        try:
            decoder, model, added = (
                _settings(backend.decoder),
                type(backend.model).__name__,
                backend.get_added_tokens_decoder(),
            )
        except (AttributeError, TypeError, ValueError):
            return None
        if not isinstance(decoder, dict) or decoder.get("type") != "ByteLevel" or model != "BPE":
            return None
        table: dict[int, bytes] = {}
        for token_id, token in added.items():  # the added vocabulary is looked up first, as the Rust decode does
            through_decoder, as_written = _decoded_bytes(token.content), token.content.encode()
            if through_decoder != as_written:  # which one the Rust decode writes is not documented: ask it
                said = backend.decode([token_id], skip_special_tokens=False).encode()
                if said not in (through_decoder, as_written):
                    return None
                through_decoder = said
            table[token_id] = through_decoder
        return _IdBytes(backend, table)

"""Encoding plain ASCII text with a byte-level BPE tokenizer at a fraction of the cost, to the same ids.

`tokenizers` spends most of an encode on bookkeeping around the work: for a ~1,900-character tool
reply, Qwen3's tokenizer takes ~0.6 ms, of which the BPE merges are a small part and the
pre-tokenizer's string alignment (kept for offsets nobody asks for here) most of it.
`PlainTextEncoder` does the same steps in the same order, on text where each step is provably
what the tokenizer does:

1. The added vocabulary (`<|im_start|>`, `<think>`, ...): the text contains none of its tokens,
   so the tokenizer splits nothing out.
2. The normalizer (NFC, or none): the identity on ASCII.
3. The pre-tokenizer's split regex: on text made only of printable ASCII, tab, newline and
   carriage return, `\\p{L}` is `[A-Za-z]`, `\\p{N}` is `[0-9]` and `\\s` is `[\\t\\n\\r ]`, so the
   tokenizer's Oniguruma pattern and the ASCII pattern here (both leftmost-first backtracking
   engines) cut the text at the same places. Only patterns listed in `_ASCII_SPLITS` are known.
4. Byte-level mapping of each piece, then the tokenizer's own BPE model on it (the same Rust
   object, so the merges are its merges); a piece's ids are remembered, as the model's own cache does.

Anything else (other characters, an added token in the text, another pre-tokenizer or model, BPE
dropout) makes `encode` return None, and the caller asks the tokenizer. tests/test_plain_text_encoder.py
compares the ids with the tokenizer's on generated and real text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from openreward_rl._compat import transformers as compat_transformers

__all__ = ["PlainTextEncoder"]

# The tokenizer's split pattern -> the same pattern on plain ASCII text (see the module docstring).
_ASCII_SPLITS = {
    # Qwen2, Qwen2.5, Qwen3 (and Qwen3.5's tokenizer family)
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\t\n\r A-Za-z0-9]+[\r\n]*|[\t\n\r ]*[\r\n]+|[\t\n\r ]+(?![^\t\n\r ])|[\t\n\r ]+",  # noqa: E501
    # Llama 3 (tiktoken cl100k-style: digits in runs of up to three)
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]{1,3}| ?[^\t\n\r A-Za-z0-9]+[\r\n]*|[\t\n\r ]*[\r\n]+|[\t\n\r ]+(?![^\t\n\r ])|[\t\n\r ]+",  # noqa: E501
}
_PLAIN = re.compile(r"[\t\n\r\x20-\x7e]*")  # the characters the ASCII patterns are proven on
_REMEMBERED = 65536  # pieces whose ids are kept; starts over when full
_LONGEST_REMEMBERED = 64  # characters


def _byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map, which the ByteLevel pre-tokenizer applies to every byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    characters = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return {byte: chr(character) for byte, character in zip(printable, characters)}


_ASCII_TO_BYTE_LEVEL = {byte: character for byte, character in _byte_level_alphabet().items() if byte < 128}


class PlainTextEncoder:
    """Same ids as `tokenizer.encode(text, add_special_tokens=False)` for plain ASCII text; None otherwise."""

    def __init__(self, model: Any, split: re.Pattern[str], added: re.Pattern[str] | None) -> None:
        self._model = model
        self._split = split
        self._added = added
        self._pieces: dict[str, list[int]] = {}

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> PlainTextEncoder | None:
        """The encoder for a transformers fast tokenizer, or None when its pipeline is not one this module knows."""
        backend = compat_transformers.backend_tokenizer(tokenizer)
        if backend is None or not hasattr(backend, "pre_tokenizer"):
            return None
        try:  # the two steps' own settings: serialising the whole tokenizer (vocab, merges) would take ~0.5 s
            pre_tokenizer, normalizer = (_settings(backend.pre_tokenizer), _settings(backend.normalizer))
        except (AttributeError, TypeError, ValueError):
            return None
        split = _known_split(pre_tokenizer)
        model = backend.model
        if split is None or type(model).__name__ != "BPE" or getattr(model, "dropout", None) is not None:
            return None
        if normalizer not in (None, {"type": "NFC"}):
            return None
        contents = [token.content for token in backend.get_added_tokens_decoder().values()]
        added = re.compile("|".join(re.escape(content) for content in contents)) if contents else None
        return cls(model, re.compile(split), added)

    def encode(self, text: str) -> list[int] | None:
        """The tokenizer's ids for `text` (without special tokens added), or None when `text` is not plain ASCII
        or holds one of the tokenizer's added tokens."""
        if not _PLAIN.fullmatch(text) or (self._added is not None and self._added.search(text)):
            return None
        pieces = self._split.findall(text)
        if sum(map(len, pieces)) != len(text):  # a gap the pattern left would be a piece of its own: not proven here
            return None
        ids: list[int] = []
        remembered = self._pieces
        for piece in pieces:
            piece_ids = remembered.get(piece)
            if piece_ids is None:
                piece_ids = [token.id for token in self._model.tokenize(piece.translate(_ASCII_TO_BYTE_LEVEL))]
                if len(piece) <= _LONGEST_REMEMBERED:  # words repeat; a long run (base64, padding) rarely does
                    if len(remembered) >= _REMEMBERED:
                        remembered.clear()
                    remembered[piece] = piece_ids
            ids.extend(piece_ids)
        return ids


def _settings(step: Any) -> Any:
    """A pipeline step's settings as `tokenizer.json` writes them (None for an absent step)."""
    return None if step is None else json.loads(step.__getstate__())


def _known_split(pre_tokenizer: dict[str, Any] | None) -> str | None:
    """The ASCII pattern for a tokenizer whose pre-tokenizer is exactly Split(known pattern, Isolated) then ByteLevel
    without a prefix space or its own regex; None for any other pre-tokenizer."""
    pre = pre_tokenizer or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not steps or len(steps) != 2:
        return None
    split, byte_level = steps
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert") is not False:
        return None
    if byte_level != {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": byte_level.get("trim_offsets"),
        "use_regex": False,
    }:
        return None
    regex = (split.get("pattern") or {}).get("Regex")
    return _ASCII_SPLITS.get(regex) if isinstance(regex, str) else None

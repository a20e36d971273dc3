"""The tokenizer view a renderers bridge gets: same ids as the real tokenizer, and answers a caller cannot corrupt.

Real Qwen3 tokenizer (offline:qwen3). The bridges built on it are proven token-exact against the
official templates in tests/test_families.py and tests/test_families_episode.py; these tests pin the
view itself.
"""

from __future__ import annotations

import pytest

from openreward_rl.assets import load_tokenizer
from openreward_rl.families.renderers_bridge import _ScaffoldMemo

SCAFFOLDING = ["\n", "user", "assistant\n", "<|im_start|>assistant\n", "<think>\n\n</think>\n\n", "a", " héllo wörld", "\n<tool_response>\n"]
LONG = "Room 19: nectar onyx pebble quartz river slate tundra amber basalt cedar delta echo. " * 8


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("offline:qwen3")


@pytest.mark.parametrize("text", [*SCAFFOLDING, LONG])
@pytest.mark.parametrize("add_special_tokens", [False, True])
def test_encode_gives_the_tokenizers_ids_every_time(tokenizer, text: str, add_special_tokens: bool) -> None:
    view = _ScaffoldMemo(tokenizer)
    expected = tokenizer.encode(text, add_special_tokens=add_special_tokens)
    assert view.encode(text, add_special_tokens=add_special_tokens) == expected
    assert view.encode(text, add_special_tokens=add_special_tokens) == expected  # the remembered answer


def test_a_caller_extending_an_encoded_list_cannot_change_later_answers(tokenizer) -> None:
    view = _ScaffoldMemo(tokenizer)
    first = view.encode("assistant\n", add_special_tokens=False)
    first.extend([1, 2, 3])
    first[0] = -1
    assert view.encode("assistant\n", add_special_tokens=False) == tokenizer.encode("assistant\n", add_special_tokens=False)


@pytest.mark.parametrize("text", ["a", "user\nHi there", "\nshort tool reply\n", LONG])
def test_call_with_offsets_matches_the_tokenizer_and_cannot_be_corrupted(tokenizer, text: str) -> None:
    view = _ScaffoldMemo(tokenizer)
    expected = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    got = view(text, add_special_tokens=False, return_offsets_mapping=True)
    assert list(got["input_ids"]) == list(expected["input_ids"])
    assert list(got["offset_mapping"]) == list(expected["offset_mapping"])
    got["input_ids"].append(7)
    got["offset_mapping"].clear()
    again = view(text, add_special_tokens=False, return_offsets_mapping=True)
    assert list(again["input_ids"]) == list(expected["input_ids"])
    assert list(again["offset_mapping"]) == list(expected["offset_mapping"])


def test_marker_ids_and_other_attributes_are_the_tokenizers(tokenizer) -> None:
    view = _ScaffoldMemo(tokenizer)
    for marker in ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "not-a-token-7f3a"):
        assert view.convert_tokens_to_ids(marker) == tokenizer.convert_tokens_to_ids(marker)
        assert view.convert_tokens_to_ids(marker) == tokenizer.convert_tokens_to_ids(marker)
    assert view.convert_tokens_to_ids(["<think>", "</think>"]) == tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    assert view.eos_token_id == tokenizer.eos_token_id
    ids = tokenizer.encode(LONG, add_special_tokens=False)
    assert view.decode(ids, skip_special_tokens=False) == tokenizer.decode(ids, skip_special_tokens=False)


def test_the_memo_starts_over_instead_of_growing_without_bound(tokenizer, monkeypatch) -> None:
    from openreward_rl.families import renderers_bridge

    monkeypatch.setattr(renderers_bridge, "_REMEMBERED", 3)
    view = _ScaffoldMemo(tokenizer)
    for number in range(10):
        assert view.encode(f"reply {number}", add_special_tokens=False) == tokenizer.encode(f"reply {number}", add_special_tokens=False)
    assert len(view._encoded) <= 3

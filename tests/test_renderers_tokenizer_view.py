"""The tokenizer view a renderers bridge gets: same ids as the real tokenizer, and answers a caller cannot corrupt.

Real Qwen3 tokenizer (offline:qwen3). The bridges built on it are proven token-exact against the
official templates in tests/test_families.py and tests/test_families_episode.py; these tests pin the
view itself.
"""

from __future__ import annotations

import pytest

from openreward_rl.assets import load_tokenizer
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.renderers_bridge import _TokenizerView

SCAFFOLDING = [
    "\n",
    "user",
    "assistant\n",
    "<|im_start|>assistant\n",
    "<think>\n\n</think>\n\n",
    "a",
    " héllo wörld",
    "\n<tool_response>\n",
]
LONG_OTHERS = ["caf\u00e9 " * 30, "<|im_start|>user\n" + "words " * 20, "ctrl \x07 " * 20]  # the tokenizer's own path
LONG = "Room 19: nectar onyx pebble quartz river slate tundra amber basalt cedar delta echo. " * 8


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("offline:qwen3")


@pytest.mark.parametrize("text", [*SCAFFOLDING, LONG, *LONG_OTHERS])
@pytest.mark.parametrize("add_special_tokens", [False, True])
def test_encode_gives_the_tokenizers_ids_every_time(tokenizer, text: str, add_special_tokens: bool) -> None:
    view = _TokenizerView(tokenizer)
    expected = tokenizer.encode(text, add_special_tokens=add_special_tokens)
    assert view.encode(text, add_special_tokens=add_special_tokens) == expected
    assert view.encode(text, add_special_tokens=add_special_tokens) == expected  # the remembered answer


def test_a_caller_extending_an_encoded_list_cannot_change_later_answers(tokenizer) -> None:
    view = _TokenizerView(tokenizer)
    first = view.encode("assistant\n", add_special_tokens=False)
    first.extend([1, 2, 3])
    first[0] = -1
    assert view.encode("assistant\n", add_special_tokens=False) == tokenizer.encode(
        "assistant\n", add_special_tokens=False
    )


def test_renderers_are_not_offered_offsets_and_encode_the_same_joined_text(tokenizer) -> None:
    from renderers.base import attribute_text_segments

    view = _TokenizerView(tokenizer)
    assert getattr(view, "__call__", None) is None  # noqa: B004  (renderers probes the attribute for offset support, as here)
    segments = [("\n", False), (LONG, True), ("\n", False)]
    with_offsets = [token for token, _ in attribute_text_segments(tokenizer, segments)]
    assert [token for token, _ in attribute_text_segments(view, segments)] == with_offsets


def test_marker_ids_and_other_attributes_are_the_tokenizers(tokenizer) -> None:
    view = _TokenizerView(tokenizer)
    for marker in ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "not-a-token-7f3a"):
        assert view.convert_tokens_to_ids(marker) == tokenizer.convert_tokens_to_ids(marker)
        assert view.convert_tokens_to_ids(marker) == tokenizer.convert_tokens_to_ids(marker)
    assert view.convert_tokens_to_ids(["<think>", "</think>"]) == tokenizer.convert_tokens_to_ids(
        ["<think>", "</think>"]
    )
    assert view.eos_token_id == tokenizer.eos_token_id
    ids = tokenizer.encode(LONG, add_special_tokens=False)
    assert view.decode(ids, skip_special_tokens=False) == tokenizer.decode(ids, skip_special_tokens=False)


def test_the_memo_starts_over_instead_of_growing_without_bound(tokenizer, monkeypatch) -> None:
    from openreward_rl.families import renderers_bridge

    monkeypatch.setattr(renderers_bridge, "_REMEMBERED", 3)
    view = _TokenizerView(tokenizer)
    for number in range(10):
        assert view.encode(f"reply {number}", add_special_tokens=False) == tokenizer.encode(
            f"reply {number}", add_special_tokens=False
        )
    assert len(view._encoded) <= 3


FAMILY_TOKENIZERS = [
    ("qwen3", "qwen3"),
    ("qwen3.5", "qwen3.5"),
    ("llama3", "llama3.1"),
    ("glm-4.5", "glm-4.5"),
    ("glm-4.7", "glm-4.7"),
    ("minimax-m2", "minimax-m2"),
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "look",
            "description": "Look around.",
            "parameters": {"type": "object", "properties": {"room": {"type": "integer"}}, "required": ["room"]},
        },
    }
]
REPLY = (
    "Room 7: it's dark.\r\n  You see 3 doors ('north', 'EAST') and 1,024 coins;\tnothing else.\n\n\n   \nA note reads: \"don't\" - 42.\n"
    * 18
)


@pytest.mark.parametrize(("family_name", "tokenizer_name"), FAMILY_TOKENIZERS)
def test_a_family_bridge_through_the_view_gives_the_ids_of_the_same_bridge_on_the_tokenizer(
    family_name: str, tokenizer_name: str, monkeypatch
) -> None:
    """Long plain tool replies (the encoder's path): the renderers bridge on the
    view and on the bare tokenizer (which tests/test_families*.py prove against the official templates) agree."""
    from openreward_rl.families import get_family, renderers_bridge

    real = load_tokenizer(f"offline:{tokenizer_name}")
    family = get_family(family_name)
    through_view = family.bridge_factory(real, {})
    monkeypatch.setattr(renderers_bridge, "_TokenizerView", lambda tokenizer: tokenizer)
    on_tokenizer = family.bridge_factory(real, {})
    assert isinstance(through_view.renderer._tokenizer, _TokenizerView)
    assert through_view.renderer._tokenizer._plain is not None or family_name == "minimax-m2"

    user = {"role": "user", "content": "Explore the corridor."}
    call = {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": {"room": 7}}}
    assistant = {"role": "assistant", "content": "", "reasoning_content": "Look first.", "tool_calls": [call]}
    renderer = on_tokenizer.renderer
    context = list(renderer.render([user], tools=TOOLS, add_generation_prompt=True).token_ids)
    whole = list(renderer.render([user, assistant], tools=TOOLS).token_ids)
    assert whole[: len(context)] == context
    closers = ChatRenderer(real, family=family).stop_token_ids  # the tool-call closer first
    sampled = whole[len(context) :]
    ends = [index for index, token in enumerate(sampled) if token in closers]
    # As the engine stops: on the closer; GLM's <|observation|> is sampled though its template writes it as the next message's start.
    sampled = sampled[: ends[-1] + 1] if ends else [*sampled, closers[0]]
    for reply in (
        REPLY,
        REPLY.replace("\r", "").replace("\t", " ")
        + "Your tool calls could not all be executed: 'look' needs a room. " * 3,
    ):
        new_messages = [{"role": "tool", "tool_call_id": "call_1", "name": "look", "content": reply}]
        expected = on_tokenizer.bridge(context_ids=context, sampled_ids=sampled, new_messages=new_messages, tools=TOOLS)
        assert expected is not None and len(expected) > 400
        assert (
            through_view.bridge(context_ids=context, sampled_ids=sampled, new_messages=new_messages, tools=TOOLS)
            == expected
        )

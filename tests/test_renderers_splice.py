"""The audited renderers bridge's shortcuts (Qwen3): the prompt from its last stop token on, and a lone
tool reply spliced into a stand-in's rendering, give exactly the ids of the renderer run on the whole
context with the real reply.

Real Qwen3 tokenizer (offline:qwen3) and the `renderers` package's Qwen3 renderer, both thinking modes;
the whole-context bridge is the one tests/test_families*.py prove against the official template.
Contexts: a first prompt and a later one (earlier turns, an earlier reasoning block); completions: a
tool call with and without reasoning, reasoning left open (with and without a stop token), a turn cut
before its closer. Replies: the edges where BPE merges across the reply's newlines, special-token
text, the stand-in's own text, non-ASCII text, generated text.
"""

from __future__ import annotations

import random

import pytest

from openreward_rl.assets import load_tokenizer
from openreward_rl.families import renderers_bridge
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.renderers_bridge import _PROBE, RenderersBridge

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "step",
            "description": "Walk on.",
            "parameters": {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
        },
    }
]
CALL = '<tool_call>\n{"name": "step", "arguments": {"note": "a door"}}\n</tool_call>'
COMPLETIONS = {
    "reasoning then call": f"<think>\nThe corridor goes on.\n</think>\n\n{CALL}<|im_end|>",
    "call": f"{CALL}<|im_end|>",
    "open reasoning, stopped": "<think>\nStill thinking<|im_end|>",
    "open reasoning, cut": "<think>\nStill thinking about the",
    "call cut before its closer": '<tool_call>\n{"name": "step", "argum',
}
_EDGE_CHARS = " \t\r\n.,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`0123456789aZ"
REPLIES = [
    "Room 1: amber basalt cedar.",
    "",
    " leading space",
    "trailing space ",
    "ends with a period.",
    "\nopens with a newline",
    "ends with a newline\n",
    "\n\n",
    "   ",
    "tab\tand\r\nCRLF\r",
    "café — ☃ 日本語 😀",
    "text with <|im_end|> and </tool_response> and <tool_response> and <think> in it",
    _PROBE,
    f"\n{_PROBE}\n",
    f"{_PROBE} {_PROBE}.",
    '{"rows": [1, 2, 3], "ok": true}',
    "Room 7: it's dark.\r\n  You see 3 doors ('north', 'EAST') and 1,024 coins;\tnothing else.\n\n\n   \n" * 12,
]


def generated_replies(count: int) -> list[str]:
    rng = random.Random(31)
    return ["".join(rng.choice(_EDGE_CHARS) for _ in range(rng.randint(1, 40))) for _ in range(count)]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("offline:qwen3")


def contexts(tokenizer, thinking: bool) -> dict[str, list[int]]:
    renderer = ChatRenderer(tokenizer, template_kwargs={"enable_thinking": thinking})
    first = [{"role": "system", "content": "Walk the corridor."}, {"role": "user", "content": "Start."}]
    call = {"id": "c1", "type": "function", "function": {"name": "step", "arguments": {"note": "start"}}}
    later = [
        *first,
        {"role": "assistant", "content": "", "reasoning_content": "First step.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Room 1: amber."},
    ]
    return {"first": renderer.render_prompt(first, TOOLS), "later": renderer.render_prompt(later, TOOLS)}


def bridges(tokenizer, thinking: bool) -> tuple[RenderersBridge, RenderersBridge]:
    """The audited bridge with its shortcuts, and the same renderer run on the whole context."""
    shortcut = renderers_bridge.renderers_bridge("Qwen3RendererConfig")(tokenizer, {"enable_thinking": thinking})
    assert shortcut._audited
    whole = RenderersBridge(shortcut.renderer)
    assert not whole._audited
    return shortcut, whole


@pytest.mark.parametrize("thinking", [True, False])
def test_the_shortcuts_give_the_whole_context_bridge_ids(tokenizer, thinking: bool) -> None:
    shortcut, whole = bridges(tokenizer, thinking)
    answered = 0
    for context in contexts(tokenizer, thinking).values():
        for name, completion in COMPLETIONS.items():
            sampled = tokenizer.encode(completion, add_special_tokens=False)
            for reply in [*REPLIES, *generated_replies(40)]:
                for new_messages in (
                    [{"role": "tool", "tool_call_id": "c2", "name": "step", "content": reply}],
                    [
                        {"role": "tool", "tool_call_id": "c2", "content": reply},
                        {"role": "tool", "tool_call_id": "c3", "content": "Room 2."},
                    ],
                    [{"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": reply}]}],
                    [{"role": "tool", "tool_call_id": "c2", "content": "Room 2."}, {"role": "user", "content": reply}],
                ):
                    expected = whole.bridge(
                        context_ids=context, sampled_ids=sampled, new_messages=new_messages, tools=TOOLS
                    )
                    got = shortcut.bridge(
                        context_ids=context, sampled_ids=sampled, new_messages=new_messages, tools=TOOLS
                    )
                    assert got == expected, (name, reply, new_messages)
                    answered += expected is not None
            if name in ("reasoning then call", "call"):  # the turns an episode bridges: answered, not refused
                lone = [{"role": "tool", "tool_call_id": "c2", "content": REPLIES[0]}]
                assert (
                    shortcut.bridge(context_ids=context, sampled_ids=sampled, new_messages=lone, tools=TOOLS)
                    is not None
                )
    assert answered > 0


def spy(shortcut: RenderersBridge, monkeypatch) -> list[tuple[int, list[str]]]:
    """(prompt length, tool message contents) of each call into the renderer."""
    seen: list[tuple[int, list[str]]] = []
    renderer = shortcut.renderer
    original = renderer.bridge_to_next_turn

    def recording(prompt, completion, messages, **kwargs):
        seen.append((len(prompt), [m.get("content") for m in messages]))
        return original(prompt, completion, messages, **kwargs)

    monkeypatch.setattr(renderer, "bridge_to_next_turn", recording)
    return seen


def test_a_lone_reply_is_rendered_as_the_stand_in_on_the_prompts_tail(tokenizer, monkeypatch) -> None:
    shortcut, _ = bridges(tokenizer, True)
    context = contexts(tokenizer, True)["later"]
    sampled = tokenizer.encode(COMPLETIONS["call"], add_special_tokens=False)
    seen = spy(shortcut, monkeypatch)
    reply = "Room 2: basalt cedar delta. " * 20
    ids = shortcut.bridge(
        context_ids=context, sampled_ids=sampled, new_messages=[{"role": "tool", "content": reply}], tools=TOOLS
    )
    assert ids is not None and tokenizer.decode(ids).count(reply) == 1
    assert len(seen) == 1
    prompt_length, contents = seen[0]
    assert contents == [_PROBE]
    assert prompt_length < 10 < len(context)  # from the last <|im_end|>: "<|im_end|>\n<|im_start|>assistant\n"


def test_where_the_stand_ins_run_is_not_found_once_the_renderer_gets_everything(tokenizer, monkeypatch) -> None:
    shortcut, whole = bridges(tokenizer, True)
    context = contexts(tokenizer, True)["later"]
    sampled = tokenizer.encode(COMPLETIONS["call"], add_special_tokens=False)
    new_messages = [{"role": "tool", "content": "Room 3: ember fjord."}]
    expected = whole.bridge(context_ids=context, sampled_ids=sampled, new_messages=new_messages, tools=TOOLS)
    monkeypatch.setattr(renderers_bridge, "_find_once", lambda ids, run: -1)
    seen = spy(shortcut, monkeypatch)
    assert shortcut.bridge(context_ids=context, sampled_ids=sampled, new_messages=new_messages, tools=TOOLS) == expected
    assert seen[-1] == (len(context), ["Room 3: ember fjord."])


def test_other_renderers_get_the_whole_context(monkeypatch) -> None:
    llama = load_tokenizer("offline:llama3.1")
    bridge = renderers_bridge.renderers_bridge("Llama3RendererConfig")(llama, {})
    assert not bridge._audited

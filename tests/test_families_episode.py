"""Token-exact multi-turn episodes per model family, against each family's official chat template
and real tokenizer (see tests/family_episodes.py for what is scripted and what is checked)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from family_episodes import FamilyCase, check_family_run, run_family_episode

from openreward_rl import EpisodeSettings
from openreward_rl.env.local_server import LocalEnvServer
from openreward_rl.families import get_family

pytestmark = pytest.mark.anyio

LLAMA_ERROR = ("calculator", {"expression": "1 / 0"})  # a bare call to an unknown tool is plain content for Llama


def glm_final(ours: str, template: str) -> tuple[str, str]:
    """GLM ends a final answer with <|user|>, which its template writes as the start of the next user turn."""
    assert ours.endswith("<|user|>")
    return ours.removesuffix("<|user|>"), template


def gpt_oss_final(ours: str, template: str) -> tuple[str, str]:
    """gpt-oss's template drops the analysis of earlier tool-call turns once a final answer follows; the
    episode keeps what the model sampled. Ours with those analysis messages removed must equal the template."""
    opener = "<|channel|>analysis<|message|>"
    pattern = re.escape(opener) + r".*?<\|end\|><\|start\|>assistant(?= to=)"
    stripped, count = re.subn(pattern, "", ours, flags=re.S)
    assert count >= 1, "the scripted thinking turn's analysis must be in the context"
    return stripped, template


def _at(ids: list[int], pattern: list[int], index: int) -> bool:
    return bool(pattern) and ids[index : index + len(pattern)] == pattern


def reasoning_dropped_before_last_user(
    user_opener: str, assistant_opener: str, opener: str, closer: str, *, tool_reply: str | None = None, replacement: str = ""
) -> Callable[[Any, list[int]], list[int]]:
    """The rule of templates that keep reasoning only after the last user message (Qwen3.5, MiniMax M2,
    GLM-4.7): the episode keeps what the model sampled; ours with each reasoning block (`opener` …
    `closer`) of the assistant turns before the last user message replaced by `replacement` must equal
    the template, token for token. Works on ids: nothing is re-encoded but the markers. `tool_reply`:
    the start of a user message that is a tool reply and so does not count (Qwen3.5 wraps them in one).
    An opener that ends the context is a sampled stop token (GLM's `<|user|>`), not a user message."""

    def rule(tokenizer: Any, ids: list[int]) -> list[int]:
        def enc(text: str) -> list[int]:
            return list(tokenizer.encode(text, add_special_tokens=False)) if text else []

        user, assistant, think, end, reply, instead = map(enc, (user_opener, assistant_opener, opener, closer, tool_reply or "", replacement))
        users = [i for i in range(len(ids)) if _at(ids, user, i) and i + len(user) < len(ids) and not _at(ids, reply, i + len(user))]
        if not users:
            return list(ids)
        last = users[-1]
        out: list[int] = []
        i = 0
        while i < last:
            if _at(ids, assistant, i) and _at(ids, think, i + len(assistant)):
                close = next(j for j in range(i + len(assistant), last) if _at(ids, end, j))
                out += assistant + instead
                i = close + len(end)
            else:
                out.append(ids[i])
                i += 1
        return out + list(ids[last:])

    return rule


def reasoning_dropped_before_last_user_text(user_opener: str, assistant_opener: str, block: str) -> Callable[[Any, list[int]], list[int]]:
    """As `reasoning_dropped_before_last_user`, on text, then re-encoded: for MiniMax M2, whose template
    writes `</think>\n\n` + `\n<minimax:tool_call>` (one `\n\n\n` token in ours), so removing the block
    moves a token boundary. Weaker than the id-level rule: the removed turns are compared as text."""

    def rule(tokenizer: Any, ids: list[int]) -> list[int]:
        text = tokenizer.decode(ids)
        users = [m.start() for m in re.finditer(re.escape(user_opener), text) if m.end() < len(text)]
        if not users:
            return list(ids)
        head, tail = text[: users[-1]], text[users[-1] :]
        head = re.sub(re.escape(assistant_opener) + block, lambda m: assistant_opener, head, flags=re.S)
        return list(tokenizer.encode(head, add_special_tokens=False)) + list(ids[len(ids) - len(tokenizer.encode(tail, add_special_tokens=False)) :])

    return rule


def both(*rules: Callable[[Any, list[int]], list[int]]) -> Callable[[Any, list[int]], list[int]]:
    def rule(tokenizer: Any, ids: list[int]) -> list[int]:
        for each in rules:
            ids = each(tokenizer, ids)
        return ids

    return rule


def empty_reasoning_newlines(tokenizer: Any, ids: list[int]) -> list[int]:
    """Qwen3.5–3.8's generation prompt ends in `<think>\n`; a turn without reasoning continues with `\n</think>`.
    The template's text encodes that `\n\n` as one token: ours [<think>, \n, \n, </think>] is its
    [<think>, \n\n, </think>]. Nothing else differs."""
    think, end = tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    newline, two = (tokenizer.encode(t, add_special_tokens=False) for t in ("\n", "\n\n"))
    split, merged = [think, *newline, *newline, end], [think, *two, end]
    out: list[int] = []
    i = 0
    while i < len(ids):
        if ids[i : i + len(split)] == split:
            out += merged
            i += len(split)
        else:
            out.append(ids[i])
            i += 1
    return out


QWEN35_RULE = both(
    reasoning_dropped_before_last_user("<|im_start|>user\n", "<|im_start|>assistant\n", "<think>", "</think>\n\n", tool_reply="<tool_response>"),
    empty_reasoning_newlines,
)

CASES = {
    "qwen3": FamilyCase("offline:qwen3"),
    "qwen2.5": FamilyCase("offline:qwen2.5", thinks=False),
    "llama3.1": FamilyCase("offline:llama3.1", error_call=LLAMA_ERROR),
    "llama3.2": FamilyCase("offline:llama3.2", error_call=LLAMA_ERROR),
    "gpt-oss": FamilyCase("offline:gpt-oss", reasoning_key="thinking", final_rule=gpt_oss_final),
    "glm-4.5": FamilyCase("offline:glm-4.5", final_rule=glm_final),
    # thinking off: with it on, the template writes a turn without reasoning as `</think>` alone, dropping
    # the `<think>` its own generation prompt opened
    "glm-4.7": FamilyCase("offline:glm-4.7", final_rule=glm_final, template_kwargs={"enable_thinking": False}, thinks=False),
    # thinking on: GLM-4.7 reasons in every turn (its generation prompt opens <think>); the template keeps
    # reasoning only after the last user message and writes `</think>` alone before it
    "glm-4.7-thinking": FamilyCase(
        "offline:glm-4.7",
        final_rule=glm_final,
        always_reasons=True,
        history_rule=reasoning_dropped_before_last_user("<|user|>", "<|assistant|>", "<think>", "</think>", replacement="</think>"),
    ),
    # a fine-tune whose name no family knows: the Qwen3 chat template decides, with no config
    "renamed-qwen3-finetune": FamilyCase("offline:qwen3", renamed="myorg/agent-7b"),
    # thinking off (the config's default): the template leaves the generation prompt's empty reasoning
    # block out of tool-call turns in history; the family states that rule (families/history.py)
    "qwen3-thinking-off": FamilyCase("offline:qwen3", template_kwargs={"enable_thinking": False}, thinks=False, history_rule=get_family("qwen3").history_rule),
    "qwen3.5": FamilyCase("offline:qwen3.5", history_rule=QWEN35_RULE),
    "qwen3.6": FamilyCase("offline:qwen3.6", history_rule=QWEN35_RULE),
    "qwen3.8": FamilyCase("offline:qwen3.8", history_rule=empty_reasoning_newlines),
    # named as on the hub: the cache directory's name would select qwen3 (the check refuses that with thinking off)
    "qwen3-2507": FamilyCase("offline:qwen3-2507", thinks=False, renamed="Qwen/Qwen3-4B-Instruct-2507"),
    # the error turn is a call the environment answers with an error: V3.2's encoder closes <function_results>
    # only after as many results as the turn had calls, and an unknown tool gets no tool result (see docs)
    "deepseek-v3.2": FamilyCase("offline:deepseek-v3.2", arguments_as_strings=True, thinks=False, error_call=LLAMA_ERROR),
    # thinking mode: the encoder wants reasoning in every turn after the last user message (it raises otherwise)
    "deepseek-v3.2-thinking": FamilyCase(
        "offline:deepseek-v3.2", arguments_as_strings=True, error_call=LLAMA_ERROR, always_reasons=True, template_kwargs={"enable_thinking": True}
    ),
    "deepseek-v4": FamilyCase("offline:deepseek-v4", arguments_as_strings=True, template_kwargs={"enable_thinking": True}),
    "deepseek-v4-chat": FamilyCase("offline:deepseek-v4", arguments_as_strings=True, thinks=False),
    "deepseek-v3.1": FamilyCase("offline:deepseek-v3.1", arguments_as_strings=True, thinks=False),
    # the training format (families/mistral.py): Nemo's template drops the system prompt once the assistant answers
    # (the family's rule); the error turn is a call the environment answers with an error, because the template
    # cannot render a user message after tool results (it requires user/assistant alternation): the training
    # format's `[INST]…[/INST]` there is checked against mistral-common in tests/test_families_mistral.py
    "mistral-nemo": FamilyCase(
        "offline:mistral-nemo", error_call=LLAMA_ERROR, call_id_format="call{index}x{n:03d}", history_rule=get_family("mistral").history_rule
    ),
    "minimax-m2": FamilyCase(
        "offline:minimax-m2",
        always_reasons=True,
        history_rule=reasoning_dropped_before_last_user_text("]~b]user\n", "]~b]ai\n", r"<think>\n.*?</think>\n\n"),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_family_episode_is_token_exact(name: str, env_server: LocalEnvServer, openreward_client) -> None:
    run = await run_family_episode(env_server, openreward_client, CASES[name])
    check_family_run(run)

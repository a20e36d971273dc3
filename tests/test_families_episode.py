"""Token-exact multi-turn episodes per model family, against each family's official chat template
and real tokenizer (see tests/family_episodes.py for what is scripted and what is checked)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from family_episodes import FamilyCase, check_family_run, run_family_episode

from openreward_rl import EpisodeSettings
from openreward_rl.local_env import LocalEnvServer

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


def reasoning_dropped_before_last_user(user_opener: str, assistant_opener: str, block: str, *, tool_reply: str | None = None) -> Callable[[Any, list[int]], list[int]]:
    """The rule of templates that keep reasoning only after the last user message (Qwen3.5, MiniMax M2):
    the episode keeps what the model sampled; ours with the reasoning blocks (`block`, a regex) of the
    assistant turns before the last user message removed must equal the template. `tool_reply`: the
    start of a user message that is a tool reply and so does not count (Qwen3.5 wraps them in one)."""

    def rule(tokenizer: Any, ids: list[int]) -> list[int]:
        text = tokenizer.decode(ids)
        users = [m.start() for m in re.finditer(re.escape(user_opener), text)]
        if tool_reply is not None:
            users = [u for u in users if not text.startswith(tool_reply, u + len(user_opener))]
        if not users:
            return list(ids)
        head, tail = text[: users[-1]], text[users[-1] :]
        head = re.sub(re.escape(assistant_opener) + block, lambda m: assistant_opener, head, flags=re.S)
        return tokenizer.encode(head + tail, add_special_tokens=False)

    return rule


QWEN35_RULE = reasoning_dropped_before_last_user(
    "<|im_start|>user\n", "<|im_start|>assistant\n", r"<think>\n.*?</think>\n\n", tool_reply="<tool_response>"
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
    "qwen3.5": FamilyCase("offline:qwen3.5", history_rule=QWEN35_RULE),
    "qwen3.6": FamilyCase("offline:qwen3.6", history_rule=QWEN35_RULE),
    "qwen3-2507": FamilyCase("offline:qwen3-2507", thinks=False),
    "deepseek-v3.1": FamilyCase("offline:deepseek-v3.1", arguments_as_strings=True, thinks=False),
    "minimax-m2": FamilyCase(
        "offline:minimax-m2",
        always_reasons=True,
        history_rule=reasoning_dropped_before_last_user("]~b]user\n", "]~b]ai\n", r"<think>\n.*?</think>\n\n"),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_family_episode_is_token_exact(name: str, env_server: LocalEnvServer, openreward_client) -> None:
    run = await run_family_episode(env_server, openreward_client, CASES[name])
    check_family_run(run)

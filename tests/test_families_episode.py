"""Token-exact multi-turn episodes per model family, against each family's official chat template
and real tokenizer (see tests/family_episodes.py for what is scripted and what is checked)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from family_episodes import FamilyCase, check_family_run, run_family_episode
from openreward_rl.env.local_server import LocalEnvServer
from openreward_rl.families import get_family
from openreward_rl.families.tool_preamble import HERMES_PREAMBLE

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


# the families' declared rules (families/history.py: the start-up check applies them too), checked here on whole episodes
QWEN35_RULE = both(get_family("qwen3.5").history_rule, empty_reasoning_newlines)

CASES = {
    "qwen3": FamilyCase("offline:qwen3"),
    "qwen2.5": FamilyCase("offline:qwen2.5", thinks=False),
    "llama3.1": FamilyCase("offline:llama3.1", error_call=LLAMA_ERROR),
    "llama3.2": FamilyCase("offline:llama3.2", error_call=LLAMA_ERROR),
    "gpt-oss": FamilyCase("offline:gpt-oss", reasoning_key="thinking", final_rule=gpt_oss_final),
    "glm-4.5": FamilyCase("offline:glm-4.5", final_rule=glm_final),
    # thinking off: with it on, the template writes a turn without reasoning as `</think>` alone, dropping
    # the `<think>` its own generation prompt opened
    "glm-4.7": FamilyCase(
        "offline:glm-4.7", final_rule=glm_final, template_kwargs={"enable_thinking": False}, thinks=False
    ),
    # thinking on: GLM-4.7 reasons in every turn (its generation prompt opens <think>); the template keeps
    # reasoning only after the last user message and writes `</think>` alone before it
    "glm-4.7-thinking": FamilyCase(
        "offline:glm-4.7",
        final_rule=glm_final,
        always_reasons=True,
        history_rule=get_family("glm-4.7").history_rule,
    ),
    # a fine-tune whose name no family knows: the Qwen3 chat template decides, with no config
    "renamed-qwen3-finetune": FamilyCase("offline:qwen3", renamed="myorg/agent-7b"),
    # thinking off (the config's default): the template leaves the generation prompt's empty reasoning
    # block out of tool-call turns in history; the family states that rule (families/history.py)
    "qwen3-thinking-off": FamilyCase(
        "offline:qwen3",
        template_kwargs={"enable_thinking": False},
        thinks=False,
        history_rule=get_family("qwen3").history_rule,
    ),
    "qwen3.5": FamilyCase("offline:qwen3.5", history_rule=QWEN35_RULE),
    "qwen3.6": FamilyCase("offline:qwen3.6", history_rule=QWEN35_RULE),
    "qwen3.8": FamilyCase("offline:qwen3.8", history_rule=empty_reasoning_newlines),
    # named as on the hub: the cache directory's name would select qwen3 (the check refuses that with thinking off)
    "qwen3-2507": FamilyCase("offline:qwen3-2507", thinks=False, renamed="Qwen/Qwen3-4B-Instruct-2507"),
    # the error turn is a call the environment answers with an error: V3.2's encoder closes <function_results>
    # only after as many results as the turn had calls, and an unknown tool gets no tool result (see docs)
    "deepseek-v3.2": FamilyCase(
        "offline:deepseek-v3.2", arguments_as_strings=True, thinks=False, error_call=LLAMA_ERROR
    ),
    # thinking mode: the encoder wants reasoning in every turn after the last user message (it raises otherwise)
    "deepseek-v3.2-thinking": FamilyCase(
        "offline:deepseek-v3.2",
        arguments_as_strings=True,
        error_call=LLAMA_ERROR,
        always_reasons=True,
        template_kwargs={"enable_thinking": True},
    ),
    "deepseek-v4": FamilyCase(
        "offline:deepseek-v4", arguments_as_strings=True, template_kwargs={"enable_thinking": True}
    ),
    "deepseek-v4-chat": FamilyCase("offline:deepseek-v4", arguments_as_strings=True, thinks=False),
    "deepseek-v3.1": FamilyCase("offline:deepseek-v3.1", arguments_as_strings=True, thinks=False),
    # the training format (families/mistral.py): Nemo's template drops the system prompt once the assistant answers
    # (the family's rule); the error turn is a call the environment answers with an error, because the template
    # cannot render a user message after tool results (it requires user/assistant alternation): the training
    # format's `[INST]…[/INST]` there is checked against mistral-common in tests/test_families_mistral.py
    "mistral-nemo": FamilyCase(
        "offline:mistral-nemo",
        error_call=LLAMA_ERROR,
        call_id_format="call{index}x{n:03d}",
        history_rule=get_family("mistral").history_rule,
    ),
    # SmolLM2's plain ChatML renders no tools and no calls: the family's Hermes preamble shows the tools in the
    # system prompt (the episode's first prompt, compared like every other), the calls are text in the turn
    "chatml-smollm2": FamilyCase("offline:smollm2", thinks=False, calls_as_text=HERMES_PREAMBLE),
    # Qwen2.5-VL's official template is the same plain ChatML (no tools; images as vision placeholders):
    # the text episode here, its images in tests/test_vision_episode.py
    "qwen2.5-vl": FamilyCase("offline:qwen2.5-vl", thinks=False, calls_as_text=HERMES_PREAMBLE),
    # R1-0528's template (on DeepSeek-R1's tokenizer: V3's vocabulary) holds the episode append-only; it writes
    # no reasoning, and keeps only the text after </think> of each assistant turn
    "deepseek-r1-0528": FamilyCase("offline:deepseek-r1-0528", arguments_as_strings=True, thinks=False),
    # the opt-in training format (families/deepseek.py) on R1's tokenizer and template: R1's generation prompt
    # opens <think>, so every turn reasons; the reference is the format itself (tests/test_families_deepseek.py
    # checks it against R1-0528's template, renderers and tml-renderers)
    "deepseek-v3-format-r1": FamilyCase(
        "offline:deepseek-r1", arguments_as_strings=True, always_reasons=True, family=get_family("deepseek-v3-format")
    ),
    "deepseek-v3-format-v3": FamilyCase(
        "offline:deepseek-v3", arguments_as_strings=True, family=get_family("deepseek-v3-format")
    ),
    "minimax-m2": FamilyCase(
        "offline:minimax-m2",
        always_reasons=True,
        history_rule=get_family("minimax-m2").history_rule,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_family_episode_is_token_exact(name: str, env_server: LocalEnvServer, openreward_client) -> None:
    run = await run_family_episode(env_server, openreward_client, CASES[name])
    check_family_run(run)

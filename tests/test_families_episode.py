"""Token-exact multi-turn episodes per model family, against each family's official chat template
and real tokenizer (see tests/family_episodes.py for what is scripted and what is checked)."""

from __future__ import annotations

import re

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


CASES = {
    "qwen3": FamilyCase("offline:qwen3"),
    "qwen2.5": FamilyCase("offline:qwen2.5", thinks=False),
    "llama3.1": FamilyCase("offline:llama3.1", error_call=LLAMA_ERROR),
    "llama3.2": FamilyCase("offline:llama3.2", error_call=LLAMA_ERROR),
    "gpt-oss": FamilyCase("offline:gpt-oss", reasoning_key="thinking", final_rule=gpt_oss_final),
    "glm-4.5": FamilyCase("offline:glm-4.5", final_rule=glm_final),
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_family_episode_is_token_exact(name: str, env_server: LocalEnvServer, openreward_client) -> None:
    run = await run_family_episode(env_server, openreward_client, CASES[name])
    check_family_run(run)

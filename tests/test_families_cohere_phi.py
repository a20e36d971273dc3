"""Cohere's running call index and Phi-4-mini's training format, on tokenizers **assembled for the test**.

No Command or Phi-4-mini tokenizer or tool template ships in a package reachable offline, so both families
are proven at start-up only, on the user's tokenizer. These tests run the start-up probe on the Qwen3
tokenizer with the families' special tokens added and on templates written here: they check the families'
mechanics (the index the Cohere bridge carries, the format's bridge and parser), never the vendors' own
vocabularies or templates.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs
import pytest

from openreward_rl.assets import load_tokenizer
from openreward_rl.families import family_for, get_family
from openreward_rl.families.probe import ModelCheckError, check_model, probe_family

# Command R7B's tool turns, reduced to what the bridge depends on: each call's tool_call_id is its running
# index among all calls of the conversation, in the action list and in the results that answer it.
COHERE_TEMPLATE = (
    "{%- macro call_index(messages, call_id) -%}{%- set n = namespace(i=0, found=-1) -%}"
    "{%- for m in messages -%}{%- for c in (m.tool_calls or []) -%}{%- if c.id == call_id and n.found < 0 -%}{%- set n.found = n.i -%}{%- endif -%}"
    "{%- set n.i = n.i + 1 -%}{%- endfor -%}{%- endfor -%}{{ n.found }}{%- endmacro -%}"
    "{{ bos_token }}{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{{ m.content }}<|END_OF_TURN_TOKEN|>"
    "{%- elif m.role == 'user' -%}<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ m.content }}<|END_OF_TURN_TOKEN|>"
    "{%- elif m.role == 'assistant' -%}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    "{%- if m.tool_calls -%}<|START_ACTION|>[{%- for c in m.tool_calls -%}"
    '{"tool_call_id": "{{ call_index(messages, c.id) }}", "tool_name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}'
    "{%- if not loop.last %}, {% endif -%}{%- endfor -%}]<|END_ACTION|>"
    "{%- else -%}<|START_RESPONSE|>{{ m.content }}<|END_RESPONSE|>{%- endif -%}<|END_OF_TURN_TOKEN|>"
    "{%- elif m.role == 'tool' -%}{%- if loop.previtem is not defined or loop.previtem.role != 'tool' -%}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TOOL_RESULT|>[{%- endif -%}"
    '{"tool_call_id": "{{ call_index(messages, m.tool_call_id) }}", "results": {"0": {{ m.content | tojson }}}}'
    "{%- if loop.nextitem is defined and loop.nextitem.role == 'tool' -%}, {% else -%}]<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>{%- endif -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{%- endif -%}"
)
COHERE_TOKENS = [
    "<|START_OF_TURN_TOKEN|>",
    "<|END_OF_TURN_TOKEN|>",
    "<|SYSTEM_TOKEN|>",
    "<|USER_TOKEN|>",
    "<|CHATBOT_TOKEN|>",
    "<|START_ACTION|>",
    "<|END_ACTION|>",
    "<|START_RESPONSE|>",
    "<|END_RESPONSE|>",
    "<|START_TOOL_RESULT|>",
    "<|END_TOOL_RESULT|>",
]
PHI_TOKENS = [
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
    "<|tool|>",
    "<|/tool|>",
    "<|tool_call|>",
    "<|/tool_call|>",
]
# Phi-4-mini-instruct's template as its tokenizer_config writes it (read, not shipped): no tool call, ever
PHI_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and message['tools'] is not none %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}"
    "{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)


def assembled(name: str, tokens: list[str], template: str, eos: str) -> Any:
    tokenizer = copy.deepcopy(load_tokenizer("offline:qwen3"))
    tokenizer.add_special_tokens({"additional_special_tokens": tokens})
    tokenizer.eos_token = eos
    tokenizer.chat_template = template
    tokenizer.name_or_path = name
    return tokenizer


@pytest.fixture(scope="module")
def command() -> Any:
    return assembled("assembled/command-r7b-for-the-test", COHERE_TOKENS, COHERE_TEMPLATE, "<|END_OF_TURN_TOKEN|>")


def test_the_cohere_bridge_carries_the_running_call_index(command: Any) -> None:
    """The probe's second call turn is the conversation's third call: the template answers it as
    tool_call_id "2", which the family's bridge writes and the template-derived one (numbering from 0) cannot."""
    family = family_for(command)
    assert family.name == "cohere" and family.bridge_factory is not None
    verdict = probe_family(command, family)
    assert verdict.exact, verdict.difference
    assert verdict.bridge == "hand-written" and verdict.turns == 4
    derived = probe_family(command, attrs.evolve(family, bridge_factory=None))
    assert not derived.exact and "the prompt of turn 2 differs" in derived.difference


@pytest.fixture(scope="module")
def phi() -> Any:
    return assembled("assembled/Phi-4-mini-instruct-for-the-test", PHI_TOKENS, PHI_TEMPLATE, "<|endoftext|>")


def test_phi_4_minis_template_is_refused_at_start_up_and_names_the_training_format(phi: Any) -> None:
    assert family_for(phi).name == "phi-4-mini"
    with pytest.raises(ModelCheckError, match="opt in: model_family: phi-4-mini-format"):
        check_model(phi, get_family("phi-4-mini"), disk_cache=False)
    verdict = check_model(phi, get_family("phi-4-mini-format"), disk_cache=False)
    assert (
        verdict.exact and verdict.turns == 4 and verdict.departs.startswith("the official template (phi-4-mini family)")
    )


def test_a_phi_4_mini_template_that_writes_the_formats_calls_runs_as_it_is(phi: Any) -> None:
    """A fine-tune whose template writes the stated format needs no opt-in: the official family runs it."""
    template = (
        "{% if messages[0]['role'] == 'system' or tools %}<|system|>{{ messages[0]['content'] if messages[0]['role'] == 'system' else '' }}"
        "{% if tools %}<|tool|>{{ tools | map(attribute='function') | list | tojson }}<|/tool|>{% endif %}<|end|>{% endif %}"
        "{% for m in messages if m['role'] != 'system' %}<|{{ m['role'] }}|>{{ m['content'] or '' }}"
        '{% if m.tool_calls %}<|tool_call|>[{% for c in m.tool_calls %}{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
        "{% if not loop.last %}, {% endif %}{% endfor %}]<|/tool_call|>{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    tuned = assembled("acme/phi-4-mini-tools", PHI_TOKENS, template, "<|endoftext|>")
    verdict = check_model(tuned, get_family("phi-4-mini"), disk_cache=False)
    assert verdict.exact, verdict.difference
    assert probe_family(tuned, get_family("phi-4-mini-format")).departs == ""


# The 14 models issue 30 names (what a researcher trains); each resolves to a family that runs it or proves it at start-up
POPULAR = {
    "google/gemma-4-31B-it": "gemma-4",
    "moonshotai/Kimi-K2-Instruct-0905": "kimi-k2",
    "moonshotai/Kimi-K2.5": "kimi-k2.5",
    "deepseek-ai/DeepSeek-V3-0324": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-v3",
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": "mistral",
    "mistralai/Devstral-Small-2507": "mistral",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama4",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "nemotron-3",
    "microsoft/Phi-4-mini-instruct": "phi-4-mini",
    "ByteDance-Seed/Seed-OSS-36B-Instruct": "seed-oss",
    "CohereLabs/c4ai-command-r7b-12-2024": "cohere",
    "Qwen/Qwen3-8B": "qwen3",
    "zai-org/GLM-4.5-Air": "glm-4.5",
}


@pytest.mark.parametrize(("model", "family"), sorted(POPULAR.items()))
def test_no_popular_model_is_refused_outright(model: str, family: str) -> None:
    found = family_for(model)  # UnsupportedModelError for a refused family
    assert found.name == family and not found.refused


# Miles' TITO registry (radixark/miles, miles/utils/chat_template_utils/tito_tokenizer.py, TITOTokenizerType): a
# model of each family resolves to ours (docs/families.md lists them)
MILES_TITO = {
    "Qwen/Qwen3-8B": "qwen3",  # qwen3
    "Qwen/Qwen3.5-35B-A3B": "qwen3.5",  # qwen35
    "Qwen/Qwen3.6-35B-A3B": "qwen3.5",  # qwen36
    "Qwen/Qwen3.8-27B": "qwen3.5",  # qwen38small
    "Qwen/Qwen3.8-Flash-Next": "qwen3.5",  # qwen4exp (model_type qwen4_exp)
    "Qwen/Qwen3-Next-80B-A3B-Thinking": "qwen",  # qwennext (the 2507 templates)
    "Qwen/Qwen3-30B-A3B-Thinking-2507": "qwen",  # qwennext
    "zai-org/GLM-4.7": "glm-4.7",  # glm47
    "zai-org/GLM-5.3": "glm-4.7",  # glm53
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B": "nemotron-3",  # nemotron3
    "moonshotai/Kimi-K2.5": "kimi-k2.5",  # kimi25
    "moonshotai/Kimi-K2.6": "kimi-k2.5",  # kimi26
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2",  # minimax_m25
    "MiniMaxAI/MiniMax-M2.7": "minimax-m2",  # minimax_m27
    "deepseek-ai/DeepSeek-V3.2": "deepseek-v3.2",  # deepseekv32
    "deepseek-ai/DeepSeek-V4-Flash": "deepseek-v4",  # deepseekv4
}


@pytest.mark.parametrize(("model", "family"), sorted(MILES_TITO.items()))
def test_miles_tito_families_have_ours(model: str, family: str) -> None:
    assert family_for(model).name == family

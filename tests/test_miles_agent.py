"""Miles' agentic path end to end: `openreward_rl.backends.miles_agent` as Miles' agent function.

Real parts: the SDK's environment server on 127.0.0.1 (Faulty, MathEnv), the Qwen3 tokenizer and
chat template, the SGLang `/generate` wire double. Doubles written from Miles' source (see
tests/doubles/miles_session_double.py): Miles' TITO session server (v1) and `agentic_tool_call.generate`,
and Miles' `Sample` (tests/doubles/miles_double.py)."""

from __future__ import annotations

import copy
import sys
import types
from types import SimpleNamespace
from typing import Any

import pytest

from doubles import miles_double, miles_rollout_double, miles_session_double, slime_double
from openreward_rl.assets import load_tokenizer
from openreward_rl.backends import miles, miles_agent
from openreward_rl.backends.filters import group_verdict
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.loop.trajectory import StopReason
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from test_backend_slime import SAMPLING, SUBMIT_OK, SUBMIT_WRONG, config_file, record_of  # noqa: F401  (fixture)

pytestmark = pytest.mark.anyio

EXPLODE = '<tool_call>\n{"name": "explode", "arguments": {"message": "boom"}}\n</tool_call>'
WAIT = 'Let me wait first.\n<tool_call>\n{"name": "hang", "arguments": {"seconds": 0}}\n</tool_call>'


@pytest.fixture
async def stack(monkeypatch) -> Any:
    tokenizer = load_tokenizer("offline:qwen3")
    async with SGLangTestServer(tokenizer, weight_version="w3") as sglang, miles_session_double.SessionServerDouble(tokenizer, sglang.url) as sessions:
        miles_session_double.install(monkeypatch)
        yield SimpleNamespace(sglang=sglang, sessions=sessions, tokenizer=tokenizer)
    await miles_agent.close_agent_states()


def make_args(stack: Any, **overrides: Any) -> SimpleNamespace:
    values = dict(
        session_server_ip="127.0.0.1",
        session_server_ports=[stack.sessions.port],
        use_session_server="v1",
        custom_agent_function_path="openreward_rl.backends.miles_agent.run",
        hf_checkpoint="offline:qwen3",
        rollout_max_context_len=4096,
        rollout_max_response_len=256,
        max_seq_len=None,
        group_rm=False,
        reward_key=None,
        partial_rollout=False,
    )
    values.update(overrides)
    return SimpleNamespace(**values)


def make_sample(index: int = 0, sample_index: int = 0, environment: str = "Faulty") -> miles_double.Sample:
    row = task_row(TaskRef(environment, "train", index=index, variant=environment.lower()))
    return miles_double.Sample(index=sample_index, group_index=0, prompt=row["prompt"], metadata=row["metadata"], routing_key=f"route-{sample_index}")


async def run_generate(args: Any, sample: miles_double.Sample) -> miles_double.Sample:
    assert miles_double.generate_form(miles_agent.generate) == "new"
    output = await miles_agent.generate(miles_session_double.GenerateFnInput(SimpleNamespace(args=args), sample, copy.deepcopy(SAMPLING)))
    return output.samples


async def test_agent_runs_a_multi_turn_episode_and_the_reward_reaches_the_reward_hook(config_file, stack) -> None:
    stack.sglang.push(ScriptedCompletion(text=WAIT), ScriptedCompletion(text=SUBMIT_OK))
    args = make_args(stack)
    sample = await run_generate(args, make_sample())
    assert sample.status is miles_double.Sample.Status.COMPLETED
    assert record_of(sample).episode_reward == 1.0 and record_of(sample).stop_reason is StopReason.COMPLETED
    assert record_of(sample).metrics["turns"] == 2.0 and record_of(sample).metrics["tool_calls"] == 2.0  # hang, then submit
    sample.reward = await miles.reward(args, sample)  # what --custom-rm-path reads
    assert sample.reward == 1.0
    miles_double.check_trainable(sample, args)
    # the session server owns the tokens: the sample is its two calls, sampled ids trained, tool turn masked
    first, second = stack.sglang.requests
    end = stack.tokenizer.convert_tokens_to_ids("<|im_end|>")
    sampled = [stack.tokenizer.encode(WAIT) + [end], stack.tokenizer.encode(SUBMIT_OK) + [end]]
    assert first.input_ids + sampled[0] == second.input_ids[: len(first.input_ids) + len(sampled[0])]
    assert sample.tokens == second.input_ids + sampled[1]
    gap = len(second.input_ids) - len(first.input_ids) - len(sampled[0])
    assert sample.loss_mask == [1] * len(sampled[0]) + [0] * gap + [1] * len(sampled[1])
    assert sample.weight_versions == ["w3", "w3"]
    assert sample.metadata["agent_metrics"]["model_calls"] == 2.0 and sample.non_generation_time >= 0.0
    # the episode's own sampling settings reached SGLang under SGLang's names
    assert first.sampling_params["max_new_tokens"] <= SAMPLING["max_new_tokens"] and first.sampling_params["temperature"] == 1.0
    assert stack.sessions.created == 1 and stack.sessions.deleted and not stack.sessions.sessions


async def test_environment_fault_mid_episode_is_aborted_not_a_zero_reward(config_file, stack) -> None:
    stack.sglang.push(ScriptedCompletion(text=EXPLODE))
    args = make_args(stack)
    sample = await run_generate(args, make_sample())
    assert record_of(sample).stop_reason is StopReason.ENV_ERROR and "boom" in record_of(sample).stop_detail
    # Miles set COMPLETED from the model call's finish reason; the episode says the run failed
    assert sample.status is miles_double.Sample.Status.ABORTED and sample.remove_sample
    assert not any(sample.loss_mask) and not any(sample.rollout_log_probs)
    assert record_of(sample).reward_observed is False
    assert sample.reward == 0.0  # Miles runs no reward model for ABORTED: the placeholder value is preset
    miles_double.check_trainable(sample, args)
    stack.sglang.push(ScriptedCompletion(text=SUBMIT_OK))
    ok = await run_generate(args, make_sample(sample_index=1))
    ok.reward = await miles.reward(args, ok)
    assert group_verdict(args, [sample, ok]) == (False, "aborted_member")  # the filter drops the group


async def miles_generate_and_rm(args: Any, sample: miles_double.Sample) -> miles_double.Sample:
    """Through Miles' generate_and_rm (tests/doubles/miles_rollout_double.py): no reward model for an ABORTED sample."""
    args.custom_generate_function_path = "openreward_rl.backends.miles_agent.generate"
    args.custom_rm_path = "openreward_rl.backends.miles.reward"
    args.mask_offpolicy_in_partial_rollout = False
    state = miles_rollout_double.GenerateState(args)
    return await miles_rollout_double.generate_and_rm(state, sample, copy.deepcopy(SAMPLING))


async def test_environment_that_never_opens_gives_a_removed_placeholder_not_a_none_reward(config_file, stack) -> None:
    """No model call reached the session, so Miles returns a copy of the input sample, ABORTED, without the
    agent's record; Miles skips the reward model for it and its train-data conversion would meet reward None
    (TypeError) if the filter were off. It comes back removed, masked, with a placeholder reward and the record."""
    args = make_args(stack)
    sample = await miles_generate_and_rm(args, make_sample(index=999))
    assert stack.sglang.requests == [] and stack.sessions.created == 1 and not stack.sessions.sessions
    assert sample.status is miles_double.Sample.Status.ABORTED and sample.remove_sample is True
    assert sample.reward == 0.0 and sample.response_length == 1 and sample.loss_mask == [0] and sample.rollout_log_probs == [0.0]
    record = record_of(sample)
    assert record.stop_reason is StopReason.ENV_ERROR and record.placeholder and record.reward_observed is False
    miles_double.check_trainable(sample, args)
    stack.sglang.push(ScriptedCompletion(text=SUBMIT_OK))
    ok = await miles_generate_and_rm(args, make_sample(sample_index=1))
    assert ok.reward == 1.0 and group_verdict(args, [sample, ok]) == (False, "aborted_member")  # the filter drops the group
    data = miles_double.convert_samples_to_train_data(args, [sample, ok])  # and without the filter nothing breaks
    assert data["loss_masks"][0] == [0] and any(data["loss_masks"][1])


async def test_agent_that_raises_before_a_model_call_gives_a_removed_placeholder(config_file, stack, monkeypatch) -> None:
    """The agent function itself fails (Miles logs it and collects nothing): no record came back at all."""

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("agent broke")

    monkeypatch.setattr(miles_agent, "_state", lambda args: (_ for _ in ()).throw(RuntimeError("no state")))
    monkeypatch.setattr(miles_agent, "run", broken)
    args = make_args(stack)
    sample = await miles_generate_and_rm(args, make_sample())
    assert sample.status is miles_double.Sample.Status.ABORTED and sample.remove_sample and sample.reward == 0.0
    assert sample.tokens == [0, 0] and record_of(sample).stop_reason is StopReason.ABORTED and "without the agent's record" in record_of(sample).stop_detail
    miles_double.check_trainable(sample, args)


async def test_group_rm_leaves_the_removed_placeholder_reward_to_the_reward_hook(config_file, stack) -> None:
    """Miles asserts a group RM meets no preset reward; the reward hook then gives the placeholder 0.0."""
    args = make_args(stack, group_rm=True, sglang_router_ip="127.0.0.1", sglang_router_port=stack.sglang.port)  # Miles' args carry the router
    sample = await miles_generate_and_rm(args, make_sample(index=999))
    assert sample.reward is None and sample.remove_sample and sample.status is miles_double.Sample.Status.ABORTED
    miles_double.group_rm_precheck([sample])
    assert await miles.reward(args, [sample]) == [0.0]


async def test_agent_without_args_names_the_fix(config_file, stack, monkeypatch) -> None:
    monkeypatch.delenv(miles_agent.TOKENIZER_ENV, raising=False)
    with pytest.raises(miles.RolloutStepError, match="OPENREWARD_RL_TOKENIZER"):  # a ConfigError Miles would swallow, raised past it
        await miles_agent.run(f"{stack.sessions.url}/sessions/x", [], {}, make_sample().metadata)


async def test_miles_generate_used_directly_with_the_tokenizer_variable(config_file, stack, monkeypatch) -> None:
    monkeypatch.setenv(miles_agent.TOKENIZER_ENV, "offline:qwen3")
    stack.sglang.push(ScriptedCompletion(text=SUBMIT_WRONG))
    args = make_args(stack)
    output = await miles_session_double.agentic_generate(miles_session_double.GenerateFnInput(SimpleNamespace(args=args), make_sample(), copy.deepcopy(SAMPLING)))
    sample = output.samples
    assert sample.status is miles_double.Sample.Status.COMPLETED and record_of(sample).episode_reward == 0.0
    assert await miles.reward(args, sample) == 0.0 and record_of(sample).reward_observed is True


def test_request_kwargs_map_back_to_sglang_names() -> None:
    kwargs = miles_session_double.build_chat_request_kwargs(dict(SAMPLING, sampling_seed=5))
    assert miles_agent.chat_sampling_params(kwargs) == {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64, "no_stop_trim": True, "sampling_seed": 5}


def _framework_sample(cls: type, module: str) -> type:
    """The double's Sample class as the trainer's own (`<module>.Sample`), which is what the filter reads."""
    return type("Sample", (cls,), {"__module__": module})


@pytest.mark.parametrize("caller", ["miles", "slime"])
def test_dynamic_filter_answers_the_caller_when_both_trainers_import(caller: str, monkeypatch) -> None:
    """Slime and Miles both importable (their filter_hub/base_types doubles in sys.modules, slime's first):
    each trainer reads the answer with its own `call_dynamic_filter`, which takes any other class as a
    truthy keep. A zero-spread group must be dropped for both, a spread one kept."""
    from openreward_rl.backends import filters

    doubles = {"slime": slime_double, "miles": miles_double}
    for name, double in doubles.items():  # the order slime, miles is the order the old lookup tried
        for package in (name, f"{name}.rollout", f"{name}.rollout.filter_hub"):
            monkeypatch.setitem(sys.modules, package, types.ModuleType(package))
        base_types = types.ModuleType(f"{name}.rollout.filter_hub.base_types")
        base_types.DynamicFilterOutput, base_types.call_dynamic_filter = double.DynamicFilterOutput, double.call_dynamic_filter
        monkeypatch.setitem(sys.modules, base_types.__name__, base_types)
    double = doubles[caller]
    cls = _framework_sample(double.Sample, f"{caller}.utils.types")
    args = SimpleNamespace(reward_key=None)
    flat = [cls(index=0, reward=1.0, status=cls.Status.COMPLETED), cls(index=1, reward=1.0, status=cls.Status.COMPLETED)]
    verdict = double.call_dynamic_filter(filters.keep_informative_groups, args, flat)
    assert type(verdict) is double.DynamicFilterOutput and verdict.keep is False and verdict.reason == "zero_std_1.0"
    flat[1].reward = 0.0
    assert double.call_dynamic_filter(filters.keep_informative_groups, args, flat).keep is True
    fanned = [[cls(index=0, rollout_id=0, reward=0.5, status=cls.Status.COMPLETED)], [cls(index=1, rollout_id=1, reward=0.5, status=cls.Status.COMPLETED)]]
    assert double.call_dynamic_filter(filters.keep_informative_groups, args, fanned).keep is False
    # a Sample class of neither trainer: a plain bool, which both read correctly
    assert filters.keep_informative_groups(args, [double.Sample(index=0, reward=1.0), double.Sample(index=1, reward=1.0)]) is False

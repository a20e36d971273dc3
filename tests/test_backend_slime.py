"""The Slime hooks end to end: the SDK's real environment server (Faulty, MathEnv) on 127.0.0.1,
the SGLang wire-format double (`SGLangTestServer`, scripted completions, real Qwen3 tokenizer),
and a test double of Slime's `Sample` (tests/doubles/slime_double.py) that asserts every rule Slime
relies on."""

from __future__ import annotations

import copy
import inspect
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import openreward_rl
from doubles import slime_double
from openreward_rl.assets import load_tokenizer
from openreward_rl.backends import filters, slime
from openreward_rl.backends._sample import state as _state
from openreward_rl.backends._sample.fill import samples_from_trajectory
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.config import ConfigError
from openreward_rl.env.tasks import TaskRef
from openreward_rl.loop.trajectory import StopReason, TokenSegment, Trajectory
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer

pytestmark = pytest.mark.anyio

SUBMIT_OK = '<tool_call>\n{"name": "submit", "arguments": {"answer": "ok"}}\n</tool_call>'
SUBMIT_WRONG = '<tool_call>\n{"name": "submit", "arguments": {"answer": "nope"}}\n</tool_call>'
EXPLODE = '<tool_call>\n{"name": "explode", "arguments": {"message": "boom"}}\n</tool_call>'


def record_of(sample: Any) -> EpisodeRecord:
    """What the hooks stored on `sample`, read the way the reward hook and the rollout log read it."""
    return EpisodeRecord.from_metadata(sample.metadata)


@pytest.fixture
def tokenizer() -> Any:
    return load_tokenizer("offline:qwen3")


@pytest.fixture
def config_file(served_config) -> Any:
    """context_policy: none: these tests read one Sample per rollout; with the default policy the hook returns a list
    for every rollout in training (test_the_default_context_policy_makes_a_list_of_every_training_rollout)."""
    return served_config({"Faulty": {"context_policy": "none"}, "MathEnv": {"max_turns": 3, "context_policy": "none"}})


@pytest.fixture
async def sglang(tokenizer) -> Any:
    async with SGLangTestServer(tokenizer, weight_version="w7") as server:
        yield server
    await _state.close_states()


def make_args(server: SGLangTestServer, **overrides: Any) -> SimpleNamespace:
    return slime_double.rollout_args("127.0.0.1", server.port, **overrides)


def make_sample(environment: str = "Faulty", index: int = 0, sample_index: int = 0) -> slime_double.Sample:
    return slime_double.task_sample(
        TaskRef(environment, "train", index=index),
        index=sample_index,
        group_index=0,
        session_id=f"session-{sample_index}",
    )


SAMPLING = {
    "temperature": 1.0,
    "top_p": 1.0,
    "max_new_tokens": 64,
    "no_stop_trim": True,
    "custom_params": {"keep": ["me"]},
}


async def run(
    args: Any, sample: slime_double.Sample, *, evaluation: bool = False, sampling: dict[str, Any] | None = None
) -> Any:
    return await slime_double.call_generate(
        slime.generate, args, sample, copy.deepcopy(sampling or SAMPLING), evaluation=evaluation
    )


def test_generate_signature_receives_evaluation() -> None:
    parameters = list(inspect.signature(slime.generate).parameters)
    assert parameters[:3] == ["args", "sample", "sampling_params"]
    assert "evaluation" in parameters  # Slime passes evaluation= only to a parameter of this exact name
    assert inspect.iscoroutinefunction(slime.generate) and inspect.iscoroutinefunction(slime.reward)


async def test_completed_episode_fills_sample_token_exactly(config_file, sglang, tokenizer) -> None:
    sglang.push(ScriptedCompletion(text=SUBMIT_OK))
    args = make_args(sglang)
    sample = make_sample()
    sampling = copy.deepcopy(SAMPLING)
    out = await slime_double.call_generate(slime.generate, args, sample, sampling)
    assert out is sample  # the received sample, mutated
    assert sampling == SAMPLING  # nested dicts untouched
    slime_double.check_output(out, args)
    assert sample.status is slime_double.Sample.Status.COMPLETED
    assert sample.reward == 1.0 and record_of(sample).reward_observed is True
    (request,) = sglang.requests
    sampled = tokenizer.encode(SUBMIT_OK) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert sample.tokens == request.input_ids + sampled  # exactly what was sent plus what was sampled
    assert sample.loss_mask == [1] * len(sampled) and sample.response_length == len(sampled)
    assert request.routing_key == "session-0"
    assert request.sampling_params["custom_params"] == {"keep": ["me"]}
    assert sample.weight_versions == ["w7"]
    metadata = sample.metadata
    json.dumps(metadata)  # the trainer's data buffer may serialise it
    record = EpisodeRecord.from_metadata(metadata)
    assert (record.environment, record.split, record.index) == ("Faulty", "train", 0)
    assert record.stop_reason is StopReason.COMPLETED and record.step_rewards == [1.0] and record.finished
    assert record.episode_reward == 1.0 and record.reward_observed and record.metrics["turns"] == 1.0
    assert metadata["variant"] is None and "task_hash" in metadata  # prepare's keys kept
    assert await slime.reward(args, sample) == 1.0


PACKAGE = Path(openreward_rl.__file__).resolve().parent


def _holds(value: Any, sample: Any) -> bool:
    return value is sample or (isinstance(value, list) and any(item is sample for item in value))


async def files_entered(sample: Any, call: Any) -> list[str]:
    """The package's files `sample` is passed into while `call` runs, in order: a function of the package
    that receives `sample` (or a list holding it) and is called from another file enters that file. A
    coroutine resumed after an await is not entered again."""
    entered: list[str] = []
    started: dict[int, Any] = {}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or started.get(id(frame)) is frame:
            return
        started[id(frame)] = frame
        path = Path(frame.f_code.co_filename)
        if PACKAGE not in path.parents or not any(_holds(value, sample) for value in frame.f_locals.values()):
            return
        caller = frame.f_back
        if caller is None or caller.f_code.co_filename != frame.f_code.co_filename:
            entered.append(path.relative_to(PACKAGE).as_posix())

    sys.setprofile(profile)
    try:
        await call()
    finally:
        sys.setprofile(None)
    return entered


@pytest.mark.parametrize("evaluation", [False, True])
async def test_the_plain_generate_path_enters_each_file_once(config_file, sglang, evaluation) -> None:
    """Following a sample through the plain Slime hook: down the house once, no file entered twice, and the
    partial-rollout path never entered."""
    sglang.push(ScriptedCompletion(text=SUBMIT_OK))
    sample = make_sample()
    entered = await files_entered(sample, lambda: run(make_args(sglang), sample, evaluation=evaluation))
    assert entered == ["backends/slime.py", "backends/_sample/generate.py", "backends/_sample/fill.py"]
    assert sample.status is slime_double.Sample.Status.COMPLETED and sample.reward == 1.0


async def test_the_partial_rollout_path_is_its_own(config_file, sglang) -> None:
    """Under --partial-rollout the sample leaves the plain path for `_sample/partial.py`, then gets the same one fill."""
    sglang.push(ScriptedCompletion(text=SUBMIT_OK))
    sample = make_sample()
    entered = await files_entered(sample, lambda: run(make_args(sglang, partial_rollout=True), sample))
    assert entered == [
        "backends/slime.py",
        "backends/_sample/generate.py",
        "backends/_sample/partial.py",
        "backends/_sample/fill.py",
    ]
    assert sample.status is slime_double.Sample.Status.COMPLETED and sample.reward == 1.0


async def test_the_default_context_policy_makes_a_list_of_every_training_rollout(config_file, sglang) -> None:
    """No context_policy in the config: the default (clear_then_summarize) may cut an episode into several
    contexts, so in training the hook returns a list for every rollout (of one here: the episode is short)
    naming its rollout, as Slime's flattening needs; in evaluation one Sample; under --partial-rollout, whose
    abort() cannot hold a list, the default is off and the hook returns one Sample."""
    config_file.write_text(config_file.read_text().replace("    context_policy: none\n", ""))
    for index, (evaluation, partial) in enumerate([(False, False), (True, False), (False, True)]):
        sglang.push(ScriptedCompletion(text=SUBMIT_OK))
        args = make_args(sglang, partial_rollout=partial)
        sample = make_sample(sample_index=index)
        out = await slime_double.call_generate(
            slime.generate, args, sample, copy.deepcopy(SAMPLING), evaluation=evaluation
        )
        slime_double.check_output(out, args)
        if evaluation or partial:
            assert out is sample
        else:
            assert out == [sample] and sample.rollout_id == sample.index == index
        assert sample.status is slime_double.Sample.Status.COMPLETED and sample.reward == 1.0


async def test_wrong_answer_is_a_real_zero(config_file, sglang) -> None:
    sglang.push(ScriptedCompletion(text=SUBMIT_WRONG))
    args = make_args(sglang)
    sample = await run(args, make_sample())
    slime_double.check_output(sample, args)
    assert sample.reward == 0.0 and record_of(sample).reward_observed is True and not sample.remove_sample


async def test_truncated_turn(config_file, sglang) -> None:
    sglang.push(ScriptedCompletion(text="I will think about this for a very long time", finish="length"))
    args = make_args(sglang)
    sample = await run(args, make_sample(), sampling={**SAMPLING, "max_new_tokens": 6})
    slime_double.check_output(sample, args)
    assert sample.status is slime_double.Sample.Status.TRUNCATED
    assert record_of(sample).stop_reason is StopReason.TRUNCATED and sample.response_length == 6
    assert sample.reward == 0.0 and record_of(sample).reward_observed is False
    assert sample.loss_mask == [1] * 6 and not sample.remove_sample


async def test_engine_abort_is_aborted_and_never_retried(config_file, sglang) -> None:
    sglang.push(ScriptedCompletion(text="partial answer", finish="abort"), ScriptedCompletion(text=SUBMIT_OK))
    args = make_args(sglang)
    sample = await run(args, make_sample())
    slime_double.check_output(sample, args)
    assert sample.status is slime_double.Sample.Status.ABORTED and sample.remove_sample
    assert len(sglang.requests) == 1 and sglang.pending_script == 1  # no second attempt
    assert sample.reward == 0.0 and record_of(sample).reward_observed is False
    assert await slime.reward(args, sample) == 0.0


async def test_environment_failure_mid_episode_is_aborted(config_file, sglang) -> None:
    sglang.push(ScriptedCompletion(text=EXPLODE))
    args = make_args(sglang)
    sample = await run(args, make_sample())
    slime_double.check_output(sample, args)
    assert sample.status is slime_double.Sample.Status.ABORTED and sample.remove_sample
    assert record_of(sample).stop_reason is StopReason.ENV_ERROR and "ToolFailed" in record_of(sample).stop_detail
    assert sample.response_length > 1 and not any(sample.loss_mask)


async def test_infrastructure_failure_without_tokens_is_a_masked_placeholder(config_file, sglang) -> None:
    args = make_args(sglang)
    sample = await run(args, make_sample(index=999))  # the server rejects the index: no session, no prompt
    slime_double.check_output(sample, args)
    assert sample.status is slime_double.Sample.Status.ABORTED and sample.remove_sample
    assert len(sample.tokens) == 2 and sample.response_length == 1
    assert sample.loss_mask == [0] and sample.rollout_log_probs == [0.0] and sample.reward == 0.0
    assert record_of(sample).placeholder is True and record_of(sample).stop_reason is StopReason.ENV_ERROR
    assert not sglang.requests


async def test_evaluation_uses_the_eval_context_budget(config_file, sglang) -> None:
    args = make_args(sglang, eval_max_context_len=40)  # smaller than any prompt with tools
    sample = await run(args, make_sample(), evaluation=True)
    slime_double.check_output(sample, args)
    assert record_of(sample).evaluation is True and record_of(sample).stop_reason is StopReason.CONTEXT_OVERFLOW
    assert sample.status is slime_double.Sample.Status.TRUNCATED and record_of(sample).placeholder is True
    assert not sglang.requests
    sglang.push(ScriptedCompletion(text=SUBMIT_OK))
    trained = await run(args, make_sample())
    assert record_of(trained).evaluation is False and trained.reward == 1.0


async def test_terminal_tool_environment(config_file, sglang) -> None:
    from examples.environments.math_env import make_problem

    _, target = make_problem("math/train/0")
    sglang.push(ScriptedCompletion(text=f"The answer is {target}."))
    args = make_args(sglang)
    sample = await run(args, make_sample("MathEnv", index=0))
    slime_double.check_output(sample, args)
    assert sample.reward == 1.0 and sample.status is slime_double.Sample.Status.COMPLETED


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rollout_top_p": 0.9}, "--rollout-top-p"),
        ({"hf_checkpoint": None}, "hf_checkpoint"),
        ({"rollout_max_context_len": 1}, "--rollout-max-context-len"),
    ],
)
async def test_bad_trainer_settings_are_refused(config_file, sglang, overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        await run(make_args(sglang, **overrides), make_sample())


async def test_bad_config_is_refused(tmp_path, monkeypatch, sglang) -> None:
    monkeypatch.setenv("OPENREWARD_RL_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="does not exist"):
        await run(make_args(sglang), make_sample())
    bad = tmp_path / "bad.yaml"
    bad.write_text("environments:\n  Faulty:\n    max_turn: 3\n")
    monkeypatch.setenv("OPENREWARD_RL_CONFIG", str(bad))
    with pytest.raises(ConfigError, match="did you mean 'max_turns'"):
        await run(make_args(sglang), make_sample())


async def test_metadata_without_a_task_is_refused(config_file, sglang) -> None:
    sample = slime_double.Sample(index=0, metadata={"source": "gsm8k"})
    with pytest.raises(ValueError, match="needs 'environment' and 'split'"):
        await run(make_args(sglang), sample)


async def test_reward_hook_for_lists_and_foreign_samples(config_file, sglang) -> None:
    args = make_args(sglang)
    sglang.push(ScriptedCompletion(text=SUBMIT_OK), ScriptedCompletion(text=SUBMIT_WRONG))
    group = [await run(args, make_sample(sample_index=i)) for i in range(2)]
    assert await slime.reward(args, group) == [1.0, 0.0]
    assert await slime.reward(make_args(sglang, group_rm=True), group) == [1.0, 0.0]  # Faulty has no score_group
    assert await slime.reward(args, [[group[0]], [group[1]]]) == [[1.0], [0.0]]
    with pytest.raises(ValueError, match="not produced by openreward_rl"):
        await slime.reward(args, slime_double.Sample(index=0, metadata={}))


def _trajectory(
    segments: list[TokenSegment], stop: StopReason = StopReason.COMPLETED, reward: float | None = 0.5
) -> Trajectory:
    return Trajectory(
        task=TaskRef("Faulty", "train", index=0),
        segments=segments,
        turns=[],
        messages=[],
        step_rewards=[] if reward is None else [reward],
        reward=reward,
        stop_reason=stop,
        finished=True,
        prefix_breaks=len(segments) - 1,
    )


def test_prefix_breaks_fan_out_with_a_shared_rollout_id(tokenizer) -> None:
    segments = [
        TokenSegment([1, 2], [3, 4], [1, 0], [-0.5, 0.0]),
        TokenSegment([1, 2, 9], [5], [1], [-0.25]),
    ]
    sample = slime_double.Sample(index=7, metadata={"environment": "Faulty", "split": "train", "index": 0})
    out = samples_from_trajectory(sample, _trajectory(segments), tokenizer=tokenizer, weight_versions=["w1"])
    assert out[0] is sample and len(out) == 2
    slime_double.check_output(out)
    assert [s.rollout_id for s in out] == [7, 7] and [s.tokens for s in out] == [[1, 2, 3, 4], [1, 2, 9, 5]]
    assert [record_of(s).segment for s in out] == [0, 1] and out[0].metadata is not out[1].metadata
    assert [s.weight_versions for s in out] == [["w1"], ["w1"]]


def test_fan_out_on_a_sample_without_rollout_id_keeps_the_last_segment(tokenizer) -> None:
    from dataclasses import make_dataclass

    fields = [(f.name, f.type, f) for f in slime_double.Sample.__dataclass_fields__.values() if f.name != "rollout_id"]
    OldSample = make_dataclass("OldSample", fields)
    OldSample.Status = slime_double.Sample.Status
    segments = [TokenSegment([1], [3], [1], [-0.5]), TokenSegment([1, 2], [5, 6], [1, 1], [-0.25, -0.1])]
    (only,) = samples_from_trajectory(OldSample(index=0, metadata={}), _trajectory(segments), tokenizer=tokenizer)
    assert only.tokens == [1, 2, 5, 6] and record_of(only).dropped_segments == 1
    assert not hasattr(only, "remove_sample") or only.remove_sample is False


def _scored(index: int, reward: float, status: str = "COMPLETED", rollout_id: int | None = None) -> slime_double.Sample:
    return slime_double.Sample(
        index=index,
        rollout_id=rollout_id,
        reward=reward,
        status=slime_double.Sample.Status[status],
        remove_sample=status == "ABORTED",
    )


def test_dynamic_filter() -> None:
    args = SimpleNamespace(reward_key=None)
    assert filters.group_verdict(args, [_scored(0, 1.0), _scored(1, 0.0)]) == (True, None)
    assert filters.group_verdict(args, [_scored(0, 1.0), _scored(1, 1.0)]) == (False, "zero_std_1.0")
    assert filters.group_verdict(args, [_scored(0, 1.0), _scored(1, 0.0, "ABORTED")]) == (False, "aborted_member")
    fanned = [[_scored(0, 1.0, rollout_id=0), _scored(0, 1.0, rollout_id=0)], [_scored(1, 1.0, rollout_id=1)]]
    assert filters.group_verdict(args, fanned) == (False, "zero_std_1.0")  # each rollout counted once
    fanned[1][0].reward = 0.0
    assert filters.group_verdict(args, fanned) == (True, None)
    assert filters.keep_informative_groups(args, [_scored(0, 1.0), _scored(1, 0.0)]) is True  # no Slime here: a bool
    assert filters.group_verdict(args, [_scored(0, 1.0)]) == (False, "single_rollout")


def test_metadata_json_string_rows_become_dicts(tokenizer) -> None:
    row = {"environment": "Faulty", "split": "train", "index": 0, "source": "cookbook", "task_spec": {"id": 7}}
    sample = slime_double.Sample(index=0, metadata=json.dumps(row))
    (out,) = samples_from_trajectory(sample, _trajectory([TokenSegment([1], [2], [1], [-0.1])]), tokenizer=tokenizer)
    assert isinstance(out.metadata, dict)
    # the row's own keys survive the parse (the trajectory knows neither of them)
    assert out.metadata["source"] == "cookbook" and out.metadata["task_spec"] == {"id": 7}
    assert EpisodeRecord.from_metadata(out.metadata).episode_reward == 0.5


async def test_generate_uploads_the_trajectory_without_waiting(config_file, sglang, monkeypatch) -> None:
    """With `upload: true` each episode goes to the OpenReward rollout API (a local sink here)."""
    from test_upload import UploadSink

    config_file.write_text(config_file.read_text().replace("upload: false", "upload: true"))
    with UploadSink() as sink:
        monkeypatch.setenv("OPENREWARD_API_URL", sink.url)
        monkeypatch.setenv("OPENREWARD_API_KEY", "upload-key")  # uploads need a key; local environments do not
        sglang.push(ScriptedCompletion(text=SUBMIT_OK))
        args = make_args(sglang)
        out = await run(args, make_sample())
        assert out.status is slime_double.Sample.Status.COMPLETED
        await _state.state_for(args).uploader.aclose()
    (rollout,) = sink.of_type("rollout")
    assert rollout["environment"] == "Faulty" and rollout["split"] == "train"
    results = [m for m in sink.of_type("message") if m["type"] == "tool_result"]
    assert [(m.get("reward"), m["isFinished"]) for m in results] == [(1.0, True)]

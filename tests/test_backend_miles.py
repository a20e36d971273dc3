"""The Miles hooks end to end against the SDK's environment server and the SGLang wire-format double,
checked by a test double of Miles' `Sample` (tests/doubles/miles_double.py)."""

from __future__ import annotations

import copy
import inspect
from types import SimpleNamespace
from typing import Any

import pytest

from doubles import miles_double
from openreward_rl.assets import load_tokenizer
from openreward_rl.backends import miles
from openreward_rl.backends._sample import state as _state
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from test_backend_slime import SAMPLING, SUBMIT_OK, SUBMIT_WRONG, config_file, make_args, record_of  # noqa: F401  (fixture)

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sglang() -> Any:
    async with SGLangTestServer(load_tokenizer("offline:qwen3")) as server:
        yield server
    await _state.close_states()


def make_sample(sample_index: int = 0, index: int = 0) -> miles_double.Sample:
    row = task_row(TaskRef("Faulty", "train", index=index, variant="faulty"))
    return miles_double.Sample(index=sample_index, group_index=0, prompt=row["prompt"], metadata=row["metadata"], routing_key=f"route-{sample_index}")


def test_legacy_form_is_detected_and_receives_evaluation() -> None:
    assert miles_double.generate_form(miles.generate) == "legacy"
    assert "evaluation" in inspect.signature(miles.generate).parameters
    assert miles_double.generate_form(miles.generate_fn) == "new"


async def test_legacy_generate_fills_a_miles_sample(config_file, sglang) -> None:
    sglang.push(ScriptedCompletion(text=SUBMIT_OK))
    args = make_args(sglang)
    sample = make_sample()
    out = await miles_double.call_generate(miles.generate, args, sample, copy.deepcopy(SAMPLING))
    assert out is sample
    miles_double.check_trainable(sample, args)
    assert sample.reward == 1.0 and sample.status is miles_double.Sample.Status.COMPLETED
    assert sglang.requests[0].routing_key == "route-0"


async def test_new_form_runs_the_same_episode(config_file, sglang) -> None:
    sglang.push(ScriptedCompletion(text=SUBMIT_WRONG))
    args = make_args(sglang)
    sample = make_sample()
    output = await miles.generate_fn(SimpleNamespace(state=SimpleNamespace(args=args), args=args, sample=sample, sampling_params=dict(SAMPLING), evaluation=False))
    assert output.samples is sample
    miles_double.check_trainable(sample, args)
    assert sample.reward == 0.0 and record_of(sample).reward_observed is True


async def test_group_rm_leaves_rewards_to_the_reward_hook(config_file, sglang) -> None:
    sglang.push(ScriptedCompletion(text=SUBMIT_OK), ScriptedCompletion(text=SUBMIT_WRONG))
    args = make_args(sglang, group_rm=True)
    group = [await miles_double.call_generate(miles.generate, args, make_sample(i), dict(SAMPLING)) for i in range(2)]
    failed = await miles_double.call_generate(miles.generate, args, make_sample(2, index=999), dict(SAMPLING))
    group.append(failed)
    miles_double.group_rm_precheck(group)  # Miles asserts no preset reward under --group-rm
    rewards = await miles.reward(args, group)
    assert rewards == [1.0, 0.0, 0.0]
    for sample, value in zip(group, rewards):
        sample.reward = value
        miles_double.check_trainable(sample, args)
    miles_double.check_sibling_rewards(group)
    assert failed.status is miles_double.Sample.Status.ABORTED and failed.remove_sample
    assert all(record_of(s).transcript is not None for s in group[:2])

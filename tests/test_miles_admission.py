"""`concurrency: auto` through Miles' own rollout code (tests/test_miles_source.py says what runs and what stands in):
Miles' default class-based rollout (`InferenceRolloutFn`) with the new-form hook, the SGLang double playing a
KV-cache pool and SGLang's scheduler behind the router stand-in. The hooks' admission controller finds the
worker through the router's `GET /workers` and polls its `/v1/loads`, as on a real Miles rollout node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from miles_source import RouterStandIn, write_rows
from openreward_rl.assets import offline_tokenizer_dir
from openreward_rl.backends._sample import state as _state
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.testing import KVCacheModel, SGLangTestServer
from test_context_policy import CorridorAgent
from test_miles_source import Stack, WalkersAndQuitters, blocking, check_trained_step, fresh_singletons, miles  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture
async def kv_stack(miles: Any, qwen3_tokenizer: Any, tmp_path: Path, served_config: Any) -> Any:
    served_config({"Corridor": {"max_turns": 24}}, concurrency={"mode": "auto", "floor": 1, "poll_interval": 0.02})
    rows = write_rows(tmp_path / "tasks.jsonl", [task_row(TaskRef("Corridor", "train", index=i)) for i in range(3)])
    script = WalkersAndQuitters(CorridorAgent(qwen3_tokenizer))
    engine = KVCacheModel(max_total_tokens=16384, step_s=0.002)
    async with (
        SGLangTestServer(qwen3_tokenizer, script=script, kv_cache=engine) as sglang,
        RouterStandIn(sglang.url) as router,
    ):
        stack = Stack(miles, sglang, router, script, str(offline_tokenizer_dir("qwen3")), rows)
        try:
            yield stack
        finally:
            await blocking(stack.run_on_miles_loop, _state.close_states())
            await _state.close_states()


async def test_a_class_based_rollout_step_admits_its_episodes_from_the_engines_kv_load(kv_stack: Stack) -> None:
    """Every episode of the step goes through the controller (floor 1; the ceiling is Miles' own limit,
    `--sglang-server-concurrency` per engine), which read the double's load behind the router; the step trains."""
    miles = kv_stack.miles
    args = kv_stack.args(custom_generate_function_path="openreward_rl.backends.miles.generate_fn")
    rollout = miles.compatibility.load_rollout_function(
        miles.base_types.RolloutFnConstructorInput(args=args, data_source=kv_stack.data_source(args)),
        "miles.rollout.inference_rollout.inference_rollout_common.InferenceRolloutFn",
    )
    output = await blocking(
        miles.compatibility.call_rollout_function, rollout, miles.base_types.RolloutFnTrainInput(rollout_id=0)
    )
    check_trained_step(miles, args, output.samples, forked=True)
    (state,) = list(_state._STATES.values())
    gate = state.admission
    assert gate is not None and not gate.static and gate.polls >= 1
    assert (gate.floor, gate.in_flight, gate.queued) == (1, 0, 0) and gate.ceiling == _state.trainer_concurrency(args)
    assert kv_stack.sglang.kv_scheduler.generated_tokens > 0

"""`concurrency: auto` through Slime's own rollout code (tests/slime_source.py says what runs and what stands in):
a training step's `generate_rollout` over its data source, with the SGLang double playing a KV-cache pool and
SGLang's scheduler (`KVCacheModel`). The hooks' process admits each episode through its admission controller,
which polls the double's `/v1/loads` behind the router's `/workers`, as it would a real SGLang worker.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from openreward_rl.backends._sample import state as _state
from openreward_rl.engines.admission import AdmissionController
from openreward_rl.testing import KVCacheModel, SGLangTestServer
from slime_source import (  # noqa: F401
    SIX_ROOMS,
    UNCOMPACTED,
    Player,
    SlimeCode,
    corridor_rows,
    corridor_sample,
    serve_sglang,
    slime,
    slime_args,
    start_step,
    train_data,
)

pytestmark = pytest.mark.timeout(120)
SEVEN_ROOMS = 1


@pytest.fixture
def kv_sglang(slime: SlimeCode) -> Iterator[SGLangTestServer]:
    """The Corridor's players on an engine of 16,384 KV tokens, 2 ms a scheduler step."""
    from openreward_rl.assets import load_tokenizer

    yield from serve_sglang(
        slime, Player(load_tokenizer("offline:qwen3")), kv_cache=KVCacheModel(max_total_tokens=16384, step_s=0.002)
    )


def hook_states() -> list[_state.BackendState]:
    return list(_state._STATES.values())


def test_a_training_step_admits_its_episodes_from_the_engines_kv_load(
    slime, kv_sglang, served_config, tmp_path
) -> None:
    """Two 7-room groups of two: every episode is admitted by the controller (floor 1, the trainer's
    `--sglang-server-concurrency 16` as its ceiling), none is aborted, and the step trains as without it."""
    served_config({"Corridor": {"max_turns": 20}}, concurrency={"mode": "auto", "floor": 1, "poll_interval": 0.02})
    prompts = corridor_rows(tmp_path / "corridor.jsonl", [SEVEN_ROOMS, SEVEN_ROOMS])
    args = slime_args(kv_sglang, prompts, rollout_max_context_len=UNCOMPACTED)
    start_step(slime, args)
    samples, data = train_data(slime, args, slime.data_source.RolloutDataSourceWithBuffer(args), rollout_id=0)
    (state,) = hook_states()
    gate = state.admission
    assert gate is not None and not gate.static and gate.polls >= 1
    assert (gate.floor, gate.ceiling, gate.in_flight, gate.queued) == (1, 16, 0, 0)
    assert len(samples) == 4 and sorted(s.reward for s in samples) == [0.0, 0.0, 1.0, 1.0]
    assert all(s.status == slime.Sample.Status.COMPLETED for s in samples)
    assert (
        kv_sglang.kv_scheduler.generated_tokens >= sum(sum(s.loss_mask) for s in samples) > 0
    )  # sampled through the KV pool
    assert data["raw_reward"] == [s.reward for s in samples]


@pytest.fixture
def small_sglang(slime: SlimeCode) -> Iterator[SGLangTestServer]:
    """The Corridor's players on an engine of 10,000 KV tokens: SGLang admits a request when its prompt (up to ~4,000 tokens) and its
    256 `max_new_tokens` fit, so two or three run at once and the rest queue."""
    from openreward_rl.assets import load_tokenizer

    yield from serve_sglang(
        slime, Player(load_tokenizer("offline:qwen3")), kv_cache=KVCacheModel(max_total_tokens=10000, step_s=0.002)
    )


def test_on_a_full_engine_the_controller_holds_episodes_back_and_every_one_completes(
    slime, small_sglang, served_config, tmp_path, monkeypatch
) -> None:
    """Eight 7-room groups of two (16 episodes, the trainer's ceiling 16) on an engine that runs two or three
    requests at once: the controller never lets all 16 in (the engine's queue holds and trims the limit), no
    episode is stopped for it, and every one completes."""
    peak = 0
    admitted = AdmissionController.admitted

    @contextlib.asynccontextmanager
    async def counted(gate: AdmissionController) -> AsyncIterator[None]:
        nonlocal peak
        async with admitted(gate):
            peak = max(peak, gate.in_flight)
            yield

    monkeypatch.setattr(AdmissionController, "admitted", counted)
    served_config({"Corridor": {"max_turns": 20}}, concurrency={"mode": "auto", "floor": 1, "poll_interval": 0.2})
    args = slime_args(
        small_sglang,
        corridor_rows(tmp_path / "corridor.jsonl", [SEVEN_ROOMS] * 8),
        rollout_batch_size=8,
        rollout_max_context_len=UNCOMPACTED,
    )
    start_step(slime, args)
    samples, _ = train_data(slime, args, slime.data_source.RolloutDataSourceWithBuffer(args), rollout_id=0)
    (state,) = hook_states()
    assert state.admission is not None and state.admission.ceiling == 16 and state.admission.polls >= 3
    assert 1 < peak < 16, peak
    assert len(samples) == 16 and all(s.status == slime.Sample.Status.COMPLETED for s in samples)
    assert small_sglang.kv_scheduler.generated_tokens >= sum(sum(s.loss_mask) for s in samples) > 0


def test_static_concurrency_builds_no_controller(slime, kv_sglang, served_config, tmp_path) -> None:
    served_config({"Corridor": {"max_turns": 20}})
    prompts = corridor_rows(tmp_path / "corridor.jsonl", [SEVEN_ROOMS])
    args = slime_args(kv_sglang, prompts, rollout_batch_size=1, rollout_max_context_len=UNCOMPACTED)
    start_step(slime, args)
    samples, _ = train_data(slime, args, slime.data_source.RolloutDataSourceWithBuffer(args), rollout_id=0)
    assert len(samples) == 2 and all(state.admission is None for state in hook_states())


@pytest.fixture
def held_sglang(slime: SlimeCode) -> Iterator[SGLangTestServer]:
    """Walkers whose first model call stays in flight until it is aborted, on the KV double."""
    from openreward_rl.assets import load_tokenizer

    yield from serve_sglang(
        slime,
        Player(load_tokenizer("offline:qwen3"), hold_at=1),
        kv_cache=KVCacheModel(max_total_tokens=16384, step_s=0.002),
    )


def test_an_episode_still_waiting_for_its_slot_when_the_step_aborts_never_starts(
    slime, held_sglang, served_config, tmp_path
) -> None:
    """Ceiling 1: the first walk runs (its first call held), the second waits in the controller. Slime's `abort()`
    sets `GenerateState.aborted` and aborts the requests in flight: the running walk ends ABORTED as the trainer's
    abort, and the waiting one gets its slot and returns ABORTED without a request, as Slime does with a sample that
    waited past the abort on its own semaphore."""
    served_config(
        {"Corridor": {"max_turns": 20}}, concurrency={"mode": "auto", "floor": 1, "ceiling": 1, "poll_interval": 0.02}
    )
    args = slime_args(
        held_sglang, corridor_rows(tmp_path / "corridor.jsonl", [SIX_ROOMS]), rollout_max_context_len=UNCOMPACTED
    )
    start_step(slime, args)
    sampling = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 256, "no_stop_trim": True}

    async def step() -> list[Any]:
        walks = [
            asyncio.create_task(
                slime.rollout.generate_and_rm(args, corridor_sample(slime, i, task=SIX_ROOMS), dict(sampling))
            )
            for i in range(2)
        ]
        await held_sglang.wait_in_flight(1)
        while not hook_states() or hook_states()[0].admission.queued < 1:
            await asyncio.sleep(0.01)
        slime.rollout.GenerateState(args).aborted = True  # what Slime's abort() does first, then abort_all
        async with (
            aiohttp.ClientSession() as http,
            http.post(held_sglang.url + "/abort_request", json={"abort_all": True}) as response,
        ):
            assert response.status == 200
        return await asyncio.gather(*walks)

    walked, waited = slime.run(step())
    walked = walked if isinstance(walked, list) else [walked]  # the default context policy's list of contexts
    assert [s.status for s in walked] == [slime.Sample.Status.ABORTED] and waited.status == slime.Sample.Status.ABORTED
    assert waited.response_length == 0  # returned as Slime returns a sample it never ran
    assert len({r.routing_key for r in held_sglang.requests}) == 1  # the second walk sent nothing
    (state,) = hook_states()
    assert (state.admission.in_flight, state.admission.queued) == (0, 0)

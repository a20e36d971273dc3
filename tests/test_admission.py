"""Adaptive episode admission (`openreward_rl.engines.admission`) and the SGLang double's KV cache it reads.

The double's KV model (`openreward_rl.testing.kv_cache`, its own cases in test_kv_cache_double.py) is checked
at the wire: requests queue while the pool is full, an abort takes a queued request out, and `/v1/loads`
answers with SGLang's fields. The controller is checked on its rule (`next_limit`),
then against the double over HTTP: it grows while the cache has room, holds and trims when requests queue,
never stops a running episode, and falls back to the static ceiling, saying so once, where the engine
reports no KV-cache usage.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from openreward_rl.engines.admission import AdmissionController, EngineLoad, SGLangLoads
from openreward_rl.testing import KVCacheModel, ScriptedCompletion, SGLangTestServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

# SGLang's /v1/loads entry fields (include=core) the controller and Slime's abort() read
LOAD_FIELDS = {
    "dp_rank",
    "num_running_reqs",
    "num_waiting_reqs",
    "num_total_reqs",
    "num_used_tokens",
    "max_total_num_tokens",
    "token_usage",
}


def prompt(length: int) -> list[int]:
    return [9707 + (i % 50) for i in range(length)]


def to_length(request: object) -> ScriptedCompletion:
    """A completion that runs to the request's `max_new_tokens`."""
    return ScriptedCompletion(ids=(9707, 11, 1879), finish="length")


async def generate(
    session: aiohttp.ClientSession, server: SGLangTestServer, prompt_len: int, max_new: int, rid: str
) -> dict:
    body = {"input_ids": prompt(prompt_len), "rid": rid, "sampling_params": {"max_new_tokens": max_new}}
    async with session.post(server.url + "/generate", json=body) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def loads(session: aiohttp.ClientSession, server: SGLangTestServer) -> dict:
    async with session.get(server.url + "/v1/loads?include=core") as response:
        return await response.json()


def kv_server(tokenizer, pool: int, *, step_s: float = 0.002, script=None) -> SGLangTestServer:
    return SGLangTestServer(tokenizer, script or to_length, kv_cache=KVCacheModel(max_total_tokens=pool, step_s=step_s))


# --- the double's KV cache ---------------------------------------------------------------------------------


async def test_requests_wait_in_the_queue_while_the_pool_is_full_and_loads_say_so(qwen3_tokenizer) -> None:
    """Pool 600: a request of 200 prompt tokens reserves 0.7 x 300 more, so a second one does not fit beside it."""
    async with kv_server(qwen3_tokenizer, 600) as server, aiohttp.ClientSession() as session:
        calls = [asyncio.create_task(generate(session, server, 200, 300, f"r{i}")) for i in range(2)]
        while server.kv_scheduler.generated_tokens < 10:
            await asyncio.sleep(0.005)
        report = await loads(session, server)
        answers = await asyncio.gather(*calls)
        idle = await loads(session, server)
    entry = report["loads"][0]
    assert LOAD_FIELDS <= set(entry) and report["dp_rank_count"] == 1 and "aggregate" in report
    assert (
        entry["num_running_reqs"],
        entry["num_waiting_reqs"],
        entry["num_total_reqs"],
        entry["max_total_num_tokens"],
    ) == (1, 1, 2, 600)
    assert entry["num_used_tokens"] > 200 and entry["token_usage"] == round(entry["num_used_tokens"] / 600, 4)
    assert [len(a["output_ids"]) for a in answers] == [300, 300]
    assert {a["meta_info"]["finish_reason"]["type"] for a in answers} == {"length"}
    assert idle["loads"][0]["num_total_reqs"] == 0 and idle["loads"][0]["token_usage"] == 0.0


async def test_an_abort_takes_a_queued_request_out_with_nothing_generated(qwen3_tokenizer) -> None:
    async with kv_server(qwen3_tokenizer, 600, step_s=0.01) as server, aiohttp.ClientSession() as session:
        first = asyncio.create_task(generate(session, server, 200, 300, "first"))
        queued = asyncio.create_task(generate(session, server, 200, 300, "queued"))
        while len(server.kv_scheduler.waiting) < 1:
            await asyncio.sleep(0.005)
        async with session.post(server.url + "/abort_request", json={"rid": "queued"}) as response:
            assert response.status == 200
        aborted = await queued
        assert (await loads(session, server))["loads"][0]["num_waiting_reqs"] == 0
        first.cancel()
    assert aborted["output_ids"] == [] and aborted["meta_info"]["finish_reason"]["type"] == "abort"


# --- the controller's rule ---------------------------------------------------------------------------------


def controller(
    floor: int = 4, ceiling: int = 64, *, limit: int, in_flight: int, queued: int, queue_weight: float = 1.0
) -> AdmissionController:
    """A controller in that state; `queue_weight` 1 (the default here): its rule sees each reading's queue as is."""
    made = AdmissionController(lambda: asyncio.sleep(0, None), floor=floor, ceiling=ceiling, queue_weight=queue_weight)
    made.limit, made.in_flight, made.queued = limit, in_flight, queued
    return made


def test_the_limit_grows_by_half_while_nothing_queues_and_only_when_episodes_wait() -> None:
    assert controller(limit=10, in_flight=10, queued=5).next_limit(EngineLoad(10, 0, 10_000, 100_000)) == 15
    assert controller(limit=10, in_flight=10, queued=5).next_limit(EngineLoad(10, 0, 91_000, 100_000)) == 10  # full
    assert (
        controller(limit=10, in_flight=6, queued=0).next_limit(EngineLoad(6, 0, 1_000, 100_000)) == 10
    )  # nobody waits
    assert controller(limit=60, in_flight=60, queued=9).next_limit(EngineLoad(60, 0, 1_000, 100_000)) == 64  # ceiling
    after_a_queue = controller(limit=32, in_flight=32, queued=5)
    after_a_queue.queued_polls = 2  # the slow start is over: a moment without a queue grows it by one only
    assert after_a_queue.next_limit(EngineLoad(30, 0, 10_000, 100_000)) == 33


def test_a_short_queue_grows_the_limit_slowly_a_full_cache_or_a_queue_holds_it_and_a_long_queue_trims_it() -> None:
    assert controller(limit=30, in_flight=20, queued=3).next_limit(EngineLoad(20, 0, 95_000, 100_000)) == 20
    # 6 waiting < 14 / 2: the engine is at its batch; one more
    assert controller(limit=30, in_flight=20, queued=3).next_limit(EngineLoad(14, 6, 80_000, 100_000)) == 31
    assert controller(limit=48, in_flight=48, queued=3).next_limit(EngineLoad(40, 16, 80_000, 100_000)) == 49
    # 6 = 12 / 2 and 12 = 12: hold at the episodes in flight
    assert controller(limit=30, in_flight=20, queued=3).next_limit(EngineLoad(12, 6, 80_000, 100_000)) == 20
    assert controller(limit=30, in_flight=20, queued=3).next_limit(EngineLoad(12, 12, 80_000, 100_000)) == 20
    # 20 waiting for 6 running: half of the 20 - 0.5 x 6 = 17 past the short queue, 9, off the 24 in flight
    assert controller(limit=30, in_flight=24, queued=3).next_limit(EngineLoad(6, 20, 80_000, 100_000)) == 15
    assert controller(limit=6, in_flight=6, queued=3).next_limit(EngineLoad(3, 40, 99_000, 100_000)) == 4  # floor


def test_one_burst_of_waiting_requests_does_not_trim_the_limit_a_lasting_queue_does() -> None:
    """The queue's average starts at none and weighs each reading by half."""
    gate = controller(limit=40, in_flight=40, queued=3, queue_weight=0.5)
    assert gate.next_limit(EngineLoad(40, 12, 50_000, 100_000)) == 41  # 0.3 now, 0.15 on average: grows by one
    gate.limit = 40
    assert gate.next_limit(EngineLoad(40, 64, 50_000, 100_000)) == 40  # 1.6 now, 0.875 on average: holds
    assert gate.next_limit(EngineLoad(40, 64, 50_000, 100_000)) == 40 - 15  # 1.2375: (1.2375 - 0.5) x 40 / 2 = 14.75
    assert gate.queue == pytest.approx(1.2375) and gate.queued_polls == 2


def test_a_queue_on_one_poll_at_the_start_does_not_end_the_slow_start() -> None:
    gate = controller(limit=8, in_flight=8, queued=200, queue_weight=0.5)
    gate.limit = gate.next_limit(EngineLoad(3, 5, 1_000, 100_000))  # requests that just arrived: holds
    assert (gate.limit, gate.queued_polls) == (8, 1)
    assert gate.next_limit(EngineLoad(8, 0, 2_000, 100_000)) == 12 and gate.queued_polls == 0  # grows by half


def test_polls_that_see_the_same_long_queue_while_episodes_finish_do_not_trim_again() -> None:
    gate = controller(limit=40, in_flight=40, queued=3)
    gate.limit = gate.next_limit(EngineLoad(20, 40, 50_000, 100_000))  # queue 2: (2 - 0.5) x 20 / 2 = 15 off 40
    assert gate.limit == 25
    assert gate.next_limit(EngineLoad(20, 40, 50_000, 100_000)) == 25  # the 40 still run: 25 again, not 10


def test_loads_without_kv_usage_are_no_load() -> None:
    assert EngineLoad.from_sglang([{"loads": [{"num_reqs": 3}]}]) is None
    two_ranks = {
        "loads": [
            {
                "num_running_reqs": 2,
                "num_waiting_reqs": 1,
                "num_used_tokens": 300,
                "max_total_num_tokens": 1000,
                "token_usage": 0.3,
            },
            {
                "num_running_reqs": 1,
                "num_waiting_reqs": 0,
                "num_used_tokens": 500,
                "max_total_num_tokens": 1000,
                "token_usage": 0.5,
            },
        ]
    }
    assert EngineLoad.from_sglang([two_ranks]) == EngineLoad(3, 1, 800, 2000)


# --- the controller against the double ---------------------------------------------------------------------


async def test_admits_more_while_the_cache_has_room_and_holds_when_requests_queue(qwen3_tokenizer) -> None:
    """60 episodes of two calls each (300 prompt + 100 new tokens) on a pool of 6,000 tokens: from a floor of 2
    the limit grows past it, and once the engine queues, the episodes in flight stop growing; every episode ends."""
    async with kv_server(qwen3_tokenizer, 6000) as server, aiohttp.ClientSession() as session:
        gate = AdmissionController(SGLangLoads(server.url), floor=2, ceiling=40, interval_s=0.02)
        peak = 0
        limits: list[int] = []

        async def episode(i: int) -> list[dict]:
            nonlocal peak
            async with gate.admitted():
                peak = max(peak, gate.in_flight)
                limits.append(gate.limit)
                return [await generate(session, server, 300, 100, f"e{i}t{turn}") for turn in range(2)]

        results = await asyncio.gather(*(episode(i) for i in range(60)))
        await gate.aclose()
    answers = [a for episode_answers in results for a in episode_answers]
    assert len(answers) == 120 and all(a["meta_info"]["finish_reason"]["type"] == "length" for a in answers)
    assert not gate.static and gate.polls >= 2
    assert 2 < peak <= 40, peak
    assert max(limits) > 2


async def test_a_running_episode_is_never_stopped_when_the_limit_drops_below_it(qwen3_tokenizer) -> None:
    """Six episodes run; the engine then reports a queue and the limit drops to the floor; all six finish, and a
    seventh starts only once fewer than the limit run."""
    reports = [EngineLoad(0, 0, 0, 10_000)]

    async def read() -> EngineLoad:
        return reports[-1]

    gate = AdmissionController(read, floor=2, ceiling=8, interval_s=0.01)
    release = asyncio.Event()
    started: list[int] = []

    async def episode(i: int) -> int:
        async with gate.admitted():
            started.append(i)
            await release.wait()
            return i

    running = [asyncio.create_task(episode(i)) for i in range(6)]
    while len(started) < 6:
        await asyncio.sleep(0.01)
    reports.append(EngineLoad(4, 30, 9_900, 10_000))
    while gate.limit > 2:
        await asyncio.sleep(0.01)
    late = asyncio.create_task(episode(6))
    await asyncio.sleep(0.05)
    assert gate.in_flight == 6 and 6 not in started and not any(task.done() for task in running)
    release.set()
    assert await asyncio.gather(*running, late) == list(range(7))
    await gate.aclose()


async def test_an_engine_without_kv_usage_falls_back_to_the_static_ceiling_saying_so_once(
    qwen3_tokenizer, caplog
) -> None:
    """The double without a KV model answers `/v1/loads` as a router does (`num_reqs` only): no KV-cache usage."""
    caplog.set_level(logging.WARNING, logger="openreward_rl.engines.admission")
    script = lambda request: ScriptedCompletion(text="ok", latency_s=0.05)  # noqa: E731
    async with SGLangTestServer(qwen3_tokenizer, script) as server, aiohttp.ClientSession() as session:
        gate = AdmissionController(SGLangLoads(server.url), floor=1, ceiling=12, interval_s=0.01)
        peak = 0

        async def episode(i: int) -> dict:
            nonlocal peak
            async with gate.admitted():
                peak = max(peak, gate.in_flight)
                return await generate(session, server, 20, 8, f"e{i}")

        answers = await asyncio.gather(*(episode(i) for i in range(30)))
        await gate.aclose()
    assert gate.static and gate.limit == 12 and peak == 12 and len(answers) == 30
    warnings = [r.getMessage() for r in caplog.records if "adaptive concurrency" in r.getMessage()]
    assert len(warnings) == 1 and "no KV-cache usage" in warnings[0] and "static 12" in warnings[0]


async def test_an_unreachable_engine_falls_back_too(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="openreward_rl.engines.admission")
    gate = AdmissionController(SGLangLoads("http://127.0.0.1:9", timeout_s=1.0), floor=1, ceiling=5)
    async with gate.admitted():
        while gate.polls < 1:
            await asyncio.sleep(0.01)
    await gate.aclose()
    assert gate.static and gate.limit == 5
    assert any("reading it failed" in r.getMessage() for r in caplog.records)


def test_bad_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="floor .* above its ceiling"):
        AdmissionController(lambda: asyncio.sleep(0, None), floor=10, ceiling=5)
    with pytest.raises(ValueError, match="interval_s must be a positive number"):
        AdmissionController(lambda: asyncio.sleep(0, None), interval_s=0)

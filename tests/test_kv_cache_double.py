"""The SGLang double's KV pool (`openreward_rl.testing.kv_cache`) and prefix cache (`...testing.radix_cache`)
against small cases computed by hand from SGLang's rules (see the modules' docstrings).

Sequences start with distinct tokens (1000s, 2000s, ...) so that they share no prefix unless a case says so.
"""

from __future__ import annotations

import asyncio

import pytest

from openreward_rl.testing.kv_cache import KVCacheModel, KVScheduler
from openreward_rl.testing.radix_cache import RadixCache

pytestmark = pytest.mark.timeout(60)


def seq(start: int, length: int) -> tuple[int, ...]:
    return tuple(range(start, start + length))


# --- the radix cache ---------------------------------------------------------------------------------------


def test_insert_and_match_share_prefixes_and_split_nodes() -> None:
    cache = RadixCache()
    assert cache.insert(seq(0, 10))[0] == 0
    assert cache.insert(seq(0, 6) + seq(100, 4))[0] == 6  # splits the first node after 6 tokens
    assert cache.evictable_size == 14 and cache.protected_size == 0
    assert cache.match_prefix(seq(0, 8))[0] == 8
    assert cache.match_prefix(seq(0, 6) + (100, 7))[0] == 7
    assert cache.match_prefix((5, 6))[0] == 0


def test_locks_protect_the_path_and_evict_takes_the_least_recently_used_leaf_first() -> None:
    cache = RadixCache()
    _, a = cache.insert(seq(1000, 50))
    _, b = cache.insert(seq(2000, 30))
    _, c = cache.insert(seq(3000, 20))
    cache.match_prefix(seq(1000, 50))  # a used again: b is now the least recently used
    cache.inc_lock_ref(c)
    assert (cache.evictable_size, cache.protected_size) == (80, 20)
    assert cache.evict(10) == 30  # b, whole: a node goes at once
    assert cache.match_prefix(seq(2000, 30))[0] == 0 and cache.match_prefix(seq(1000, 50))[0] == 50
    assert cache.evict(1000) == 50  # then a; c is locked
    assert (cache.evictable_size, cache.protected_size) == (0, 20)
    cache.dec_lock_ref(c)
    assert cache.evict(1) == 20 and cache.total_size == 0


def test_a_parent_left_without_children_is_evicted_after_them() -> None:
    cache = RadixCache()
    cache.insert(seq(0, 10))
    cache.insert(seq(0, 10) + seq(500, 5))  # child of 5 under the 10
    cache.insert(seq(7000, 3))
    cache.match_prefix(seq(7000, 3))
    assert cache.evict(12) == 15  # the 5-token leaf, then its parent of 10; the recently used 7000s stay
    assert cache.total_size == 3


# --- the scheduler over the pool ---------------------------------------------------------------------------


def scheduler(pool: int, **costs: float) -> KVScheduler:
    return KVScheduler(KVCacheModel(max_total_tokens=pool, step_s=costs.get("step_s", 0.0)))


@pytest.mark.anyio
async def test_a_next_turn_prefills_only_what_its_finished_turn_did_not_cache() -> None:
    """Turn 1: 100 prompt tokens, 10 generated; SGLang caches all but the last generated token (its KV was never
    computed), 109 tokens, unlocked. Turn 2 (turn 1's tokens + 20) finds 109 cached and prefills 21."""
    engine = scheduler(1000)
    prompt, output = seq(1000, 100), seq(5000, 10)
    try:
        assert await engine.generate(prompt, output, 10) == (10, 0, 0)
        assert (engine.cache.evictable_size, engine.used_tokens, engine.load()["token_usage"]) == (109, 0, 0.0)
        assert await engine.generate(prompt + output + seq(6000, 20), seq(5100, 5), 5) == (5, 0, 109)
        assert engine.prefilled_tokens == 100 + 21
    finally:
        await engine.aclose()


@pytest.mark.anyio
async def test_a_full_pool_evicts_the_least_recently_used_history_which_then_prefills_again() -> None:
    """Pool 400, every request asks max_new_tokens = its 10 generated tokens. A1 and B1 (150-token prompts) leave
    159 cached tokens each; B2 (B1's 160 + 20) hits 159 and leaves B's path 189 long; 52 slots are free. C1 needs 150:
    the least recently used leaf, A's 159, goes. A2 (A1's 160 + 20) finds nothing and prefills 180: 128 short,
    so B's path goes, leaf by leaf from its end (9, 21, 159), while C (used later) stays."""
    engine = scheduler(400)
    a1, b1, c1 = seq(1000, 150), seq(2000, 150), seq(3000, 150)
    out = {name: seq(base, 10) for name, base in (("a1", 5000), ("b1", 5100), ("b2", 5200), ("c1", 5300), ("a2", 5400))}
    try:
        hits = [
            (await engine.generate(a1, out["a1"], 10))[2],
            (await engine.generate(b1, out["b1"], 10))[2],
            (await engine.generate(b1 + out["b1"] + seq(6000, 20), out["b2"], 10))[2],
        ]
        assert engine.cache.total_size == 159 + 189 and engine.evicted_tokens == 0
        hits.append((await engine.generate(c1, out["c1"], 10))[2])
        assert engine.evicted_tokens == 159
        hits.append((await engine.generate(a1 + out["a1"] + seq(6100, 20), out["a2"], 10))[2])
    finally:
        await engine.aclose()
    assert hits == [0, 0, 159, 0, 0]
    assert engine.evicted_tokens == 159 + 189
    assert engine.prefilled_tokens == 150 + 150 + 21 + 150 + 180
    assert engine.cache.match_prefix(c1)[0] == 150


@pytest.mark.anyio
async def test_a_request_waits_while_its_prompt_and_max_new_tokens_do_not_fit() -> None:
    """Pool 600: the first request takes 200 + 300 + 1 of it; the second needs as much and waits in the queue,
    which /v1/loads reports, until the first finishes."""
    engine = scheduler(600, step_s=0.001)
    try:
        first = asyncio.create_task(engine.generate(seq(1000, 200), seq(5000, 300), 300))
        second = asyncio.create_task(engine.generate(seq(2000, 200), seq(6000, 300), 300))
        while engine.generated_tokens < 20:
            await asyncio.sleep(0.001)
        load = engine.load()
        assert (load["num_running_reqs"], load["num_waiting_reqs"]) == (1, 1)
        assert load["num_used_tokens"] == 200 + engine.generated_tokens
        assert load["num_total_tokens"] == load["num_used_tokens"] + 200
        assert await asyncio.gather(first, second) == [(300, 0, 0), (300, 0, 0)]
    finally:
        await engine.aclose()


@pytest.mark.anyio
async def test_decoding_past_the_pool_retracts_the_newest_request_which_still_finishes() -> None:
    """Pool 1000. A (100 + 800) runs alone. After about 300 tokens the ratio is near 0.4, so A reserves about
    500 x 0.4 = 200 of what it still asks and B (100 + 280 + 1) fits into the ~400 left. They decode together until
    A's 100 + g + k and B's 100 + k tokens reach 1000 (B ~250 tokens in): nothing is evictable, so B, the one with
    fewer tokens generated, is retracted; it prefills its prompt (cached) and its ~250 generated tokens again
    once A has finished."""
    engine = scheduler(1000, step_s=0.0005)
    try:
        a = asyncio.create_task(engine.generate(seq(1000, 100), seq(5000, 800), 800))
        while engine.generated_tokens < 300:
            await asyncio.sleep(0.0005)
        b = asyncio.create_task(engine.generate(seq(2000, 100), seq(6000, 280), 280))
        (a_made, a_retracted, _), (b_made, b_retracted, b_cached) = await asyncio.gather(a, b)
    finally:
        await engine.aclose()
    assert (a_made, a_retracted, b_made, b_retracted) == (800, 0, 280, 1)
    assert engine.retractions == 1 and b_cached == 100  # the prompt it had prefilled was still cached
    retracted_at = engine.prefilled_tokens - 100 - 100  # B's second prefill: what it had generated
    assert 200 < retracted_at < 280

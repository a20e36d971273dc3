"""The SGLang double's KV cache and scheduler: a token pool, a prefix cache, a waiting queue, retraction.

`KVCacheModel` turns `SGLangTestServer` from "every request answers at once" into an engine with a
fixed KV-cache pool, run the way SGLang's scheduler runs one (SGLang 0.5.23 with its default settings:
`Scheduler`, `PrefillAdder` and `PrefillBudget`, `ScheduleBatch.retract_decode`, `RadixCache`):

- the pool holds the prefix cache (`RadixCache`, see `testing/radix_cache.py`) and each running request's
  tokens not yet in it. A finished request's prompt and output go into the cache unlocked ("evictable",
  `cache_finished_req`); a prefilled prompt goes in locked by its request (`cache_unfinished_req`), so
  requests sharing a prompt share its KV. Allocation takes free slots first and evicts the least recently
  used unlocked prefixes for the rest (`evict_to_free_tokens`). An episode's next turn therefore prefills
  only its new tokens while its history is cached, and its whole history again once it was evicted;
- requests wait in the queue first come, first served. Each scheduling round matches every waiting
  request's prefix (which marks it used, `calc_priority` / `match_kv_cache`) and admits from the front
  while `uncached prompt + min(max_new_tokens - generated, 4096) + 1 < free + evictable - reserved`, where
  `reserved` is `min(max_new_tokens - generated, 4096) x new_token_ratio` for every running request and the
  whole `uncached prompt + 1 + max_new` of each one admitted this round; at most `max_prefill_tokens` of
  uncached prompt per round (a first request always goes). The matched prefix is locked while it is
  checked, so it counts as taken, not evictable. A request that does not fit stops the round and marks the
  batch full: no admission is tried again until a request leaves the batch (`batch_is_full`);
- `new_token_ratio` starts at 0.7, decays by (0.7 - 0.098) / 600 per decode step down to 0.098, is reset
  to 0.7 when the engine goes idle and set to `(generated + 20 x requests) / (sum of max_new_tokens + 1)`
  (at most 1) after a retraction;
- each iteration runs either one prefill batch (the admitted requests' uncached tokens; each then has its
  first token) or one decode step (every running request gains one token). A decode step first evicts
  cached prefixes to make room for its tokens; when even that is not enough it retracts requests (the one
  with the fewest generated tokens first, ties: the longest prompt; always at least one, never the last):
  a retracted request frees its uncached tokens, unlocks its prefix, evicts up to 20 tokens per request
  left, and goes to the back of the queue, to prefill its prompt and what it had generated again later
  (`num_retractions` counts it);
- the step takes `step_s` plus `kv_token_s` per token of KV the batch holds (decode reads it all) and
  `prefill_token_s` per token prefilled, so an over-admitted engine loses time to prefilling evicted
  histories again and to retraction, while a half-empty one runs short batches.

One liberty: a request alone in an idle engine is admitted when its prompt fits the pool even if its
`max_new_tokens` does not (SGLang sizes its pool to hold a request of the full context length; the
double's tests use pools smaller than that). Not reproduced: chunked prefill, mixed prefill/decode batches, pages larger than one token, the
hierarchical (host) cache, speculative decoding, priorities. `load()` answers SGLang's `/v1/loads` entry
(`SchedulerLoadInquirer.get_loads`): `num_used_tokens` and `token_usage` count what the running requests
and locked prefixes hold, not the evictable cache (`max_total_num_tokens - (available + evictable)`), and
`cache_hit_rate` is the last prefill batch's cached share (SGLang reports it with `--enable-metrics`).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Sequence
from typing import Any

import attrs

from openreward_rl.testing.radix_cache import RadixCache, RadixNode

__all__ = ["KVCacheModel", "KVScheduler"]

# SGLang's defaults: SGLANG_INIT_NEW_TOKEN_RATIO, ..._MIN_NEW_TOKEN_RATIO_FACTOR, ..._NEW_TOKEN_RATIO_DECAY_STEPS,
# SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION and SGLANG_RETRACT_DECODE_STEPS.
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
CLIP_MAX_NEW_TOKENS = 4096
RETRACT_DECODE_STEPS = 20
PAGE_SIZE = 1  # PrefillBudget.reserve charges one page per admitted request


@attrs.frozen
class KVCacheModel:
    """The engine the double plays: `max_total_tokens` of KV cache (SGLang's `max_total_num_tokens`) and
    the cost of one scheduler step (see the module docstring)."""

    max_total_tokens: int = attrs.field(validator=attrs.validators.ge(1))
    step_s: float = attrs.field(default=0.01, validator=attrs.validators.ge(0))
    kv_token_s: float = attrs.field(default=0.0, validator=attrs.validators.ge(0))
    prefill_token_s: float = attrs.field(default=0.0, validator=attrs.validators.ge(0))
    max_prefill_tokens: int = attrs.field(default=16384, validator=attrs.validators.ge(1))
    max_running_requests: int | None = None


@attrs.define(eq=False)
class _Job:
    prompt: tuple[int, ...]
    output: tuple[int, ...]  # the tokens this request will generate before it finishes
    max_new: int  # what it asked for (the reservation estimate), >= len(output)
    generated: int = 0
    retractions: int = 0
    cached_tokens: int = 0  # prefix hits over its prefills (meta_info.cached_tokens)
    node: RadixNode | None = None  # the cached prefix it locks while running, or last matched while waiting
    protected: int = 0  # tokens of its sequence in the cache (locked by it while it runs)
    done: asyncio.Event = attrs.field(factory=asyncio.Event)

    @property
    def fill_ids(self) -> tuple[int, ...]:
        return self.prompt + self.output[: self.generated]

    @property
    def kv_tokens(self) -> int:
        return len(self.prompt) + self.generated

    @property
    def private_tokens(self) -> int:
        """KV slots it holds outside the prefix cache."""
        return self.kv_tokens - self.protected

    @property
    def new_tokens_left(self) -> int:
        return min(max(self.max_new - self.generated, 0), CLIP_MAX_NEW_TOKENS)


class KVScheduler:
    """One engine's queue, running batch, prefix cache and KV pool; `generate` plays one request through them."""

    def __init__(self, model: KVCacheModel) -> None:
        self.model = model
        self.cache = RadixCache()
        self.waiting: collections.deque[_Job] = collections.deque()
        self.running: list[_Job] = []
        self.ratio = INIT_NEW_TOKEN_RATIO
        self.batch_is_full = False
        self.retractions = 0
        self.generated_tokens = 0
        self.prefilled_tokens = 0  # tokens computed by prefills (cache misses)
        self.cached_prefill_tokens = 0  # prompt tokens prefills found in the cache
        self.evicted_tokens = 0
        self._last_hit_rate = 0.0
        self._last_step: tuple[int, float] = (0, 1.0)  # tokens made by the last decode step, its seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def available_tokens(self) -> int:
        """Free slots of the pool: neither in the prefix cache nor held by a running request."""
        return self.model.max_total_tokens - self.cache.total_size - sum(job.private_tokens for job in self.running)

    @property
    def used_tokens(self) -> int:
        """SGLang's `num_used_tokens`: the pool less its free and evictable parts."""
        return self.model.max_total_tokens - self.available_tokens - self.cache.evictable_size

    def load(self) -> dict[str, Any]:
        """This engine's entry of SGLang's `/v1/loads` (`include=core` fields)."""
        used, total = self.used_tokens, self.model.max_total_tokens
        tokens, seconds = self._last_step
        return {
            "dp_rank": 0,
            "timestamp": time.time(),
            "num_running_reqs": len(self.running),
            "num_waiting_reqs": len(self.waiting),
            "num_total_reqs": len(self.running) + len(self.waiting),
            "num_used_tokens": used,
            "num_total_tokens": used + sum(len(job.fill_ids) for job in self.waiting),
            "max_total_num_tokens": total,
            "token_usage": round(used / total, 4),
            "gen_throughput": round(tokens / seconds, 2) if self.running else 0.0,
            "cache_hit_rate": round(self._last_hit_rate, 4),
            "utilization": round(used / total, 4),
            "max_running_requests": self.model.max_running_requests or 0,
        }

    async def generate(
        self, prompt: Sequence[int], output: Sequence[int], max_new: int, *stops: asyncio.Event
    ) -> tuple[int, int, int]:
        """Queue a request, run it until its `output` tokens are made or one of `stops` is set (an abort);
        returns (tokens made, times it was retracted, prompt tokens found in the prefix cache)."""
        job = _Job(tuple(prompt), tuple(output), max(max_new, len(output)))
        if not job.output:
            return 0, 0, 0
        self.waiting.append(job)
        self._ensure_running()
        self._wake.set()
        waiters = {asyncio.ensure_future(event.wait()) for event in (job.done, *stops)}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            self._drop(job)
        return job.generated, job.retractions, job.cached_tokens

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    def _drop(self, job: _Job) -> None:
        """An aborted request leaves: its private KV is freed, its prefix unlocked (SGLang's abort path)."""
        if job in self.running:
            self._release(job)
            self.running.remove(job)
            self.batch_is_full = False
        elif job in self.waiting:
            self.waiting.remove(job)

    async def _loop(self) -> None:
        while True:
            if not self.waiting and not self.running:
                self.ratio = INIT_NEW_TOKEN_RATIO  # the idle check's new_token_ratio_tracker.reset()
                self._wake.clear()
                await self._wake.wait()
                continue
            admitted = self._admit()
            if admitted:
                prefill = sum(job.kv_tokens - job.protected for job in admitted)
                self._make_free(0)  # the admitted requests' uncached tokens are already counted as held
                await asyncio.sleep(self.model.step_s + self.model.prefill_token_s * prefill)
                for job in admitted:
                    if job in self.running:
                        self._cache_prefilled(job)
                self._advance([job for job in admitted if job in self.running])
                continue
            if not self.running:  # waiting requests that cannot be admitted into an empty engine
                self.batch_is_full = False
                self._wake.clear()
                await self._wake.wait()
                continue
            self._make_room_for_decode()
            batch = list(self.running)
            seconds = self.model.step_s + self.model.kv_token_s * sum(job.kv_tokens for job in batch)
            await asyncio.sleep(seconds)
            made = self._advance([job for job in batch if job in self.running])
            self._last_step = (made, seconds)

    def _admit(self) -> list[_Job]:
        """The waiting requests PrefillAdder takes this round, moved to the running batch with their prefix locked."""
        for job in self.waiting:  # calc_priority matches every waiting request, which marks its prefix used
            if job.node is not None and job.node.attached:
                self.cache.touch(job.node)
            else:
                job.node = self.cache.match_prefix(job.fill_ids[:-1])[1]
        if not self.running:
            self.batch_is_full = False  # an empty batch has no request left to leave and clear it
        if self.batch_is_full or not self.waiting:
            return []
        model = self.model
        reserved = sum(job.new_tokens_left * self.ratio for job in self.running)
        admitted: list[_Job] = []
        prefill = 0
        while self.waiting:
            job = self.waiting[0]
            if model.max_running_requests is not None and len(self.running) >= model.max_running_requests:
                self.batch_is_full = True
                break
            cached, node = self.cache.match_prefix(job.fill_ids[:-1])  # at least one token is computed
            extend = len(job.fill_ids) - cached
            self.cache.inc_lock_ref(node)
            room = self.available_tokens + self.cache.evictable_size - reserved
            alone = not self.running and not admitted  # see the module docstring: a lone request that fits runs
            if extend + job.new_tokens_left + PAGE_SIZE >= room and not (alone and extend < room):
                self.cache.dec_lock_ref(node)
                self.batch_is_full = bool(admitted or self.running)
                break
            if admitted and prefill + extend > model.max_prefill_tokens:
                self.cache.dec_lock_ref(node)
                break
            self.waiting.popleft()
            job.node, job.protected = node, cached
            job.cached_tokens += cached
            self.cached_prefill_tokens += cached
            self.running.append(job)
            admitted.append(job)
            reserved += extend + PAGE_SIZE + job.new_tokens_left
            prefill += extend
        if admitted:
            computed = sum(job.kv_tokens - job.protected for job in admitted)
            hits = sum(job.protected for job in admitted)
            self._last_hit_rate = hits / (hits + computed) if hits + computed else 0.0
            self.prefilled_tokens += computed
        return admitted

    def _make_free(self, tokens: int) -> None:
        """At least `tokens` free slots, evicting cached prefixes for the shortfall (`evict_to_free_tokens`)."""
        shortfall = tokens - self.available_tokens
        if shortfall > 0:
            self.evicted_tokens += self.cache.evict(shortfall)

    def _cache_prefilled(self, job: _Job) -> None:
        """`cache_unfinished_req`: the prefilled sequence goes into the cache, locked by its request."""
        assert job.node is not None
        _, node = self.cache.insert(job.fill_ids)
        self.cache.inc_lock_ref(node)
        self.cache.dec_lock_ref(job.node)
        job.node, job.protected = node, len(job.fill_ids)

    def _release(self, job: _Job) -> None:
        """Free the request's private KV and unlock its prefix (`release_kv_cache` without insertion)."""
        if job.node is not None:
            self.cache.dec_lock_ref(job.node)
        job.node, job.protected = None, 0

    def _make_room_for_decode(self) -> None:
        """`check_decode_mem`, then `retract_decode` while the next step's tokens do not fit."""
        self._make_free(len(self.running))
        if self.available_tokens >= len(self.running):
            self.ratio = max(MIN_NEW_TOKEN_RATIO, self.ratio - NEW_TOKEN_RATIO_DECAY)
            return
        order = sorted(self.running, key=lambda job: (job.generated, -len(job.prompt)), reverse=True)
        first = True
        while len(order) > 1 and (first or self.available_tokens < len(order)):
            first = False
            job = order.pop()
            self._release(job)
            self.running.remove(job)
            job.retractions += 1
            self.retractions += 1
            self.waiting.append(job)
            self._make_free(len(order) * RETRACT_DECODE_STEPS)
        self.batch_is_full = False
        decoded = sum(job.generated for job in self.running)
        asked = sum(job.max_new for job in self.running)
        self.ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / (asked + 1))

    def _advance(self, jobs: list[_Job]) -> int:
        """One token more for each of `jobs`; the finished ones leave the batch, their sequence cached unlocked."""
        for job in jobs:
            job.generated += 1
            self.generated_tokens += 1
            if job.generated >= len(job.output):
                # cache_finished_req: all but the last token (whose KV was never computed) go into the cache
                self.cache.insert(job.fill_ids[:-1])
                self._release(job)
                self.running.remove(job)
                self.batch_is_full = False
                job.done.set()
        return len(jobs)

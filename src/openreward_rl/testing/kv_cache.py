"""The SGLang double's KV cache and scheduler: a token budget, a waiting queue, retraction on overflow.

`KVCacheModel` turns `SGLangTestServer` from "every request answers at once" into an engine with a
fixed KV-cache pool, run the way SGLang's scheduler runs one (SGLang 0.5.x, `Scheduler` and
`PrefillAdder`, with their default settings):

- a request waits in the queue (first come, first served) until the pool has room for its prompt
  plus an estimate of what it will still generate: `min(max_new_tokens - generated, 4096) x
  new_token_ratio` for it and for every running request (SGLang's optimistic reservation; the
  ratio starts at 0.7 and decays by (0.7 - 0.098) / 600 per decode step down to 0.098);
- each scheduler iteration runs either one prefill batch (the admitted requests' prompts, at most
  `max_prefill_tokens`, each then has its first token) or one decode step (every running request
  gains one token);
- when a decode step finds fewer free tokens than 20 per running request, requests are retracted
  (the one with the fewest generated tokens first, ties: the longest prompt) until the rest fit:
  a retracted request frees its KV, goes back to the front of the queue and later prefills its
  prompt and what it had generated again (`num_retractions` counts it); the ratio is then reset to
  (tokens generated + 20 per request) / their max_new_tokens, at most 1;
- the step takes `step_s` plus `kv_token_s` per token of KV the batch holds (decode reads it all)
  and `prefill_token_s` per token prefilled, so an over-admitted engine loses time to retraction
  and re-prefill while a half-empty one runs short batches.

Not reproduced: the prefix (radix) cache (a finished request's KV is freed, `cached_tokens` stays 0),
chunked prefill, mixed prefill/decode batches, paging, speculative decoding. `load()` answers the
fields of SGLang's `/v1/loads` entry that describe this: running and waiting requests, used tokens,
the pool size and `token_usage` (used over the pool; the evictable prefix cache SGLang also leaves
out is not modelled).
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import attrs

__all__ = ["KVCacheModel", "KVScheduler"]

# SGLang's defaults: SGLANG_INIT_NEW_TOKEN_RATIO, ..._MIN_NEW_TOKEN_RATIO_FACTOR, ..._NEW_TOKEN_RATIO_DECAY_STEPS,
# SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION and the scheduler's retract_decode_steps.
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
CLIP_MAX_NEW_TOKENS = 4096
RETRACT_DECODE_STEPS = 20


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
    prompt_len: int
    output_len: int  # tokens this request will generate before it finishes
    max_new: int  # what it asked for (the reservation estimate), >= output_len
    generated: int = 0
    retractions: int = 0
    done: asyncio.Event = attrs.field(factory=asyncio.Event)

    @property
    def kv_tokens(self) -> int:
        return self.prompt_len + self.generated

    def reserve(self, ratio: float) -> float:
        return min(self.max_new - self.generated, CLIP_MAX_NEW_TOKENS) * ratio


class KVScheduler:
    """One engine's queue, running batch and KV pool; `generate` plays one request through them."""

    def __init__(self, model: KVCacheModel) -> None:
        self.model = model
        self.waiting: collections.deque[_Job] = collections.deque()
        self.running: list[_Job] = []
        self.ratio = INIT_NEW_TOKEN_RATIO
        self.retractions = 0
        self.generated_tokens = 0
        self.prefilled_tokens = 0
        self._last_step: tuple[int, float] = (0, 1.0)  # tokens made by the last decode step, its seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def used_tokens(self) -> int:
        return sum(job.kv_tokens for job in self.running)

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
            "num_total_tokens": used + sum(job.kv_tokens for job in self.waiting),
            "max_total_num_tokens": total,
            "token_usage": round(used / total, 4),
            "gen_throughput": round(tokens / seconds, 2) if self.running else 0.0,
            "cache_hit_rate": 0.0,
            "utilization": round(used / total, 4),
            "max_running_requests": self.model.max_running_requests or 0,
        }

    async def generate(self, prompt_len: int, output_len: int, max_new: int, *stops: asyncio.Event) -> tuple[int, int]:
        """Queue a request, run it until its `output_len` tokens are made or one of `stops` is set (an
        abort); returns (tokens made, times it was retracted)."""
        job = _Job(prompt_len, output_len, max(max_new, output_len))
        if output_len == 0:
            return 0, 0
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
        return job.generated, job.retractions

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
        if job in self.running:
            self.running.remove(job)
        elif job in self.waiting:
            self.waiting.remove(job)

    async def _loop(self) -> None:
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
                continue
            admitted = self._admit()
            if admitted:
                prefill = sum(job.kv_tokens for job in admitted)
                self.prefilled_tokens += prefill
                await asyncio.sleep(self.model.step_s + self.model.prefill_token_s * prefill)
                self._advance([job for job in admitted if job in self.running])
                continue
            self._retract_for_decode()
            batch = list(self.running)
            seconds = self.model.step_s + self.model.kv_token_s * sum(job.kv_tokens for job in batch)
            await asyncio.sleep(seconds)
            made = self._advance([job for job in batch if job in self.running])
            self._last_step = (made, seconds)
            self.ratio = max(MIN_NEW_TOKEN_RATIO, self.ratio - NEW_TOKEN_RATIO_DECAY)

    def _admit(self) -> list[_Job]:
        """The waiting requests PrefillAdder would take now, moved to the running batch."""
        model = self.model
        room = model.max_total_tokens - self.used_tokens - sum(job.reserve(self.ratio) for job in self.running)
        admitted: list[_Job] = []
        prefill = 0
        while self.waiting:
            job = self.waiting[0]
            if model.max_running_requests is not None and len(self.running) >= model.max_running_requests:
                break
            need = job.kv_tokens + job.reserve(self.ratio)
            alone = not self.running and not admitted  # SGLang runs a lone request that fits the pool at all
            if need > room and not (alone and job.kv_tokens < model.max_total_tokens):
                break
            if admitted and prefill + job.kv_tokens > model.max_prefill_tokens:
                break
            self.waiting.popleft()
            self.running.append(job)
            admitted.append(job)
            room -= need
            prefill += job.kv_tokens
        return admitted

    def _retract_for_decode(self) -> None:
        """Retract requests until every running one has room for RETRACT_DECODE_STEPS more tokens."""
        free = self.model.max_total_tokens - self.used_tokens
        if free >= len(self.running):
            return
        order = sorted(self.running, key=lambda job: (job.generated, -job.prompt_len), reverse=True)
        while len(order) > 1 and free < len(order) * RETRACT_DECODE_STEPS:
            job = order.pop()
            self.running.remove(job)
            free += job.kv_tokens
            job.retractions += 1
            self.retractions += 1
            self.waiting.appendleft(job)
        remaining_new = sum(job.max_new for job in self.running) or 1
        decoded = sum(job.generated for job in self.running)
        self.ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / remaining_new)

    def _advance(self, jobs: list[_Job]) -> int:
        """One token more for each of `jobs`; the finished ones leave the batch."""
        for job in jobs:
            job.generated += 1
            self.generated_tokens += 1
            if job.generated >= job.output_len:
                self.running.remove(job)
                job.done.set()
        return len(jobs)

"""Episodes in flight sized from the engines' KV-cache load instead of a fixed number.

`AdmissionController` lets an episode start (`async with controller.admitted():`) while fewer than its
current `limit` run, and moves the limit between a `floor` and a `ceiling` from what the engines say
about their load, read by one poll every `interval_s` that all episodes share. The rule steers the
engines' queue (waiting requests per running one, averaged over the last polls, `queue_weight` for the
newest) into a short band:

- until the engines first queue on two polls in a row (a slow start, as TCP's; the average starts at no
  queue): while no request waits and the cache has room (below `full_usage` of it, default 0.9), with
  episodes waiting for a slot, the limit grows by half;
- a queue shorter than `short_queue` (default 0.5) per running request, or none after the slow start: the
  limit grows by one per poll (AIMD's additive increase). The engines' batch is then about as large as
  their KV cache admits (SGLang reserves each request's `max_new_tokens`, which `token_usage` does not
  show), and it swings as SGLang's reservation ratio decays and resets: growing fast while it swings up
  starts episodes the engines cannot hold once it swings back, and a started episode stays in flight;
- a queue of `short_queue` to `long_queue` (default 1) per running request, or the cache at `full_usage`:
  the limit holds at the episodes in flight. Such a queue is kept on purpose: SGLang admits from it the
  moment a request finishes, so the batch stays full while episodes are between turns;
- a longer queue: the extra episodes only wait, and the more episodes are in flight the more of their
  histories SGLang's prefix cache evicts between their turns, to be prefilled again; the limit drops to
  the episodes in flight less half the queue past `short_queue` (from the episodes in flight, not from
  the last limit, so polls that see the same queue while running episodes finish do not trim it again).

A running episode is never stopped for it: the limit only decides when the next one starts. When the
engines do not report their KV-cache usage (an older server, a router without `/workers`, an error on
the first poll) the controller says so once and admits up to `ceiling`, the static setting.

`SGLangLoads` reads SGLang's load report: the router's `GET /workers` for its workers (the SGLang Model
Gateway's list; a plain server is its own one worker), then each worker's `GET /v1/loads?include=core`
(`{"loads": [{"num_running_reqs", "num_waiting_reqs", "num_used_tokens", "max_total_num_tokens",
"token_usage", ...}, ...]}`, one entry per data-parallel rank), summed into one `EngineLoad`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import aiohttp
import attrs

__all__ = ["AdmissionController", "EngineLoad", "SGLangLoads"]

logger = logging.getLogger(__name__)


@attrs.frozen
class EngineLoad:
    """What the engines hold now, summed over every worker and data-parallel rank."""

    running: int
    waiting: int
    used_tokens: int
    total_tokens: int

    @property
    def token_usage(self) -> float:
        return self.used_tokens / self.total_tokens if self.total_tokens else 1.0

    @classmethod
    def from_sglang(cls, reports: Iterable[Any]) -> EngineLoad | None:
        """Sum SGLang `/v1/loads` answers; None when no entry says how full its KV cache is."""
        running = waiting = used = total = 0
        counted = False
        for report in reports:
            entries = report.get("loads") if isinstance(report, Mapping) else None
            for entry in entries if isinstance(entries, list) else []:
                if not isinstance(entry, Mapping):
                    continue
                pool, usage = _number(entry.get("max_total_num_tokens")), _number(entry.get("token_usage"))
                if not pool or usage is None:
                    continue
                counted = True
                running += int(_number(entry.get("num_running_reqs")) or 0)
                waiting += int(_number(entry.get("num_waiting_reqs")) or 0)
                used += int(_number(entry.get("num_used_tokens")) or round(usage * pool))
                total += int(pool)
        return cls(running, waiting, used, total) if counted else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@attrs.define(eq=False)
class SGLangLoads:
    """Reads the load of the SGLang workers behind `base_url` (a router or one server); see the module docstring."""

    base_url: str = attrs.field(converter=lambda url: str(url).rstrip("/"))
    timeout_s: float = 5.0
    _session: aiohttp.ClientSession | None = attrs.field(default=None, init=False)

    async def __call__(self) -> EngineLoad | None:
        session = self._client()
        workers = await self._workers(session)
        reports = await asyncio.gather(*(self._get(session, f"{url}/v1/loads?include=core") for url in workers))
        return EngineLoad.from_sglang(reports)

    async def _workers(self, session: aiohttp.ClientSession) -> list[str]:
        try:
            listed = await self._get(session, f"{self.base_url}/workers")
        except aiohttp.ClientResponseError:  # a plain server, no router in front
            return [self.base_url]
        workers = listed.get("workers") if isinstance(listed, Mapping) else None
        urls = [
            str(worker["url"]).rstrip("/")
            for worker in workers or []
            if isinstance(worker, Mapping) and worker.get("url")
        ]
        return urls or [self.base_url]

    async def _get(self, session: aiohttp.ClientSession, url: str) -> Any:
        async with session.get(url, raise_for_status=True) as response:
            return await response.json(content_type=None)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _positive(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"AdmissionController.{attribute.name} must be a positive number, got {value!r}")


@attrs.define(eq=False)
class AdmissionController:
    """Episodes in flight between `floor` and `ceiling`, set from `read_load` (see the module docstring).

    `read_load`: an async callable giving the engines' `EngineLoad`, or None when they do not report one.
    The first `admitted()` starts the poll on the running loop; `aclose()` stops it.
    """

    read_load: Callable[[], Awaitable[EngineLoad | None]]
    floor: int = attrs.field(default=8, validator=_positive)
    ceiling: int = attrs.field(default=512, validator=_positive)
    interval_s: float = attrs.field(default=0.5, validator=_positive)
    full_usage: float = attrs.field(default=0.9, validator=_positive)
    short_queue: float = attrs.field(default=0.5, validator=_positive)  # waiting per running request: growth stops
    long_queue: float = attrs.field(default=1.0, validator=_positive)  # ... past which the limit is trimmed
    queue_weight: float = attrs.field(default=0.5, validator=_positive)  # of the newest poll in the queue's average
    limit: int = attrs.field(init=False)
    in_flight: int = attrs.field(default=0, init=False)
    queued: int = attrs.field(default=0, init=False)  # episodes waiting for a slot
    static: bool = attrs.field(default=False, init=False)  # the engines gave no load: admitting up to `ceiling`
    polls: int = attrs.field(default=0, init=False)
    queue: float | None = attrs.field(default=None, init=False)  # waiting per running request, averaged
    queued_polls: int = attrs.field(default=0, init=False)  # polls in a row that saw a queue (2: slow start over)
    _changed: asyncio.Condition | None = attrs.field(default=None, init=False)
    _poller: asyncio.Task[None] | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        if self.floor > self.ceiling:
            raise ValueError(f"AdmissionController.floor ({self.floor}) is above its ceiling ({self.ceiling})")
        if self.full_usage > 1:
            raise ValueError(
                f"AdmissionController.full_usage is a fraction of the KV cache, at most 1, got {self.full_usage!r}"
            )
        if self.queue_weight > 1:
            raise ValueError(
                f"AdmissionController.queue_weight is the newest poll's share of the average, at most 1, got {self.queue_weight!r}"
            )
        self.limit = self.floor

    @contextlib.asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """Wait for a slot, hold it while the block runs, give it back however the block ends."""
        changed = self._condition()
        self._start_polling()
        async with changed:
            self.queued += 1
            try:
                await changed.wait_for(lambda: self.in_flight < self.limit)
            finally:
                self.queued -= 1
            self.in_flight += 1
        try:
            yield
        finally:
            async with changed:
                self.in_flight -= 1
                changed.notify_all()

    def next_limit(self, load: EngineLoad) -> int:
        """The limit after one reading of the engines' load (updates the queue's average)."""
        running = max(load.running, 1)
        queue = load.waiting / running
        self.queue = (self.queue or 0.0) + self.queue_weight * (queue - (self.queue or 0.0))
        if self.queued_polls < 2:  # a queue on one poll alone may be requests that just arrived
            self.queued_polls = self.queued_polls + 1 if queue >= self.short_queue else 0
        if self.queue > self.long_queue:
            excess = (self.queue - self.short_queue) * running
            return max(self.floor, min(self.limit, self.in_flight - math.ceil(excess / 2)))
        if self.queue >= self.short_queue or load.token_usage >= self.full_usage:
            return max(self.floor, min(self.limit, self.in_flight))
        if not self.queued:  # nobody waits for a slot: no reason to grow
            return self.limit
        step = max(1, self.limit // 2) if self.queued_polls < 2 and not load.waiting else 1
        return min(self.ceiling, self.limit + step)

    async def poll_once(self) -> None:
        """Read the load once and move the limit (the first reading without one turns the controller static)."""
        try:
            load = await self.read_load()
            failure = "they report no KV-cache usage (token_usage, max_total_num_tokens)"
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            load, failure = None, f"reading it failed: {type(error).__name__}: {error}"
        self.polls += 1
        if load is None:
            if self.polls == 1:
                self.static = True
                logger.warning(
                    "adaptive concurrency: the engines' load is not readable (%s); admitting up to the static %d episodes in flight instead",
                    failure,
                    self.ceiling,
                )
                await self._set_limit(self.ceiling)
            else:
                logger.debug("adaptive concurrency: no load this poll (%s); the limit stays at %d", failure, self.limit)
            return
        await self._set_limit(self.next_limit(load))

    async def _set_limit(self, limit: int) -> None:
        changed = self._condition()
        async with changed:
            self.limit = limit
            changed.notify_all()

    async def _poll(self) -> None:
        while not self.static:
            await self.poll_once()
            if not self.static:
                await asyncio.sleep(self.interval_s)

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    def _start_polling(self) -> None:
        if self._poller is None and not self.static:
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def aclose(self) -> None:
        """Stop the poll (episodes in flight are not touched) and close `read_load` where it has `aclose`."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        closer = getattr(self.read_load, "aclose", None)
        if closer is not None:
            await closer()

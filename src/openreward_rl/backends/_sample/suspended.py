"""The process's suspended episodes (partial rollout): bounded by a TTL and a cap, closed at exit.

A suspended episode is a `LiveEpisode` parked with its environment session open. Its sample goes
back to the trainer's data buffer carrying `metadata["resume"]` (`ResumeRecord`); when the sample
returns, `take` hands the episode back. An episode parked longer than `ttl` seconds, or pushed out
because `cap` others are parked, is closed (its session too) and remembered as lost with the
reason, so its sample becomes an aborted placeholder that says why, never a trained 0.

The store is process-wide and not tied to one event loop: an episode runs on the loop that started
it, and is resumed or closed there (Slime's fully-async worker and its eval loop are different
threads, each with its own loop).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from openreward_rl.loop.resumable import LiveEpisode

__all__ = ["RESUME_KEY", "ResumeRecord", "SuspensionStore", "store_for", "reset_store"]

logger = logging.getLogger(__name__)

RESUME_KEY = "resume"
_LOST_MEMORY = 10_000  # lost keys remembered with their reason


@attrs.frozen
class ResumeRecord:
    """What a suspended sample carries in `metadata["resume"]`: plain JSON, so it survives the data buffer.

    >>> record = ResumeRecord(key="k1", pid=7, suspensions=2)
    >>> ResumeRecord.from_metadata({"resume": record.to_metadata()}) == record
    True
    >>> ResumeRecord.from_metadata({"environment": "MathEnv"}) is None
    True
    """

    key: str
    pid: int
    suspensions: int = 1

    def to_metadata(self) -> dict[str, Any]:
        return {"key": self.key, "pid": self.pid, "suspensions": self.suspensions}

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> ResumeRecord | None:
        value = (metadata or {}).get(RESUME_KEY)
        if not isinstance(value, Mapping) or not isinstance(value.get("key"), str):
            return None
        return cls(key=value["key"], pid=int(value.get("pid", -1)), suspensions=int(value.get("suspensions", 1)))

    @classmethod
    def new(cls) -> ResumeRecord:
        return cls(key=uuid.uuid4().hex, pid=os.getpid(), suspensions=1)


@attrs.define(eq=False)
class SuspensionStore:
    """Suspended episodes by key, oldest first."""

    ttl: float
    cap: int
    clock: Callable[[], float] = time.monotonic
    _live: dict[str, tuple[LiveEpisode, float]] = attrs.field(init=False, factory=dict)
    _lost: collections.OrderedDict[str, str] = attrs.field(init=False, factory=collections.OrderedDict)

    def __len__(self) -> int:
        return len(self._live)

    def keys(self) -> list[str]:
        return list(self._live)

    def episodes(self) -> list[LiveEpisode]:
        return [live for live, _ in self._live.values()]

    async def park(self, key: str, live: LiveEpisode) -> None:
        """Keep `live` under `key`; the oldest episodes beyond the cap are closed."""
        self._live.pop(key, None)
        self._live[key] = (live, self.clock())
        while len(self._live) > self.cap:
            oldest = next(iter(self._live))
            await self._drop(
                oldest,
                f"closed: more than max_suspended_episodes={self.cap} episodes were suspended at once (this one was the oldest)",
            )

    def take(self, record: ResumeRecord) -> LiveEpisode | str:
        """The episode suspended under `record.key`, removed from the store; else why there is none."""
        entry = self._live.pop(record.key, None)
        if entry is not None:
            return entry[0]
        if record.key in self._lost:
            return self._lost[record.key]
        if record.pid != os.getpid():
            return f"nothing to resume: the episode was suspended in process {record.pid}, this is process {os.getpid()} (the rollout process restarted)"
        return "nothing to resume: no episode is suspended under this key in this process (already resumed, or closed)"

    async def sweep(self) -> int:
        """Close the episodes parked longer than the TTL; returns how many."""
        now = self.clock()
        expired = [key for key, (_, parked_at) in self._live.items() if now - parked_at > self.ttl]
        for key in expired:
            await self._drop(
                key,
                f"expired: suspended for more than suspended_episode_ttl={self.ttl:g}s, its environment session was closed",
            )
        return len(expired)

    async def _drop(self, key: str, reason: str) -> None:
        entry = self._live.pop(key, None)
        if entry is None:  # another call on this loop dropped it while this one awaited
            return
        live, _ = entry
        self._lost[key] = reason
        while len(self._lost) > _LOST_MEMORY:
            self._lost.popitem(last=False)
        logger.warning("suspended episode %s %s", key, reason)
        await close_live(live)

    async def aclose(self) -> None:
        """Close every suspended episode (their sessions too)."""
        keys = list(self._live)
        for key in keys:
            await self._drop(key, "closed: the rollout process shut its suspended episodes")

    def close_at_exit(self) -> None:
        """Synchronous close for `atexit`: each episode on its own loop, where that loop still runs."""
        for key in list(self._live):
            live, _ = self._live.pop(key)
            self._lost[key] = "closed at process exit"
            loop = live.loop
            try:
                if loop.is_closed():
                    continue
                if loop.is_running():
                    asyncio.run_coroutine_threadsafe(live.aclose(), loop).result(timeout=30)
                else:
                    loop.run_until_complete(live.aclose())
            except Exception as error:  # exit must go on
                logger.warning("could not close suspended episode %s at exit: %s", key, error)


async def close_live(live: LiveEpisode) -> None:
    """Close `live` on its own loop, from whichever loop is running here."""
    loop = asyncio.get_running_loop()
    if live.loop is loop:
        await live.aclose()
    elif live.loop.is_running():
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(live.aclose(), live.loop))


_STORE: SuspensionStore | None = None


def store_for(ttl: float, cap: int) -> SuspensionStore:
    """The process's store, with the current config's TTL and cap; closed at interpreter exit."""
    global _STORE
    if _STORE is None:
        _STORE = SuspensionStore(ttl=ttl, cap=cap)
        atexit.register(_close_at_exit)
    _STORE.ttl, _STORE.cap = ttl, cap
    return _STORE


def _close_at_exit() -> None:
    if _STORE is not None:
        _STORE.close_at_exit()


def reset_store() -> SuspensionStore | None:
    """Forget the process's store (tests simulating a restarted process); returns the old one to close."""
    global _STORE
    old, _STORE = _STORE, None
    return old

"""The liveness race of `EnvSession` calls: a fast call never starts the probe; a call still
running when the probe finds the server down ends with `ServerUnreachable` (and is cancelled);
a call to a server that accepts connections but answers nothing ends the same way within the
probe's window; a slow call to a live server is left alone, and so is one to a server slow on
/health that still answers other requests; outside cancellation stays a cancellation.
The probe's HTTP client is a real aiohttp session to 127.0.0.1: a closed port (down), a listening
socket that never answers (hung), or a real aiohttp server answering /health (up)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from local_http import serve_app
from openreward_rl.env.environment import UNRESPONSIVE_S, LivenessProbe, ServerUnreachable, _race_liveness
from openreward_rl.env.traffic import SessionTraffic

pytestmark = pytest.mark.anyio


def closed_port() -> int:
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        return probe_socket.getsockname()[1]


class CountingProbe(LivenessProbe):
    def __init__(self, http: aiohttp.ClientSession, **options: Any) -> None:
        super().__init__(http, **options)
        self.probes = 0

    async def _probe_once(self) -> str | None:
        self.probes += 1
        return await super()._probe_once()


async def test_fast_call_never_probes_and_runs_in_the_callers_task() -> None:
    async def call() -> tuple[asyncio.Task[Any] | None, int]:
        await asyncio.sleep(0)
        return asyncio.current_task(), len(asyncio.all_tasks())

    async with aiohttp.ClientSession(f"http://127.0.0.1:{closed_port()}") as http:
        probe = CountingProbe(http, after_s=0.05, interval_s=0.01)
        tasks_before = len(asyncio.all_tasks())
        running_in, tasks_during = await _race_liveness(call(), probe)
        assert running_in is asyncio.current_task() and tasks_during == tasks_before  # no task per call
        await asyncio.sleep(0.15)  # past after_s: no timer left behind either
        assert probe.probes == 0


async def test_call_to_a_dead_server_ends_unreachable_and_is_cancelled() -> None:
    cancelled = asyncio.Event()

    async def hanging_call() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with aiohttp.ClientSession(f"http://127.0.0.1:{closed_port()}") as http:
        probe = CountingProbe(http, after_s=0.05, interval_s=0.01, failures=2)
        with pytest.raises(ServerUnreachable, match="2 connection attempts to /health failed"):
            await _race_liveness(hanging_call(), probe)
    assert cancelled.is_set() and probe.probes == 2
    assert asyncio.current_task().cancelling() == 0  # the verdict's cancellation was taken back


@contextlib.asynccontextmanager
async def live_server() -> AsyncIterator[aiohttp.ClientSession]:
    """A client of a local server whose /health always answers."""
    app = web.Application()
    app.router.add_get("/health", lambda request: web.json_response({"ok": True}))
    async with serve_app(app) as base, aiohttp.ClientSession(base) as http:
        yield http


async def test_slow_call_to_a_live_server_completes() -> None:
    async with live_server() as http:
        probe = CountingProbe(http, after_s=0.02, interval_s=0.02)
        assert await _race_liveness(asyncio.sleep(0.2, result="slow"), probe) == "slow"
        assert probe.probes >= 2


async def test_outside_cancellation_stays_a_cancellation() -> None:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{closed_port()}") as http:
        probe = CountingProbe(http, after_s=10)
        task = asyncio.ensure_future(_race_liveness(asyncio.sleep(30), probe))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_concurrent_slow_calls_share_one_watch() -> None:
    # 200 calls outlasting after_s: one /health watch for all of them, not one per call.
    async with live_server() as http:
        probe = CountingProbe(http, after_s=0.02, interval_s=0.05)
        results = await asyncio.gather(*(_race_liveness(asyncio.sleep(0.3, result=i), probe) for i in range(200)))
        assert results == list(range(200))
        assert 2 <= probe.probes <= 8  # ~0.28 s / 0.05 s of one watch; a watch per call would be ~1,000
        await asyncio.sleep(0.15)
        settled = probe.probes
        await asyncio.sleep(0.15)
        assert probe.probes == settled  # the watch stopped with the last call


async def test_a_verdict_reaches_every_waiting_call() -> None:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{closed_port()}") as http:
        probe = CountingProbe(http, after_s=0.02, interval_s=0.01, failures=2)
        outcomes = await asyncio.gather(
            *(_race_liveness(asyncio.sleep(30), probe) for _ in range(50)), return_exceptions=True
        )
    assert all(isinstance(outcome, ServerUnreachable) for outcome in outcomes)
    assert probe.probes == 2  # one watch found it down for all 50


async def test_sessions_on_one_client_share_a_probe() -> None:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{closed_port()}") as http:
        first = LivenessProbe.for_environment(type("Env", (), {"client": http})())
        second = LivenessProbe.for_environment(type("Env", (), {"client": http})())
        other = LivenessProbe.for_environment(type("Env", (), {"client": http})(), after_s=5.0)
        assert first is second and other is not first and other.after_s == 5.0
        assert LivenessProbe.for_environment(type("Env", (), {"client": None})()) is None


@contextlib.contextmanager
def hung_port() -> Any:
    """A port on 127.0.0.1 that accepts connections (the kernel completes them) and never answers: a
    stopped or hung server."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        yield listening.getsockname()[1]


async def test_a_server_that_answers_nothing_is_found_down_within_its_window() -> None:
    loop = asyncio.get_running_loop()
    with hung_port() as port:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            probe = CountingProbe(http, after_s=0.05, interval_s=0.05, request_timeout_s=0.1, unresponsive_s=0.6)
            started = loop.time()
            with pytest.raises(ServerUnreachable, match="accepts connections but has answered nothing for"):
                await _race_liveness(asyncio.sleep(30), probe)
            first = loop.time() - started
            # after_s, then the window, overrun by at most one probe and its pause
            assert 0.6 <= first <= 0.05 + 0.6 + 0.1 + 0.05 + 0.5, first
            # A server found so stays down until it answers: the next call watches at once, and one probe repeats the verdict.
            probes, started = probe.probes, loop.time()
            with pytest.raises(ServerUnreachable, match="since it was found unresponsive"):
                await _race_liveness(asyncio.sleep(30), probe)
            assert probe.probes - probes == 1 and loop.time() - started < 0.6


async def test_a_server_slow_on_health_but_answering_other_requests_is_alive() -> None:
    """A saturated server answers /health late yet answers other requests on the client: not down."""

    async def slow_health(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/health", slow_health)
    app.router.add_get("/other", lambda request: web.json_response({}))
    traffic = SessionTraffic()
    async with serve_app(app) as base, aiohttp.ClientSession(base, trace_configs=[traffic.trace_config]) as http:
        traffic.attach(http)

        async def other_requests() -> None:
            while True:
                async with http.get("/other") as response:
                    await response.read()
                await asyncio.sleep(0.05)

        others = asyncio.ensure_future(other_requests())
        try:
            probe = CountingProbe(http, after_s=0.02, interval_s=0.02, request_timeout_s=0.05, unresponsive_s=0.2)
            assert await _race_liveness(asyncio.sleep(1.0, result="slow"), probe) == "slow"
            assert probe.probes >= 5  # /health went unanswered the whole time
        finally:
            others.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await others


async def test_the_default_window_is_bounded() -> None:
    """A hung server is found within a bounded time by default: the window, plus one probe and its pause."""
    async with aiohttp.ClientSession(f"http://127.0.0.1:{closed_port()}") as http:
        probe = LivenessProbe(http)
    assert probe.unresponsive_s == UNRESPONSIVE_S <= 120
    assert probe.after_s + probe.unresponsive_s + probe.request_timeout_s + probe.interval_s <= 120

"""Session keep-alive pings on the episode's loop (`env.keepalive`): an episode's session pings its
server from the episode's event loop over the pooled client, not from the SDK's ping thread; pings
reach the server with the session's id; failed pings in a row mark the session dead the SDK's way; a
session the server has heard from within the ping interval (a call it answered) is not pinged, an idle
one is.
Real parts: the SDK's environment `Server` in a child process and the SDK's `AsyncOpenReward`; for the
failures, a real aiohttp server answering /ping 404 and a stand-in for the SDK session's attributes
(the SDK session cannot be opened against a server that refuses its pings)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from openreward import AsyncOpenReward
from openreward.api._session import ping as sdk_ping
from openreward.api._session import session as sdk_session_module
from openreward.api.errors import SessionTerminatedError

from local_http import serve_app
from openreward_rl.env import keepalive
from openreward_rl.env.environment import EnvironmentFault, LivenessProbe, open_session
from openreward_rl.env.local_server import LocalEnvServer, serve_environments
from openreward_rl.env.tasks import TaskRef
from openreward_rl.env.traffic import SessionTraffic, traffic_of

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def env_server(example_env_specs: dict[str, str]) -> Any:
    with serve_environments([example_env_specs["Faulty"]], subprocess=True) as server:
        yield server


async def test_pings_run_on_the_episode_loop(env_server: LocalEnvServer, monkeypatch: pytest.MonkeyPatch) -> None:
    scheduled: list[str] = []
    monkeypatch.setattr(sdk_ping.ping_thread, "schedule", lambda *args, **kwargs: scheduled.append(args[1]))
    monkeypatch.setattr(keepalive, "PING_INTERVAL_S", 0.05)
    pings: list[tuple[str, str | None]] = []
    real_ping = keepalive.sdk.ping

    async def counting(session: Any) -> Any:
        pings.append((f"{session.base_url}/ping", session.sid))
        return await real_ping(session)

    monkeypatch.setattr(keepalive.sdk, "ping", counting)
    client = AsyncOpenReward(api_key="local")
    task = TaskRef("Faulty", "train", index=0, variant=env_server.variant_for("Faulty"), base_url=env_server.base_url)
    try:
        async with open_session(client, task, liveness=False) as session:
            sdk = session.sdk_session
            assert sdk._ping_task.get_coro().__name__ == "keep_alive"
            await asyncio.sleep(0.3)
            assert sdk._dead_exception is None  # the server took every ping
            outcome = await session.call_tool("garble", {})
            assert outcome.error is None
        assert sdk._ping_task is None  # the SDK's exit cancelled ours
    finally:
        await client.environments.aclose()
    assert scheduled == []  # nothing went to the SDK's ping thread
    assert len(pings) >= 3 and {p for p in pings} == {(f"{env_server.base_url}/ping", sdk.sid)}


class SessionStandIn:
    """The attributes of an SDK session `keep_alive` reads, and a `_mark_dead` that records."""

    def __init__(self, base_url: str, client: aiohttp.ClientSession) -> None:
        self.base_url, self.client, self.sid, self.api_key, self.deployment = base_url, client, "sid-1", "key", None
        self.dead: list[str] = []

    def _mark_dead(self, error: Any) -> None:
        self.dead.append(error.message)


async def test_failed_pings_mark_the_session_dead() -> None:
    # a success, 5 failures (strike 1), a success (the streak starts over, the strikes do not), then
    # 20 failures (strikes 2 to 5): dead after 27 pings, and no more pings
    answers = iter([200, *[404] * 5, 200, *[404] * 20, 200])
    seen: list[str | None] = []

    async def ping(request: web.Request) -> web.Response:
        seen.append(request.headers.get("X-Session-ID"))
        return web.json_response({"detail": "Active environment not found"}, status=next(answers))

    app = web.Application()
    app.router.add_post("/ping", ping)
    async with serve_app(app) as base, aiohttp.ClientSession(base) as http:
        stand_in = SessionStandIn(base, http)
        await asyncio.wait_for(keepalive.keep_alive(stand_in, interval_s=0.01), 10)
    assert len(seen) == 27 and set(seen) == {"sid-1"}
    assert len(stand_in.dead) == 1 and stand_in.dead[0].startswith(
        "5 x 5 consecutive ping failures: SessionResponseError"
    )


@pytest.mark.filterwarnings(
    "ignore:coroutine .resumable_sse. was never awaited"
)  # the SDK refuses a dead session before awaiting it
async def test_a_session_marked_dead_by_pings_fails_its_next_call(
    env_server: LocalEnvServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's own `_mark_dead` path: the next call raises `SessionTerminatedError`, which the library
    reports as an environment fault (never a reward)."""
    monkeypatch.setattr(keepalive, "PING_INTERVAL_S", 0.01)
    monkeypatch.setattr(keepalive, "STREAK", 2)
    monkeypatch.setattr(keepalive, "STRIKES", 1)
    real_ping = keepalive.sdk.ping

    async def failing(session: Any) -> Any:
        elsewhere = SimpleNamespace(
            client=session.client,
            base_url=f"{session.base_url}/gone",
            api_key=session.api_key,
            sid=session.sid,
            deployment=session.deployment,
        )
        return await real_ping(elsewhere)  # 404 from the real server

    monkeypatch.setattr(keepalive.sdk, "ping", failing)
    client = AsyncOpenReward(api_key="local")
    task = TaskRef("Faulty", "train", index=0, variant=env_server.variant_for("Faulty"), base_url=env_server.base_url)
    try:
        async with open_session(client, task, liveness=False) as session:
            for _ in range(200):
                if session.sdk_session._dead_exception is not None:
                    break
                await asyncio.sleep(0.01)
            assert isinstance(session.sdk_session._dead_exception, SessionTerminatedError)
            with pytest.raises(Exception, match="consecutive ping failures") as caught:
                await session.call_tool("garble", {})
            assert type(caught.value).__name__ == "EnvironmentFault"
            dead = session.sdk_session._dead_exception
    finally:
        await client.environments.aclose()
    dead.__traceback__ = None  # it holds the SDK's unawaited call: freed here, under this test's filter
    del caught, dead, session
    gc.collect()


def test_a_started_ping_task_is_left_alone() -> None:
    async def scenario() -> bool:
        class Session:
            sid, api_key, base_url, deployment = "s", None, "http://127.0.0.1:9", None

            def _mark_dead(self, error: Any) -> None: ...

        session = Session()
        async with aiohttp.ClientSession() as http:
            session.client = http  # type: ignore[attr-defined]
            session._ping_task = asyncio.get_running_loop().create_task(asyncio.sleep(5))  # type: ignore[attr-defined]
            await asyncio.sleep(0)  # it has started
            adopted = keepalive.adopt_pings(session)
            session._ping_task.cancel()  # type: ignore[attr-defined]
            return adopted

    assert asyncio.run(scenario()) is False
    assert sdk_session_module.BaseAsyncSession._run_ping is not None  # the SDK's own pings stay available


def counting_pings(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Replace keepalive's request with one that records the loop time of each ping, then sends it."""
    pings: list[float] = []
    real_ping = keepalive.sdk.ping

    async def counting(session: Any) -> Any:
        pings.append(asyncio.get_running_loop().time())
        return await real_ping(session)

    monkeypatch.setattr(keepalive.sdk, "ping", counting)
    return pings


async def test_a_session_with_recent_calls_is_not_pinged_and_an_idle_one_is(
    env_server: LocalEnvServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's `Server` refreshes a session on every request naming it: while the episode calls a
    tool more often than the ping interval no ping is sent; once it is idle, pings resume at the
    interval, and the server keeps the session throughout (its calls and pings succeed)."""
    monkeypatch.setattr(keepalive, "PING_INTERVAL_S", 0.5)
    pings = counting_pings(monkeypatch)
    client = AsyncOpenReward(api_key="local")
    task = TaskRef("Faulty", "train", index=0, variant=env_server.variant_for("Faulty"), base_url=env_server.base_url)
    loop = asyncio.get_running_loop()
    try:
        async with open_session(client, task, liveness=False) as session:
            sdk = session.sdk_session
            assert traffic_of(sdk.client) is not None
            busy_until = loop.time() + 2.0
            while loop.time() < busy_until:  # a call every ~0.05 s, 10x the ping rate
                assert (await session.call_tool("garble", {})).error is None
                await asyncio.sleep(0.05)
            assert pings == []
            idle_from = loop.time()
            await asyncio.sleep(1.6)
            assert 2 <= len(pings) <= 4 and pings[0] - idle_from < 0.55  # the cadence, from the last call
            assert sdk._dead_exception is None
            assert (await session.call_tool("garble", {})).error is None
    finally:
        await client.environments.aclose()


class FlakyPingServer:
    """/ping answers 404 (the session unknown to it); /call answers `call_status`."""

    def __init__(self, call_status: int = 200) -> None:
        self.pings, self.call_status = 0, call_status
        self.app = web.Application()
        self.app.router.add_post("/ping", self.ping)
        self.app.router.add_post("/call", self.call)

    async def ping(self, request: web.Request) -> web.Response:
        self.pings += 1
        return web.json_response({"detail": "Active environment not found"}, status=404)

    async def call(self, request: web.Request) -> web.Response:
        return web.json_response({}, status=self.call_status)


async def test_an_idle_session_on_the_pooled_transport_is_still_marked_dead() -> None:
    """Traffic recording does not weaken the SDK's tolerance: an idle session whose pings all fail
    is marked dead after `STRIKES` x `STREAK` pings, as without it."""
    server = FlakyPingServer()
    traffic = SessionTraffic()
    async with serve_app(server.app) as base, aiohttp.ClientSession(base, trace_configs=[traffic.trace_config]) as http:
        traffic.attach(http)
        stand_in = SessionStandIn(base, http)
        await asyncio.wait_for(keepalive.keep_alive(stand_in, interval_s=0.01), 10)
        assert traffic.last_heard("sid-1") == float("-inf")  # forgotten once its keep-alive ended
    assert server.pings == keepalive.STREAK * keepalive.STRIKES
    assert len(stand_in.dead) == 1 and stand_in.dead[0].startswith("5 x 5 consecutive ping failures")


@pytest.mark.parametrize(("call_status", "dead"), [(200, False), (502, True)])
async def test_only_an_answered_request_stands_for_a_ping(call_status: int, dead: bool) -> None:
    """A request for the session answered 2xx ends a streak of failed pings (the server holds the
    session); a 502 (a proxy's, or a server that did not handle it) proves nothing and does not."""
    server = FlakyPingServer(call_status)
    traffic = SessionTraffic()
    async with serve_app(server.app) as base, aiohttp.ClientSession(base, trace_configs=[traffic.trace_config]) as http:
        traffic.attach(http)
        stand_in = SessionStandIn(base, http)
        pinging = asyncio.create_task(keepalive.keep_alive(stand_in, interval_s=0.05))
        answered = 0
        while not pinging.done() and server.pings < keepalive.STREAK * keepalive.STRIKES + 10:
            if server.pings % 3 == 0 and server.pings > answered:  # one call after every third failed ping
                answered = server.pings
                async with http.post("/call", headers={"X-Session-ID": "sid-1"}):
                    pass
            await asyncio.sleep(0.005)
        pinging.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pinging
    assert bool(stand_in.dead) is dead


@pytest.mark.parametrize(("stands_s", "pinged_while_waiting"), [(keepalive.WAITING_STANDS_S, False), (0.2, True)])
async def test_a_request_waiting_for_its_answer_stands_for_a_ping(
    monkeypatch: pytest.MonkeyPatch, stands_s: float, pinged_while_waiting: bool
) -> None:
    """A server that has fallen behind answers every request late: while a request for the session
    waits for its answer, no ping is sent (it would queue behind it), for up to `WAITING_STANDS_S`."""
    monkeypatch.setattr(keepalive, "WAITING_STANDS_S", stands_s)
    pings: list[float] = []
    loop = asyncio.get_running_loop()

    async def ping(request: web.Request) -> web.Response:
        pings.append(loop.time())
        return web.json_response({"status": "ok"})

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1.0)
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/ping", ping)
    app.router.add_post("/slow", slow)
    traffic = SessionTraffic()
    async with serve_app(app) as base, aiohttp.ClientSession(base, trace_configs=[traffic.trace_config]) as http:
        traffic.attach(http)
        pinging = asyncio.create_task(
            keepalive.keep_alive(SessionStandIn(base, http), interval_s=0.1, heard_at=loop.time())
        )
        await asyncio.sleep(0)
        sent = loop.time()
        async with http.post("/slow", headers={"X-Session-ID": "sid-1"}):
            answered = loop.time()
        await asyncio.sleep(0.3)
        pinging.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pinging
    while_waiting = [t for t in pings if sent + 0.15 < t < answered]
    assert bool(while_waiting) is pinged_while_waiting
    assert any(t > answered for t in pings)  # answered 1 s after it was sent: pings resume
    assert traffic.latest_waiting("sid-1") == float("-inf")


async def test_a_refused_ping_confirmed_by_the_probe_marks_the_session_dead_at_once() -> None:
    """A server process that is gone refuses connections: the session is dead after one ping (its SDK
    retries) and the probe's check, not after the SDK's 25 failed pings (over 5 minutes)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{closed.getsockname()[1]}"
    async with aiohttp.ClientSession(base) as http:
        stand_in = SessionStandIn(base, http)
        probe = LivenessProbe(http, interval_s=0.01)
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(keepalive.keep_alive(stand_in, interval_s=0.01, probe=probe), 30)
        elapsed = asyncio.get_running_loop().time() - started
    assert len(stand_in.dead) == 1 and stand_in.dead[0].startswith(
        "environment server unreachable: a ping was refused"
    ), stand_in.dead
    assert elapsed < 10, elapsed  # one ping's three attempts (~3 s of the SDK's backoff) and two probes


async def test_failed_pings_of_many_sessions_are_one_warning(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every session of a dead server fails its pings: one warning for the server, the rest at debug level."""
    monkeypatch.setattr(keepalive, "STREAK", 2)
    monkeypatch.setattr(keepalive, "STRIKES", 2)
    server = FlakyPingServer()
    async with serve_app(server.app) as base, aiohttp.ClientSession(base) as http:
        stand_ins = [SessionStandIn(base, http) for _ in range(8)]
        for number, stand_in in enumerate(stand_ins):
            stand_in.sid = f"sid-{number}"
        with caplog.at_level(logging.DEBUG, logger=keepalive.__name__):
            await asyncio.wait_for(asyncio.gather(*(keepalive.keep_alive(s, interval_s=0.01) for s in stand_ins)), 30)
    assert all(len(s.dead) == 1 for s in stand_ins)
    records = [r for r in caplog.records if r.name == keepalive.__name__]
    warnings = [r for r in records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and base in warnings[0].getMessage(), [r.getMessage() for r in warnings]
    assert sum(r.levelno == logging.DEBUG for r in records) == 8 * 2 * 2 - 1  # every other failure, at debug level


async def test_an_episode_waiting_on_the_model_ends_when_its_server_dies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's real `Server` in a child process, killed while the episode waits on something else (the
    model): the session's next ping is refused, the probe confirms, and the episode's wait is cut at once as
    an environment fault, instead of running on until its next environment call."""
    monkeypatch.setattr(keepalive, "PING_INTERVAL_S", 0.2)
    client = AsyncOpenReward(api_key="local")
    try:
        with serve_environments(["examples/environments/faulty.py:Faulty"], subprocess=True) as server:
            task = TaskRef("Faulty", "train", index=0, base_url=server.base_url)
            async with open_session(client, task) as session:
                waiting = asyncio.ensure_future(session.while_alive(asyncio.sleep(120)))  # the model's turn
                await asyncio.sleep(0.3)
                server.kill()
                started = asyncio.get_running_loop().time()
                with pytest.raises(
                    EnvironmentFault,
                    match="the environment session ended while the episode ran: environment server unreachable",
                ):
                    await asyncio.wait_for(waiting, 30)
                elapsed = asyncio.get_running_loop().time() - started
    finally:
        await client.environments.aclose()
    assert elapsed < 10, elapsed

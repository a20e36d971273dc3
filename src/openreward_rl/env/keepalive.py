"""Session keep-alive pings on the episode's own event loop, over the pooled environment transport.

An open SDK session pings its server (`POST /ping` with the session id) every 10 s so the server
keeps it. The SDK runs every session's pings on one dedicated thread with its own event loop and
its own `aiohttp` session made with `trust_env=True`: each ping crosses threads and makes two
thread-pool hops (a `~/.netrc` read and a proxy lookup), and the thread contends with the episode
loop for the GIL. An episode's session lives as long as the episode, which grows with the episodes
in flight, so this cost per turn grew with concurrency (~0.4 ms/turn of the episode process at
1,000 concurrent episodes on 2 cores).

`adopt_pings(session)` replaces an SDK session's ping task, right after the session opened (before
that task first runs), with `keep_alive`: the same request (`_compat.openreward.ping`: the SDK's
env-server retry policy and headers) on the session's own HTTP client, which `open_session` made
pooled (`env.traffic.use_pooled_transport`), in the episode's event loop, at the SDK's cadence, each ping (its up to
three attempts) bounded by `PING_TIMEOUT_S`. The SDK's tolerance is kept: its ping loop gives up
after `STREAK` failed pings in a row, and its session is marked dead the `STRIKES`-th time that
happens (the strikes are never reset); then `keep_alive` marks the session dead as the SDK does
(`_compat.openreward.mark_dead`), so its next call raises `SessionTerminatedError` (an infrastructure fault). A
session that does not look like the SDK's (another SDK version's internals) keeps its own pings.

A session the server has heard from within the last interval is not pinged. The SDK's `Server`
refreshes a session's liveness on every request that names it, not only `/ping` (`env.traffic`),
so a ping is due only `interval_s` after the latest of: the session's open (`adopt_pings(session,
heard_at=...)`: the open's start, before the SDK's `/create` was sent), its latest request the server
answered 2xx (`env.traffic`, recorded on the pooled transport), its latest ping attempt; and a due
ping waits while another request for the session, sent under `WAITING_STANDS_S` ago, still waits
for its answer (the server refreshes the session when it handles that one; a ping would queue
behind it). A session in a busy episode (a tool call or a prompt read every few seconds, or
requests queued at a server that has fallen behind) then sends no pings, and one that is idle
(parked between turns, waiting on a slow model, or in a call the server answered but has not
finished, longer than the interval) pings at the SDK's cadence with the SDK's tolerance as before. The server's own answer to another request
shows it holds the session, so it also ends a streak of failed pings (the strikes stay).
At 10,000 concurrent episodes pinging at the SDK's cadence is ~1,000 pings/s, and a single local
environment server spent most of its CPU on them (docs/performance.md, section 4).

A ping refused a connection (the server process is gone) is not left to the SDK's tolerance (25
failed pings, over 5 minutes): where the session has a `LivenessProbe` (`adopt_pings(..., probe=)`),
the probe checks the server at once, and a server that refuses it too marks the session dead then.
Failed pings are logged once per server until one succeeds there again (warning), each one at debug
level: every session of a dead server fails its pings, and a line per failed ping was a flood.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from openreward_rl._compat import openreward as sdk
from openreward_rl.env.repeats import OncePerKey
from openreward_rl.env.traffic import SessionTraffic, traffic_of

__all__ = ["adopt_pings", "keep_alive", "PING_INTERVAL_S", "PING_TIMEOUT_S", "STREAK", "STRIKES", "WAITING_STANDS_S"]

logger = logging.getLogger(__name__)

PING_INTERVAL_S = 10.0  # the SDK's cadence (`BaseAsyncSession.__aenter__`: sleep_time=10)
PING_TIMEOUT_S = 90.0  # the SDK's ping client bounds each of its (up to 3) attempts by 30 s
# A request still waiting for its answer stands for a ping this long after it was sent, no longer.
WAITING_STANDS_S = PING_TIMEOUT_S
STREAK = 5  # the SDK's ping(): _MAX_CONSECUTIVE_PING_FAILURES failed pings in a row end one ping loop
STRIKES = 5  # the SDK's _run_ping: the session is dead when its ping loop has ended this many times

_FAILING = OncePerKey()  # base URLs whose pings fail: the first failure of each is a warning, the rest debug


async def keep_alive(
    session: Any, interval_s: float = PING_INTERVAL_S, heard_at: float | None = None, probe: Any = None
) -> None:
    """Ping `session`'s server whenever it has not heard from the session for `interval_s` (see the
    module; `heard_at`: a loop time by which the server knew the session, e.g. its open's start; None:
    ping at once) until cancelled; mark the session dead and stop as the SDK would (`STREAK`, `STRIKES`),
    or at once when a ping's connection is refused and `probe` (a `LivenessProbe`) finds the server refusing too."""
    traffic = traffic_of(session.client)
    if traffic is not None:
        traffic.watch(session.sid)
    try:
        await _ping_when_quiet(session, interval_s, float("-inf") if heard_at is None else heard_at, traffic, probe)
    finally:
        if traffic is not None:
            traffic.forget(session.sid)


async def _ping_when_quiet(
    session: Any, interval_s: float, heard_at: float, traffic: SessionTraffic | None, probe: Any
) -> None:
    streak, strikes = 0, 0
    loop = asyncio.get_running_loop()
    attempted = float("-inf")  # the start of the latest ping (failed or not)
    heard = heard_at
    while True:
        if traffic is not None and traffic.last_heard(session.sid) > heard:
            heard = traffic.last_heard(session.sid)
            if heard > attempted:
                streak = 0  # the server answered another request for the session after the failed pings
        wait = max(heard, attempted) + interval_s - loop.time()
        if wait <= 0 and traffic is not None:  # due, unless a request the server has yet to answer stands for it
            wait = min(interval_s, traffic.latest_waiting(session.sid) + WAITING_STANDS_S - loop.time())
        if wait > 0:
            await asyncio.sleep(wait)
            continue
        attempted = loop.time()
        try:
            async with asyncio.timeout(PING_TIMEOUT_S):
                await sdk.ping(session)
            streak, heard = 0, max(heard, attempted)
            if _FAILING.forget(session.base_url):
                logger.info("pings to %s are answered again", session.base_url)
        except Exception as error:  # as the SDK's ping: any failure counts (HTTP errors, 401, timeouts)
            if getattr(session.client, "closed", False):
                return  # the client was closed under it (the run is shutting down): nothing to keep alive
            streak += 1
            _log_failure(session, error, f"{streak}/{STREAK}, strike {strikes + 1}/{STRIKES}")
            refused = probe is not None and isinstance(error, aiohttp.ClientConnectorError)
            reason = await probe.check() if refused else None
            if reason is not None:
                sdk.mark_dead(session, f"environment server unreachable: a ping was refused, then {reason}")
                return
            if streak >= STREAK:
                streak, strikes = 0, strikes + 1
                if strikes >= STRIKES:
                    sdk.mark_dead(
                        session, f"{strikes} x {STREAK} consecutive ping failures: {type(error).__name__}: {error}"
                    )
                    return


def _log_failure(session: Any, error: BaseException, count: str) -> None:
    detail = f"{type(error).__name__}: {error}"
    if _FAILING.first(session.base_url):
        logger.warning(
            "pings to %s fail (%s); further ping failures there are logged at debug level until one succeeds",
            session.base_url,
            detail,
        )
    else:
        logger.debug("ping failed sid=%s (%s): %s", session.sid, count, detail)


def adopt_pings(session: Any, heard_at: float | None = None, probe: Any = None) -> bool:
    """Swap the SDK session's pending ping task for `keep_alive` on this loop; False (nothing
    changed) where the session's ping task has already started or is not the SDK's. `heard_at`: a
    loop time before the session's open began (its first ping is due `PING_INTERVAL_S` after it);
    None: ping at once. `probe`: the session's `LivenessProbe`, which confirms a refused ping."""
    return sdk.replace_ping_task(session, lambda: keep_alive(session, PING_INTERVAL_S, heard_at, probe))

"""When the environment server last heard from each session, seen from the pooled transport.

The SDK's environment `Server` keeps a session while it hears from it: every request that names the
session (`X-Session-ID`) refreshes the session's liveness as it starts to be handled, not only
`/ping` (`/call`, `/prompt`, `/messages`, `/score_group` through `require_ready_session`,
`/task_tools` through `require_existing_session`), and its reaper deletes a session it has not heard
from in 900 s. A ping is redundant for a session that made another request within the ping interval
(`env.keepalive` skips it).

`SessionTraffic` is an aiohttp trace on the pooled HTTP sessions (`use_pooled_transport`: the SDK's
environments API with pooled connections, `_compat.openreward.transport`). For each watched
session id it records:
- when the latest request naming that session was sent, once the server has answered that request
  with a 2xx status (a proxy's 5xx, a refused connection or a timeout proves nothing). The server
  refreshed the session after the request was sent and before it answered, so the recorded time is
  never later than the server's own record;
- when the latest request naming it that has not been answered yet (no response headers, no
  failure) was sent. A ping sent meanwhile would wait on the same server (when a server falls behind,
  every request waits for its answer longer than the ping interval), and the server refreshes the
  session as it handles the waiting request. aiohttp ends every traced request with an answer or a
  failure (`on_request_end`, `on_request_exception`, cancellation included).

It also records when the server last answered any request on the client (`last_answer`: the arrival
of a response head, any status, any session or none), which `LivenessProbe` reads to tell a busy
server (slow, yet answering) from one that answers nothing.
"""

from __future__ import annotations

import asyncio
import weakref
from types import SimpleNamespace
from typing import Any

import aiohttp

from openreward_rl._compat.openreward import transport

__all__ = ["SessionTraffic", "traffic_of", "use_pooled_transport", "SESSION_HEADER"]

SESSION_HEADER = "X-Session-ID"  # the header the SDK names a session by on every session request

_by_client: weakref.WeakKeyDictionary[aiohttp.ClientSession, SessionTraffic] = weakref.WeakKeyDictionary()


class SessionTraffic:
    """Per watched session id: the send time (event-loop clock) of its latest request answered 2xx; and
    `last_answer`, the arrival time of the latest response head on the client (-inf before any)."""

    def __init__(self) -> None:
        self.last_answer = float("-inf")
        self._heard: dict[str, float] = {}
        self._waiting: dict[str, dict[int, float]] = {}  # sid -> {id(request's trace context): send time}
        self.trace_config = aiohttp.TraceConfig()
        self.trace_config.on_request_start.append(self._on_start)
        self.trace_config.on_request_end.append(self._on_end)
        self.trace_config.on_request_exception.append(self._on_exception)

    def watch(self, sid: str) -> None:
        """Start recording `sid`'s requests (nothing is known of it yet)."""
        self._heard.setdefault(sid, float("-inf"))

    def forget(self, sid: str) -> None:
        self._heard.pop(sid, None)
        self._waiting.pop(sid, None)

    def latest_waiting(self, sid: str) -> float:
        """When the latest request for `sid` still waiting for its answer was sent; -inf if none."""
        return max(self._waiting.get(sid, {}).values(), default=float("-inf"))

    def last_heard(self, sid: str) -> float:
        """When the latest 2xx-answered request for `sid` was sent; -inf if none (or not watched)."""
        return self._heard.get(sid, float("-inf"))

    def attach(self, client: aiohttp.ClientSession) -> None:
        """Make this the record `traffic_of(client)` returns (`client` must carry `trace_config`)."""
        _by_client[client] = self

    async def _on_start(
        self, session: aiohttp.ClientSession, context: SimpleNamespace, params: aiohttp.TraceRequestStartParams
    ) -> None:
        sid = params.headers.get(SESSION_HEADER)
        if sid is not None and sid in self._heard:
            context.sid, context.sent = sid, asyncio.get_running_loop().time()
            self._waiting.setdefault(sid, {})[id(context)] = context.sent

    async def _on_end(
        self, session: aiohttp.ClientSession, context: SimpleNamespace, params: aiohttp.TraceRequestEndParams
    ) -> None:
        self.last_answer = asyncio.get_running_loop().time()
        sid = self._settle(context)
        if sid is not None and 200 <= params.response.status < 300 and sid in self._heard:
            self._heard[sid] = max(self._heard[sid], context.sent)

    async def _on_exception(
        self, session: aiohttp.ClientSession, context: SimpleNamespace, params: aiohttp.TraceRequestExceptionParams
    ) -> None:
        self._settle(context)

    def _settle(self, context: SimpleNamespace) -> str | None:
        sid = getattr(context, "sid", None)
        waiting = self._waiting.get(sid) if sid is not None else None
        if sid is not None and waiting is not None:
            waiting.pop(id(context), None)
            if not waiting:
                del self._waiting[sid]
        return sid


def traffic_of(client: Any) -> SessionTraffic | None:
    """The traffic record of a pooled HTTP session, or None (a client that records none)."""
    try:
        return _by_client.get(client)
    except TypeError:  # not weak-referenceable: not one of ours
        return None


def use_pooled_transport(client: Any) -> Any:
    """Give `client` (an `AsyncOpenReward`) the pooled transport, its sessions recording their traffic, unless
    its environments API already holds sessions (call it before the first); anything else is returned untouched."""
    return transport.use_pooled_transport(client, traffic=SessionTraffic)

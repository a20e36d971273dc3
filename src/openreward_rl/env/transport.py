"""Pooled HTTP transport to environment servers, under the SDK's own session protocol.

The SDK (`AsyncEnvironmentsAPI.get`) makes one `aiohttp.ClientSession` per base URL with
`trust_env=True`, which costs two thread-pool hops per request (a `~/.netrc` read and a proxy
lookup), and every tool call is a server-sent-event stream the SDK leaves as soon as it has read
the `end` event, before the stream's last chunk: aiohttp then closes the connection instead of
pooling it, so every tool call opens a new TCP connection.

The SDK's SSE parser also alters long tool output. Its server cuts a tool's result (JSON text) into
events of 4,096 characters (`openreward.environments.reconnect.CHUNK_SIZE`), and its client
(`openreward.api._session.http._parse_sse_events`) strips *all* leading whitespace of every data
value (`value.lstrip()`), where the SSE specification removes one space, the one after the colon.
Whitespace that opens a chunk (a space between two words, an indent, a chunk of only spaces, a
no-break space) is lost from what the model reads.

`PooledEnvironmentsAPI` is the SDK's API with only these things changed. It places its own
sessions in the SDK's per-URL table before the SDK would make one, and the SDK does everything
else (requests, retries, the session protocol):

- proxy and `~/.netrc` credentials are resolved once per base URL, the way `trust_env=True`
  resolves them per request, and the session is made with `trust_env=False`;
- a response left cleanly (no exception) before its end is read to its end first, within
  `DRAIN_TIMEOUT_S` and `DRAIN_LIMIT_BYTES`, so its connection returns to the pool; otherwise it is
  closed as before;
- it records when the server last answered a request for each session (`env.traffic`), so that
  `env.keepalive` pings only sessions the server has not heard from lately;
- a tool call waits up to `CALL_ANSWER_WAIT_S` for the head of its answer, not the SDK's 30-s
  heartbeat: the SDK sends a `/call` that got no answer again as a new call (its `resumable_sse`
  re-POSTs without a `task_id` on a read timeout), and a server that was only slow (a saturated
  environment server queues requests for longer than that) then runs the tool twice, which the
  episode sees as a lost answer (`LostResult`). Between the stream's events the heartbeat applies as
  before; a server that is down is found by the liveness probe, and a call is bounded by `tool_timeout`;
- server-sent events on its responses are parsed as the specification says (`parse_sse_events`):
  the SDK's stream reader (`resumable_sse`, behind every tool call, session open and group score)
  looks its parser up by name at each call, and the replacement installed there hands our
  responses to `parse_sse_events` and every other response to the SDK's own parser.

`use_pooled_transport(client)` installs it on an `AsyncOpenReward` whose environments API has not
opened any connection yet; `open_session` calls it, so every episode gets it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from types import TracebackType
from typing import Any

import aiohttp
import openreward.api._session.http as sdk_http
from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
from openreward.api._session.http import set_retry_policy
from openreward.api.environments.client import AsyncEnvironmentsAPI
from yarl import URL

from openreward_rl._limits import pool_limit
from openreward_rl.env.traffic import SessionTraffic

__all__ = ["PooledEnvironmentsAPI", "DrainingResponse", "parse_sse_events", "use_pooled_transport", "DRAIN_TIMEOUT_S", "DRAIN_LIMIT_BYTES", "CALL_ANSWER_WAIT_S"]

# How long, and how many bytes, a response left early may take to reach its end before its
# connection is closed instead of pooled (an SSE stream's tail is a few bytes, milliseconds away).
DRAIN_TIMEOUT_S = 1.0
DRAIN_LIMIT_BYTES = 64 * 1024
# How long a tool call waits for the head of its answer before the SDK's heartbeat (30 s) applies.
CALL_ANSWER_WAIT_S = 300.0


class DrainingResponse(aiohttp.ClientResponse):
    """A response that, left cleanly before its end, reads the rest so its connection is reused; and
    whose tool call (`POST .../call`) waits up to `CALL_ANSWER_WAIT_S` for the head of its answer."""

    async def start(self, connection: Any) -> DrainingResponse:
        protocol = connection.protocol
        heartbeat = getattr(protocol, "read_timeout", None)
        waits_longer = heartbeat is not None and self.method == "POST" and self.url.path.endswith("/call")
        if waits_longer:
            protocol.read_timeout = max(heartbeat, CALL_ANSWER_WAIT_S)
            protocol.start_timeout()  # the timer the request's send started, started again with the longer wait
        try:
            return await super().start(connection)
        finally:
            if waits_longer:
                protocol.read_timeout = heartbeat  # the SDK's heartbeat between the stream's events
                protocol.start_timeout()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                await self._drain()
        finally:
            await super().__aexit__(exc_type, exc_val, exc_tb)

    async def _drain(self) -> None:
        if self.connection is None or self.content.is_eof():
            return
        read = 0
        with contextlib.suppress(TimeoutError, aiohttp.ClientError):
            async with asyncio.timeout(DRAIN_TIMEOUT_S):
                while read <= DRAIN_LIMIT_BYTES:
                    chunk = await self.content.readany()
                    if not chunk:
                        return
                    read += len(chunk)


_LINE_END = re.compile(rb"\r\n|\r|\n")


class parse_sse_events:  # noqa: N801 - used as the SDK's parser function; an iterator class, not a generator (see below)
    """(event type, data) of each event `response` streams, parsed as the SSE specification says
    (WHATWG HTML, "Parsing an event stream"): one space after a field's colon is removed, no more;
    data lines join with a newline; an event without data is not dispatched; the type defaults to
    "message". The same pairs as the SDK's `_parse_sse_events`, without its whitespace loss.

    Lines may be of any length and split anywhere between blocks; CRLF, LF and a lone CR each end
    one; an unterminated last line ends no event (the specification discards it).

    An async iterator object rather than an async generator: the SDK leaves the stream at its `end`
    event, and an async generator left unfinished is closed through the event loop's finalizer hook
    (a thread-safe wake-up of the loop and a task running `aclose()`, for it and the line reader
    inside it), on every tool call. This object is simply dropped.
    """

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._content = response.content
        self._lines: list[bytes] = []  # complete lines not yet parsed, in reverse order
        self._pending = b""
        self._first = True
        self._ended = False

    def __aiter__(self) -> parse_sse_events:
        return self

    async def __anext__(self) -> tuple[str, str]:
        event_type, data = "", []
        while True:
            line = await self._next_line()
            if line is None:
                raise StopAsyncIteration
            if self._first:
                line, self._first = line.removeprefix("\ufeff"), False
            if not line:
                if data:
                    return event_type or "message", "\n".join(data)
                event_type = ""
            elif not line.startswith(":"):  # a comment (the server's keep-alive pings) otherwise
                field, colon, value = line.partition(":")
                if colon and value.startswith(" "):
                    value = value[1:]
                if field == "event":
                    event_type = value
                elif field == "data":
                    data.append(value)  # `id` and `retry` are not used by the session protocol

    async def _next_line(self) -> str | None:
        while not self._lines:
            if self._ended:
                return None
            block = await self._content.readany()
            if not block:
                self._ended = True
                return None
            pending = self._pending + block
            held_cr = pending.endswith(b"\r")  # perhaps the first half of a CRLF split between blocks
            *complete, pending = _LINE_END.split(pending[:-1] if held_cr else pending)
            self._pending = pending + b"\r" if held_cr else pending
            complete.reverse()
            self._lines = complete
        return self._lines.pop().decode("utf-8", "replace")


_sdk_parse_sse_events = sdk_http._parse_sse_events


def _parse_sse_events(response: aiohttp.ClientResponse) -> Any:
    """The SDK's parser, replaced: our pooled sessions' responses parsed by `parse_sse_events`."""
    if isinstance(response, DrainingResponse):
        return parse_sse_events(response)
    return _sdk_parse_sse_events(response)


def _install_sse_parser() -> None:
    sdk_http._parse_sse_events = _parse_sse_events  # type: ignore[assignment]


def _env_settings(url: str) -> dict[str, Any]:
    """What `trust_env=True` would find for `url`: a proxy (with its credentials) and netrc auth."""
    settings: dict[str, Any] = {}
    parsed = URL(url)
    with contextlib.suppress(LookupError):
        settings["proxy"], settings["proxy_auth"] = get_env_proxy_for_url(parsed)
    if parsed.host is not None:
        with contextlib.suppress(LookupError):
            settings["auth"] = basicauth_from_netrc(netrc_from_env(), parsed.host)
    return settings


class PooledEnvironmentsAPI(AsyncEnvironmentsAPI):
    """`AsyncEnvironmentsAPI` whose per-URL HTTP sessions pool their connections (see the module),
    in one pool of at most 40% of the process's open-file limit (`_limits.pool_limit`; the SDK's own
    pool is unbounded, and past the limit requests failed to open a connection)."""

    def _get_connector(self) -> aiohttp.TCPConnector:
        if self._connector is None or self._connector.closed:
            self._connector = aiohttp.TCPConnector(limit=pool_limit())
        return self._connector

    def _pooled_session(self, url: str) -> aiohttp.ClientSession:
        _install_sse_parser()
        traffic = SessionTraffic()
        client = aiohttp.ClientSession(
            base_url=url,
            timeout=self.timeout,
            connector=self._get_connector(),
            trust_env=False,
            response_class=DrainingResponse,
            trace_configs=[traffic.trace_config],
            **_env_settings(url),
        )
        traffic.attach(client)
        return client

    def get(self, name: str, variant: str | None = None, base_url: str | None = None) -> Any:
        url = base_url if base_url is not None else self.base_url
        if url not in self._clients:
            self._clients[url] = self._pooled_session(url)
            set_retry_policy(self._clients[url], "env-server")  # as the SDK tags its env-server sessions
        if self.api_base_url and self.api_base_url not in self._clients:
            self._clients[self.api_base_url] = self._pooled_session(self.api_base_url)
        return super().get(name, variant=variant, base_url=base_url)


def use_pooled_transport(client: Any) -> Any:
    """Give `client` (an `AsyncOpenReward`) a `PooledEnvironmentsAPI`, unless its environments API
    already holds sessions (then it is left as it is). Anything else is returned untouched."""
    if not hasattr(client, "_environments_api") or not hasattr(client, "session_base_url"):
        return client
    current = client._environments_api
    if isinstance(current, PooledEnvironmentsAPI):
        return client
    if current is not None and (type(current) is not AsyncEnvironmentsAPI or current._clients):
        return client
    client._environments_api = PooledEnvironmentsAPI(
        base_url=client.session_base_url, api_key=client.api_key, api_base_url=client.base_url
    )
    return client

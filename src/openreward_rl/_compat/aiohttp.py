"""aiohttp internals the pooled environment transport relies on.

- `DrainingResponse` (a `response_class`, public) overrides `ClientResponse.start(connection)` and sets the
  connection protocol's `read_timeout` around it (`ResponseHandler.read_timeout`, `start_timeout()`: aiohttp
  internals) so a tool call waits `CALL_ANSWER_WAIT_S` for the head of its answer (docs/upstream.md, fix 2);
  left cleanly before its end, it reads the rest so its connection returns to the pool.
- `env_settings(url)` resolves what `trust_env=True` would for a URL, once, through `aiohttp.helpers`
  (undocumented): a session made with `trust_env=True` resolves them per request, with two thread-pool hops.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import client_proto, helpers
from yarl import URL

from openreward_rl._compat._gate import Gate, Internal, callable_attribute

__all__ = ["DrainingResponse", "env_settings", "GATE", "DRAIN_TIMEOUT_S", "DRAIN_LIMIT_BYTES", "CALL_ANSWER_WAIT_S"]

# How long, and how many bytes, a response left early may take to reach its end before its
# connection is closed instead of pooled (an SSE stream's tail is a few bytes, milliseconds away).
DRAIN_TIMEOUT_S = 1.0
DRAIN_LIMIT_BYTES = 64 * 1024
# How long a tool call waits for the head of its answer before the SDK's heartbeat (30 s) applies.
CALL_ANSWER_WAIT_S = 300.0


def _internals() -> list[Internal]:
    handler = client_proto.ResponseHandler
    return [
        Internal("aiohttp.ClientResponse.start(connection)", lambda: callable(aiohttp.ClientResponse.start)),
        Internal(
            "aiohttp.client_proto.ResponseHandler.read_timeout",
            lambda: isinstance(handler.read_timeout, property) and handler.read_timeout.fset is not None,
        ),
        Internal("aiohttp.client_proto.ResponseHandler.start_timeout", lambda: callable(handler.start_timeout)),
        *(
            Internal(f"aiohttp.helpers.{name}", functools.partial(callable_attribute, helpers, name))
            for name in ("get_env_proxy_for_url", "basicauth_from_netrc", "netrc_from_env")
        ),
    ]


GATE = Gate("aiohttp", ">=3.9,<4", _internals)


class DrainingResponse(aiohttp.ClientResponse):
    """A response that, left cleanly before its end, reads the rest so its connection is reused; and
    whose tool call (`POST .../call`) waits up to `CALL_ANSWER_WAIT_S` for the head of its answer."""

    async def start(self, connection: Any) -> aiohttp.ClientResponse:
        protocol = connection.protocol
        heartbeat: float | None = getattr(protocol, "read_timeout", None)
        waits_longer = heartbeat is not None and self.method == "POST" and self.url.path.endswith("/call")
        if waits_longer:
            protocol.read_timeout = max(heartbeat or 0.0, CALL_ANSWER_WAIT_S)
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


def env_settings(url: str) -> dict[str, Any]:
    """What `trust_env=True` would find for `url`: a proxy (with its credentials) and netrc auth."""
    settings: dict[str, Any] = {}
    parsed = URL(url)
    with contextlib.suppress(LookupError):
        settings["proxy"], settings["proxy_auth"] = helpers.get_env_proxy_for_url(parsed)
    if parsed.host is not None:
        with contextlib.suppress(LookupError):
            settings["auth"] = helpers.basicauth_from_netrc(helpers.netrc_from_env(), parsed.host)
    return settings

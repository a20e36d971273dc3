"""Server-sent events parsed as the specification says, for the SDK's stream reader (`resumable_sse`).

The SDK's server cuts a tool's result (JSON text) into events of 4,096 characters
(`openreward.environments.reconnect.CHUNK_SIZE`), and its client parser
(`openreward.api._session.http._parse_sse_events`) strips *all* leading whitespace of every data value
(`value.lstrip()`), where the SSE specification removes one space, the one after the colon. Whitespace
that opens a chunk (a space between two words, an indent, a chunk of only spaces, a no-break space) is
lost from what the model reads (docs/upstream.md, fix 1).

`resumable_sse` (behind every tool call, session open and group score) looks its parser up by name at
each call, so `install()` puts `sdk_parser_for` there: responses of the pooled transport
(`DrainingResponse`) are parsed by `parse_sse_events`, every other response by the SDK's own parser.
`uninstall()` puts the SDK's parser back.
"""

from __future__ import annotations

import importlib
import re
import threading
from typing import Any

import aiohttp

from openreward_rl._compat.aiohttp import DrainingResponse

__all__ = ["parse_sse_events", "install", "uninstall", "installed", "sdk_parser"]

_LINE_END = re.compile(rb"\r\n|\r|\n")


class parse_sse_events:  # noqa: N801 - stands in for the SDK's parser function; an iterator class, not a generator (see below)
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
        event_type, data = "", list[str]()
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


def _sdk_http() -> Any:
    return importlib.import_module("openreward.api._session.http")  # at call time: the gate names what moved


_lock = threading.Lock()
_saved: list[Any] = []  # the SDK's parser while ours is installed


def sdk_parser() -> Any:
    """The SDK's own parser (installed or not)."""
    return _saved[0] if _saved else _sdk_http()._parse_sse_events


def sdk_parser_for(response: aiohttp.ClientResponse) -> Any:
    """What `resumable_sse` calls while installed: the pooled transport's responses parsed by `parse_sse_events`."""
    if isinstance(response, DrainingResponse):
        return parse_sse_events(response)
    return _saved[0](response) if _saved else _sdk_http()._parse_sse_events(response)


def install() -> None:
    """Put `sdk_parser_for` where `resumable_sse` looks its parser up (idempotent)."""
    from openreward_rl._compat.openreward import check

    check()
    with _lock:
        http = _sdk_http()
        if http._parse_sse_events is not sdk_parser_for:
            _saved[:] = [http._parse_sse_events]
            http._parse_sse_events = sdk_parser_for


def uninstall() -> None:
    """Give the SDK its parser back (idempotent)."""
    with _lock:
        if _saved:
            http = _sdk_http()
            if http._parse_sse_events is sdk_parser_for:
                http._parse_sse_events = _saved[0]
            _saved.clear()


def installed() -> bool:
    return _sdk_http()._parse_sse_events is sdk_parser_for

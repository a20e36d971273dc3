"""sse-starlette's process-wide shutdown event, one per event loop while installed.

sse-starlette 2.x (pinned by the SDK; it streams `/create_session`) keeps one process-wide
`AppStatus.should_exit_event` that binds to the first loop that waits on it. A second in-process
environment server runs on its own loop, so its `/create_session` fails with "bound to a different event
loop" and the client's retry meets "Session already exists". `install()` puts `ExitEventPerLoop` there,
which gives every loop its own event and sets them all on shutdown; `uninstall()` puts the original back.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

import anyio

from openreward_rl._compat._gate import Gate, Internal

__all__ = ["ExitEventPerLoop", "GATE", "install", "uninstall", "installed"]


def _internals() -> list[Internal]:
    from sse_starlette.sse import AppStatus

    return [Internal("sse_starlette.sse.AppStatus.should_exit_event", lambda: hasattr(AppStatus, "should_exit_event"))]


GATE = Gate("sse-starlette", "", _internals)


class ExitEventPerLoop:
    """sse-starlette's shutdown event, one `anyio.Event` per event loop."""

    def __init__(self) -> None:
        self._events: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.Event] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def _event(self) -> anyio.Event:
        loop = asyncio.get_running_loop()
        with self._lock:
            return self._events.setdefault(loop, anyio.Event())

    async def wait(self) -> None:
        await self._event().wait()

    def is_set(self) -> bool:
        return self._event().is_set()

    def set(self) -> None:
        with self._lock:
            events = list(self._events.items())
        for loop, event in events:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                pass


_saved: list[Any] = []


def _app_status() -> Any:
    try:
        from sse_starlette.sse import AppStatus
    except ImportError:  # an SDK without the SSE routes: nothing to patch
        return None
    return AppStatus


def install() -> None:
    status = _app_status()
    if status is None or isinstance(status.should_exit_event, ExitEventPerLoop):
        return
    GATE.check()
    _saved[:] = [status.should_exit_event]
    status.should_exit_event = ExitEventPerLoop()


def uninstall() -> None:
    status = _app_status()
    if status is not None and _saved and isinstance(status.should_exit_event, ExitEventPerLoop):
        status.should_exit_event = _saved[0]
    _saved.clear()


def installed() -> bool:
    status = _app_status()
    return status is not None and isinstance(status.should_exit_event, ExitEventPerLoop)

"""An SDK session's calls run in the caller's task, still ended by the session's death (`run_calls_in_caller`).

Nothing process-wide: this replaces the private `_run_or_die` and `_mark_dead` of one SDK session object
and reads its `_dead_exception`; the session and its replacements end together.

Every request an SDK session makes (each tool call, the prompt, the tool listing) goes through its
`_run_or_die`: it starts the request as a new task, starts a second task waiting on the session's
"dead" event, and waits for the first of the two (`asyncio.wait`). That is three tasks' worth of
scheduling on every tool call, ~0.03 ms of the ~0.3 ms a tool call costs the episode process.

`run_calls_in_caller(session)` gives the session a `_run_or_die` with the same contract that awaits
the request in the calling task instead:
- a session already dead raises its `SessionTerminatedError` before anything is sent;
- a session that dies while calls are in flight (`_mark_dead`: the keep-alive's verdict, another
  call's `SessionTerminatedError`) cancels each of those callers, and each then raises the session's
  `SessionTerminatedError`; a call that finished as the session died keeps its result, as in the SDK;
- a `SessionTerminatedError` from the request marks the session dead and propagates;
- any other error is annotated with the session (`_annotate_error`) and propagates, as in the SDK;
- a cancellation from outside (a timeout, the episode's end) propagates as a cancellation.

`until_dead(session, operation)` ends a longer operation the same way: a whole episode run on the
session, which spends most of its time waiting on the model, not on the session. When the session dies
(its pings found the server gone: `env.keepalive`) the episode's task is cancelled wherever it waits,
a model call included, and `SessionTerminatedError` raised; a dead server no longer costs the model
calls an episode would make before its next environment call. Calls made inside it nest.

A session that does not look like the SDK's (another SDK version's internals) keeps its own.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Coroutine
from typing import Any

from openreward.api.errors import SessionTerminatedError

from openreward_rl._compat.openreward import mark_dead

__all__ = ["run_calls_in_caller", "until_dead"]

_PARTS = ("_run_or_die", "_mark_dead", "_dead_exception", "_annotate_error")


def run_calls_in_caller(session: Any) -> bool:
    """Replace `session`'s `_run_or_die` (see the module); False, changing nothing, where the session's
    class has its own `_run_or_die` or lacks the parts this relies on."""
    from openreward.api._session.session import BaseAsyncSession

    if not isinstance(session, BaseAsyncSession) or type(session)._run_or_die is not BaseAsyncSession._run_or_die:
        return False
    if not all(hasattr(session, name) for name in _PARTS):
        return False
    calls = _CallsInCaller(session)
    patched: Any = session  # the instance's own attributes shadow the class's methods
    patched._run_or_die = calls.run_or_die
    patched._mark_dead = calls.mark_dead
    _CALLS[id(session)] = calls
    return True


async def until_dead(session: Any, operation: Awaitable[Any]) -> Any:
    """Await `operation` in this task; if `session` dies meanwhile, cancel it and raise the session's
    `SessionTerminatedError` (see the module). A session `run_calls_in_caller` did not adopt: just awaited."""
    calls = _CALLS.get(id(session))
    if calls is None or calls._session is not session:
        return await operation
    return await calls.until_dead(operation)


# The adopted sessions, by id: an SDK session holds its `_CallsInCaller` (its `_run_or_die`), which holds it.
_CALLS: weakref.WeakValueDictionary[int, _CallsInCaller] = weakref.WeakValueDictionary()


class _CallsInCaller:
    def __init__(self, session: Any) -> None:
        self._session = session
        self._sdk_mark_dead = session._mark_dead
        self._callers: dict[asyncio.Task[Any], int] = {}  # callers awaiting a call (or `until_dead`), with how many
        self._ended: set[asyncio.Task[Any]] = set()  # callers this object cancelled because the session died

    def mark_dead(self, error: Any) -> None:
        self._sdk_mark_dead(error)
        try:
            current = asyncio.current_task()
        except RuntimeError:  # no running loop: no caller is this one
            current = None
        for caller in self._callers.keys() - self._ended:
            if caller is not current and not caller.done():
                self._ended.add(caller)
                caller.cancel()

    async def run_or_die(self, coro: Coroutine[Any, Any, Any]) -> Any:
        session = self._session
        if session._dead_exception is not None:
            coro.close()
            raise session._dead_exception
        caller = self._enter()
        try:
            return await coro
        except asyncio.CancelledError:
            self._raise_if_ended_by_death(caller)
            raise
        except SessionTerminatedError as error:
            mark_dead(session, str(error))
            raise
        except Exception as error:
            raise session._annotate_error(error) from error.__cause__
        finally:
            self._leave(caller)

    async def until_dead(self, operation: Awaitable[Any]) -> Any:
        session = self._session
        if session._dead_exception is not None:
            getattr(operation, "close", lambda: None)()
            raise session._dead_exception
        caller = self._enter()
        try:
            return await operation
        except asyncio.CancelledError:
            self._raise_if_ended_by_death(caller)
            raise
        finally:
            self._leave(caller)

    def _enter(self) -> asyncio.Task[Any]:
        caller = asyncio.current_task()
        assert caller is not None
        self._callers[caller] = self._callers.get(caller, 0) + 1
        return caller

    def _raise_if_ended_by_death(self, caller: asyncio.Task[Any]) -> None:
        if caller in self._ended:
            self._ended.discard(caller)
            if caller.uncancel() == 0 and self._session._dead_exception is not None:
                raise self._session._dead_exception from None  # ended by the session's death alone

    def _leave(self, caller: asyncio.Task[Any]) -> None:
        left = self._callers.pop(caller, 1) - 1
        if left > 0:
            self._callers[caller] = left
        if caller in self._ended:  # the request swallowed the cancellation, or ended as it came: its outcome stands
            self._ended.discard(caller)
            caller.uncancel()

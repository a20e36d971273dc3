"""Every touch of the OpenReward SDK's private names (`openreward.api._session`, session and client internals).

- `sse`: the SDK's SSE parser, replaced process-wide while installed (docs/upstream.md, fix 1);
- `transport`: the SDK's environments API with pooled HTTP sessions, one client at a time;
- `calls`: an SDK session's calls in the caller's task, ended by the session's death, one session at a time;
- below: the session's ping task swapped for the project's (`env.keepalive`), its death declared, its
  listed terminal tool reused, a rollout's "disabled" flag read, and the environment server's module loggers
  swapped while an in-process server runs (`env.server_log`; process-wide, restored by the last server out).

`GATE` names the SDK versions this is written against and the internals it relies on; `check()` fails
with the version and the internal that moved.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp

from openreward_rl._compat._gate import Gate, Internal, callable_attribute

__all__ = [
    "GATE",
    "check",
    "mark_dead",
    "ping",
    "replace_ping_task",
    "reuse_listed_terminal_tool",
    "rollout_disabled",
    "SERVER_LOGGERS",
    "replace_server_loggers",
    "restore_server_loggers",
]

# The SDK's server-side modules and the name each one's `logger` is bound with.
SERVER_LOGGERS = {
    "openreward.environments.server": "openreward.environments.server",
    "openreward.environments.environment": "openreward.environments",
    "openreward.environments.session": "openreward.environments.session",
}


def _has_logger(module_name: str) -> bool:
    return hasattr(importlib.import_module(module_name), "logger")


def _has_source(owner: Callable[[], Any], *names: str) -> Callable[[], bool]:
    return lambda: all(name in inspect.getsource(owner()) for name in names)


def _internals() -> list[Internal]:
    from openreward.api._session import http, ping, session
    from openreward.api.environments.client import AsyncEnvironmentsAPI, AsyncSession
    from openreward.api.rollouts.rollout import Rollout
    from openreward.client import AsyncOpenReward

    base = session.BaseAsyncSession
    return [
        Internal(
            "openreward.api._session.http._parse_sse_events(response)",
            lambda: (
                inspect.isasyncgenfunction(http._parse_sse_events)
                or http._parse_sse_events.__module__ == f"{__name__}.sse"
            ),  # ours while installed
        ),
        Internal(
            "openreward.api._session.http.resumable_sse looking up _parse_sse_events by name",
            _has_source(lambda: http.resumable_sse, "_parse_sse_events(resp)"),
        ),
        Internal(
            "openreward.api._session.http.request_retryable",
            lambda: (
                list(inspect.signature(http.request_retryable).parameters)[:5]
                == ["client", "method", "path", "expect_json", "token"]
            ),
        ),
        Internal("openreward.api._session.http.set_retry_policy", lambda: callable(http.set_retry_policy)),
        Internal(
            "openreward.api._session.ping.ErrorResponse(type, message)",
            lambda: list(inspect.signature(ping.ErrorResponse).parameters) == ["type", "message"],
        ),
        *(
            Internal(
                f"openreward.api._session.session.BaseAsyncSession.{name}",
                functools.partial(callable_attribute, base, name),
            )
            for name in ("_run_or_die", "_mark_dead", "_annotate_error")
        ),
        Internal(
            "BaseAsyncSession._dead_exception and ._ping_task",
            _has_source(lambda: base.__init__, "self._dead_exception", "self._ping_task"),
        ),
        Internal(
            "AsyncSession._terminal_tool, ._terminal_tool_fetched, ._score_group_fetched",
            _has_source(
                lambda: AsyncSession,
                "self._terminal_tool =",
                "self._terminal_tool_fetched = True",
                "self._score_group_fetched = True",
            ),
        ),
        Internal(
            "AsyncEnvironmentsAPI._get_connector, ._connector, ._clients",
            _has_source(lambda: AsyncEnvironmentsAPI, "def _get_connector", "self._connector", "self._clients"),
        ),
        Internal("AsyncOpenReward._environments_api", _has_source(lambda: AsyncOpenReward, "self._environments_api")),
        Internal("Rollout._rollouts_disabled", _has_source(lambda: Rollout, "self._rollouts_disabled = True")),
        *(Internal(f"{module}.logger", functools.partial(_has_logger, module)) for module in SERVER_LOGGERS),
    ]


GATE = Gate("openreward", ">=0.1.167,<0.2", _internals)


def check() -> None:
    """Fail (`CompatError`) unless the installed SDK has what this package touches."""
    GATE.check()


def mark_dead(session: Any, message: str) -> None:
    """Declare `session` dead as the SDK does (`_mark_dead`): its next call raises `SessionTerminatedError`."""
    from openreward.api._session.ping import ErrorResponse

    session._mark_dead(ErrorResponse(type="error", message=message))


async def ping(session: Any) -> None:
    """One keep-alive ping of `session` (`POST <base>/ping`), with the SDK's retry policy and headers."""
    from openreward.api._session.http import request_retryable

    await request_retryable(
        session.client,
        "POST",
        f"{session.base_url}/ping",
        expect_json=False,
        token=session.api_key,
        sid=session.sid,
        deployment=session.deployment,
    )


def replace_ping_task(session: Any, pings: Callable[[], Coroutine[Any, Any, None]]) -> bool:
    """Swap the SDK session's pending ping task for a task running `pings()` on this loop; False (nothing
    changed) where the session's ping task has already started or the session is not the SDK's."""
    task = getattr(session, "_ping_task", None)
    client = getattr(session, "client", None)
    if not isinstance(task, asyncio.Task) or task.done() or not isinstance(client, aiohttp.ClientSession):
        return False
    if not all(hasattr(session, name) for name in ("sid", "api_key", "base_url", "deployment", "_mark_dead")):
        return False
    coroutine = task.get_coro()
    if not inspect.iscoroutine(coroutine) or inspect.getcoroutinestate(coroutine) != inspect.CORO_CREATED:
        return False  # already started: its ping thread holds a schedule we cannot take back cleanly
    task.cancel()
    session._ping_task = asyncio.get_running_loop().create_task(pings())
    return True


def reuse_listed_terminal_tool(session: Any) -> None:
    """The SDK's session reads its terminal tool out of every tool listing (`list_tools` stores it, with the
    listing's other session facts, and marks those fetched), yet its `terminal_tool()`, which caches for the
    session's life, lists the tools again unless it made the listing itself: an episode's `tools()` then
    `terminal_tool()` cost two identical requests. Where a listing already ran on this session, its stored
    answer is marked as the cached one. Sessions without these fields (another SDK version) are left alone."""
    if (
        getattr(session, "_score_group_fetched", None) is True
        and getattr(session, "_terminal_tool_fetched", None) is False
        and hasattr(session, "_terminal_tool")
    ):
        session._terminal_tool_fetched = True


def rollout_disabled(rollout: Any) -> bool:
    """Whether the SDK gave up on `rollout` (its start POST failed; the SDK logged why)."""
    return bool(getattr(rollout, "_rollouts_disabled", False))


def replace_server_loggers(make: Callable[[str], Any]) -> dict[str, Any]:
    """Bind each SDK server module's `logger` to `make(its logger name)`; the loggers replaced, by module."""
    saved = {}
    for module_name, logger_name in SERVER_LOGGERS.items():
        module: Any = importlib.import_module(module_name)
        if hasattr(module, "logger"):
            saved[module_name] = module.logger
            module.logger = make(logger_name)
    return saved


def restore_server_loggers(saved: dict[str, Any]) -> None:
    """Put back the loggers `replace_server_loggers` returned."""
    for module_name, logger in saved.items():
        module: Any = importlib.import_module(module_name)
        module.logger = logger

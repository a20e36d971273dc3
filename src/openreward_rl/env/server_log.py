"""Where an environment server running in this process logs: a file, and one terminal line per distinct failure.

The SDK's environment `Server` logs from three module loggers (`openreward.environments.server`,
`.environment`, `.session`), each a structlog logger printing to the process's stdout; they are swapped
through `_compat.openreward.replace_server_loggers` (module globals of the SDK). Served in the
training process (`train --serve`, `eval --serve`), every failure of the environment's own code printed
its whole traceback into the command's output: an environment whose tools all raise printed one per
episode (9,155 lines for a 25-s run of 16 episodes per step), and a Ctrl-C printed one per request it cut.

`route_server_logs()` points those loggers at a log file for as long as an in-process server runs (the
first server in installs it, the last one out restores the SDK's loggers) and writes the first line of
each distinct error (its event, and the exception's last line) to stderr, naming the file once. The
file gets everything, tracebacks included, at the SDK's level (`OPENREWARD_LOG_LEVEL`, default INFO).
Both have registered secrets masked (`openreward_rl.redaction`).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

from openreward_rl._compat import openreward as sdk
from openreward_rl.env.repeats import OncePerKey
from openreward_rl.redaction import redact

__all__ = ["ServerLog", "route_server_logs", "release_server_logs"]


class ServerLog:
    """A log file for the SDK's server loggers; the first line of each distinct error also goes to `terminal`."""

    def __init__(self, path: str, terminal: TextIO | None = None) -> None:
        self.path = path
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for as long as servers run
        self._terminal = terminal
        self._lock = threading.Lock()
        self._said = OncePerKey()

    def write(self, text: str) -> None:
        with self._lock:
            self._file.write(redact(text))  # registered secrets masked, as in everything the library writes
            self._file.flush()

    def flush(self) -> None:
        pass  # every write is flushed

    def new_run(self) -> None:
        """Another server started beside the running ones (another command's run in this process): its
        distinct failures are said again, the log file's name with the first."""
        self._said = OncePerKey()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def echo_errors(self, logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        """A structlog processor: the first of each distinct error (event and exception) as one terminal line."""
        if method in ("error", "exception", "critical"):
            failure = _last_line(str(event.get("exception") or "")) or " ".join(
                str(event[key]) for key in ("error_type", "error") if event.get(key)
            )
            where = ", ".join(f"{key} {event[key]}" for key in ("tool", "path") if event.get(key))
            if self._said.first(
                failure or event.get("event")
            ):  # the SDK logs one failure under two events (request_error, unhandled_exception)
                first = self._said.first("the file")
                line = f"environment server (in this process): {event.get('event')}{f' ({where})' if where else ''}: {failure or 'see its log'}"
                note = f"; its log, tracebacks included: {self.path}" if first else ""
                print(redact(f"{line}{note}"), file=self._terminal or sys.stderr, flush=True)
        return event


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


_state_lock = threading.Lock()
_routed: dict[str, Any] = {}  # "log": the ServerLog, "users": servers using it, "saved": the SDK's loggers


def route_server_logs() -> ServerLog:
    """Point the SDK's server loggers at a log file (a new one for the first server in); the `ServerLog`."""
    with _state_lock:
        if _routed.get("users"):
            _routed["users"] += 1
            _routed["log"].new_run()
            return _routed["log"]
        handle, path = tempfile.mkstemp(prefix="openreward-env-server-", suffix=".log")
        os.close(handle)
        log = ServerLog(path)
        level = getattr(
            logging,
            (os.environ.get("OPENREWARD_LOG_LEVEL") or os.environ.get("LOG_LEVEL") or "INFO").upper(),
            logging.INFO,
        )
        processors: list[structlog.typing.Processor] = [
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            log.echo_errors,
            structlog.dev.ConsoleRenderer(colors=False),
        ]
        saved = sdk.replace_server_loggers(
            lambda logger_name: structlog.wrap_logger(
                structlog.PrintLogger(log),  # type: ignore[arg-type]  # PrintLogger only writes and flushes, as ServerLog does
                processors=processors,
                wrapper_class=structlog.make_filtering_bound_logger(level),
            ).bind(logger_name=logger_name)
        )
        _routed.update(log=log, users=1, saved=saved)
        return log


def release_server_logs() -> None:
    """One server stopped; the last one out gives the SDK its loggers back (the file stays, for reading)."""
    with _state_lock:
        if not _routed.get("users"):
            return
        _routed["users"] -= 1
        if _routed["users"]:
            return
        sdk.restore_server_loggers(_routed["saved"])
        _routed["log"].close()
        _routed.clear()

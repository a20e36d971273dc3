"""structlog's `PrintLogger`, made to mask registered secrets in every line it prints, while installed.

The OpenReward SDK logs through structlog print loggers straight to stdout, bypassing `logging`; its
environment server's `tool_call_failed` line carries the tool's traceback (in this process under
`eval --serve`). `install(redact)` replaces `PrintLogger`'s output methods (all aliases of `msg`; the
bound logger calls them by level name) with one that prints `redact(line)`; `uninstall()` restores them.
Process-wide: every print logger of the process is the SDK's or prints through the same class.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from openreward_rl._compat._gate import Gate, Internal

__all__ = ["GATE", "install", "uninstall", "installed", "PRINT_LOGGER_METHODS"]

# structlog.PrintLogger's output methods (all aliases of `msg`); the bound logger calls them by level name.
PRINT_LOGGER_METHODS = (
    "msg",
    "log",
    "debug",
    "info",
    "warn",
    "warning",
    "fatal",
    "failure",
    "err",
    "error",
    "critical",
    "exception",
)


def _internals() -> list[Internal]:
    from structlog import PrintLogger

    def is_alias(name: str) -> bool:
        return getattr(PrintLogger, name) is PrintLogger.msg or name in _saved

    return [
        Internal(f"structlog.PrintLogger.{name} (an alias of msg)", functools.partial(is_alias, name))
        for name in PRINT_LOGGER_METHODS
    ]


GATE = Gate("structlog", "", _internals)

_saved: dict[str, Any] = {}


def install(redact: Callable[[str], str]) -> None:
    """Print `redact(line)` for every line a `PrintLogger` prints (the latest `redact` wins)."""
    try:
        from structlog import PrintLogger
    except ImportError:  # the SDK requires structlog; nothing prints through it otherwise
        return
    GATE.check()
    print_line = _saved.get("msg", PrintLogger.msg)

    def msg(self: PrintLogger, message: str) -> None:
        print_line(self, redact(message))

    for name in PRINT_LOGGER_METHODS:
        _saved.setdefault(name, getattr(PrintLogger, name))
        setattr(PrintLogger, name, msg)


def uninstall() -> None:
    if not _saved:
        return
    from structlog import PrintLogger

    for name, method in _saved.items():
        setattr(PrintLogger, name, method)
    _saved.clear()


def installed() -> bool:
    return bool(_saved)

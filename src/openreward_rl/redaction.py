"""Keeping secret values out of logs, errors, dumps, uploads, sample metadata and run configs.

Secret values resolved from the config (`TrainConfig.resolve_secrets`) and the values of the
credentials the library knows of (`KNOWN_SECRET_VARIABLES`: the OpenReward, WandB, OpenAI and
Hugging Face keys, registered by `register_known_secrets` at every entry point's preflight) are
registered once per process in `SECRETS`, the one owned registry; `redact` replaces every
registered value with ``***`` in strings and, recursively, in dicts, lists and tuples.
`install_log_redaction` makes every log record of the process pass through `redact` (message,
arguments and traceback), whatever handler later prints it, and masks the lines the OpenReward SDK
prints through structlog; `RedactingFilter` does the same for one handler.

What the environment itself shows the model (a tool that prints its own key) is the model's
context and is kept token-exact; this module guarantees that *our* logs, errors and metadata never
add a secret.

>>> registry = SecretRegistry()
>>> registry.register(["sk-live-123456"])
>>> registry.redact({"detail": "auth failed for sk-live-123456", "n": 3})
{'detail': 'auth failed for ***', 'n': 3}
>>> registry.redact("too short to be a secret: abc")  # values under MIN_SECRET_LENGTH are ignored
'too short to be a secret: abc'
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from openreward_rl._compat import structlog as structlog_redaction

__all__ = [
    "MASK",
    "MIN_SECRET_LENGTH",
    "SecretRegistry",
    "SECRETS",
    "register_secrets",
    "KNOWN_SECRET_VARIABLES",
    "register_known_secrets",
    "redact",
    "RedactingFilter",
    "install_log_redaction",
]

MASK = "***"
# Shorter values would blank out ordinary words and numbers; no real credential is this short.
MIN_SECRET_LENGTH = 6


class SecretRegistry:
    """A set of secret values and a compiled pattern that finds any of them (longest first)."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()

    def register(self, values: Iterable[object]) -> None:
        """Add secret values; None, empty, too-short and non-string values are skipped."""
        fresh = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_LENGTH} - self._values
        if not fresh:
            return
        with self._lock:
            self._values |= fresh
            ordered = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._pattern = None

    def __contains__(self, value: object) -> bool:
        return value in self._values

    def __len__(self) -> int:
        return len(self._values)

    def redact(self, value: Any) -> Any:
        """`value` with every registered secret masked; containers are copied, other objects kept."""
        pattern = self._pattern
        if pattern is None:
            return value
        return _redact(value, pattern)


def _redact(value: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(value, str):
        return pattern.sub(MASK, value)
    if isinstance(value, bytes):
        return pattern.sub(MASK, value.decode("utf-8", "replace")).encode()
    if isinstance(value, Mapping):
        return {_redact(k, pattern): _redact(v, pattern) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, pattern) for v in value]
    if isinstance(value, tuple):
        return tuple(_redact(v, pattern) for v in value)
    return value


# The process's registry: filled where secrets enter the process (TrainConfig.resolve_secrets) and
# where they go to the SDK (open_session: session secrets, the client's API key), read by the log
# hook and by every writer of logs, dumps, uploads and metadata.
SECRETS = SecretRegistry()


def register_secrets(values: Iterable[Any] | Mapping[str, Any]) -> None:
    """Register secret values with the process registry.

    A mapping registers its values; a value may be the SDK's ``(value, allowed_domains)`` pair.
    """
    items = values.values() if isinstance(values, Mapping) else values
    SECRETS.register(v[0] if isinstance(v, tuple) and v else v for v in items)


# Credentials a run's process may hold whatever the config says: the SDK's, WandB's, the OpenAI
# engine's and the Hugging Face hub's. A tool error, a traceback or a log line may quote any of them.
KNOWN_SECRET_VARIABLES = ("OPENREWARD_API_KEY", "WANDB_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def register_known_secrets(environ: Mapping[str, str] | None = None, variables: Iterable[str] = ()) -> None:
    """Register the values of `KNOWN_SECRET_VARIABLES` and of `variables` set in `environ` (default: os.environ).

    >>> register_known_secrets({"WANDB_API_KEY": "wandb-doctest-key-0123", "MY_KEY": "mine-doctest-456"}, ["MY_KEY"])
    >>> redact("wandb-doctest-key-0123 / mine-doctest-456")
    '*** / ***'
    """
    environ = os.environ if environ is None else environ
    register_secrets(environ.get(name) for name in (*KNOWN_SECRET_VARIABLES, *variables))


def redact(value: Any) -> Any:
    """`value` with every registered secret replaced by ``***``."""
    return SECRETS.redact(value)


def _redact_record(record: logging.LogRecord, registry: SecretRegistry) -> None:
    if not len(registry):
        return
    try:
        message = record.getMessage()
    except Exception:  # a broken format string: keep what logging would have shown
        message = f"{record.msg!r} % {record.args!r}"
    record.msg, record.args = registry.redact(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = registry.redact(record.exc_text)
    if record.stack_info:
        record.stack_info = registry.redact(record.stack_info)


class RedactingFilter(logging.Filter):
    """A handler filter that masks registered secrets in the message, its arguments and tracebacks."""

    def __init__(self, registry: SecretRegistry | None = None) -> None:
        super().__init__()
        self.registry = SECRETS if registry is None else registry

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record, self.registry)
        return True


_installed_lock = threading.Lock()
_installed = False


def install_log_redaction() -> None:
    """Redact every log record of this process as it is created, and every line the SDK's structlog
    loggers print (idempotent).

    Wraps the log-record factory, so handlers added later (pytest's caplog, WandB's, a user's)
    only ever see redacted records.
    """
    global _installed
    with _installed_lock:
        if not structlog_redaction.installed():  # undone by `_compat.uninstall()`, which leaves the record factory
            structlog_redaction.install(SECRETS.redact)
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            _redact_record(record, SECRETS)
            return record

        logging.setLogRecordFactory(factory)
        _installed = True

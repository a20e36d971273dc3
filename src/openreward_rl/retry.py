"""Retry policies for environment calls that are safe to repeat.

The SDK already retries one HTTP request a few times (429/502/503/504 and network errors, about
3 s in all). `RetryPolicy` adds a second, slower layer around whole operations that are safe to
repeat: opening a session (a failed half-open session is deleted first), listing tasks, reading
the prompt and the tools. It never wraps `call_tool`: a tool call that failed before the server
assigned it a task id may already have run, and repeating it could step the environment twice.

An environment that keeps answering 429 is at capacity: the final error says so and names the
concurrency setting to lower.

>>> policy = RetryPolicy(attempts=3, initial_s=0.5, max_s=4.0, jitter_s=0.0)
>>> [policy.delay(n) for n in (1, 2, 3, 4)]
[0.5, 1.0, 2.0, 4.0]
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiohttp
import attrs
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from openreward_rl.errors import EnvError

__all__ = [
    "RetryPolicy",
    "CAPACITY_HINT",
    "AtCapacityError",
    "is_busy",
    "is_at_capacity",
    "is_transient",
    "retry_after",
    "retrying",
    "call_with_retries",
    "describe_error",
    "NO_RETRY",
]

T = TypeVar("T")

# HTTP statuses that mean "the server is alive but cannot take this now".
BUSY_STATUSES = frozenset({429, 502, 503, 504})
CAPACITY_HINT = (
    "lower the number of concurrent episodes (Slime/Miles: --sglang-server-concurrency; "
    "openreward-rl eval: --concurrency) or ask for more environment capacity"
)


class AtCapacityError(EnvError, RuntimeError):
    """The environment answered 429 ("at capacity") through every retry."""


def _is_sdk_error(error: BaseException, *names: str) -> bool:
    """`error` is one of the OpenReward SDK's error classes `names`. The SDK is not imported for
    this: where it was never imported (an engine-only process), no error can come from it."""
    module = sys.modules.get("openreward.api.errors")
    return module is not None and isinstance(error, tuple(getattr(module, name) for name in names))


def _underlying(error: BaseException) -> BaseException:
    """The last HTTP error behind an SDK `MaxRetriesError` (it keeps them in `.errors`), else `error`."""
    errors = getattr(error, "errors", None) if _is_sdk_error(error, "MaxRetriesError") else None
    return errors[-1] if errors else error


def _status(error: BaseException) -> int | None:
    error = _underlying(error)
    status = getattr(error, "status", None)
    return status if isinstance(status, int) and isinstance(error, aiohttp.ClientResponseError) else None


def is_at_capacity(error: BaseException) -> bool:
    """An HTTP 429 from the environment server or its proxy (also as the last error the SDK retried)."""
    return _status(error) == 429


def is_busy(error: BaseException) -> bool:
    """The server answered, but with 429/502/503/504: trying again later may work."""
    return _status(error) in BUSY_STATUSES


def is_transient(error: BaseException) -> bool:
    """Worth repeating a safe operation: busy answers, network failures, the SDK giving up its retries.

    A 4xx other than 429 (bad split, unknown environment), a 500 (environment code raised) and
    authentication errors are not transient.
    """
    if _is_sdk_error(error, "MaxRetriesError", "HeartbeatTimeoutError"):
        return True
    if _status(error) is not None:
        return is_busy(error)
    return isinstance(error, (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError))


def retry_after(error: BaseException) -> float | None:
    """The server's Retry-After in seconds, when it sent one (the SDK keeps it on SessionResponseError)."""
    value = getattr(_underlying(error), "retry_after", None)
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


@attrs.frozen
class RetryPolicy:
    """Bounded exponential backoff with jitter: `attempts` tries, waits `initial_s * 2**(n-1)` capped
    at `max_s`, plus up to `jitter_s` of random jitter; a server's Retry-After wins when longer
    (still capped at `max_s`)."""

    attempts: int = attrs.field(default=3)
    initial_s: float = 1.0
    max_s: float = 30.0
    jitter_s: float = 1.0

    @attempts.validator
    def _check_attempts(self, attribute: attrs.Attribute, value: int) -> None:
        if value < 1:
            raise ValueError(f"RetryPolicy.attempts must be at least 1, got {value}")

    def __attrs_post_init__(self) -> None:
        if self.initial_s < 0 or self.max_s < 0 or self.jitter_s < 0:
            raise ValueError(f"RetryPolicy waits must be >= 0, got {self!r}")

    def delay(self, attempt: int, error: BaseException | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        backoff = min(self.max_s, self.initial_s * 2 ** (attempt - 1))
        hinted = retry_after(error) if error is not None else None
        if hinted is not None:
            backoff = max(backoff, min(hinted, self.max_s))
        return backoff + (random.uniform(0, self.jitter_s) if self.jitter_s else 0.0)


NO_RETRY = RetryPolicy(attempts=1)


def retrying(policy: RetryPolicy, *, retry_on: Callable[[BaseException], bool] = is_transient) -> AsyncRetrying:
    """A tenacity `AsyncRetrying` for `policy`; re-raises the last error."""

    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        return policy.delay(state.attempt_number, error)

    return AsyncRetrying(
        stop=stop_after_attempt(policy.attempts),
        wait=wait,
        retry=retry_if_exception(retry_on),
        reraise=True,
    )


async def call_with_retries(
    operation: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    what: str,
    retry_on: Callable[[BaseException], bool] = is_transient,
) -> T:
    """Run `operation()` under `policy`. A 429 that outlasts every attempt becomes `AtCapacityError`.

    Attempt 1 runs without the retry machinery (the common case, on hot paths); only its failure,
    when worth retrying, enters the policy, which then waits and goes on with attempt 2.
    """
    attempts = 1
    try:
        try:
            return await operation()
        except Exception as error:
            if policy.attempts == 1 or not retry_on(error):
                raise
            first_error = error
        async for attempt in retrying(policy, retry_on=retry_on):
            with attempt:
                if attempt.retry_state.attempt_number == 1:
                    raise first_error
                attempts += 1
                return await operation()
    except Exception as error:
        if is_at_capacity(error):
            raise AtCapacityError(
                f"{what}: the environment is at capacity (HTTP 429) after {attempts} attempt(s); {CAPACITY_HINT}"
            ) from error
        raise
    raise AssertionError("unreachable")  # pragma: no cover


def describe_error(error: BaseException) -> str:
    """One line: `Type (HTTP status): message`; for the SDK's `MaxRetriesError`, also its last error.

    >>> describe_error(ValueError("bad split"))
    'ValueError: bad split'
    """
    if _is_sdk_error(error, "MaxRetriesError"):
        head = str(error).splitlines()[0] if str(error) else "MaxRetriesError"
        last = _underlying(error)
        tail = f"; last error: {describe_error(last)}" if last is not error else ""
        return f"MaxRetriesError: {head}{tail}"
    status = _status(error)
    detail = getattr(error, "message", None) if status is not None else None
    text = " ".join(str(detail if detail else error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}" if status is None else f"{type(error).__name__} (HTTP {status}): {text}"

"""Answers handed from an embedded engine's own thread to the asyncio futures waiting for them.

Results that are ready together are set in one callback per event loop, so the callers they wake
send their next requests back to back (one callback per result let a batch restart half empty at
every turn boundary). A future whose loop has closed, or that is already done (its caller was
cancelled), is left alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

__all__ = ["reject_from_thread", "resolve_from_thread"]


def resolve_from_thread(results: Iterable[tuple[asyncio.Future[Any], Any]]) -> None:
    """Set each (future, result) pair's result on the future's loop; thread-safe."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
    for future, result in results:
        by_loop.setdefault(future.get_loop(), []).append((future, result))
    for loop, resolved in by_loop.items():
        if not loop.is_closed():
            loop.call_soon_threadsafe(_set_results, resolved)


def reject_from_thread(futures: Iterable[asyncio.Future[Any]], error: BaseException) -> None:
    """Fail each future with `error` on its own loop; thread-safe."""
    for future in futures:
        loop = future.get_loop()
        if not loop.is_closed():
            loop.call_soon_threadsafe(_set_exception, future, error)


def _set_results(resolved: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for future, result in resolved:
        if not future.done():
            future.set_result(result)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)

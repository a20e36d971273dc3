"""`OncePerKey`: say something once per key (a server, a failure), not once per occurrence.

A dead environment server fails every session's requests at once: a log line per failed request or
episode is a flood that hides the one line that matters.

>>> seen = OncePerKey()
>>> seen.first("http://127.0.0.1:8080"), seen.first("http://127.0.0.1:8080"), seen.forget("http://127.0.0.1:8080")
(True, False, True)
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

__all__ = ["OncePerKey"]


class OncePerKey:
    """Which keys were seen (at most `limit`; past it every key counts as seen, so it stays bounded)."""

    def __init__(self, limit: int = 1024) -> None:
        self._seen: set[Hashable] = set()
        self._limit = limit
        self._lock = threading.Lock()

    def first(self, key: Hashable) -> bool:
        """True the first time `key` is seen (again after `forget`), False after."""
        with self._lock:
            if key in self._seen or len(self._seen) >= self._limit:
                return False
            self._seen.add(key)
            return True

    def forget(self, key: Hashable) -> bool:
        """Make `key` new again; True where it had been seen."""
        with self._lock:
            if key in self._seen:
                self._seen.discard(key)
                return True
            return False

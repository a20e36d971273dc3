"""How many connections one HTTP pool may keep, from the process's open-file limit.

A rollout process keeps a connection per request in flight to the engine and to the environment
server. Unbounded pools with more requests in flight than the process may open files fail the
requests past the limit (`EMFILE`: "Cannot connect to host", an engine or environment fault after
the retries): 10,000 concurrent episodes over HTTP on a 20,000-file limit lost 6,425 of them so.
A pool capped at its share of the limit makes the requests past it wait for a free connection
instead. The SGLang engine's pool and the environment transport's pool take `POOL_SHARE` each,
leaving the rest for everything else the process opens.
"""

from __future__ import annotations

import resource

__all__ = ["pool_limit", "POOL_SHARE"]

POOL_SHARE = 0.4


def pool_limit(requested: int = 0, share: float = POOL_SHARE) -> int:
    """`requested` connections if set (> 0); otherwise `share` of the soft open-file limit (0, aiohttp's
    "unlimited", where the limit is itself unlimited or unknown).

    >>> pool_limit(64)
    64
    """
    if requested > 0:
        return requested
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 0
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 0
    return max(16, int(soft * share))

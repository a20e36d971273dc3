"""A throwaway aiohttp application on 127.0.0.1, for tests that need a real HTTP server of their own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web


@contextlib.asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[str]:
    """Serves `app` on 127.0.0.1 (an ephemeral port) for the duration of the block; yields its base URL,
    ``http://127.0.0.1:PORT``, and cleans the runner up on the way out."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()

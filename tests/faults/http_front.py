"""`HttpFront`: a small aiohttp reverse proxy on 127.0.0.1 in front of an environment server that
answers scripted errors (5xx, 429 with Retry-After) for chosen requests, then forwards faithfully,
streaming (the SDK's tool calls are server-sent events)."""

from __future__ import annotations

import collections
from collections.abc import Iterable

import aiohttp
import attrs
from aiohttp import web

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te", "trailer", "upgrade"}


@attrs.define
class _Fault:
    status: int
    retry_after: str | None
    paths: frozenset[str] | None


@attrs.define(eq=False)
class HttpFront:
    upstream: str
    seen: list[tuple[str, int]] = attrs.Factory(list)  # (path, status answered)
    _faults: collections.deque[_Fault] = attrs.Factory(collections.deque)
    _runner: web.AppRunner | None = None
    _http: aiohttp.ClientSession | None = None
    port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail_next(
        self, count: int, *, status: int = 503, retry_after: str | None = None, paths: Iterable[str] | None = None
    ) -> None:
        """Answer the next `count` requests (to `paths`, if given: suffixes such as "/create_session") with `status`."""
        chosen = frozenset(paths) if paths is not None else None
        self._faults.extend(_Fault(status, retry_after, chosen) for _ in range(count))

    def statuses(self, status: int) -> int:
        return sum(1 for _, s in self.seen if s == status)

    def _take_fault(self, path: str) -> _Fault | None:
        if self._faults:
            fault = self._faults[0]
            if fault.paths is None or any(path.endswith(p) for p in fault.paths):
                return self._faults.popleft()
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.rel_url.path
        body = await request.read()
        fault = self._take_fault(path)
        if fault is not None:
            self.seen.append((path, fault.status))
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
            detail = "at capacity" if fault.status == 429 else "injected fault"
            return web.json_response({"detail": detail}, status=fault.status, headers=headers)
        assert self._http is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with self._http.request(
            request.method, self.upstream + str(request.rel_url), headers=headers, data=body, allow_redirects=False
        ) as upstream:
            self.seen.append((path, upstream.status))
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP},
            )
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def __aenter__(self) -> HttpFront:
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._http is not None:
            await self._http.close()

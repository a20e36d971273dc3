"""`OriginPool`: POST a body to one HTTP origin over pooled keep-alive connections, read the whole answer.

The engine's hot path is one JSON POST per model call and one answer read whole. aiohttp's client
pays for generality there (request and response objects, a task per body write, stream readers,
timer handles, tracing hooks): ~0.13 ms of CPU per `/generate` exchange against ~0.06 ms for the
exchange itself, about 6% of a turn on the trainer hook path (benchmarks/hook_path.py). This
client does only that exchange, on `asyncio.Protocol` connections:

- the request is written in one piece: request line, `Host`, `Content-Length`, the caller's headers
  (`Content-Type` among them), the body;
- the answer is read by `Content-Length`, by chunked transfer coding, or to the connection's close
  when it has neither; interim 1xx answers are skipped; a gzip or deflate body is decompressed;
- a connection is reused when the answer allows it (HTTP/1.1 without `Connection: close`, read to
  its exact end), and dropped when it idled past `KEEPALIVE_S` (a server or load balancer may have
  forgotten it), was closed by the server, or an exchange on it failed or was cancelled;
- at most `limit` exchanges run at once (0: no cap); the rest wait for a slot;
- any failure to complete an exchange (refused or reset connections, a close before the answer's
  end, an answer that is not HTTP/1.x) is `HttpExchangeError`; timeouts are `TimeoutError`.

Proxies are not consulted (the engine's aiohttp session never did: `trust_env` was off). A request is
never re-sent here: retrying is the caller's decision (a POST may have reached the server).
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections.abc import Mapping
from urllib.parse import urlsplit

__all__ = ["OriginPool", "HttpExchangeError", "KEEPALIVE_S", "MAX_HEAD_BYTES"]

KEEPALIVE_S = 15.0  # an idle connection older than this is closed instead of reused (aiohttp's default)
MAX_HEAD_BYTES = 64 * 1024  # status line and headers of one answer
_USER_AGENT = b"openreward-rl"


class HttpExchangeError(Exception):
    """The exchange did not complete: the connection failed, closed early, or the answer was not HTTP/1.x."""


class _Answer:
    """The parse state of one answer on a connection."""

    __slots__ = ("status", "keep_alive", "length", "chunked", "encoding", "parts", "chunk_left", "done")

    def __init__(self) -> None:
        self.status = 0  # 0 until the head of a final (non-1xx) answer was read
        self.keep_alive = True
        self.length: int | None = None  # body bytes still expected (Content-Length), None: chunked or to the close
        self.chunked = False
        self.encoding = b""
        self.parts: list[bytes] = []
        self.chunk_left = -1  # chunked: bytes left in the current chunk (+2 for its CRLF); -1: a size line is next
        self.done = False


class _Connection(asyncio.Protocol):
    """One keep-alive connection; `exchange` writes a request and waits for its whole answer."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._buffer = bytearray()
        self._answer: _Answer | None = None
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._answer is None:  # bytes nobody asked for: this connection cannot be trusted again
            self.abort()
            return
        self._buffer += data
        try:
            self._parse()
        except HttpExchangeError as error:
            self._fail(error)

    def eof_received(self) -> bool:
        answer = self._answer
        if answer is not None and answer.status and answer.length is None and not answer.chunked:
            answer.parts.append(bytes(self._buffer))  # a body delimited by the close ends here
            self._buffer.clear()
            answer.keep_alive = False
            self._finish(answer)
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            reason = f"{type(exc).__name__}: {exc}" if exc is not None else "the server closed the connection"
            self._waiter.set_exception(HttpExchangeError(f"{reason} before the answer was complete"))

    # the exchange
    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        if self.closed:
            raise HttpExchangeError("the connection closed before the request was sent")
        self._answer = _Answer()
        self._waiter = self._loop.create_future()
        self.transport.write(request)
        try:
            return await self._waiter
        finally:
            self._waiter = None

    @property
    def reusable(self) -> bool:
        return not self.closed and self._answer is not None and self._answer.done and self._answer.keep_alive and not self._buffer

    def release(self) -> None:
        self._answer = None

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            try:
                self.transport.abort()
            except RuntimeError:  # its event loop has closed (an engine used from one `asyncio.run` per call)
                pass  # the socket is closed when the transport is collected

    def _fail(self, error: HttpExchangeError) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)
        self.abort()

    def _finish(self, answer: _Answer) -> None:
        answer.done = True
        body = answer.parts[0] if len(answer.parts) == 1 else b"".join(answer.parts)
        if answer.encoding not in (b"", b"identity"):
            body = _decompressed(body, answer.encoding)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result((answer.status, body))

    def _parse(self) -> None:
        answer = self._answer
        assert answer is not None
        buffer = self._buffer
        while not answer.done:
            if not answer.status:
                if not self._read_head(answer):
                    return
            elif answer.chunked:
                if not self._read_chunk(answer):
                    return
            elif answer.length is not None:
                if len(buffer) < answer.length:
                    return
                answer.parts.append(bytes(buffer[: answer.length]))
                del buffer[: answer.length]
                self._finish(answer)
            else:
                answer.parts.append(bytes(buffer))  # to the close: eof_received finishes it
                buffer.clear()
                return

    def _read_head(self, answer: _Answer) -> bool:
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                raise HttpExchangeError(f"the answer's head is longer than {MAX_HEAD_BYTES} bytes")
            return False
        lines = bytes(buffer[:end]).split(b"\r\n")
        del buffer[: end + 4]
        version, _, rest = lines[0].partition(b" ")
        status_text = rest[:3]
        if not version.startswith(b"HTTP/1.") or not status_text.isdigit():
            raise HttpExchangeError(f"the server did not answer in HTTP/1.x: {lines[0][:80]!r}")
        status = int(status_text)
        if 100 <= status < 200:
            return True  # an interim answer (100 Continue, 103 Early Hints): the final one follows
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                raise HttpExchangeError(f"a malformed header line in the answer: {line[:80]!r}")
            key = name.strip().lower()
            headers[key] = headers[key] + b", " + value.strip() if key in headers else value.strip()
        answer.status = status
        connection = headers.get(b"connection", b"").lower()
        answer.keep_alive = b"close" not in connection if version == b"HTTP/1.1" else b"keep-alive" in connection
        answer.encoding = headers.get(b"content-encoding", b"").strip().lower()
        if status in (204, 304):
            answer.length = 0
        elif b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            answer.chunked = True
        elif b"content-length" in headers:
            text = headers[b"content-length"].split(b",")[0].strip()
            if not text.isdigit():
                raise HttpExchangeError(f"the answer's Content-Length is not a number: {text[:40]!r}")
            answer.length = int(text)
        else:
            answer.keep_alive = False  # the body runs to the close
        return True

    def _read_chunk(self, answer: _Answer) -> bool:
        buffer = self._buffer
        if answer.chunk_left < 0:
            end = buffer.find(b"\r\n")
            if end < 0:
                return False
            size_text = bytes(buffer[:end]).split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HttpExchangeError(f"a malformed chunk size in the answer: {size_text[:40]!r}") from None
            if size == 0:  # the last chunk, then trailer lines (rarely any), then an empty line
                after = end + 2
                if buffer[after : after + 2] == b"\r\n":
                    del buffer[: after + 2]
                else:
                    trailers_end = buffer.find(b"\r\n\r\n", after)
                    if trailers_end < 0:
                        return False
                    del buffer[: trailers_end + 4]
                self._finish(answer)
                return True
            del buffer[: end + 2]
            answer.chunk_left = size + 2
        if len(buffer) < answer.chunk_left:
            return False
        if buffer[answer.chunk_left - 2 : answer.chunk_left] != b"\r\n":
            raise HttpExchangeError("a chunk of the answer does not end where its size says")
        answer.parts.append(bytes(buffer[: answer.chunk_left - 2]))
        del buffer[: answer.chunk_left]
        answer.chunk_left = -1
        return True


def _decompressed(body: bytes, encoding: bytes) -> bytes:
    try:
        if encoding in (b"gzip", b"x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if encoding == b"deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)  # raw deflate, as some servers send it
    except zlib.error as error:
        raise HttpExchangeError(f"the answer's {encoding.decode(errors='replace')} body does not decompress: {error}") from error
    raise HttpExchangeError(f"the answer uses a content coding this client does not read: {encoding.decode(errors='replace')}")


class OriginPool:
    """Keep-alive connections to the origin of `base_url` (http or https), made on the running event loop.

    >>> import asyncio
    >>> from aiohttp import web
    >>> async def echo(request):
    ...     return web.Response(body=await request.read(), content_type="application/json")
    >>> async def demo():
    ...     app = web.Application()
    ...     app.router.add_post("/echo", echo)
    ...     runner = web.AppRunner(app)
    ...     await runner.setup()
    ...     await web.TCPSite(runner, "127.0.0.1", 0).start()
    ...     pool = OriginPool(f"http://127.0.0.1:{runner.addresses[0][1]}")
    ...     try:
    ...         first = await pool.post("/echo", b'{"a": 1}', {"Content-Type": "application/json"}, timeout_s=10)
    ...         second = await pool.post("/echo", b'{"b": 2}', {"Content-Type": "application/json"}, timeout_s=10)
    ...         return first, second, len(pool._open)  # one connection, reused
    ...     finally:
    ...         pool.close()
    ...         await runner.cleanup()
    >>> asyncio.run(demo())
    ((200, b'{"a": 1}'), (200, b'{"b": 2}'), 1)
    """

    def __init__(self, base_url: str, *, limit: int = 0, connect_timeout_s: float = 10.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"OriginPool needs an http:// or https:// URL with a host, got {base_url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        default_port = parts.port is None or parts.port == (443 if parts.scheme == "https" else 80)
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = (host if default_port else f"{host}:{self._port}").encode("ascii")
        self._connect_timeout_s = connect_timeout_s
        self.limit = limit
        self._slots = asyncio.Semaphore(limit) if limit > 0 else None
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self.loop = asyncio.get_running_loop()  # the connections' loop
        self.closed = False

    async def post(self, path: str, body: bytes, headers: Mapping[str, str] | None, timeout_s: float) -> tuple[int, bytes]:
        """POST `body` to `path`; (status, whole body). `timeout_s` bounds the wait for a slot, the connect and the answer."""
        if self.closed:
            raise HttpExchangeError("the connection pool is closed")
        request = self._request(path, body, headers)
        async with asyncio.timeout(timeout_s):
            if self._slots is None:
                return await self._exchange(request)
            async with self._slots:
                return await self._exchange(request)

    def close(self) -> None:
        """Close every connection; later `post` calls fail."""
        self.closed = True
        for connection in list(self._open):
            connection.abort()
        self._open.clear()
        self._idle.clear()

    async def _exchange(self, request: bytes) -> tuple[int, bytes]:
        connection = self._idle_connection() or await self._connect()
        try:
            answer = await connection.exchange(request)
        except BaseException:
            self._drop(connection)
            raise
        if connection.reusable and not self.closed:
            connection.release()
            connection.idle_since = self.loop.time()
            self._idle.append(connection)
        else:
            self._drop(connection)
        return answer

    def _idle_connection(self) -> _Connection | None:
        idle, now = self._idle, self.loop.time()
        while idle:
            connection = idle.pop()
            if not connection.closed and now - connection.idle_since < KEEPALIVE_S:
                return connection
            self._drop(connection)
        return None

    async def _connect(self) -> _Connection:
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, connection = await self.loop.create_connection(
                    lambda: _Connection(self.loop), self._host, self._port, ssl=self._ssl,
                    server_hostname=self._host if self._ssl is not None else None,
                )  # fmt: skip
        except TimeoutError:
            raise HttpExchangeError(f"no connection to {self._host}:{self._port} within {self._connect_timeout_s:g}s") from None
        except OSError as error:
            raise HttpExchangeError(f"cannot connect to {self._host}:{self._port}: {type(error).__name__}: {error}") from error
        self._open.add(connection)
        return connection

    def _drop(self, connection: _Connection) -> None:
        connection.abort()
        self._open.discard(connection)

    def _request(self, path: str, body: bytes, headers: Mapping[str, str] | None) -> bytes:
        head = [b"POST ", path.encode("ascii"), b" HTTP/1.1\r\nHost: ", self._host_header,
                b"\r\nUser-Agent: ", _USER_AGENT, b"\r\nAccept-Encoding: identity\r\nContent-Length: ", str(len(body)).encode(), b"\r\n"]  # fmt: skip
        if headers:
            for name, value in headers.items():
                if any(c in name or c in value for c in "\r\n"):
                    raise ValueError(f"an HTTP header may not hold a line break: {name!r}")
                head += (name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n")
        head += (b"\r\n", body)
        return b"".join(head)

"""`engines._http1.OriginPool`, the SGLang engine's own HTTP/1.1 client, against real sockets on 127.0.0.1:
a raw asyncio server that answers scripted bytes (framings, interim answers, early closes, garbage),
aiohttp's web server (chunked streaming) and uvicorn with Starlette (the server stack SGLang's
`/generate` runs on)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from openreward_rl.engines import _http1
from openreward_rl.engines._http1 import HttpExchangeError, OriginPool

pytestmark = pytest.mark.anyio
JSON = {"Content-Type": "application/json"}


class ScriptedServer:
    """Answers the n-th request with `answers[n](request bytes)`: raw bytes, written as given (a list
    is written piece by piece, to split an answer across reads; a None in it closes the connection
    there); None closes the connection without an answer."""

    def __init__(self, answers: list[Callable[[bytes], bytes | list[bytes | None] | None]]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.connections = 0

    async def __aenter__(self) -> ScriptedServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        self.pool = OriginPool(self.url)  # the client under test, closed with the server
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.pool.close()
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.answers[len(self.requests) - 1](request)
                if answer is None:
                    break
                pieces = answer if isinstance(answer, list) else [answer]
                for piece in pieces:
                    if piece is None:
                        return
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.005)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def length_answer(body: bytes, *, extra: bytes = b"", status: bytes = b"200 OK") -> Callable[[bytes], bytes]:
    return lambda request: b"HTTP/1.1 " + status + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body


def chunked(*parts: bytes, trailer: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n" + trailer + b"\r\n"


async def test_a_content_length_answer_is_read_whole_and_the_connection_reused() -> None:
    async with ScriptedServer([length_answer(b'{"a":1}'), length_answer(b'{"b":2}')]) as server:
        pool = server.pool
        assert await pool.post("/generate", b'{"x":1}', JSON, timeout_s=5) == (200, b'{"a":1}')
        assert await pool.post("/generate", b'{"x":2}', JSON, timeout_s=5) == (200, b'{"b":2}')
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nContent-Type: application/json\r\n" in first and b"\r\nContent-Length: 7\r\n" in first
    assert first.endswith(b'\r\n\r\n{"x":1}')


async def test_chunked_answers_split_anywhere_with_and_without_trailers_are_joined() -> None:
    body = chunked(b'{"text": "', b"a" * 3000, b'"}')
    split_everywhere = [body[i : i + 7] for i in range(0, len(body), 7)]
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    answers = [
        lambda r: [head, *split_everywhere],
        lambda r: head + chunked(b"{}", trailer=b"X-Checksum: 1\r\n"),
        length_answer(b"after"),
    ]
    async with ScriptedServer(answers) as server:
        pool = server.pool
        status, raw = await pool.post("/generate", b"{}", JSON, timeout_s=10)
        assert status == 200 and json.loads(raw) == {"text": "a" * 3000}
        assert await pool.post("/generate", b"{}", JSON, timeout_s=5) == (200, b"{}")
        assert await pool.post("/generate", b"{}", JSON, timeout_s=5) == (200, b"after")  # still in step on one connection
    assert server.connections == 1


async def test_interim_answers_are_skipped_and_error_statuses_come_back_with_their_body() -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    answers = [
        lambda r: interim + length_answer(b"ok")(r),
        length_answer(b'{"error": {"message": "busy"}}', status=b"503 Service Unavailable"),
    ]
    async with ScriptedServer(answers) as server:
        pool = server.pool
        assert await pool.post("/generate", b"{}", None, timeout_s=5) == (200, b"ok")
        assert await pool.post("/generate", b"{}", None, timeout_s=5) == (503, b'{"error": {"message": "busy"}}')


async def test_an_answer_saying_connection_close_is_read_and_its_connection_not_reused() -> None:
    answers = [length_answer(b"one", extra=b"Connection: close\r\n"), length_answer(b"two")]
    async with ScriptedServer(answers) as server:
        pool = server.pool
        assert await pool.post("/generate", b"{}", None, timeout_s=5) == (200, b"one")
        assert await pool.post("/generate", b"{}", None, timeout_s=5) == (200, b"two")
    assert server.connections == 2


async def test_an_answer_delimited_by_the_close_is_read_to_the_close() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n{\"to\": ")
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(b'"the close"}')
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    pool = OriginPool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    try:
        assert await pool.post("/generate", b"", None, timeout_s=5) == (200, b'{"to": "the close"}')
        assert not pool._idle  # nothing to reuse
    finally:
        pool.close()
        server.close()


async def test_a_gzip_answer_is_decompressed() -> None:
    packed = gzip.compress(b'{"zipped": true}')
    async with ScriptedServer([length_answer(packed, extra=b"Content-Encoding: gzip\r\n")]) as server:
        pool = server.pool
        assert await pool.post("/generate", b"{}", None, timeout_s=5) == (200, b'{"zipped": true}')
    assert b"\r\nAccept-Encoding: identity\r\n" in server.requests[0]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda r: None, "closed the connection before the answer was complete"),
        (lambda r: [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", None], "closed the connection before the answer was complete"),
        (lambda r: b"SSH-2.0-OpenSSH\r\n\r\n", "did not answer in HTTP/1.x"),
        (lambda r: b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n", "Content-Length is not a number"),
        (lambda r: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"),
        (lambda r: b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\n{}", "content coding this client does not read"),
    ],
    ids=["closed-before-answer", "closed-mid-body", "not-http", "bad-length", "bad-chunk", "unknown-coding"],
)
async def test_an_exchange_that_cannot_complete_is_an_error_naming_why(answer: Callable[[bytes], bytes | None], message: str) -> None:
    async with ScriptedServer([answer, length_answer(b"fine")]) as server:
        pool = server.pool
        with pytest.raises(HttpExchangeError, match=message):
            await pool.post("/generate", b"{}", None, timeout_s=5)
        assert await pool.post("/generate", b"{}", None, timeout_s=5) == (200, b"fine")  # a fresh connection
    assert server.connections == 2


async def test_a_refused_connection_is_an_error_naming_the_address() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pool = OriginPool(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(HttpExchangeError, match=f"cannot connect to 127.0.0.1:{port}"):
            await pool.post("/generate", b"{}", None, timeout_s=5)
    finally:
        pool.close()


async def test_a_timeout_or_a_cancel_drops_the_connection_it_was_waiting_on() -> None:
    hang = [lambda r: [b"HTTP/1.1 200 OK\r\n"]]  # a head that never ends
    async with ScriptedServer(hang * 2 + [length_answer(b"fresh")]) as server:
        pool = server.pool
        with pytest.raises(TimeoutError):
            await pool.post("/generate", b"{}", None, timeout_s=0.2)
        task = asyncio.create_task(pool.post("/generate", b"{}", None, timeout_s=5))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await pool.post("/generate", b"{}", None, timeout_s=5) == (200, b"fresh")
    assert server.connections == 3  # neither half-read connection was reused


async def test_a_connection_the_server_closed_or_idle_too_long_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    closes_after = lambda r: [length_answer(b"one")(r), None]  # noqa: E731 - as a keep-alive timer closes an idle connection
    async with ScriptedServer([closes_after, length_answer(b"two"), length_answer(b"three")]) as server:
        pool = server.pool
        assert await pool.post("/generate", b"{}", None, timeout_s=5) == (200, b"one")
        await asyncio.sleep(0.05)
        assert await pool.post("/generate", b"{}", None, timeout_s=5) == (200, b"two")
        monkeypatch.setattr(_http1, "KEEPALIVE_S", 0.0)
        assert await pool.post("/generate", b"{}", None, timeout_s=5) == (200, b"three")
    assert server.connections == 3


async def test_at_most_limit_exchanges_run_at_once() -> None:
    in_flight, peak = 0, 0

    async def slow(request: web.Request) -> web.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return web.Response(body=await request.read())

    async with aiohttp_server({"/echo": slow}) as url:
        pool = OriginPool(url, limit=3)
        try:
            answers = await asyncio.gather(*(pool.post("/echo", str(i).encode(), None, timeout_s=10) for i in range(12)))
        finally:
            pool.close()
    assert answers == [(200, str(i).encode()) for i in range(12)]
    assert peak == 3


async def test_aiohttp_streamed_chunked_answers_come_back_whole() -> None:
    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for i in range(50):
            await response.write(b"%d," % i)
        await response.write_eof()
        return response

    async with aiohttp_server({"/stream": streamed}) as url:
        pool = OriginPool(url + "/")
        try:
            for _ in range(3):
                assert await pool.post("/stream", b"", None, timeout_s=10) == (200, b"".join(b"%d," % i for i in range(50)))
        finally:
            pool.close()


def test_uvicorn_and_starlette_answers_are_read_as_aiohttp_reads_them() -> None:
    """The stack SGLang's HTTP server runs on: FastAPI (Starlette) under uvicorn, JSON answers."""
    import aiohttp
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def generate(request: Request) -> JSONResponse:
        payload = await request.json()
        status = 400 if payload.get("bad") else 200
        return JSONResponse({"text": "é" * 5000, "input_ids": payload["input_ids"][-3:]}, status_code=status)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/generate", generate, methods=["POST"])]), log_level="error"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def both() -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
        bodies = [json.dumps({"input_ids": list(range(n))}).encode() for n in (5, 20000)] + [b'{"bad": 1, "input_ids": []}']
        pool = OriginPool(url)
        try:
            ours = [await pool.post("/generate", body, JSON, timeout_s=10) for body in bodies]
        finally:
            pool.close()
        async with aiohttp.ClientSession() as session:
            theirs = []
            for body in bodies:
                async with session.post(url + "/generate", data=body, headers=JSON) as response:
                    theirs.append((response.status, await response.read()))
        return ours, theirs

    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        ours, theirs = asyncio.run(both())
    finally:
        server.should_exit = True
        thread.join(10)
    assert ours == theirs and [status for status, _ in ours] == [200, 200, 400]


def test_header_values_with_line_breaks_are_refused() -> None:
    async def attempt() -> None:
        pool = OriginPool("http://127.0.0.1:9")
        try:
            await pool.post("/generate", b"{}", {"X-SMG-Routing-Key": "a\r\nInjected: 1"}, timeout_s=1)
        finally:
            pool.close()

    with pytest.raises(ValueError, match="line break"):
        asyncio.run(attempt())


@contextlib.asynccontextmanager
async def aiohttp_server(routes: dict[str, Callable]) -> AsyncIterator[str]:
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()

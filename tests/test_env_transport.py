"""The pooled environment transport: tool calls over the SDK's own session protocol reuse one
connection, give the same results as the SDK's stock transport, and keep proxy settings.
Real parts: the SDK's environment `Server` in a child process (as in production, the server's
writes reach the client apart from its reads; an in-process server thread hides the
connection-per-call behaviour) and the SDK's `AsyncOpenReward`."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from openreward import AsyncOpenReward

from chunk_boundary_env import CHUNK_SIZE, KINDS, boundary_text, streamed_result
from local_http import serve_app
from openreward_rl import ChatRenderer, EpisodeSettings, ToolEpisode, run_episode
from openreward_rl._compat.aiohttp import DrainingResponse
from openreward_rl._compat.openreward.sse import parse_sse_events
from openreward_rl._compat.openreward.transport import PooledEnvironmentsAPI
from openreward_rl.config import parse_config
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.env.environment import open_session
from openreward_rl.env.local_server import LocalEnvServer, serve_environments
from openreward_rl.env.tasks import TaskRef, list_tasks
from openreward_rl.env.traffic import use_pooled_transport
from openreward_rl.parsers import get_parser
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer

pytestmark = pytest.mark.anyio
SLEPT = ["slept 0 s", "slept 0.01 s", "slept 0 s", "slept 0.02 s", "slept 0 s"]


@pytest.fixture(scope="module")
def env_server(example_env_specs: dict[str, str]) -> Any:
    with serve_environments([example_env_specs["Faulty"]], subprocess=True) as server:
        yield server


def count_connects(connector: aiohttp.TCPConnector) -> list[int]:
    """Count the new TCP connections `connector` opens from now on."""
    opened = [0]
    create = connector._create_connection

    async def counting(*args: Any, **kwargs: Any) -> Any:
        opened[0] += 1
        return await create(*args, **kwargs)

    connector._create_connection = counting  # type: ignore[method-assign]
    return opened


async def call_five_times(client: AsyncOpenReward, env_server: LocalEnvServer) -> tuple[list[Any], list[int]]:
    task = TaskRef("Faulty", "train", index=0, variant=env_server.variant_for("Faulty"), base_url=env_server.base_url)
    outcomes = []
    async with open_session(client, task, liveness=False) as session:
        opened = count_connects(client.environments._get_connector())
        for _ in range(5):
            outcomes.append(await session.call_tool("garble", {}))
    return outcomes, opened


async def test_tool_calls_reuse_one_connection(env_server: LocalEnvServer) -> None:
    client = AsyncOpenReward(api_key="local")
    try:
        outcomes, opened = await call_five_times(client, env_server)
        assert isinstance(client.environments, PooledEnvironmentsAPI)
        session = client.environments._clients[env_server.base_url]
        assert session.trust_env is False
    finally:
        await client.environments.aclose()
    assert len({o.text for o in outcomes}) == 1 and outcomes[0].error is None
    assert opened[0] <= 1  # reused: the SDK's own sessions may open one per tool call (see below)


async def test_stock_transport_gives_the_same_outcomes(env_server: LocalEnvServer) -> None:
    """The same calls over the SDK's own sessions (already in use, so `use_pooled_transport` leaves
    them): same results. (Whether the SDK's stream tail arrives before it stops reading, which decides
    if its connection is kept, is a matter of timing; the next test pins it down.)"""
    client = AsyncOpenReward(api_key="local")
    try:
        env_server.environment(client, "Faulty")  # the SDK makes its own session first
        outcomes, _ = await call_five_times(client, env_server)
        assert not isinstance(client.environments, PooledEnvironmentsAPI)
    finally:
        await client.environments.aclose()
    assert len({o.text for o in outcomes}) == 1 and outcomes[0].error is None


async def test_tool_calls_leave_no_async_generator_for_the_loop_to_close(env_server: LocalEnvServer) -> None:
    """The SDK leaves each tool call's event stream at its `end` event. Our parser is an iterator
    object, not an async generator: nothing is left for the loop's finalizer hook (a thread-safe
    wake-up and an `aclose()` task per unfinished generator, two per call with a generator parser)."""
    finalized: list[str] = []
    hooks = sys.get_asyncgen_hooks()  # the running loop's

    def counting(agen: Any) -> None:
        finalized.append(agen.__qualname__)
        hooks.finalizer(agen)

    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=counting)
    client = AsyncOpenReward(api_key="local")
    try:
        outcomes, _ = await call_five_times(client, env_server)
    finally:
        sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=hooks.finalizer)
        await client.environments.aclose()
    assert len(outcomes) == 5 and outcomes[0].error is None
    assert [name for name in finalized if "sse" in name or "lines" in name] == []


@pytest.mark.parametrize("response_class", [aiohttp.ClientResponse, DrainingResponse])
async def test_a_stream_left_before_its_tail_keeps_its_connection_only_when_drained(response_class: type) -> None:
    """An SSE stream whose last chunk comes 50 ms after the event the reader stops at (as the SDK
    stops at `end`): aiohttp's own response closes the connection, `DrainingResponse` pools it."""

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"event: end\ndata: {}\n\n")
        await asyncio.sleep(0.05)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/call", stream)
    connector = aiohttp.TCPConnector()
    opened = count_connects(connector)
    async with serve_app(app) as base:
        async with aiohttp.ClientSession(base, connector=connector, response_class=response_class) as http:
            for _ in range(3):
                async with http.post("/call") as response:
                    async for line in response.content:
                        if line.startswith(b"data:"):
                            break
    assert opened[0] == (1 if response_class is DrainingResponse else 3)


async def test_a_tool_call_waits_past_the_heartbeat_for_its_answers_head_and_not_between_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A saturated server answers late: the SDK reads with a 30-s heartbeat (here 0.2 s) and sends a `/call`
    that timed out again as a new call, which runs the tool twice. `DrainingResponse` waits for a
    tool call's answer head up to `CALL_ANSWER_WAIT_S` (here 2 s), then holds the stream to the heartbeat."""
    from openreward_rl._compat import aiohttp as compat_aiohttp

    monkeypatch.setattr(compat_aiohttp, "CALL_ANSWER_WAIT_S", 2.0)
    runs: list[str] = []

    async def late(request: web.Request) -> web.StreamResponse:
        runs.append(request.path)
        await asyncio.sleep(0.6)  # queued behind other requests: past the heartbeat, under the answer wait
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"event: task_id\ndata: t1\n\n")
        if request.query.get("stall"):
            await asyncio.sleep(0.6)  # silent mid-stream for longer than the heartbeat: a dead stream
        await response.write(b"event: end\ndata: {}\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    for path in ("/env/call", "/env/create_session"):
        app.router.add_post(path, late)
    heartbeat = aiohttp.ClientTimeout(total=None, sock_read=0.2)  # as the SDK's resumable_sse sets it (30 s there)
    async with serve_app(app) as base:
        async with aiohttp.ClientSession(base, response_class=DrainingResponse) as http:
            async with http.post("/env/call", json={"name": "step"}, timeout=heartbeat) as response:
                assert b"event: end" in await response.read()
            with pytest.raises(aiohttp.ServerTimeoutError):  # another request keeps the heartbeat for its head
                async with http.post("/env/create_session", timeout=heartbeat) as response:
                    await response.read()
            with pytest.raises(aiohttp.ServerTimeoutError):  # and a call's stream keeps it between events
                async with http.post("/env/call?stall=1", json={"name": "step"}, timeout=heartbeat) as response:
                    await response.read()
    assert runs == ["/env/call", "/env/create_session", "/env/call"]  # each sent once


async def test_proxy_from_the_environment_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://user:secret@proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = use_pooled_transport(AsyncOpenReward(api_key="local"))
    try:
        client.environments.get("Remote", base_url="http://envs.example:8080")
        client.environments.get("Local", base_url="http://127.0.0.1:9")
        remote = client.environments._clients["http://envs.example:8080"]
        local = client.environments._clients["http://127.0.0.1:9"]
        assert str(remote._default_proxy) == "http://proxy.invalid:3128"
        assert remote._default_proxy_auth.login == "user"
        assert local._default_proxy is None
    finally:
        await client.environments.aclose()


def test_other_clients_are_left_alone() -> None:
    fake = object()
    assert use_pooled_transport(fake) is fake


@pytest.fixture(scope="module")
def chunk_server() -> Any:
    with serve_environments([f"{Path(__file__).parent / 'chunk_boundary_env.py'}:ChunkBoundary"]) as server:
        yield server


@pytest.mark.parametrize(("kind", "listed_first"), [*((kind, False) for kind in KINDS), ("space", True)])
async def test_whitespace_on_a_stream_chunk_boundary_reaches_the_model(
    chunk_server: LocalEnvServer, qwen3_tokenizer: Any, kind: str, listed_first: bool
) -> None:
    """The SDK's server streams a tool result in chunks of `CHUNK_SIZE` characters; whitespace opening
    a chunk (constructed there, checked below) must survive, in the trajectory and in what the model reads next.
    `listed_first`: the client lists the tasks before the episode, as `openreward-rl eval` does."""
    expected = boundary_text(kind)
    streamed = streamed_result(expected)
    assert all(streamed[k * CHUNK_SIZE].isspace() for k in range(1, 4))  # the construction puts it there
    script = [
        ScriptedCompletion(text='<tool_call>\n{"name": "emit", "arguments": {"kind": "' + kind + '"}}\n</tool_call>'),
        ScriptedCompletion(text="done"),
    ]
    settings = EpisodeSettings(sampling_params={"max_new_tokens": 64}, max_tool_output_tokens=None)
    client = AsyncOpenReward(api_key="local")
    task = TaskRef(
        "ChunkBoundary",
        "train",
        index=0,
        base_url=chunk_server.base_url,
        variant=chunk_server.variant_for("ChunkBoundary"),
    )
    try:
        if listed_first:
            config = parse_config(
                {
                    "env_base_url": chunk_server.base_url,
                    "environments": {"ChunkBoundary": {"variant": task.variant, "splits": ["train"]}},
                }
            )
            assert [t.index for t in await list_tasks(client, config)] == [0]
        async with SGLangTestServer(qwen3_tokenizer, script=script) as model:
            engine = SGLangEngine(model.url)
            try:
                trajectory = await run_episode(
                    lambda: ToolEpisode(engine, ChatRenderer(qwen3_tokenizer), get_parser("hermes"), settings),
                    client,
                    task,
                    attempts=1,
                )
            finally:
                await engine.aclose()
    finally:
        await client.environments.aclose()
    assert trajectory.stop_reason.value == "no_tool_call" and len(model.requests) == 2, (
        trajectory.stop_detail
    )  # the plain "done"
    seen = trajectory.turns[0].tool_results[0].text
    assert len(seen) == len(expected) and seen == expected
    assert expected in qwen3_tokenizer.decode(model.requests[1].input_ids)  # the next prompt holds it exactly


SSE_BLOCKS = [
    b"\xef\xbb\xbf: ping\r\n\r\nevent: task_id\r\ndata: t1\r\n\r",  # a BOM; a comment; CRLF split between writes
    b"\nevent: chunk\ndata:   three spaces, one removed\n\n",
    b"event: chunk\rdata:no space\r\r",  # lone CRs end lines
    b"event: end\ndata: first\ndata:\ndata:  last\n\n",  # data lines join with newlines
    b"event: ignored-without-data\n\ndata: plain message\n\nevent: unfinished\ndata: cut",  # no blank line: not dispatched
]


async def test_events_are_parsed_as_the_sse_specification_says() -> None:
    """Over a real HTTP stream written in the blocks above."""

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for block in SSE_BLOCKS:
            await response.write(block)
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/events", stream)
    async with serve_app(app) as base:
        async with aiohttp.ClientSession(base, response_class=DrainingResponse) as http:
            async with http.get("/events") as response:
                events = [event async for event in parse_sse_events(response)]
    assert events == [
        ("task_id", "t1"),
        ("chunk", "  three spaces, one removed"),
        ("chunk", "no space"),
        ("end", "first\n\n last"),
        ("message", "plain message"),
    ]


async def test_the_terminal_tool_is_read_from_the_tool_listing_not_a_second_one(
    example_env_specs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An episode lists the tools, then asks for the terminal tool: one listing request, and the same
    terminal tool as a session that asks for it alone (the SDK's own listing)."""
    listings: list[str] = []
    request = aiohttp.ClientSession._request

    def counting(self: aiohttp.ClientSession, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
        if str(url).endswith("tools"):
            listings.append(str(url))
        return request(self, method, url, *args, **kwargs)

    monkeypatch.setattr(aiohttp.ClientSession, "_request", counting)
    with serve_environments([example_env_specs["ClosestGuess"]], subprocess=True) as server:
        client = AsyncOpenReward(api_key="local")
        task = TaskRef(
            "ClosestGuess", "train", index=0, variant=server.variant_for("ClosestGuess"), base_url=server.base_url
        )
        try:
            async with open_session(client, task, liveness=False) as session:
                tools = await session.tools()
                terminal = await session.terminal_tool()
                assert await session.terminal_tool() is terminal
            assert len(listings) == 1
            async with open_session(client, task, liveness=False) as session:
                alone = await session.terminal_tool()
            assert len(listings) == 2
        finally:
            await client.environments.aclose()
    assert terminal is not None and terminal == alone and isinstance(tools, list)

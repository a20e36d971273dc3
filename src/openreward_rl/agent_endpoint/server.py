"""`AgentEndpoint`: an OpenAI-compatible Chat Completions server in front of an `Engine`, one URL per episode.

Routes (aiohttp, on `host:port`; port 0 picks a free one):

- `POST /episodes/{key}/v1/chat/completions`: the episode's model calls (`EpisodeRecorder`), non-streamed or
  streamed as server-sent events;
- `GET /episodes/{key}/v1/models`: the one model, for clients that list them first;
- `POST /episodes/{key}/tools/{name}`: run a tool on the episode's OpenReward session (the JSON body is its
  arguments), for agents in another process; answers `{"text", "reward", "finished", "error"}`.

An agent gets `endpoint.base_url(key)` as its OpenAI base URL. With `api_key` set, every request must carry
it as `Authorization: Bearer ...` (HTTP 401 otherwise). Refusals are HTTP 400 in the API's error shape,
naming the field; an unknown episode is 404; an engine failure 503 (the episode then reports it).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
from aiohttp import web

from openreward_rl.agent_endpoint.openai_shape import BadRequest, ChatRequest, completion_body, stream_chunks
from openreward_rl.agent_endpoint.recorder import EndpointFault, EpisodeRecorder, RecorderSettings
from openreward_rl.engines.base import Engine
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.parsers.base import ToolParser

__all__ = ["AgentEndpoint", "ToolRunner"]

# (tool name, arguments) -> the API's answer for the agent: {"text", "reward", "finished", "error"}
ToolRunner = Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]


def _error(
    status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None, param: str | None = None
) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": param, "code": code}}, status=status)


@attrs.define(eq=False)
class AgentEndpoint:
    """Serves episodes' model calls through `engine`, rendered by `renderer` and parsed by `parser`.

    >>> endpoint = AgentEndpoint(engine=None, renderer=None, parser=None, port=8123)
    >>> endpoint.base_url("ep1")
    'http://127.0.0.1:8123/episodes/ep1/v1'
    """

    engine: Engine
    renderer: ChatRenderer
    parser: ToolParser
    settings: RecorderSettings = attrs.field(factory=RecorderSettings)
    model_name: str = "openreward-rl-policy"
    api_key: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    episodes: dict[str, EpisodeRecorder] = attrs.field(factory=dict)
    _tool_runners: dict[str, ToolRunner] = attrs.field(factory=dict)
    _runner: web.AppRunner | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _start_lock: asyncio.Lock | None = None

    def base_url(self, key: str) -> str:
        return f"http://{self.host}:{self.port}/episodes/{key}/v1"

    def tools_url(self, key: str) -> str:
        return f"http://{self.host}:{self.port}/episodes/{key}/tools"

    def open_episode(
        self,
        key: str | None = None,
        *,
        tool_runner: ToolRunner | None = None,
        parser: ToolParser | None = None,
        settings: RecorderSettings | None = None,
        engine: Engine | None = None,
    ) -> EpisodeRecorder:
        """A new episode's recorder, served at `base_url(key)`; `parser`, `settings` and `engine` (the hooks give each
        training episode its own, wrapping the process's) replace the endpoint's for it."""
        key = key or uuid.uuid4().hex
        if key in self.episodes:
            raise ValueError(f"episode {key!r} is already open on this endpoint")
        recorder = self.episodes[key] = EpisodeRecorder(
            key, engine or self.engine, self.renderer, parser or self.parser, settings or self.settings
        )
        if tool_runner is not None:
            self._tool_runners[key] = tool_runner
        return recorder

    def close_episode(self, key: str) -> EpisodeRecorder:
        """The episode's record; its URL answers 404 from now on."""
        self._tool_runners.pop(key, None)
        recorder = self.episodes.pop(key)
        recorder.close()
        return recorder

    async def ensure_started(self) -> None:
        """Start serving on the running event loop unless it already does (an endpoint a builder made
        before any loop ran starts with its first episode)."""
        loop = asyncio.get_running_loop()
        if self._runner is not None and self._loop is loop:
            return
        if self._start_lock is None or self._loop is not loop:
            self._start_lock, self._loop, self._runner = asyncio.Lock(), loop, None
        async with self._start_lock:
            if self._runner is None:
                await self.start()

    async def start(self) -> AgentEndpoint:
        self._loop = asyncio.get_running_loop()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/episodes/{key}/v1/chat/completions", self._completions)
        app.router.add_get("/episodes/{key}/v1/models", self._models)
        app.router.add_post("/episodes/{key}/tools/{name}", self._tool)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]  # the one it got where it asked for any (0)
        return self

    def serving_on(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether it serves on `loop` (started there and not closed)."""
        return self._runner is not None and self._loop is loop

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> AgentEndpoint:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _authorized(self, request: web.Request) -> bool:
        return self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}"

    def _recorder(self, request: web.Request) -> EpisodeRecorder | web.Response:
        if not self._authorized(request):
            return _error(401, "invalid API key for this endpoint", kind="authentication_error", code="invalid_api_key")
        key = request.match_info["key"]
        recorder = self.episodes.get(key)
        if recorder is None:
            return _error(404, f"no episode {key!r} is open on this endpoint", code="episode_not_found")
        return recorder

    async def _models(self, request: web.Request) -> web.Response:
        found = self._recorder(request)
        if isinstance(found, web.Response):
            return found
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "openreward-rl"}],
            }
        )

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        found = self._recorder(request)
        if isinstance(found, web.Response):
            return found
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the request body is not JSON")
        try:
            chat = ChatRequest.parse(body)
            choices = await found.complete(chat)
        except BadRequest as error:
            return web.json_response(error.body(), status=400)
        except EndpointFault as fault:
            return _error(503, str(fault), kind="server_error", code="engine_failed")
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        model = body.get("model") or self.model_name
        if not chat.stream:
            return web.json_response(
                completion_body(completion_id, model, choices), dumps=lambda o: json.dumps(o, ensure_ascii=False)
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event in stream_chunks(completion_id, model, choices, include_usage=chat.include_usage):
            await response.write(event.encode())
        await response.write_eof()
        return response

    async def _tool(self, request: web.Request) -> web.Response:
        found = self._recorder(request)
        if isinstance(found, web.Response):
            return found
        runner = self._tool_runners.get(found.key)
        if runner is None:
            return _error(404, f"episode {found.key!r} runs no tools through this endpoint", code="no_tools")
        try:
            arguments = await request.json() if request.can_read_body else {}
        except ValueError:
            return _error(400, "the tool arguments are not JSON")
        if not isinstance(arguments, Mapping):
            return _error(400, "the tool arguments must be a JSON object")
        try:
            answer = await runner(request.match_info["name"], arguments)
        except Exception as error:  # the environment failed: the episode reports it; the agent learns the call failed
            return _error(
                503,
                f"the tool call failed: {type(error).__name__}: {error}",
                kind="server_error",
                code="environment_failed",
            )
        return web.json_response(dict(answer))

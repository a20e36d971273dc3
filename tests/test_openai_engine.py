"""OpenAIChatEngine against a local aiohttp server on 127.0.0.1 that speaks the Chat Completions wire
format (a faithful test double: real OpenAI-compatible servers cannot run here). It records each
request body and answers from a script, so the tests see exactly what the engine sends."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from local_http import serve_app
from openreward_rl.assets import load_tokenizer
from openreward_rl.engines import ContextLengthError, EngineError, FinishReason, GenerationRequest
from openreward_rl.engines.base import EngineRequestError
from openreward_rl.engines.openai_chat import OpenAIChatEngine

pytestmark = pytest.mark.anyio

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "math",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


class ChatServer:
    """Answers POST /v1/chat/completions with scripted (status, body) pairs, else from `answer(body)`
    when set; records requests."""

    def __init__(self) -> None:
        self.script: list[tuple[int, Any]] = []
        self.answer: Callable[[dict[str, Any]], tuple[int, Any]] | None = None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(await request.json())
        self.headers.append(dict(request.headers))
        status, body = self.script.pop(0) if self.script or self.answer is None else self.answer(self.requests[-1])
        return web.json_response(body, status=status)


def completion(message: dict[str, Any], finish: str = "stop", logprobs: Any = None) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish, "logprobs": logprobs}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [choice],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
    }


@pytest.fixture
async def server() -> AsyncIterator[ChatServer]:
    async with serve_chat() as chat:
        yield chat


@contextlib.asynccontextmanager
async def serve_chat() -> AsyncIterator[ChatServer]:
    """A `ChatServer` on 127.0.0.1 (an ephemeral port) for the duration of the block."""
    chat = ChatServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat.handle)
    async with serve_app(app) as base:
        chat.url = f"{base}/v1"
        yield chat


@pytest.fixture
def tokenizer():
    return load_tokenizer("offline:qwen3")


def request(**sampling: Any) -> GenerationRequest:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+3?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "use the tool",
            "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "2+3"}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "name": "calculator", "content": "5"},
    ]
    return GenerationRequest(
        input_ids=[1],
        sampling_params=sampling or {"max_new_tokens": 64, "temperature": 0.5},
        messages=messages,
        tools=TOOLS,
    )


async def test_tool_calls_come_back_parsed_and_ids_are_retokenized_not_exact(
    server: ChatServer, tokenizer, monkeypatch
) -> None:
    monkeypatch.setenv("TEST_CHAT_KEY", "sk-test")
    server.script.append(
        (
            200,
            completion(
                {
                    "content": "",
                    "reasoning_content": "again",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "calculator", "arguments": '{"expression": "5*2"}'},
                        }
                    ],
                },
                finish="tool_calls",
            ),
        )
    )
    engine = OpenAIChatEngine(server.url, "some-model", tokenizer, api_key_env="TEST_CHAT_KEY")
    try:
        generation = await engine.generate(request())
    finally:
        await engine.aclose()
    sent = server.requests[0]
    assert (
        sent["model"] == "some-model"
        and sent["max_tokens"] == 64
        and sent["temperature"] == 0.5
        and sent["tools"] == TOOLS
    )
    assert (
        sent["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"expression": "2+3"}'
    )  # JSON string on the wire
    assert "reasoning_content" not in sent["messages"][2] and "name" not in sent["messages"][3]
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    assert generation.token_exact is False and generation.finish_reason is FinishReason.STOP
    assert generation.parsed is not None and generation.parsed.reasoning == "again"
    [call] = generation.parsed.tool_calls
    assert (call.name, call.arguments, call.id) == ("calculator", {"expression": "5*2"}, "c1")
    text = tokenizer.decode(generation.output_ids)
    assert text.endswith("<|im_end|>") and "<tool_call>" in text and "5*2" in text
    assert generation.logprobs == (0.0,) * len(generation.output_ids)


async def test_plain_answer_cut_at_length_has_no_end_of_turn(server: ChatServer, tokenizer) -> None:
    server.script.append((200, completion({"content": "The answer is"}, finish="length")))
    engine = OpenAIChatEngine(server.url, "m", tokenizer, api_key_env="UNSET_KEY_FOR_TEST")
    try:
        generation = await engine.generate(request())
    finally:
        await engine.aclose()
    assert "Authorization" not in server.headers[0]
    assert generation.finish_reason is FinishReason.LENGTH
    assert tokenizer.decode(generation.output_ids).endswith("The answer is")
    assert generation.parsed.content == "The answer is" and not generation.parsed.tool_calls


async def test_logprobs_are_used_only_when_they_line_up_with_the_ids(server: ChatServer, tokenizer) -> None:
    engine = OpenAIChatEngine(server.url, "m", tokenizer)
    server.script.append(
        (200, completion({"content": "Five."}, logprobs={"content": [{"token": "Five", "logprob": -0.5}]}))
    )
    try:
        first = await engine.generate(request())
        # Qwen3's template renders the turn with an empty think block: those ids, not the API's tokens
        assert tokenizer.decode(first.output_ids) == "<think>\n\n</think>\n\nFive.<|im_end|>"
        assert first.logprobs == (0.0,) * len(first.output_ids)
        lined_up = {"content": [{"token": "t", "logprob": -0.5}] * len(first.output_ids)}
        server.script.append((200, completion({"content": "Five."}, logprobs=lined_up)))
        second = await engine.generate(request())
    finally:
        await engine.aclose()
    assert second.output_ids == first.output_ids and second.logprobs == (-0.5,) * len(first.output_ids)


async def test_bad_tool_call_arguments_become_parse_errors(server: ChatServer, tokenizer) -> None:
    server.script.append(
        (
            200,
            completion(
                {
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{not json"}}
                    ],
                },
                finish="tool_calls",
            ),
        )
    )
    engine = OpenAIChatEngine(server.url, "m", tokenizer)
    try:
        generation = await engine.generate(request())
    finally:
        await engine.aclose()
    [error] = generation.parsed.errors
    assert error.kind.value == "invalid_json" and error.call_id == "c1" and not generation.parsed.tool_calls


async def test_transient_errors_are_retried_then_client_errors_are_not(server: ChatServer, tokenizer) -> None:
    server.script += [(503, {"error": {"message": "overloaded"}}), (200, completion({"content": "ok"}))]
    engine = OpenAIChatEngine(server.url, "m", tokenizer, max_attempts=3)
    try:
        generation = await engine.generate(request())
        assert generation.parsed.content == "ok" and len(server.requests) == 2
        server.script.append((400, {"error": {"message": "This model's maximum context length is 4096 tokens"}}))
        with pytest.raises(ContextLengthError, match="maximum context length"):
            await engine.generate(request())
        server.script.append((401, {"error": {"message": "Incorrect API key"}}))
        with pytest.raises(EngineRequestError, match=r"HTTP 401: Incorrect API key \(is \$OPENAI_API_KEY set\?\)"):
            await engine.generate(request())
        server.script += [(500, {"error": "boom"})] * 3
        with pytest.raises(EngineError, match="failed 3 times"):
            await engine.generate(request())
    finally:
        await engine.aclose()
    assert len(server.requests) == 7


def test_unknown_sampling_params_and_missing_messages_are_refused(tokenizer) -> None:
    engine = OpenAIChatEngine("http://127.0.0.1:1/v1", "m", tokenizer)
    with pytest.raises(ValueError, match="cannot send the sampling parameter 'min_p'"):
        engine.payload(request(min_p=0.1))
    with pytest.raises(ValueError, match="needs request.messages"):
        engine.payload(GenerationRequest(input_ids=[1], sampling_params={}))
    assert json.dumps(engine.payload(request(top_k=-1, max_new_tokens=3))).count("top_k") == 0


def test_stop_ids_leave_end_of_turn_to_the_endpoint_and_send_the_rest_as_stop_strings(tokenizer) -> None:
    """Chat Completions has no stop ids: special tokens (the family's end-of-turn closers) are the
    endpoint's own business, other ids go out as their text next to the given `stop` strings."""
    engine = OpenAIChatEngine("http://127.0.0.1:1/v1", "m", tokenizer)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    [word] = tokenizer.encode("END", add_special_tokens=False)
    assert "stop" not in engine.payload(request(max_new_tokens=8, stop_token_ids=[im_end]))
    body = engine.payload(request(max_new_tokens=8, stop_token_ids=[im_end, word], stop=["###", "END"]))
    assert body["stop"] == ["###", "END"] and "stop_token_ids" not in body
    assert engine.payload(request(stop="###", stop_token_ids=[word]))["stop"] == ["###", "END"]
    with pytest.raises(ValueError, match="stop_token_ids must be a list of token ids"):
        engine.payload(request(stop_token_ids="<|im_end|>"))

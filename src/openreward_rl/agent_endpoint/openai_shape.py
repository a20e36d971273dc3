"""The Chat Completions wire shape: a request read and checked (`ChatRequest.parse`), and the answers
written as the OpenAI API writes them (`completion_body`, `stream_chunks`).

>>> request = ChatRequest.parse({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stop": "END"})
>>> request.max_tokens, request.stop, request.tool_choice
(8, ('END',), 'auto')
>>> try:
...     ChatRequest.parse({"messages": [{"role": "user", "content": "Hi"}], "tool_choice": {"type": "function", "function": {"name": "f"}}})
... except BadRequest as error:
...     print(error.param, error)
tool_choice tool_choice naming one function is not supported by this endpoint (only 'auto', 'none' and 'required')
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.engines.base import FinishReason
from openreward_rl.parsers.base import ParsedTurn

__all__ = ["BadRequest", "ChatRequest", "Choice", "completion_body", "openai_message", "stream_chunks"]

TOOL_CHOICES = ("auto", "none", "required")
ROLES = ("system", "developer", "user", "assistant", "tool")
# Fields of the request this endpoint reads; the rest of the OpenAI API's is refused where it changes
# what is sampled (it cannot be honoured), accepted and ignored where it does not.
IGNORED_FIELDS = frozenset(
    {
        "model",
        "user",
        "metadata",
        "store",
        "stream_options",
        "parallel_tool_calls",
        "service_tier",
        "seed",
        "logprobs",
        "top_logprobs",
    }
)
READ_FIELDS = frozenset(
    {
        "messages",
        "tools",
        "tool_choice",
        "n",
        "stop",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stream",
    }
)


class BadRequest(ValueError):
    """A request this endpoint refuses (HTTP 400): `param` names the field, the message the problem."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": str(self), "type": "invalid_request_error", "param": self.param, "code": self.code}
        }


def _number(body: Mapping[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise BadRequest(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}", param=name)
    return float(value)


def _positive_int(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{name} must be a positive integer, got {value!r}", param=name)
    return value


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise BadRequest("messages must be a non-empty list of chat messages", param="messages")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, Mapping) or message.get("role") not in ROLES:
            raise BadRequest(
                f"messages[{index}] must be an object whose role is one of {', '.join(ROLES)}",
                param=f"messages[{index}]",
            )
        messages.append(dict(message))
    if messages[-1]["role"] == "assistant":
        raise BadRequest(
            "the last message is the assistant's: continuing a pre-filled assistant turn is not supported",
            param="messages",
        )
    return messages


def _tools(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest("tools must be a list of function tools", param="tools")
    for index, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if (
            not isinstance(tool, Mapping)
            or tool.get("type") != "function"
            or not isinstance(function, Mapping)
            or not function.get("name")
        ):
            raise BadRequest(
                f"tools[{index}] must be {{'type': 'function', 'function': {{'name': ..., ...}}}}",
                param=f"tools[{index}]",
            )
    return [dict(t) for t in value]


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = (value,) if isinstance(value, str) else value
    if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise BadRequest(f"stop must be a non-empty string or a list of up to 4 of them, got {value!r}", param="stop")
    return tuple(stops)


@attrs.frozen
class ChatRequest:
    """One `/v1/chat/completions` request, checked."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = attrs.field(factory=list)
    tool_choice: str = "auto"
    n: int = 1
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    include_usage: bool = False

    @classmethod
    def parse(cls, body: Any) -> ChatRequest:
        if not isinstance(body, Mapping):
            raise BadRequest("the request body must be a JSON object")
        unknown = sorted(set(body) - READ_FIELDS - IGNORED_FIELDS)
        refused = [name for name in unknown if body.get(name) not in (None, False, 0, {}, [])]
        if refused:
            raise BadRequest(f"{', '.join(refused)}: not supported by this endpoint", param=refused[0])
        tool_choice = body.get("tool_choice") or "auto"
        if isinstance(tool_choice, Mapping):
            raise BadRequest(
                "tool_choice naming one function is not supported by this endpoint (only 'auto', 'none' and 'required')",
                param="tool_choice",
            )
        if tool_choice not in TOOL_CHOICES:
            raise BadRequest(
                f"tool_choice must be one of {', '.join(TOOL_CHOICES)}, got {tool_choice!r}", param="tool_choice"
            )
        tools = _tools(body.get("tools"))
        if tool_choice == "required" and not tools:
            raise BadRequest("tool_choice 'required' needs tools", param="tool_choice")
        max_tokens = _positive_int(body, "max_completion_tokens") or _positive_int(body, "max_tokens")
        options = body.get("stream_options") or {}
        return cls(
            messages=_messages(body.get("messages")),
            tools=tools,
            tool_choice=tool_choice,
            n=_positive_int(body, "n") or 1,
            stop=_stop(body.get("stop")),
            max_tokens=max_tokens,
            temperature=_number(body, "temperature", 0.0, 2.0),
            top_p=_number(body, "top_p", 0.0, 1.0),
            stream=bool(body.get("stream")),
            include_usage=bool(isinstance(options, Mapping) and options.get("include_usage")),
        )


@attrs.frozen
class Choice:
    """One sampled answer: the assistant message the agent gets, why it ended, and its token counts."""

    message: dict[str, Any]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


def openai_message(parsed: ParsedTurn, *, with_calls: bool = True) -> dict[str, Any]:
    """The assistant message of a parsed turn in the API's shape: arguments as JSON strings; content None
    beside tool calls when empty (as the API writes it); the reasoning as `reasoning_content`."""
    calls = (
        [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
            for c in parsed.tool_calls
        ]
        if with_calls
        else []
    )
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content if parsed.content or not calls else None}
    if calls:
        message["tool_calls"] = calls
    if parsed.reasoning:
        message["reasoning_content"] = parsed.reasoning
    return message


def finish_reason(engine_finish: FinishReason, message: Mapping[str, Any]) -> str:
    if engine_finish is FinishReason.LENGTH:
        return "length"
    return "tool_calls" if message.get("tool_calls") else "stop"


def _usage(choices: Sequence[Choice]) -> dict[str, int]:
    prompt = choices[0].prompt_tokens if choices else 0
    completion = sum(c.completion_tokens for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_body(completion_id: str, model: str, choices: Sequence[Choice]) -> dict[str, Any]:
    """A non-streamed `chat.completion` object."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": i, "message": c.message, "logprobs": None, "finish_reason": c.finish_reason}
            for i, c in enumerate(choices)
        ],
        "usage": _usage(choices),
    }


def stream_chunks(
    completion_id: str, model: str, choices: Sequence[Choice], *, include_usage: bool = False
) -> Iterator[str]:
    """The server-sent events of a streamed answer, as the API sends them: per choice a role chunk, the
    content, each tool call (id, name, then its arguments), a chunk with the finish reason; then the
    usage chunk where asked for, and `[DONE]`."""
    created = int(time.time())

    def event(delta: Mapping[str, Any], index: int, finish: str | None = None) -> str:
        chunk = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    for index, choice in enumerate(choices):
        message = choice.message
        yield event({"role": "assistant", "content": ""}, index)
        if message.get("reasoning_content"):
            yield event({"reasoning_content": message["reasoning_content"]}, index)
        if message.get("content"):
            yield event({"content": message["content"]}, index)
        for number, call in enumerate(message.get("tool_calls") or ()):
            head = {
                "index": number,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            yield event({"tool_calls": [head]}, index)
            yield event(
                {"tool_calls": [{"index": number, "function": {"arguments": call["function"]["arguments"]}}]}, index
            )
        yield event({}, index, choice.finish_reason)
    if include_usage:
        usage = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": _usage(choices),
        }
        yield f"data: {json.dumps(usage)}\n\n"
    yield "data: [DONE]\n\n"

"""`OpenAIChatEngine`: evaluate hosted models through an OpenAI-compatible `/v1/chat/completions` endpoint.

The episode's messages and tools go out as Chat Completions JSON; the reply's `content`,
`reasoning_content` and structured `tool_calls` come back as a `ParsedTurn`, so no text parser is
needed. A chat API returns text, not the sampled token ids: `output_ids` are re-tokenized with the
episode's tokenizer (the assistant turn as its chat template renders it, through its end-of-turn
token), log-probs are 0.0 unless the reply's `logprobs` line up one-to-one with those ids, and every
`Generation` says `token_exact=False`. Trajectories from this engine are therefore never trainable.

Stop ids (`stop_token_ids`, which every episode of a known model family sends: the family's
end-of-turn tokens) are not a Chat Completions parameter. A chat endpoint renders the chat template
itself and ends the assistant turn on the model's end-of-turn tokens; the reply's `content` never
holds special tokens. So ids that are special tokens (they decode to nothing with
`skip_special_tokens=True`) are left to the endpoint, and any other id goes out as a `stop` string
(its decoded text), next to any `stop` strings given.

Errors: HTTP 400 mentioning the context length -> `ContextLengthError`; other 4xx -> `EngineRequestError`
(not retried); connection errors, timeouts, 429 and 5xx are retried with backoff, then -> `EngineError`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import aiohttp
import attrs

from openreward_rl.engines.base import (
    ContextLengthError,
    EngineError,
    EngineRequestError,
    FinishReason,
    Generation,
    GenerationRequest,
)
from openreward_rl.engines.sampling import UnsupportedSamplingError
from openreward_rl.errors import ConfigError
from openreward_rl.parsers.base import ParsedTurn, ParseError, ParseErrorKind, ToolCall
from openreward_rl.retry import RetryPolicy, call_with_retries

__all__ = ["OpenAIChatEngine", "parse_chat_completion"]

CHAT_FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.STOP,
    "function_call": FinishReason.STOP,
    "length": FinishReason.LENGTH,
}
_CONTEXT_MARKERS = ("context length", "context_length", "context window", "maximum context", "too many tokens")
# SGLang-style sampling key -> Chat Completions field. `top_k` is an extension most open servers accept.
_SAMPLING_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "sampling_seed": "seed",
}
_TEXT_ONLY_KEYS = frozenset({"skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim"})


class _Transient(Exception):
    """Worth retrying: connection error, timeout, HTTP 429 or 5xx."""


def parse_chat_completion(body: Any) -> tuple[ParsedTurn, str, FinishReason, Any]:
    """(parsed turn, content, finish reason, logprobs.content or None) from a Chat Completions body.

    >>> body = {"choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "content": None,
    ...     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\\"a\\": 1}"}}]}}]}
    >>> parsed, content, finish, _ = parse_chat_completion(body)
    >>> parsed.tool_calls[0].name, parsed.tool_calls[0].arguments, finish.value
    ('add', {'a': 1}, 'stop')
    """
    try:
        choice = body["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise EngineError(f"chat completion without choices[0].message: {str(body)[:300]}") from None
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    reasoning = message.get("reasoning_content") or message.get("reasoning") or None
    calls: list[ToolCall] = []
    errors: list[ParseError] = []
    for index, raw in enumerate(message.get("tool_calls") or []):
        function = raw.get("function") or {}
        name = function.get("name")
        call_id = raw.get("id") or f"call_{index}"
        arguments = function.get("arguments")
        if not name:
            errors.append(
                ParseError(
                    ParseErrorKind.MISSING_NAME, "a tool call without a function name", json.dumps(raw), None, call_id
                )
            )
            continue
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as error:
                errors.append(
                    ParseError(
                        ParseErrorKind.INVALID_JSON,
                        f"arguments of {name} are not valid JSON: {error}",
                        function.get("arguments", ""),
                        name,
                        call_id,
                    )
                )
                continue
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            errors.append(
                ParseError(
                    ParseErrorKind.INVALID_ARGUMENTS,
                    f"arguments of {name} must be a JSON object",
                    json.dumps(arguments),
                    name,
                    call_id,
                )
            )
            continue
        calls.append(ToolCall(name, arguments, call_id))
    finish = CHAT_FINISH_REASONS.get(choice.get("finish_reason") or "stop", FinishReason.STOP)
    logprobs = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), Mapping) else None
    return (
        ParsedTurn(content=content, reasoning=reasoning, tool_calls=tuple(calls), errors=tuple(errors)),
        content,
        finish,
        logprobs,
    )


def _wire_message(message: Mapping[str, Any], send_reasoning: bool) -> dict[str, Any]:
    """One message in Chat Completions wire form: tool-call arguments as JSON strings, no private keys."""
    wire = {k: v for k, v in message.items() if k in ("role", "content", "name", "tool_call_id", "tool_calls")}
    if send_reasoning and message.get("reasoning_content"):
        wire["reasoning_content"] = message["reasoning_content"]
    if wire.get("role") == "tool":
        wire.pop("name", None)
    if wire.get("tool_calls"):
        calls = []
        for call in wire["tool_calls"]:
            function = dict(call.get("function") or {})
            if not isinstance(function.get("arguments"), str):
                function["arguments"] = json.dumps(function.get("arguments") or {}, ensure_ascii=False)
            calls.append({"id": call.get("id"), "type": "function", "function": function})
        wire["tool_calls"] = calls
    return wire


@attrs.define(eq=False)
class OpenAIChatEngine:
    """An `Engine` for one model behind an OpenAI-compatible server.

    - `base_url`: up to and including `/v1` (e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1).
    - `api_key_env`: the environment variable holding the key (read at each request; unset: no header).
    - `tokenizer`: the episode's tokenizer, used to re-tokenize replies (chat template included).
    - `max_tokens_field`: where `max_new_tokens` goes (`max_tokens`, or `max_completion_tokens`).
    - `extra_body`: merged into every request (e.g. `{"reasoning_effort": "low"}`).
    """

    # a vision-language family's images are refused at start-up (`loop.rollout.check_engine_reads_images`)
    reads_images: ClassVar[bool] = False
    images_refused: ClassVar[str] = (
        "it sends the conversation as text messages and re-tokenizes the reply; images would not be token-exact"
    )
    base_url: str
    model: str
    tokenizer: Any
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 600.0
    max_attempts: int = 4
    max_tokens_field: str = "max_tokens"
    send_reasoning: bool = False
    extra_body: Mapping[str, Any] = attrs.field(factory=dict)
    _sessions: dict[int, aiohttp.ClientSession] = attrs.field(init=False, factory=dict, repr=False)

    def __attrs_post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"OpenAIChatEngine.base_url must start with http:// or https://, got {self.base_url!r}")
        if self.max_attempts < 1:
            raise ConfigError(f"OpenAIChatEngine.max_attempts must be at least 1, got {self.max_attempts}")

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON body for one request; unsupported sampling keys raise `UnsupportedSamplingError`."""
        if request.messages is None:
            raise ValueError(f"{type(self).__name__} needs request.messages (the episode's chat history)")
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire_message(m, self.send_reasoning) for m in request.messages],
        }
        if request.tools:
            body["tools"] = list(request.tools)
        body.update(self.sampling_body(request.sampling_params))
        body.update(self.extra_body)
        return body

    def sampling_body(self, sampling_params: Mapping[str, Any]) -> dict[str, Any]:
        """The SGLang-style sampling params under their Chat Completions names."""
        body: dict[str, Any] = {}
        stops: list[str] = []  # the given `stop` strings, then those of `stop_token_ids`
        from_ids: list[str] = []
        for key, value in sampling_params.items():
            if value is None or key in _TEXT_ONLY_KEYS:
                continue
            if key == "stop":
                stops.extend([value] if isinstance(value, str) else value)
            elif key == "stop_token_ids":
                from_ids.extend(self.stop_strings(value))
            elif key == "max_new_tokens":
                body[self.max_tokens_field] = int(value)
            elif key == "top_k" and value == -1:
                continue
            elif key in _SAMPLING_FIELDS:
                body[_SAMPLING_FIELDS[key]] = value
            else:
                raise UnsupportedSamplingError(
                    f"OpenAIChatEngine cannot send the sampling parameter {key!r} "
                    f"(supported: max_new_tokens, stop, stop_token_ids, {', '.join(sorted(_SAMPLING_FIELDS))}; put others in extra_body)"
                )
        if stops or from_ids:
            body["stop"] = list(dict.fromkeys([*stops, *from_ids]))
        return body

    def stop_strings(self, stop_token_ids: Any) -> list[str]:
        """`stop_token_ids` as Chat Completions `stop` strings: special tokens (end of turn: the endpoint's
        own business, never in a reply's text) are dropped, other ids become their decoded text."""
        if isinstance(stop_token_ids, (str, bytes)) or not all(isinstance(i, int) for i in stop_token_ids):
            raise ValueError(f"stop_token_ids must be a list of token ids, got {stop_token_ids!r}")
        texts = (self.tokenizer.decode([token_id], skip_special_tokens=True) for token_id in stop_token_ids)
        return [text for text in texts if text]

    async def generate(self, request: GenerationRequest) -> Generation:
        reply = await self.post_with_retries(self.payload(request))
        parsed, content, finish, api_logprobs = parse_chat_completion(reply)
        output_ids = self._retokenize(request, parsed, finish)
        logprobs = (0.0,) * len(output_ids)
        if api_logprobs and len(api_logprobs) == len(output_ids):
            logprobs = tuple(float(item.get("logprob", 0.0)) for item in api_logprobs)
        meta = {"id": reply.get("id"), "usage": reply.get("usage"), "api_logprobs": len(api_logprobs or ())}
        return Generation(output_ids, logprobs, finish, text=content, token_exact=False, parsed=parsed, meta=meta)

    @property
    def retry_policy(self) -> RetryPolicy:
        """`max_attempts` tries with backoff (0.5 s doubling up to 10 s, up to 1 s of jitter)."""
        return RetryPolicy(attempts=self.max_attempts, initial_s=0.5, max_s=10.0, jitter_s=1.0)

    async def post_with_retries(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST `body` to /chat/completions under `retry_policy`; transient failures past it raise `EngineError`."""
        try:
            return await call_with_retries(
                lambda: self._post(body),
                self.retry_policy,
                what=f"{self.base_url}/chat/completions",
                retry_on=lambda error: isinstance(error, _Transient),
            )
        except _Transient as error:
            raise EngineError(f"{self.base_url}/chat/completions failed {self.max_attempts} times: {error}") from error

    def _retokenize(self, request: GenerationRequest, parsed: ParsedTurn, finish: FinishReason) -> tuple[int, ...]:
        """The assistant turn as the tokenizer's chat template renders it, cut after its end-of-turn token."""
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.reasoning:
            message["reasoning_content"] = parsed.reasoning
        if parsed.tool_calls:
            message["tool_calls"] = [c.to_openai() for c in parsed.tool_calls]
        eos = self.tokenizer.eos_token or ""
        text = None
        try:
            tools = list(request.tools) if request.tools else None
            before = self.tokenizer.apply_chat_template(
                list(request.messages or []), tools=tools, add_generation_prompt=True, tokenize=False
            )
            after = self.tokenizer.apply_chat_template(
                [*(request.messages or []), message], tools=tools, tokenize=False
            )
            if after.startswith(before):
                text = after[len(before) :]
        except Exception:  # a template that cannot render this turn: fall back to the plain text
            text = None
        if text is None:
            text = parsed.content + (eos if finish is FinishReason.STOP else "")
        elif eos and eos in text:
            text = text[: text.index(eos) + len(eos)]
        if finish is FinishReason.LENGTH and eos and text.endswith(eos):
            text = text[: -len(eos)]
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    def _client(self) -> aiohttp.ClientSession:
        loop_id = id(asyncio.get_running_loop())
        session = self._sessions.get(loop_id)
        if session is None or session.closed:
            session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
            self._sessions[loop_id] = session
        return session

    async def _post(self, body: Mapping[str, Any]) -> Any:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        url = f"{self.base_url}/chat/completions"
        try:
            async with self._client().post(url, json=body, headers=headers) as response:
                raw = await response.read()
                status = response.status
        except (TimeoutError, aiohttp.ClientError) as error:
            raise _Transient(f"{type(error).__name__}: {error}") from error
        if status == 429 or status >= 500:
            raise _Transient(f"HTTP {status}: {_error_text(raw)}")
        if status >= 400:
            message = _error_text(raw)
            if status == 400 and any(marker in message.lower() for marker in _CONTEXT_MARKERS):
                raise ContextLengthError(f"{url}: {message}")
            hint = f" (is ${self.api_key_env} set?)" if status in (401, 403) else ""
            raise EngineRequestError(f"{url}: HTTP {status}: {message}{hint}")
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            raise EngineError(f"{url}: the reply is not JSON: {raw[:200]!r}") from None

    async def aclose(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            if not session.closed:
                try:
                    await session.close()
                except RuntimeError:  # its event loop is gone
                    pass


def _error_text(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw[:300].decode("utf-8", "replace")
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(error, Mapping):
        return str(error.get("message") or error)
    return str(error or body)[:300]

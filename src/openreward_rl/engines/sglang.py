"""`SGLangEngine`: SGLang's native `/generate` over HTTP, token ids in, sampled ids and log-probs out.

One POST per model call:

    {"input_ids": [...], "sampling_params": {...caller's, unchanged...}, "return_logprob": true, "rid": ...}

The sampled ids and their log-probs are both read from `meta_info.output_token_logprobs`
(`[logprob, token_id, text]` entries), so they are aligned by construction; `output_ids` must agree.
The matched EOS / stop token is part of those ids (SGLang includes it); `Generation.matched_stop`
tells the caller so that it never appends another end-of-turn token.

Images (a vision-language family's `GenerationRequest.image_data`): `image_data` carries them as data
URLs, and `input_ids` hold one image pad per image (each run of pads collapsed): SGLang's Qwen-VL
processor expands a pad per image itself (it refuses pre-expanded runs on its fast path). The answer's
`meta_info.prompt_tokens` must then equal the expanded ids the episode records, or the request fails
with `EngineError` (SGLang's processor settings differ from the family's; the trajectory would not be
what the model saw).

Errors: HTTP 400 about the context length -> `ContextLengthError`; any other 4xx -> `EngineRequestError`
(never retried); connection errors, timeouts, 5xx and 429 are retried with exponential backoff and
jitter, then -> `EngineError` naming the URL and the number of attempts. A retried request carries
`rid` + `_r<n>`: SGLang may still hold the first attempt, and the gateway strips `_r<n>` when it pins
sessions, so the retry lands on the same worker and a prefix abort of `rid` still reaches it.

Example (against the test double; with a real server pass its URL):

>>> import asyncio
>>> from openreward_rl.assets import load_tokenizer
>>> from openreward_rl.engines import GenerationRequest
>>> from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
>>> async def demo():
...     tokenizer = load_tokenizer("offline:qwen3")
...     async with SGLangTestServer(tokenizer, script=[ScriptedCompletion(text="Hi!")]) as server:
...         engine = SGLangEngine(server.url)
...         try:
...             request = GenerationRequest(input_ids=[9707], sampling_params={"max_new_tokens": 8})
...             generation = await engine.generate(request)
...         finally:
...             await engine.aclose()
...     return tokenizer.decode(generation.output_ids), generation.finish_reason.value
>>> asyncio.run(demo())
('Hi!<|im_end|>', 'stop')
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import aiohttp
import attrs

from openreward_rl._limits import pool_limit
from openreward_rl.engines.base import (
    ContextLengthError,
    EncodedIds,
    EngineError,
    EngineRequestError,
    FinishReason,
    Generation,
    GenerationRequest,
)
from openreward_rl.errors import ConfigError
from openreward_rl.families.vision import one_pad_per_image
from openreward_rl.retry import RetryPolicy, call_with_retries

__all__ = ["SGLangEngine", "ROUTING_HEADER", "parse_generate_response"]

ROUTING_HEADER = "X-SMG-Routing-Key"
_NAN_STOP = "NaN happened"
_CONTEXT_LENGTH_MARKERS = ("context length", "context_length", "context window")
_JSON_HEADERS = {"Content-Type": "application/json"}
_FINISH_TYPES = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}


class _TransientError(Exception):
    """A failure worth retrying: connection error, timeout, HTTP 5xx or 429."""


def _positive(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"SGLangEngine.{attribute.name} must be > 0, got {value!r}")


@attrs.define(eq=False)
class SGLangEngine:
    """Token-in/token-out client for one SGLang server or router (`base_url`, e.g. http://127.0.0.1:30000).

    `session`: an aiohttp session to share (the caller closes it; every request then goes through it).
    Without one the engine opens its own aiohttp session per event loop and `aclose()` closes it.
    `timeout_s` bounds one HTTP attempt (the wait for a connection, the connect and the answer);
    `connect_timeout_s` bounds the connect; `max_attempts` bounds the attempts on transient faults.
    `max_connections` caps the connections of the engine's own session, so the requests in flight
    (0: no cap of its own, since rollouts keep thousands of requests in flight; it is then 40% of the
    process's open-file limit, `_limits.pool_limit`, so that requests past it wait for a connection
    instead of failing to open one).
    """

    base_url: str = attrs.field(converter=lambda url: str(url).rstrip("/"))
    session: aiohttp.ClientSession | None = None
    timeout_s: float = attrs.field(default=600.0, validator=_positive)
    connect_timeout_s: float = attrs.field(default=10.0, validator=_positive)
    max_attempts: int = attrs.field(default=4, validator=_positive)
    backoff_initial_s: float = attrs.field(default=0.5, validator=_positive)
    backoff_max_s: float = attrs.field(default=10.0, validator=_positive)
    max_connections: int = 0

    _generate_url: str = attrs.field(init=False)
    _abort_url: str = attrs.field(init=False)
    _timeout: aiohttp.ClientTimeout = attrs.field(init=False)
    _own_session: aiohttp.ClientSession | None = attrs.field(default=None, init=False)
    _own_loop: asyncio.AbstractEventLoop | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"SGLangEngine.base_url must start with http:// or https://, got {self.base_url!r}")
        self._generate_url = self.base_url + "/generate"
        self._abort_url = self.base_url + "/abort_request"
        self._timeout = aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=self.connect_timeout_s)

    # ------------------------------------------------------------------ public API

    async def generate(self, request: GenerationRequest) -> Generation:
        """POST /generate once (plus bounded retries on transient faults) and parse the answer."""
        payload: dict[str, Any] = {
            "sampling_params": _as_json_dict(request.sampling_params),
            "return_logprob": True,
        }
        if request.image_data:
            if request.image_token_id is None:
                raise EngineRequestError(
                    "a request with image_data needs image_token_id (the pad each image's run is made of)"
                )
            ids_json = json.dumps(one_pad_per_image(request.input_ids, request.image_token_id))
            payload["image_data"] = list(request.image_data)
        else:
            ids_json = _ids_json(request.input_ids)
        headers = {ROUTING_HEADER: request.routing_key} if request.routing_key is not None else None
        if request.request_id is not None:
            payload["rid"] = request.request_id
        body = await self._generate_with_retries(payload, ids_json, headers, request.request_id)
        generation = parse_generate_response(body, url=self._generate_url)
        if request.image_data:
            _check_image_expansion(generation, len(request.input_ids), self._generate_url)
        return generation

    async def abort(self, request_id: str) -> None:
        """Abort in-flight requests whose rid starts with `request_id` (SGLang matches by prefix).

        The aborted `generate` call returns normally with finish ABORT and the partial output.
        """
        if not request_id:
            raise ValueError("abort needs a non-empty request_id (an empty rid is ignored by SGLang)")
        await self._post_abort({"rid": request_id})

    async def abort_all(self) -> None:
        """Abort every in-flight request on the server (Slime does this at the end of a rollout step)."""
        await self._post_abort({"abort_all": True})

    async def aclose(self) -> None:
        """Close the engine's own session; a session passed in stays open."""
        owned, loop = self._own_session, self._own_loop
        self._own_session = self._own_loop = None
        if owned is not None:
            await _close_session(owned, loop)

    # ------------------------------------------------------------------ internals

    async def _generate_with_retries(
        self, payload: dict[str, Any], ids_json: str, headers: Mapping[str, str] | None, rid: str | None
    ) -> Any:
        """POST /generate under the engine's `RetryPolicy`; retries get the rid `<rid>_r<n>`."""
        attempts = 0

        async def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            if rid is not None and attempts > 1:
                payload["rid"] = f"{rid}_r{attempts - 1}"
            return await self._post_generate(payload, ids_json, headers)

        try:
            return await call_with_retries(
                attempt,
                self.retry_policy,
                what=f"SGLang {self._generate_url}",
                retry_on=lambda error: isinstance(error, _TransientError),
            )
        except _TransientError as error:
            raise EngineError(
                f"SGLang {self._generate_url} failed after {attempts} attempt(s) "
                f"(max_attempts={self.max_attempts}): {error}"
            ) from error

    @property
    def retry_policy(self) -> RetryPolicy:
        """`max_attempts` tries, backoff from `backoff_initial_s` doubling up to `backoff_max_s`, as much jitter as the first wait."""
        return RetryPolicy(
            attempts=self.max_attempts,
            initial_s=self.backoff_initial_s,
            max_s=self.backoff_max_s,
            jitter_s=self.backoff_initial_s,
        )

    async def _own(self) -> aiohttp.ClientSession:
        """The engine's own session on the running event loop (one made on an earlier loop is closed and
        replaced: `asyncio.run` per call gives a new loop each time, where the old connections cannot be used)."""
        loop = asyncio.get_running_loop()
        owned = self._own_session
        if owned is not None and not owned.closed and self._own_loop is loop:
            return owned
        if owned is not None:
            await _close_session(owned, self._own_loop)
        connector = aiohttp.TCPConnector(limit=pool_limit(self.max_connections))
        owned = self._own_session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        self._own_loop = loop
        return owned

    async def _post_generate(self, payload: dict[str, Any], ids_json: str, headers: Mapping[str, str] | None) -> Any:
        """One attempt: `payload` plus the ids' JSON text (`ids_json`, spliced in, never re-encoded)."""
        try:
            status, raw = await self._exchange(self._generate_url, _generate_body(ids_json, payload), headers)
        except TimeoutError as error:
            raise _TransientError(f"no answer within timeout_s={self.timeout_s}") from error
        except (aiohttp.ClientError, OSError) as error:
            raise _TransientError(f"{type(error).__name__}: {error}") from error
        if status == 200:
            try:
                return json.loads(raw)
            except ValueError as error:
                raise EngineError(f"SGLang {self._generate_url} answered 200 with non-JSON: {raw[:200]!r}") from error
        message = _error_message(raw)
        if status >= 500 or status == 429:
            raise _TransientError(f"HTTP {status}: {message}")
        if status == 400 and any(marker in message.lower() for marker in _CONTEXT_LENGTH_MARKERS):
            raise ContextLengthError(f"SGLang {self._generate_url} refused the request (HTTP 400): {message}")
        raise EngineRequestError(
            f"SGLang {self._generate_url} rejected the request (HTTP {status}): {message} "
            f"[sampling_params keys: {sorted(payload['sampling_params'])}]"
        )

    async def _exchange(self, url: str, body: bytes, headers: Mapping[str, str] | None) -> tuple[int, bytes]:
        """POST a JSON body to `url`; (status, raw answer)."""
        sent_headers = {**headers, **_JSON_HEADERS} if headers else _JSON_HEADERS
        if self.session is None:
            request = (await self._own()).post(url, data=body, headers=sent_headers)  # the session's timeout
        else:
            request = self.session.post(url, data=body, headers=sent_headers, timeout=self._timeout)
        async with request as response:
            return response.status, await response.read()

    async def _post_abort(self, body: dict[str, Any]) -> None:
        try:
            status, raw = await self._exchange(self._abort_url, json.dumps(body).encode(), None)
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise EngineError(f"SGLang {self._abort_url} unreachable: {type(error).__name__}: {error}") from error
        if status != 200:
            raise EngineError(f"SGLang {self._abort_url} answered HTTP {status}: {_error_message(raw)}")


async def _close_session(session: aiohttp.ClientSession, loop: asyncio.AbstractEventLoop | None) -> None:
    """Close `session`, made on `loop`, from the running loop.

    On its own loop, or once that loop is closed (aiohttp then has nothing left to wait for: the sockets
    go with their transports), it is closed here; a loop that still runs elsewhere closes it itself.
    """
    if loop is None or loop is asyncio.get_running_loop() or loop.is_closed():
        await session.close()
    else:
        asyncio.run_coroutine_threadsafe(session.close(), loop)


def parse_generate_response(body: Any, *, url: str = "/generate") -> Generation:
    """A `Generation` from one non-streaming `/generate` answer (`return_logprob` must have been set).

    >>> body = {"text": "Hi", "output_ids": [13048, 151645], "meta_info": {
    ...     "id": "r1", "finish_reason": {"type": "stop", "matched": 151645}, "weight_version": "3",
    ...     "output_token_logprobs": [[-0.25, 13048, None], [-0.5, 151645, None]]}}
    >>> g = parse_generate_response(body)
    >>> g.output_ids, g.logprobs, g.finish_reason.value, g.matched_stop, g.weight_version
    ((13048, 151645), (-0.25, -0.5), 'stop', 151645, '3')
    """
    if not isinstance(body, dict):
        raise EngineError(f"SGLang {url} answered {type(body).__name__}, expected one JSON object (batch sent?)")
    meta = body.get("meta_info")
    if not isinstance(meta, dict):
        raise EngineError(f"SGLang {url} answer has no meta_info: keys {sorted(body)}")
    entries = meta.get("output_token_logprobs")
    if entries is None:
        raise EngineError(f"SGLang {url} answer has no meta_info.output_token_logprobs (return_logprob dropped?)")
    try:
        output_ids = tuple([entry[1] for entry in entries])
        logprobs = tuple([entry[0] for entry in entries])
    except (TypeError, IndexError) as error:
        raise EngineError(f"SGLang {url}: malformed output_token_logprobs entry ({error})") from error
    if None in logprobs:
        raise EngineError(f"SGLang {url}: output_token_logprobs has a null log-prob at {logprobs.index(None)}")
    raw_ids = body.get("output_ids")
    if raw_ids is not None and tuple(raw_ids) != output_ids:
        raise EngineError(
            f"SGLang {url}: output_ids ({len(raw_ids)} ids) disagree with output_token_logprobs "
            f"({len(output_ids)} ids); refusing a trajectory whose ids and log-probs may not align"
        )

    finish = meta.get("finish_reason")
    if not isinstance(finish, dict) or finish.get("type") not in _FINISH_TYPES:
        raise EngineError(f"SGLang {url}: unexpected finish_reason {finish!r}")
    reason = _FINISH_TYPES[finish["type"]]
    matched = finish.get("matched") if reason is FinishReason.STOP else None
    if matched == _NAN_STOP:
        raise EngineError(f"SGLang {url}: the model produced NaN/out-of-vocabulary logits (rid {meta.get('id')!r})")
    abort_message = (finish.get("message") or "Aborted") if reason is FinishReason.ABORT else None
    weight_version = meta.get("weight_version")
    return Generation(
        output_ids=output_ids,
        logprobs=logprobs,
        finish_reason=reason,
        matched_stop=matched,
        abort_message=abort_message,
        weight_version=None if weight_version is None else str(weight_version),
        text=body.get("text"),
        meta={key: value for key, value in meta.items() if key != "output_token_logprobs"},
    )


def _check_image_expansion(generation: Generation, expected: int, url: str) -> None:
    """SGLang expanded the images to as many prompt tokens as the episode records, where it says how many."""
    reported = generation.meta.get("prompt_tokens")
    if isinstance(reported, int) and reported != expected:
        raise EngineError(
            f"SGLang {url} expanded the images to a {reported}-token prompt, the model family to {expected}: its image "
            "processor settings (e.g. max_pixels) differ from the family's, so the trajectory would not hold what the model saw"
        )


def _ids_json(ids: Any) -> str:
    """The JSON array text of `ids`: precomputed by the ledger (`EncodedIds`), else encoded here."""
    if isinstance(ids, EncodedIds):
        return ids.json_text
    if not isinstance(ids, (list, tuple)):
        tolist = getattr(ids, "tolist", None)  # numpy / torch
        ids = tolist() if tolist is not None else list(ids)
    return json.dumps(ids)


def _generate_body(ids_json: str, payload: Mapping[str, Any]) -> bytes:
    """`{"input_ids": [...], **payload}` as JSON bytes, with the ids' text spliced in unchanged.

    >>> _generate_body("[1, 2]", {"return_logprob": True})
    b'{"input_ids": [1, 2], "return_logprob": true}'
    """
    rest = json.dumps(payload)
    separator = ", " if len(rest) > 2 else ""
    return ('{"input_ids": ' + ids_json + separator + rest[1:]).encode()


def _as_json_dict(params: Mapping[str, Any]) -> dict[str, Any]:
    return params if isinstance(params, dict) else dict(params)


def _error_message(raw: bytes) -> str:
    """The server's error text: SGLang sends {"error": {"message": ...}}; proxies may send anything."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text[:500] or "<empty body>"
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if parsed.get("message"):
            return str(parsed["message"])
    return text[:500]

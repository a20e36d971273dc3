"""`SGLangTestServer`: a faithful test double of SGLang's native `/generate` wire format.

A real aiohttp server on 127.0.0.1 (ephemeral port) that answers with scripted completions instead of
a model. It reproduces what a token-in/token-out client depends on (SGLang 0.5.23, see
the project reference sglang-generate-api.md):

- request: `input_ids` (or `text`, tokenized with the given tokenizer), `sampling_params`, `rid`,
  `return_logprob`, `return_text_in_logprobs`; every request is recorded with its headers;
- validation with HTTP 400 `{"error": {"message": ...}}`: unknown `sampling_params` keys (e.g. vLLM's
  `include_stop_str_in_output`), out-of-range values (temperature, top_p, top_k, min_p, penalties,
  max/min_new_tokens), prompt length >= `context_len`, prompt + max_new_tokens > `context_len`;
- decoding rules of the scheduler, in SGLang's order: length first (`max_new_tokens`, default 128,
  `{"type": "length", "length": max_new_tokens}`), then EOS / `stop_token_ids` unless `ignore_eos`
  (`matched` = the token id, which stays in `output_ids`), then stop strings (the output ends on the
  token that completes the string, `matched` = the string);
- `text` as the detokenizer builds it: `skip_special_tokens`, matched stop token / string trimmed
  unless `no_stop_trim`;
- `meta_info`: id, finish_reason, prompt_tokens, completion_tokens, cached_tokens, weight_version,
  num_retractions, e2e_latency and, with `return_logprob`, `output_token_logprobs`
  (`[logprob, id, text-or-null]`) and `output_token_logprobs_length`;
- `POST /abort_request` (`rid` prefix match, or `abort_all`): in-flight requests answer HTTP 200 with
  their partial output and `{"type": "abort", "message": "Aborted", ...}`; `GET /health`.
- as a router over one worker (itself), what a trainer's end-of-step abort reads: `GET /workers`
  (`{"workers": [{"url": ...}]}`, the SGLang Model Gateway's list) and `GET /v1/loads`
  (`{"loads": [{"num_reqs": <requests in flight>}]}`), which Slime polls until the worker is idle.
- with `kv_cache=KVCacheModel(...)` (see `testing/kv_cache.py`): a KV-cache pool of that many tokens
  with SGLang's prefix (radix) cache in it and SGLang's scheduler over it: a request prefills only what
  is not cached (`meta_info.cached_tokens`), least recently used prefixes are evicted when the pool
  fills, requests wait in a queue while it is full, are admitted with SGLang's optimistic reservation,
  are retracted (and later prefilled again) when decoding overflows the pool
  (`meta_info.num_retractions`), and take time per scheduler step; `/v1/loads`
  then answers as an SGLang server does (`{"timestamp", "version", "dp_rank_count", "loads": [{
  "num_running_reqs", "num_waiting_reqs", "num_total_reqs", "num_used_tokens", "max_total_num_tokens",
  "token_usage", ...}], "aggregate"}`). Without it every request runs at once, as many as arrive.
- `POST /pause_generation` in its default mode "abort" (what Slime's weight updaters send, `{}`): as
  SGLang's tokenizer manager does, it marks the server paused, aborts every request in flight until
  none is left, and answers; `/generate` requests that arrive while paused are held (recorded, not
  yet run) until `POST /continue_generation`, so they run with whatever `weight_version` the update
  set. Modes "retract" and "in_place" are refused with HTTP 400 (not emulated).

Not reproduced: sampling itself (completions come from the script; log-probs are a deterministic
function of token id and position, see `scripted_logprob`), batches, streaming, `n > 1`, grammars,
`min_new_tokens` (validated only), the prefix cache without `kv_cache=` (`cached_tokens` is then 0), video and audio,
prompt log-probs (`logprob_start_len` is recorded, not honoured). Out-of-vocabulary `input_ids` get a
400 here; a real server's behaviour there is undefined.

Images (`image_data`, data URLs), only with `processor=` (the model's transformers processor, e.g.
`Qwen2_5_VLProcessor`): as SGLang's multimodal processor does for pre-tokenized input
(`BaseMultimodalProcessor._expand_input_ids` with `resolve_image_token_counts`), the prompt must hold
one image pad per image (HTTP 400 otherwise), and the i-th pad becomes as many pads as the processor's
`_get_num_multimodal_tokens` gives the i-th image; the model "sees" the expanded ids
(`RecordedRequest.model_input_ids`, `meta_info.prompt_tokens`). Not reproduced: SGLang's own Qwen-VL
pre-resize to multiples of 28 pixels (the identity for Qwen2-VL/2.5-VL's 28-pixel grid within its
pixel bounds), the vision tower.

Fault injection: `fail_next` (HTTP 5xx/429), `hang_next`, `drop_next` (close the connection),
`abort_next` (scheduler abort before any token), `latency_s` (added per request), and per-completion
`hold` (keep the request in flight until it is aborted) or `finish="nan"` (SGLang's "NaN happened").

Example:

>>> import asyncio, json, urllib.request
>>> from openreward_rl.assets import load_tokenizer
>>> async def demo():
...     tokenizer = load_tokenizer("offline:qwen3")
...     async with SGLangTestServer(tokenizer, script=[ScriptedCompletion(text="Hello")]) as server:
...         body = json.dumps({"input_ids": [1, 2, 3], "return_logprob": True}).encode()
...         post = urllib.request.Request(server.url + "/generate", data=body, method="POST")
...         answer = await asyncio.to_thread(lambda: json.load(urllib.request.urlopen(post)))
...     return answer["output_ids"], answer["meta_info"]["finish_reason"], answer["text"]
>>> asyncio.run(demo())
([9707, 151645], {'type': 'stop', 'matched': 151645}, 'Hello')
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import itertools
import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import attrs
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from openreward_rl._compat import transformers as compat_transformers
from openreward_rl.testing.kv_cache import KVCacheModel, KVScheduler

__all__ = [
    "SGLANG_SAMPLING_PARAM_KEYS",
    "RecordedRequest",
    "SGLangTestServer",
    "ScriptedCompletion",
    "scripted_logprob",
]

# The API fields of SGLang 0.5.23's SamplingParams; anything else is rejected with HTTP 400.
SGLANG_SAMPLING_PARAM_KEYS = frozenset(
    {
        "max_new_tokens",
        "stop",
        "stop_token_ids",
        "stop_regex",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "min_new_tokens",
        "n",
        "json_schema",
        "regex",
        "ebnf",
        "structural_tag",
        "ignore_eos",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "no_stop_trim",
        "custom_params",
        "stream_interval",
        "logit_bias",
        "sampling_seed",
    }
)
DEFAULT_MAX_NEW_TOKENS = 128
SGLANG_VERSION = "0.5.23"  # the version whose wire format this double reproduces
_NAN_STOP = "NaN happened"
_KEEP_SPECIAL = {"skip_special_tokens": False}  # log-prob token texts are decoded verbatim
_NAN_TOKEN = -1  # stands for the out-of-vocabulary id a NaN forward pass yields
FinishKind = Literal["stop", "length", "abort", "nan"]


def scripted_logprob(token_id: int, position: int) -> float:
    """The log-prob the double reports for `token_id` at absolute `position` (prompt length + index).

    Deterministic, always < 0 and different across ids and positions, so misaligned ids/log-probs show.

    >>> scripted_logprob(9707, 3) == scripted_logprob(9707, 3), scripted_logprob(9707, 3) < 0
    (True, True)
    >>> scripted_logprob(9707, 3) != scripted_logprob(9707, 4) != scripted_logprob(9708, 4)
    True
    """
    mixed = (token_id * 2654435761 + (position + 1) * 2246822519) % 4294967296
    return -round(0.001 + (mixed % 100_000) / 10_000, 4)


def _optional_ids(value: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if value is None else tuple(int(token) for token in value)


@attrs.frozen
class ScriptedCompletion:
    """What the "model" produces for one request, before the server applies SGLang's stop rules.

    Give `text` (tokenized with the server's tokenizer, cached) or `ids` (no tokenizer work at all).
    `finish`: "stop" appends the EOS id (`eos_id`, default the tokenizer's) as the model would emit
    it; "length" keeps generating (cycling the scripted ids) until `max_new_tokens`; "abort" ends
    with the scheduler aborting after these tokens (`abort_message`); "nan" ends in SGLang's
    "NaN happened" stop. `hold=True`: the model is still generating after the scripted tokens (no
    EOS; `finish` is not used), so the request stays in flight until an `/abort_request` arrives (or
    the server closes) and then answers with the partial output. `latency_s` delays the answer
    (abortable).
    """

    text: str | None = None
    ids: tuple[int, ...] | None = attrs.field(default=None, converter=_optional_ids)
    finish: FinishKind = attrs.field(default="stop")
    eos_id: int | None = None
    abort_message: str = "Aborted"
    hold: bool = False
    latency_s: float = 0.0

    @finish.validator
    def _check_finish(self, attribute: attrs.Attribute, value: str) -> None:
        if value not in ("stop", "length", "abort", "nan"):
            raise ValueError(f"ScriptedCompletion.finish must be stop, length, abort or nan, got {value!r}")

    def __attrs_post_init__(self) -> None:
        if self.text is not None and self.ids is not None:
            raise ValueError("ScriptedCompletion takes text or ids, not both")


@attrs.frozen
class RecordedRequest:
    """One HTTP request the server received: the parsed JSON body and the headers (case-insensitive)."""

    path: str
    body: Mapping[str, Any]
    headers: Mapping[str, str]
    model_input_ids: list[int] = attrs.field(factory=list, eq=False)  # the prompt as the model saw it (images expanded)

    @property
    def input_ids(self) -> list[int] | None:
        return self.body.get("input_ids")

    @property
    def sampling_params(self) -> Mapping[str, Any]:
        return self.body.get("sampling_params") or {}

    @property
    def rid(self) -> str | None:
        return self.body.get("rid")

    @property
    def routing_key(self) -> str | None:
        return self.headers.get("X-SMG-Routing-Key")


@attrs.define
class _Fault:
    kind: Literal["status", "hang", "drop", "abort"]
    status: int = 503
    message: str = ""


@attrs.define(eq=False)
class _InFlight:
    rid: str
    aborted: asyncio.Event = attrs.field(factory=asyncio.Event)
    abort_message: str = "Aborted"
    retractions: int = 0
    cached_tokens: int = 0


class _BadRequest(Exception):
    pass


Script = Iterable[ScriptedCompletion] | Callable[[RecordedRequest], ScriptedCompletion]


class SGLangTestServer:
    """Scripted stand-in for an SGLang server (see the module docstring for what it reproduces).

    `tokenizer`: a real transformers tokenizer (tokenizes scripted text, decodes `text`, gives EOS).
    `script`: ScriptedCompletions consumed in order (extend with `push`), or a callable that gets the
    `RecordedRequest` and returns one. `context_len` is the model's context length. `port=0` picks a free port.
    `kv_cache`: a `KVCacheModel` to run requests through a KV-cache pool and SGLang's scheduler (None: all at once).
    """

    def __init__(
        self,
        tokenizer: Any,
        script: Script = (),
        *,
        context_len: int = 32768,
        weight_version: str = "default",
        eos_token_ids: Iterable[int] | None = None,
        latency_s: float = 0.0,
        record: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        processor: Any = None,
        kv_cache: KVCacheModel | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.processor = processor
        self._kv = KVScheduler(kv_cache) if kv_cache is not None else None
        self.context_len = context_len
        self.weight_version = weight_version
        self.latency_s = latency_s
        self.record = record
        self.host = host
        default_eos = tokenizer.eos_token_id
        self.eos_token_ids = frozenset(eos_token_ids if eos_token_ids is not None else [default_eos])
        self.default_eos_id = default_eos if default_eos in self.eos_token_ids else min(self.eos_token_ids)
        self.vocab_size = len(tokenizer)
        self.requests: list[RecordedRequest] = []
        self.received = 0  # /generate requests received, recorded or not
        self.aborts: list[Mapping[str, Any]] = []
        self.script_errors: list[str] = []
        self._script_fn: Callable[[RecordedRequest], ScriptedCompletion] | None = None
        self._script: collections.deque[ScriptedCompletion] = collections.deque()
        if callable(script):
            self._script_fn = script
        else:
            self._script.extend(script)
        self._faults: collections.deque[_Fault] = collections.deque()
        self._in_flight: dict[str, _InFlight] = {}
        self._in_flight_changed = asyncio.Condition()
        self.pauses: list[Mapping[str, Any]] = []
        self._paused = False
        self._pause_changed = asyncio.Condition()
        self._held: list[str] = []  # rids of requests waiting for /continue_generation
        self._admitted = 0  # requests past the pause gate and not yet answered (SGLang: holders of the reader lock)
        self._closing = asyncio.Event()
        self._encode_cache: dict[str, tuple[int, ...]] = {}
        self._decode_cache: dict[tuple[Any, ...], str] = {}
        self._runner: web.AppRunner | None = None
        self._requested_port = port  # 0: an ephemeral port
        self.port: int | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("SGLangTestServer is not started (use `async with` or `await start()`)")
        return f"http://{self.host}:{self.port}"

    async def start(self) -> SGLangTestServer:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/generate", self._handle_generate)
        app.router.add_post("/abort_request", self._handle_abort)
        app.router.add_post("/pause_generation", self._handle_pause)
        app.router.add_post("/continue_generation", self._handle_continue)
        app.router.add_get("/health", self._handle_health)
        app.router.add_get("/workers", self._handle_workers)
        app.router.add_get("/v1/loads", self._handle_loads)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self._requested_port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        self._closing.set()
        if self._kv is not None:
            await self._kv.aclose()
        async with self._pause_changed:  # requests held by a pause are let go (and answered) too
            self._paused = False
            self._pause_changed.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SGLangTestServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ scripting and faults

    def push(self, *completions: ScriptedCompletion) -> None:
        """Append completions to the script (not allowed when the script is a callable)."""
        if self._script_fn is not None:
            raise TypeError("this server's script is a callable; push() needs a list script")
        self._script.extend(completions)

    @property
    def pending_script(self) -> int:
        return len(self._script)

    def fail_next(self, count: int = 1, *, status: int = 503, message: str = "Service Unavailable") -> None:
        """Answer the next `count` /generate requests with HTTP `status` (e.g. 500, 503, 429)."""
        self._faults.extend(_Fault("status", status, message) for _ in range(count))

    def hang_next(self, count: int = 1) -> None:
        """Never answer the next `count` /generate requests (until the server closes)."""
        self._faults.extend(_Fault("hang") for _ in range(count))

    def drop_next(self, count: int = 1) -> None:
        """Close the connection of the next `count` /generate requests without an answer."""
        self._faults.extend(_Fault("drop") for _ in range(count))

    def abort_next(self, count: int = 1, *, message: str = "Aborted") -> None:
        """Abort the next `count` valid requests in the scheduler before any token (HTTP 200, finish abort)."""
        self._faults.extend(_Fault("abort", message=message) for _ in range(count))

    @property
    def held(self) -> list[str]:
        """Request ids held by `/pause_generation` until `/continue_generation`."""
        return list(self._held)

    @property
    def in_flight(self) -> list[str]:
        """rids of the /generate requests being processed now."""
        return list(self._in_flight)

    async def wait_received(self, count: int = 1) -> None:
        """Wait until at least `count` /generate requests have arrived (faulted ones included)."""
        async with self._in_flight_changed:
            await self._in_flight_changed.wait_for(lambda: self.received >= count)

    async def wait_in_flight(self, count: int = 1) -> list[str]:
        """Wait until at least `count` requests are in flight; returns their rids."""
        async with self._in_flight_changed:
            await self._in_flight_changed.wait_for(lambda: len(self._in_flight) >= count)
            return list(self._in_flight)

    # ------------------------------------------------------------------ handlers

    async def _handle_health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _handle_workers(self, request: web.Request) -> web.Response:
        return web.json_response({"workers": [{"url": self.url}]})

    async def _handle_loads(self, request: web.Request) -> web.Response:
        if self._kv is None:
            return web.json_response({"loads": [{"num_reqs": len(self._in_flight)}]})
        load = self._kv.load()
        aggregate = {
            "total_running_reqs": load["num_running_reqs"],
            "total_waiting_reqs": load["num_waiting_reqs"],
            "total_reqs": load["num_total_reqs"],
            "total_used_tokens": load["num_used_tokens"],
            "avg_token_usage": load["token_usage"],
            "avg_throughput": load["gen_throughput"],
            "avg_utilization": load["utilization"],
        }
        stamp = datetime.datetime.now(datetime.UTC).isoformat()
        return web.json_response(
            {"timestamp": stamp, "version": SGLANG_VERSION, "dp_rank_count": 1, "loads": [load], "aggregate": aggregate}
        )

    @property
    def kv_scheduler(self) -> KVScheduler | None:
        """The KV cache and scheduler the server plays (`kv_cache=`), or None: every request runs at once."""
        return self._kv

    async def _handle_abort(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "abort_request body must be JSON")
        if not isinstance(body, dict):
            return _error(400, "abort_request body must be a JSON object")
        self.aborts.append(body)
        rid = body.get("rid") or ""
        abort_all = bool(body.get("abort_all"))
        self._abort_flights(lambda flight: abort_all or bool(rid and flight.rid.startswith(rid)))
        return web.Response(status=200)

    def _abort_flights(self, matches: Callable[[Any], bool]) -> None:
        """End the matching requests in flight with finish "abort" and what they sampled so far."""
        for flight in list(self._in_flight.values()):
            if matches(flight):
                flight.abort_message = "Aborted"
                flight.aborted.set()

    async def _handle_pause(self, request: web.Request) -> web.Response:
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return _error(400, "pause_generation body must be JSON")
        if not isinstance(body, dict):
            return _error(400, "pause_generation body must be a JSON object")
        mode = body.get("mode", "abort")
        if mode not in ("abort", "retract", "in_place"):
            return _error(400, f"Invalid mode: {mode!r}. Expected one of ['abort', 'retract', 'in_place']")
        if mode != "abort":
            return _error(400, f"SGLangTestServer emulates /pause_generation mode 'abort' only, got {mode!r}")
        self.pauses.append(body)
        async with self._pause_changed:
            self._paused = True
        while self._admitted:  # SGLang repeats abort_all until no request holds the model-update lock
            self._abort_flights(lambda flight: True)
            await asyncio.sleep(0.01)
        return web.Response(status=200)

    async def _handle_continue(self, request: web.Request) -> web.Response:
        async with self._pause_changed:
            self._paused = False
            self._pause_changed.notify_all()
        return web.Response(status=200)

    async def _pass_pause_gate(self, rid: str) -> None:
        """Hold a request while the server is paused, as SGLang's tokenizer manager does before running it."""
        async with self._pause_changed:
            if self._paused:
                self._held.append(rid)
                async with self._in_flight_changed:
                    self._in_flight_changed.notify_all()
                try:
                    await self._pause_changed.wait_for(lambda: not self._paused)
                finally:
                    self._held.remove(rid)
            self._admitted += 1

    async def _handle_generate(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body must be JSON")
        headers = CIMultiDictProxy(CIMultiDict(request.headers))  # case-insensitive, like HTTP
        recorded = RecordedRequest(request.path, body, headers) if isinstance(body, dict) else None
        self.received += 1
        if recorded is not None and self.record:
            self.requests.append(recorded)
        async with self._in_flight_changed:
            self._in_flight_changed.notify_all()
        # transport-level faults hit before validation; a scheduler abort hits the next valid request
        fault = self._faults.popleft() if self._faults and self._faults[0].kind != "abort" else None
        if fault is not None and fault.kind == "status":
            return _error(fault.status, fault.message)
        if fault is not None and fault.kind == "hang":
            await self._closing.wait()
            return _error(503, "server shutting down")
        if fault is not None and fault.kind == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=500)  # never reaches the closed connection
        await self._pass_pause_gate(str(body.get("rid") or "") if isinstance(body, dict) else "")
        try:
            return await self._admitted_generate(body, recorded, started, fault)
        finally:
            self._admitted -= 1

    async def _admitted_generate(
        self, body: Any, recorded: RecordedRequest | None, started: float, fault: _Fault | None
    ) -> web.StreamResponse:
        if recorded is None:
            return _error(400, f"request body must be a JSON object, got {type(body).__name__}")
        try:
            prompt_ids, params = self._validate(body)
        except _BadRequest as error:
            return _error(400, str(error))
        recorded.model_input_ids.extend(prompt_ids)

        if self._faults and self._faults[0].kind == "abort":
            fault = self._faults.popleft()
        rid = body.get("rid") or uuid.uuid4().hex
        flight = _InFlight(rid)
        await self._enter_flight(flight)
        try:
            if fault is not None and fault.kind == "abort":
                output: list[int] = []
                finish: dict[str, Any] = _abort_reason(fault.message)
            else:
                output, finish = await self._run(recorded, prompt_ids, params, flight)
        except _BadRequest as error:
            return _error(500, str(error))
        finally:
            await self._leave_flight(flight)
        return web.json_response(self._answer(body, rid, prompt_ids, params, output, finish, started, flight))

    # ------------------------------------------------------------------ request processing

    def _validate(self, body: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
        given = [key for key in ("text", "input_ids", "input_embeds") if body.get(key) is not None]
        if len(given) != 1:
            raise _BadRequest(f"Exactly one of text, input_ids or input_embeds must be provided, got {given}")
        if body.get("stream"):
            raise _BadRequest("SGLangTestServer does not emulate streaming (stream=true)")
        if given[0] == "input_embeds":
            raise _BadRequest("SGLangTestServer does not emulate input_embeds")
        if given[0] == "text":
            if not isinstance(body["text"], str):
                raise _BadRequest("SGLangTestServer does not emulate batch requests (text must be a string)")
            prompt_ids = list(self._encode(body["text"]))
        else:
            prompt_ids = body["input_ids"]
            token_types = set(map(type, prompt_ids)) if isinstance(prompt_ids, list) else {type(prompt_ids)}
            if list in token_types or not isinstance(prompt_ids, list):
                raise _BadRequest("SGLangTestServer does not emulate batch requests (input_ids must be a flat list)")
            if prompt_ids and (token_types != {int} or min(prompt_ids) < 0 or max(prompt_ids) >= self.vocab_size):
                raise _BadRequest(f"input_ids must be token ids in [0, {self.vocab_size})")
        if not prompt_ids:
            raise _BadRequest("The input is empty")
        if body.get("image_data"):
            prompt_ids = self._expand_images(list(prompt_ids), body["image_data"])
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise _BadRequest("sampling_params must be a JSON object (batches are not emulated)")
        unknown = sorted(set(params) - SGLANG_SAMPLING_PARAM_KEYS)
        if unknown:
            raise _BadRequest(
                f"Unknown sampling_params {unknown}; SGLang SamplingParams accepts {sorted(SGLANG_SAMPLING_PARAM_KEYS)}"
            )
        _verify_sampling_params(params)
        prompt_len = len(prompt_ids)
        if prompt_len >= self.context_len:
            raise _BadRequest(
                f"The input ({prompt_len} tokens) is longer than the model's context length "
                f"({self.context_len} tokens)."
            )
        max_new = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        if max_new is not None and prompt_len + max_new > self.context_len:
            raise _BadRequest(
                f"Requested token count exceeds the model's maximum context length of {self.context_len} "
                f"tokens. You requested a total of {prompt_len + max_new} tokens: {prompt_len} tokens from "
                f"the input messages and {max_new} tokens for the completion. Please reduce the number of "
                "tokens in the input messages or the completion to fit within the limit."
            )
        return prompt_ids, params

    def _expand_images(self, prompt_ids: list[int], image_data: Any) -> list[int]:
        """The prompt with each image's one pad expanded as the processor counts the image's tokens."""
        if self.processor is None:
            raise _BadRequest("SGLangTestServer emulates image_data only when given the model's processor (processor=)")
        if not isinstance(image_data, list) or not all(isinstance(item, str) for item in image_data):
            raise _BadRequest("image_data must be a list of image URLs / base64 strings (batches are not emulated)")
        images = [_load_image(item) for item in image_data]
        pad = self.processor.image_token_id
        pads = prompt_ids.count(pad)
        if pads != len(images):
            raise _BadRequest(f"prompt has {pads} image placeholder token(s) but {len(images)} image(s) were provided")
        counts = iter(compat_transformers.image_token_counts(self.processor, [(im.height, im.width) for im in images]))
        expanded: list[int] = []
        for token in prompt_ids:
            expanded.extend([pad] * int(next(counts)) if token == pad else [token])
        return expanded

    def _next_completion(self, recorded: RecordedRequest) -> ScriptedCompletion:
        if self._script_fn is not None:
            return self._script_fn(recorded)
        if not self._script:
            message = f"SGLangTestServer script exhausted after {len(self.requests)} request(s)"
            self.script_errors.append(message)
            raise _BadRequest(message)
        return self._script.popleft()

    async def _run(
        self, recorded: RecordedRequest, prompt_ids: list[int], params: dict[str, Any], flight: _InFlight
    ) -> tuple[list[int], dict[str, Any]]:
        completion = self._next_completion(recorded)
        latency = self.latency_s + completion.latency_s
        if latency > 0 and await self._aborted_within(flight, latency):
            return [], _abort_reason(flight.abort_message)
        output, finish = self._decode(completion, prompt_ids, params)
        if self._kv is not None:
            max_new = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
            made, flight.retractions, flight.cached_tokens = await self._kv.generate(
                prompt_ids,
                output,
                self.context_len - len(prompt_ids) if max_new is None else max_new,
                flight.aborted,
                self._closing,
            )
            if made < len(output):
                message = flight.abort_message if flight.aborted.is_set() else "server shutting down"
                return output[:made], _abort_reason(message)
        if finish is None and completion.hold:
            await self._aborted_within(flight, None)
            message = flight.abort_message if flight.aborted.is_set() else "server shutting down"
            finish = _abort_reason(message)
        if finish is None:
            finish = _abort_reason(completion.abort_message)
        return output, finish

    def _decode(
        self, completion: ScriptedCompletion, prompt_ids: list[int], params: dict[str, Any]
    ) -> tuple[list[int], dict[str, Any] | None]:
        """SGLang's per-token finish checks over the scripted token stream; None = the script ran out."""
        planned = completion.ids if completion.ids is not None else self._encode(completion.text or "")
        eos_id = completion.eos_id if completion.eos_id is not None else self.default_eos_id
        ignore_eos = bool(params.get("ignore_eos"))
        max_new = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        if max_new is None:
            max_new = self.context_len - len(prompt_ids)
        stop_ids = self.eos_token_ids | frozenset(params.get("stop_token_ids") or ())
        stop_strs = params.get("stop") or []
        if isinstance(stop_strs, str):
            stop_strs = [stop_strs]
        if max_new == 0:
            return [], {"type": "length", "length": 0}
        output: list[int] = []
        stream = iter(planned) if completion.hold else _token_stream(planned, completion.finish, eos_id, ignore_eos)
        for token in stream:
            if token == _NAN_TOKEN:
                output.append(eos_id)
                return output, {"type": "stop", "matched": _NAN_STOP}
            output.append(token)
            if len(output) >= max_new:
                return output, {"type": "length", "length": max_new}
            if not ignore_eos and token in stop_ids:
                return output, {"type": "stop", "matched": token}
            if stop_strs:
                decoded = self.tokenizer.decode(output)
                for stop in stop_strs:
                    if stop in decoded:
                        return output, {"type": "stop", "matched": stop}
        return output, None

    def _answer(
        self,
        body: dict[str, Any],
        rid: str,
        prompt_ids: list[int],
        params: dict[str, Any],
        output: list[int],
        finish: dict[str, Any],
        started: float,
        flight: _InFlight | None = None,
    ) -> dict[str, Any]:
        matched = finish.get("matched")
        no_stop_trim = bool(params.get("no_stop_trim"))
        text_ids = output[:-1] if isinstance(matched, int) and matched and output and not no_stop_trim else output
        text = self._text(text_ids, params)
        if isinstance(matched, str) and matched and not no_stop_trim:
            cut = text.find(matched)
            text = text[:cut] if cut != -1 else text
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(prompt_ids),
            "weight_version": self.weight_version,
            "completion_tokens": len(output),
            "cached_tokens": flight.cached_tokens if flight else 0,
            "num_retractions": flight.retractions if flight else 0,
            "e2e_latency": time.perf_counter() - started,
        }
        if body.get("return_logprob"):
            with_text = bool(body.get("return_text_in_logprobs"))
            start = len(prompt_ids)
            meta["output_token_logprobs"] = [
                [
                    scripted_logprob(token, start + index),
                    token,
                    self._text([token], _KEEP_SPECIAL) if with_text else None,
                ]
                for index, token in enumerate(output)
            ]
            meta["output_token_logprobs_length"] = len(output)
        return {"text": text, "output_ids": output, "meta_info": meta}

    # ------------------------------------------------------------------ helpers

    def _encode(self, text: str) -> tuple[int, ...]:
        ids = self._encode_cache.get(text)
        if ids is None:
            ids = tuple(self.tokenizer.encode(text, add_special_tokens=False))
            self._encode_cache[text] = ids
        return ids

    def _text(self, ids: Sequence[int], params: Mapping[str, Any]) -> str:
        skip = params.get("skip_special_tokens")
        skip = True if skip is None else bool(skip)
        key = (tuple(ids), skip)
        text = self._decode_cache.get(key)
        if text is None:
            if len(self._decode_cache) > 65536:
                self._decode_cache.clear()
            text = self.tokenizer.decode(list(ids), skip_special_tokens=skip)
            self._decode_cache[key] = text
        return text

    async def _aborted_within(self, flight: _InFlight, seconds: float | None) -> bool:
        """Wait up to `seconds` (None: until abort or shutdown); True if the request was aborted."""
        waiters = {asyncio.ensure_future(flight.aborted.wait()), asyncio.ensure_future(self._closing.wait())}
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        return flight.aborted.is_set()

    async def _enter_flight(self, flight: _InFlight) -> None:
        async with self._in_flight_changed:
            self._in_flight[flight.rid] = flight
            self._in_flight_changed.notify_all()

    async def _leave_flight(self, flight: _InFlight) -> None:
        async with self._in_flight_changed:
            if self._in_flight.get(flight.rid) is flight:
                del self._in_flight[flight.rid]
            self._in_flight_changed.notify_all()


def _token_stream(planned: tuple[int, ...], finish: str, eos_id: int, ignore_eos: bool) -> Iterator[int]:
    """The ids the scripted "model" would emit, in order (possibly endless)."""
    yield from planned
    if finish == "nan":
        yield _NAN_TOKEN
    elif finish == "stop":
        yield eos_id
        if ignore_eos:  # the model keeps going past the ignored EOS
            yield from itertools.cycle(planned + (eos_id,))
    elif finish == "length":
        yield from itertools.cycle(planned or (eos_id,))


def _load_image(data: str) -> Any:
    """An RGB PIL image from a data URL or bare base64 (as SGLang's `load_image` reads them)."""
    import base64
    import io

    from PIL import Image

    try:
        image = Image.open(io.BytesIO(base64.b64decode(data.split(",", 1)[1] if data.startswith("data:") else data)))
        image.load()
    except Exception as error:
        raise _BadRequest(f"Error while loading data {data[:60]}...: {error}") from error
    return image.convert("RGB")


def _abort_reason(message: str) -> dict[str, Any]:
    return {"type": "abort", "message": message, "status_code": None, "err_type": None}


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


def _number(params: Mapping[str, Any], key: str, default: float) -> float:
    value = params.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _BadRequest(f"sampling_params.{key} must be a number, got {value!r}")
    return value


def _verify_sampling_params(params: Mapping[str, Any]) -> None:
    """SGLang's SamplingParams.verify ranges (own wording)."""
    temperature = _number(params, "temperature", 1.0)
    if not math.isfinite(temperature) or temperature < 0:
        raise _BadRequest(f"temperature must be a non-negative finite number, got {temperature}.")
    top_p = _number(params, "top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        raise _BadRequest(f"top_p must be in (0, 1], got {top_p}.")
    min_p = _number(params, "min_p", 0.0)
    if not 0.0 <= min_p <= 1.0:
        raise _BadRequest(f"min_p must be in [0, 1], got {min_p}.")
    top_k = _number(params, "top_k", -1)
    if top_k != -1 and top_k < 1:
        raise _BadRequest(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    for key in ("frequency_penalty", "presence_penalty"):
        value = _number(params, key, 0.0)
        if not -2.0 <= value <= 2.0:
            raise _BadRequest(f"{key} must be in [-2, 2], got {value}.")
    repetition = _number(params, "repetition_penalty", 1.0)
    if not 0.0 < repetition <= 2.0:
        raise _BadRequest(f"repetition_penalty must be in (0, 2], got {repetition}.")
    max_new = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if max_new is not None and (type(max_new) is not int or max_new < 0):
        raise _BadRequest(f"max_new_tokens must be an integer >= 0, got {max_new!r}.")
    min_new = _number(params, "min_new_tokens", 0)
    if min_new < 0 or (max_new is not None and min_new > max_new):
        raise _BadRequest(f"min_new_tokens must be in [0, max_new_tokens], got {min_new}.")
    stop = params.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise _BadRequest(f"stop must be a string or a list of strings, got {stop!r}")
        if len(stops) > 32:
            raise _BadRequest(f"at most 32 stop strings are allowed, got {len(stops)}")
    stop_ids = params.get("stop_token_ids")
    if stop_ids is not None and (not isinstance(stop_ids, list) or not all(type(t) is int for t in stop_ids)):
        raise _BadRequest(f"stop_token_ids must be a list of token ids, got {stop_ids!r}")
    if sum(params.get(key) is not None for key in ("json_schema", "regex", "ebnf")) > 1:
        raise _BadRequest("Only one of regex, json_schema, or ebnf can be set.")

"""Test doubles of Miles' agentic path: its TITO session server and `agentic_tool_call.generate`.

Miles cannot run here (torch+CUDA, Ray, SGLang). Written from Miles' own source (radixark/miles
31f1ca9: miles/rollout/session/{sessions,core,linear_trajectory}.py, samples/merge.py,
generate_utils/openai_endpoint_utils.py, generate_hub/agentic_tool_call.py), not copied from it.

`SessionServerDouble` keeps the client-facing wire format of the v1 (linear) session server:
- `POST /sessions` -> `{"session_id"}`; `DELETE /sessions/{id}` -> 204; unknown id -> 404 `{"error"}`;
- `POST /sessions/{id}/v1/chat/completions`: an OpenAI chat body; the server owns the tokens: the
  first request is rendered with the chat template (`add_generation_prompt`), a later one must
  replay the stored messages verbatim (role, content, tool calls by name and JSON arguments; else
  HTTP 400) and only its appended messages are tokenized (the template's rendering after the stored
  turns' end-of-turn markers), joined to the stored prompt + sampled ids (TITO); the joined
  `input_ids` go to SGLang's `/generate` (here: `SGLangTestServer`) with `return_logprob`;
  the reply is a Chat Completions body whose `choices[0]` carries `message` (content with the stop
  token trimmed and hermes `<tool_call>` blocks parsed into `tool_calls`, as SGLang's
  tool-call parser does for Qwen3), `finish_reason` (`tool_calls`/`stop`/`length`/`abort`) and
  `meta_info` (`output_token_logprobs` as `[logprob, id, null]`, `completion_tokens`,
  `finish_reason`, `weight_version`);
- `POST /sessions/{id}/samples`: the session's records assembled into one training sample
  (prompt of the first call, then per later call the appended tokens masked 0 and the sampled
  tokens masked 1; status from the last call's finish reason; one weight version per call).
  Miles sends this as safetensors; the double sends JSON (the codec is Miles' internal business,
  both ends of it are doubles here).
Not reproduced: v2 tree sessions, retry rollback, R3 replay, fake streaming, `max_seq_len` truncation.

`agentic_generate` is the driver side, `agentic_tool_call.generate`: create a session, load the agent
function from `args.custom_agent_function_path`, call it with `base_url`, `prompt`,
`request_kwargs` (Miles' key renames and allow-list), `metadata` (+ `session_server_id`,
`max_seq_len`), swallow its exception, collect the samples, delete the session; no records -> the
input sample ABORTED; else merge the agent's dict into `metadata` and set `non_generation_time`
from `agent_metrics.total_tool_time`. `install(monkeypatch)` puts it where
`openreward_rl.backends.miles_agent.generate` imports it.
"""

from __future__ import annotations

import copy
import importlib
import json
import re
import sys
import types
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from doubles import miles_double
from doubles.miles_double import GenerateFnInput, GenerateFnOutput

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
# A subset of SGLang's ChatCompletionRequest fields: what build_chat_request_kwargs lets through.
_CHAT_REQUEST_FIELDS = {
    "temperature", "top_p", "top_k", "min_p", "max_tokens", "min_tokens", "stop", "stop_token_ids", "seed", "n",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "skip_special_tokens", "no_stop_trim",
    "spaces_between_special_tokens", "ignore_eos", "logprobs", "top_logprobs", "tools", "tool_choice",
}  # fmt: skip
_TO_SGLANG = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens", "seed": "sampling_seed"}
_SGLANG_PARAMS = {"temperature", "top_p", "top_k", "min_p", "max_new_tokens", "min_new_tokens", "stop", "stop_token_ids", "sampling_seed",
                  "frequency_penalty", "presence_penalty", "repetition_penalty", "skip_special_tokens", "spaces_between_special_tokens", "ignore_eos"}  # fmt: skip


@dataclass
class Record:
    request_messages: list[dict[str, Any]]
    prompt_ids: list[int]
    output_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    weight_version: str | None


@dataclass
class Session:
    messages: list[dict[str, Any]] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)


def _normal(message: dict[str, Any]) -> tuple[Any, ...]:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        calls.append((function.get("name"), json.loads(arguments) if isinstance(arguments, str) else arguments))
    return (message.get("role"), message.get("content") or "", tuple(json.dumps(c, sort_keys=True) for c in calls))


class SessionServerDouble:
    """The v1 session server's client wire format over an SGLang `/generate` upstream."""

    def __init__(self, tokenizer: Any, upstream_url: str) -> None:
        self.tokenizer = tokenizer
        self.upstream_url = upstream_url
        self.sessions: dict[str, Session] = {}
        self.deleted: list[str] = []
        self.created = 0
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> SessionServerDouble:
        app = web.Application()
        app.router.add_post("/sessions", self._create)
        app.router.add_delete("/sessions/{sid}", self._delete)
        app.router.add_post("/sessions/{sid}/v1/chat/completions", self._chat)
        app.router.add_post("/sessions/{sid}/samples", self._samples)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._http = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._http is not None and self._runner is not None
        await self._http.close()
        await self._runner.cleanup()

    def _session(self, request: web.Request) -> Session:
        session = self.sessions.get(request.match_info["sid"])
        if session is None:
            raise web.HTTPNotFound(text=json.dumps({"error": f"session not found: session_id={request.match_info['sid']}"}), content_type="application/json")
        return session

    async def _create(self, request: web.Request) -> web.Response:
        session_id = uuid.uuid4().hex
        self.sessions[session_id] = Session()
        self.created += 1
        return web.json_response({"session_id": session_id})

    async def _delete(self, request: web.Request) -> web.Response:
        self._session(request)
        self.sessions.pop(request.match_info["sid"])
        self.deleted.append(request.match_info["sid"])
        return web.Response(status=204)

    def _prompt_ids(self, session: Session, messages: list[dict[str, Any]], tools: Any) -> list[int]:
        if not session.records:
            text = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        stored = session.messages
        if len(messages) <= len(stored) or [_normal(m) for m in messages[: len(stored)]] != [_normal(m) for m in stored]:
            raise web.HTTPBadRequest(text=json.dumps({"error": "the request does not extend the session's messages at the tail"}), content_type="application/json")
        end_of_turn = self.tokenizer.convert_ids_to_tokens(session.token_ids[-1])
        if session.records[-1].finish_reason not in ("stop", "tool_calls"):
            raise web.HTTPBadRequest(text=json.dumps({"error": "the last turn did not end on a stop token; it cannot be extended"}), content_type="application/json")
        before = self.tokenizer.apply_chat_template(stored, tools=tools, tokenize=False)
        full = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        # the stored turns end at the same count of end-of-turn markers in both renderings (a template
        # may render the last assistant turn differently when it is last, e.g. Qwen3's empty think block)
        cut = -len(end_of_turn)
        for _ in range(before.count(end_of_turn)):
            cut = full.index(end_of_turn, cut + len(end_of_turn))
        return session.token_ids + list(self.tokenizer.encode(full[cut + len(end_of_turn) :], add_special_tokens=False))

    async def _chat(self, request: web.Request) -> web.Response:
        session = self._session(request)
        body = await request.json()
        messages = body.get("messages") or []
        prompt_ids = self._prompt_ids(session, messages, body.get("tools"))
        params = {_TO_SGLANG.get(k, k): v for k, v in body.items() if _TO_SGLANG.get(k, k) in _SGLANG_PARAMS}
        assert self._http is not None
        body = {"input_ids": prompt_ids, "sampling_params": params, "return_logprob": True}
        async with self._http.post(f"{self.upstream_url}/generate", json=body, headers={"X-SMG-Routing-Key": request.match_info["sid"]}) as upstream:
            if upstream.status != 200:
                return web.Response(status=upstream.status, body=await upstream.read(), content_type="application/json")
            answer = await upstream.json()
        meta = answer["meta_info"]
        entries = meta["output_token_logprobs"]
        output_ids = [int(e[1]) for e in entries]
        finish = meta["finish_reason"]["type"]
        text = self.tokenizer.decode(output_ids, skip_special_tokens=False)
        matched = meta["finish_reason"].get("matched")
        if finish == "stop" and isinstance(matched, int):
            text = self.tokenizer.decode(output_ids[:-1], skip_special_tokens=False)  # no_stop_trim=False
        calls = []
        for raw in _TOOL_CALL.findall(text):
            try:
                parsed = json.loads(raw)
                calls.append({"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function", "function": {"name": parsed["name"], "arguments": json.dumps(parsed.get("arguments", {}))}})
            except (ValueError, KeyError):
                continue
        content = _TOOL_CALL.sub("", text).strip() if calls else text
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        finish_reason = "tool_calls" if calls and finish == "stop" else finish
        record = Record(messages, prompt_ids, output_ids, [float(e[0]) for e in entries], finish_reason, meta.get("weight_version"))
        session.records.append(record)
        session.messages = [*messages, message]
        session.token_ids = prompt_ids + output_ids
        reply_meta = {
            "output_token_logprobs": [[e[0], e[1], None] for e in entries], "completion_tokens": len(entries),
            "finish_reason": meta["finish_reason"], "weight_version": meta.get("weight_version"),
        }
        return web.json_response({
            "id": meta.get("id"), "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "meta_info": reply_meta}],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(entries)},
        })  # fmt: skip

    async def _samples(self, request: web.Request) -> web.Response:
        session = self._session(request)
        if not session.records:
            return web.json_response({"samples": [], "metadata": {}, "empty_reason": "no_records"})
        first = session.records[0]
        tokens = list(first.prompt_ids)
        prompt_length = len(tokens)
        loss_mask: list[int] = []
        logprobs: list[float] = []
        for record in session.records:
            assert record.prompt_ids[: len(tokens)] == tokens, "a later call does not extend the session's tokens"
            gap = record.prompt_ids[len(tokens) :]
            tokens += gap + record.output_ids
            loss_mask += [0] * len(gap) + [1] * len(record.output_ids)
            logprobs += [0.0] * len(gap) + record.logprobs
        status = {"stop": "COMPLETED", "tool_calls": "COMPLETED", "length": "TRUNCATED", "abort": "ABORTED"}[session.records[-1].finish_reason]
        sample = {
            "tokens": tokens, "response_length": len(tokens) - prompt_length, "loss_mask": loss_mask, "rollout_log_probs": logprobs,
            "response": self.tokenizer.decode(tokens[prompt_length:], skip_special_tokens=False), "status": status,
            "weight_versions": [r.weight_version for r in session.records if r.weight_version is not None],
        }  # fmt: skip
        return web.json_response({"samples": [sample], "metadata": {"accumulated_token_ids": session.token_ids}, "empty_reason": None})


def build_chat_request_kwargs(sampling_params: dict[str, Any]) -> dict[str, Any]:
    """Miles' renames (max_new_tokens -> max_tokens, ...) and its ChatCompletionRequest allow-list."""
    kwargs = dict(sampling_params)
    for src, dst in (("max_new_tokens", "max_tokens"), ("min_new_tokens", "min_tokens"), ("sampling_seed", "seed")):
        if src in kwargs:
            kwargs.setdefault(dst, kwargs[src])
            kwargs.pop(src)
    return {k: v for k, v in kwargs.items() if k in _CHAT_REQUEST_FIELDS and v is not None}


def _load(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


async def agentic_generate(input: Any) -> GenerateFnOutput:  # noqa: A002
    """The driver side of Miles' agentic path (v1), as `agentic_tool_call.generate` does it."""
    args = input.args
    assert getattr(args, "session_server_ip", None) and getattr(args, "session_server_ports", None), "pass --use-session-server"
    base = f"http://{args.session_server_ip}:{args.session_server_ports[0]}"
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/sessions", json={}) as response:
            session_id = (await response.json())["session_id"]
        agent = _load(args.custom_agent_function_path)
        metadata = {**input.sample.metadata, "max_seq_len": getattr(args, "max_seq_len", None), "session_server_id": base.removeprefix("http://")}
        agent_metadata = None
        try:
            agent_metadata = await agent(base_url=f"{base}/sessions/{session_id}", prompt=input.sample.prompt, request_kwargs=build_chat_request_kwargs(input.sampling_params), metadata=metadata)
        except Exception as error:  # Miles logs and goes on to collect
            input.sample.metadata = {**input.sample.metadata, "agent_error_in_double": repr(error)}
        try:
            async with http.post(f"{base}/sessions/{session_id}/samples", json={"max_seq_len": getattr(args, "max_seq_len", None)}) as response:
                assert response.status == 200, await response.text()
                reply = await response.json()
        finally:
            async with http.delete(f"{base}/sessions/{session_id}"):
                pass
    if not reply["samples"]:
        sample = copy.deepcopy(input.sample)
        sample.status = type(sample).Status.ABORTED
        return GenerateFnOutput(samples=sample)
    (fields,) = reply["samples"]
    sample = copy.deepcopy(input.sample)
    for key in ("tokens", "response_length", "loss_mask", "rollout_log_probs", "response", "weight_versions"):
        setattr(sample, key, fields[key])
    sample.status = getattr(type(sample).Status, fields["status"])
    sample.metadata.update(agent_metadata or {})
    tool_time = ((agent_metadata or {}).get("agent_metrics") or {}).get("total_tool_time")
    if tool_time is not None:
        sample.non_generation_time = tool_time
    sample.metadata.update(reply["metadata"])
    return GenerateFnOutput(samples=sample)


agentic_generate.add_arguments = lambda parser: parser.add_argument("--custom-agent-function-path")  # type: ignore[attr-defined]


def install(monkeypatch: Any) -> None:
    """Make `miles.rollout.generate_hub.agentic_tool_call` this double for the test's duration."""
    names = ["miles", "miles.rollout", "miles.rollout.generate_hub", "miles.rollout.generate_hub.agentic_tool_call"]
    for name in names:
        module = types.ModuleType(name)
        module.__path__ = []  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, module)
    leaf = sys.modules[names[-1]]
    leaf.generate = agentic_generate
    leaf.GenerateFnInput, leaf.GenerateFnOutput = GenerateFnInput, GenerateFnOutput


Sample = miles_double.Sample

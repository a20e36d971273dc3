"""`SGLangEngine` against `SGLangTestServer`, a faithful double of SGLang's native /generate wire format.

A real SGLang server cannot run here (no GPU, no weights). The double is a real HTTP server on
127.0.0.1 that reproduces SGLang 0.5.23's request validation, stop rules, finish reasons, meta_info,
abort semantics and error bodies (see its module docstring and tests/test_sglang_server.py); its
completions are scripted and tokenized with the real Qwen3 tokenizer.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from openreward_rl.engines import (
    ContextLengthError,
    EngineError,
    EngineRequestError,
    FinishReason,
    GenerationRequest,
    SGLangEngine,
)
from openreward_rl.engines.sglang import _close_session, parse_generate_response
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer, scripted_logprob

PROMPT = (151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198)
FAST_RETRY = {"backoff_initial_s": 0.01, "backoff_max_s": 0.02}


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def request(max_new_tokens: int = 64, **fields) -> GenerationRequest:
    params = fields.pop("sampling_params", {"max_new_tokens": max_new_tokens})
    return GenerationRequest(input_ids=fields.pop("input_ids", PROMPT), sampling_params=params, **fields)


def expected_logprobs(ids: list[int], prompt_len: int = len(PROMPT)) -> tuple[float, ...]:
    return tuple(scripted_logprob(token, prompt_len + index) for index, token in enumerate(ids))


@pytest.mark.anyio
async def test_round_trip_ids_logprobs_and_single_eos(qwen3_tokenizer) -> None:
    text = 'I will call it.\n<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>'
    async with SGLangTestServer(qwen3_tokenizer, script=[ScriptedCompletion(text=text)], weight_version="12") as server:
        engine = SGLangEngine(server.url)
        try:
            generation = await engine.generate(request(200))
        finally:
            await engine.aclose()
    eos = qwen3_tokenizer.eos_token_id
    assert list(generation.output_ids) == encode(qwen3_tokenizer, text) + [eos]
    assert generation.output_ids.count(eos) == 1  # SGLang's ids already hold the matched EOS: never add another
    assert generation.logprobs == expected_logprobs(list(generation.output_ids))
    assert generation.finish_reason is FinishReason.STOP and generation.matched_stop == eos
    assert generation.weight_version == "12" and generation.text == text and generation.token_exact
    assert generation.meta["prompt_tokens"] == len(PROMPT) and "output_token_logprobs" not in generation.meta


@pytest.mark.anyio
async def test_stop_string_and_length(qwen3_tokenizer) -> None:
    text = "<tool_call>\n{}\n</tool_call>\ntrailing words"
    script = [ScriptedCompletion(text=text), ScriptedCompletion(text="a b c d e f g h", finish="length")]
    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        engine = SGLangEngine(server.url)
        try:
            stopped = await engine.generate(
                request(sampling_params={"max_new_tokens": 50, "stop": ["</tool_call>"], "no_stop_trim": True})
            )
            truncated = await engine.generate(request(5))
        finally:
            await engine.aclose()
    full = encode(qwen3_tokenizer, text)
    assert list(stopped.output_ids) == full[: full.index(151658) + 1]
    assert stopped.finish_reason is FinishReason.STOP and stopped.matched_stop == "</tool_call>"
    assert stopped.logprobs == expected_logprobs(list(stopped.output_ids))
    assert truncated.finish_reason is FinishReason.LENGTH and truncated.matched_stop is None
    assert list(truncated.output_ids) == encode(qwen3_tokenizer, "a b c d e f g h")[:5]


@pytest.mark.anyio
async def test_abort_in_flight_via_abort_request(qwen3_tokenizer) -> None:
    partial = "Let me think about"
    script = [ScriptedCompletion(text=partial, hold=True), ScriptedCompletion(text="other", hold=True)]
    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        engine = SGLangEngine(server.url)
        try:
            first = asyncio.ensure_future(engine.generate(request(request_id="9f3c_t1")))
            await server.wait_in_flight(1)
            second = asyncio.ensure_future(engine.generate(request(request_id="77aa_t1")))
            await server.wait_in_flight(2)
            await engine.abort("9f3c")  # prefix of "9f3c_t1" only
            aborted = await first
            assert not second.done()
            await engine.abort_all()
            other = await second
        finally:
            await engine.aclose()
    assert aborted.finish_reason is FinishReason.ABORT and aborted.abort_message == "Aborted"
    assert list(aborted.output_ids) == encode(qwen3_tokenizer, partial)
    assert aborted.logprobs == expected_logprobs(encode(qwen3_tokenizer, partial))
    assert other.finish_reason is FinishReason.ABORT
    assert server.aborts == [{"rid": "9f3c"}, {"abort_all": True}]


@pytest.mark.anyio
async def test_abort_from_script_and_scheduler(qwen3_tokenizer) -> None:
    script = [ScriptedCompletion(text="half a", finish="abort", abort_message="weight update")]
    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        server.abort_next()
        engine = SGLangEngine(server.url)
        try:
            before_any_token = await engine.generate(request())
            partial = await engine.generate(request())
        finally:
            await engine.aclose()
    assert before_any_token.finish_reason is FinishReason.ABORT and before_any_token.output_ids == ()
    assert partial.finish_reason is FinishReason.ABORT and partial.abort_message == "weight update"
    assert list(partial.output_ids) == encode(qwen3_tokenizer, "half a")
    assert len(server.requests) == 2  # an abort is an answer, never retried


@pytest.mark.anyio
async def test_context_length_400_is_context_length_error_without_retry(qwen3_tokenizer) -> None:
    async with SGLangTestServer(qwen3_tokenizer, script=[], context_len=100) as server:
        engine = SGLangEngine(server.url, **FAST_RETRY)
        try:
            with pytest.raises(ContextLengthError, match="maximum context length of 100"):
                await engine.generate(request(95))
            with pytest.raises(ContextLengthError, match="longer than the model's context length"):
                await engine.generate(request(1, input_ids=list(range(100))))
        finally:
            await engine.aclose()
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_unknown_sampling_param_is_request_error_naming_it(qwen3_tokenizer) -> None:
    async with SGLangTestServer(qwen3_tokenizer, script=[]) as server:
        engine = SGLangEngine(server.url, **FAST_RETRY)
        try:
            with pytest.raises(EngineRequestError, match="include_stop_str_in_output") as caught:
                await engine.generate(
                    request(sampling_params={"max_new_tokens": 8, "include_stop_str_in_output": True})
                )
        finally:
            await engine.aclose()
    assert not isinstance(caught.value, ContextLengthError)
    assert "HTTP 400" in str(caught.value) and server.url in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_transient_faults_are_retried_with_retry_suffixed_rid(qwen3_tokenizer) -> None:
    script = [ScriptedCompletion(text="ok"), ScriptedCompletion(text="ok"), ScriptedCompletion(text="ok")]
    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        engine = SGLangEngine(server.url, max_attempts=3, timeout_s=0.5, **FAST_RETRY)
        try:
            server.fail_next(1, status=503)
            after_503 = await engine.generate(request(request_id="ep_t0"))
            server.fail_next(1, status=429)
            server.drop_next(1)
            after_429_and_drop = await engine.generate(request(request_id="ep_t1"))
            server.hang_next(1)
            after_timeout = await engine.generate(request(request_id="ep_t2"))
        finally:
            await engine.aclose()
    for generation in (after_503, after_429_and_drop, after_timeout):
        assert generation.finish_reason is FinishReason.STOP
        assert list(generation.output_ids) == encode(qwen3_tokenizer, "ok") + [qwen3_tokenizer.eos_token_id]
    rids = [recorded.rid for recorded in server.requests]
    assert rids == ["ep_t0", "ep_t0_r1", "ep_t1", "ep_t1_r1", "ep_t1_r2", "ep_t2", "ep_t2_r1"]
    assert server.pending_script == 0


async def generate_error(engine: SGLangEngine, match: str | None = None) -> EngineError:
    """The `EngineError` (matching `match`) that `engine` raises for `request()`; the engine is closed after."""
    try:
        with pytest.raises(EngineError, match=match) as caught:
            await engine.generate(request())
    finally:
        await engine.aclose()
    return caught.value


@pytest.mark.anyio
async def test_persistent_5xx_gives_engine_error_after_bounded_attempts(qwen3_tokenizer) -> None:
    async with SGLangTestServer(qwen3_tokenizer, script=[]) as server:
        server.fail_next(10, status=500, message="CUDA error: illegal memory access")
        error = await generate_error(SGLangEngine(server.url, max_attempts=3, **FAST_RETRY))
    message = str(error)
    assert type(error) is EngineError
    assert server.url + "/generate" in message and "3 attempt(s)" in message and "CUDA error" in message
    assert server.received == 3


@pytest.mark.anyio
async def test_unreachable_server_is_engine_error(qwen3_tokenizer) -> None:
    async with SGLangTestServer(qwen3_tokenizer) as server:
        url = server.url
    await generate_error(SGLangEngine(url, max_attempts=2, **FAST_RETRY), match="2 attempt")


@pytest.mark.anyio
async def test_nan_stop_is_an_engine_error(qwen3_tokenizer) -> None:
    async with SGLangTestServer(qwen3_tokenizer, script=[ScriptedCompletion(text="x", finish="nan")]) as server:
        await generate_error(SGLangEngine(server.url), match="NaN")


@pytest.mark.anyio
async def test_wire_payload_routing_header_rid_and_params_unchanged(qwen3_tokenizer) -> None:
    params = {
        "max_new_tokens": 32,
        "temperature": 0.8,
        "top_p": 0.95,
        "top_k": 20,
        "min_p": 0.0,
        "stop": ["</tool_call>"],
        "stop_token_ids": [151643],
        "no_stop_trim": True,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "sampling_seed": 7,
        "custom_params": {"replay": True},
    }
    script = [ScriptedCompletion(text="a"), ScriptedCompletion(text="b")]
    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        engine = SGLangEngine(server.url)
        try:
            await engine.generate(request(sampling_params=params, request_id="u1_t3", routing_key="u1"))
            await engine.generate(request())
        finally:
            await engine.aclose()
    keyed, plain = server.requests
    assert keyed.body == {"input_ids": list(PROMPT), "sampling_params": params, "return_logprob": True, "rid": "u1_t3"}
    assert keyed.routing_key == "u1"
    assert plain.body == {"input_ids": list(PROMPT), "sampling_params": {"max_new_tokens": 64}, "return_logprob": True}
    assert "x-smg-routing-key" not in plain.headers and keyed.headers["x-smg-routing-key"] == "u1"
    assert all("logprob_start_len" not in r.body for r in server.requests)


@pytest.mark.anyio
async def test_concurrent_requests_each_get_their_own_answer(qwen3_tokenizer) -> None:
    def script(recorded):
        return ScriptedCompletion(text=f"answer to {recorded.input_ids[-1]}")

    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        engine = SGLangEngine(server.url)
        try:
            prompts = [[9707, 1000 + index] for index in range(40)]
            generations = await asyncio.gather(
                *(engine.generate(request(input_ids=p, request_id=f"c{i}")) for i, p in enumerate(prompts))
            )
        finally:
            await engine.aclose()
    for prompt, generation in zip(prompts, generations, strict=True):
        assert list(generation.output_ids) == encode(qwen3_tokenizer, f"answer to {prompt[-1]}") + [
            qwen3_tokenizer.eos_token_id
        ]
        assert generation.logprobs == expected_logprobs(list(generation.output_ids), prompt_len=2)
    assert {g.meta["id"] for g in generations} == {f"c{i}" for i in range(40)}


@pytest.mark.anyio
async def test_shared_session_stays_open_and_owned_session_closes(qwen3_tokenizer) -> None:
    async with SGLangTestServer(qwen3_tokenizer, script=[ScriptedCompletion(text="a")] * 2) as server:
        async with aiohttp.ClientSession() as shared:
            engine = SGLangEngine(server.url, session=shared)
            await engine.generate(request())
            await engine.aclose()
            assert not shared.closed
        owning = SGLangEngine(server.url)
        await owning.generate(request())
        owned = owning._own_session
        await owning.aclose()
        assert owned is not None and owned.closed


ANSWER = {
    "text": "a",
    "output_ids": [64],
    "meta_info": {
        "id": "r",
        "finish_reason": {"type": "length", "length": 1},
        "output_token_logprobs": [[-0.5, 64, None]],
    },
}


@pytest.mark.anyio
async def test_own_session_reuses_connections_up_to_max_connections() -> None:
    """Requests one after another ride one keep-alive connection; concurrent ones open at most
    `max_connections`, the rest wait for one (counted at a real aiohttp server by the client's port)."""
    ports: list[int] = []
    in_flight = peak = 0

    async def generate(http_request: web.Request) -> web.Response:
        nonlocal in_flight, peak
        ports.append(http_request.transport.get_extra_info("peername")[1])
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return web.json_response(ANSWER)

    app = web.Application()
    app.router.add_post("/generate", generate)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    engine = SGLangEngine(f"http://127.0.0.1:{runner.addresses[0][1]}", max_connections=3)
    try:
        for _ in range(4):
            assert (await engine.generate(request())).output_ids == (64,)
        assert len(set(ports)) == 1
        ports.clear()
        generations = await asyncio.gather(*(engine.generate(request()) for _ in range(12)))
    finally:
        await engine.aclose()
        await runner.cleanup()
    assert [g.output_ids for g in generations] == [(64,)] * 12
    assert peak == 3 and len(set(ports)) == 3


def test_engine_survives_event_loop_changes(qwen3_tokenizer) -> None:
    """One engine used from two `asyncio.run` calls: its own session must follow the running loop."""
    ports: list[int] = []

    async def one_call(engine: SGLangEngine | None) -> tuple[SGLangEngine, tuple[int, ...]]:
        port = ports[0] if ports else 0
        async with SGLangTestServer(qwen3_tokenizer, script=[ScriptedCompletion(text="hi")], port=port) as server:
            ports.append(server.port)
            engine = engine or SGLangEngine(server.url)
            return engine, (await engine.generate(request())).output_ids

    engine, first = asyncio.run(one_call(None))
    _, second = asyncio.run(one_call(engine))
    asyncio.run(engine.aclose())
    assert first == second == tuple(encode(qwen3_tokenizer, "hi") + [qwen3_tokenizer.eos_token_id])


def test_a_session_of_a_loop_still_open_is_closed_on_that_loop() -> None:
    """The engine's session from a loop that is not closed (run again later) is closed when that loop runs,
    not awaited from the new loop (its connections' futures belong to the old one)."""

    async def new_session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession()

    old_loop = asyncio.new_event_loop()
    try:
        session = old_loop.run_until_complete(new_session())
        asyncio.run(_close_session(session, old_loop))
        assert not session.closed
        old_loop.run_until_complete(asyncio.sleep(0.01))
        assert session.closed
    finally:
        old_loop.close()


def test_parse_rejects_misaligned_or_incomplete_answers() -> None:
    good = {
        "output_ids": [5, 6],
        "meta_info": {
            "finish_reason": {"type": "length", "length": 2},
            "output_token_logprobs": [[-1.0, 5, None], [-2.0, 6, None]],
        },
    }
    assert parse_generate_response(good).finish_reason is FinishReason.LENGTH
    misaligned = {**good, "output_ids": [5, 7]}
    with pytest.raises(EngineError, match="disagree"):
        parse_generate_response(misaligned)
    no_logprobs = {"output_ids": [5], "meta_info": {"finish_reason": {"type": "stop", "matched": 5}}}
    with pytest.raises(EngineError, match="return_logprob"):
        parse_generate_response(no_logprobs)
    with pytest.raises(EngineError, match="finish_reason"):
        parse_generate_response({"meta_info": {"finish_reason": None, "output_token_logprobs": []}})
    with pytest.raises(EngineError, match="expected one JSON object"):
        parse_generate_response([good])


def test_bad_configuration_is_rejected() -> None:
    with pytest.raises(ValueError, match="http"):
        SGLangEngine("127.0.0.1:30000")
    with pytest.raises(ValueError, match="max_attempts"):
        SGLangEngine("http://127.0.0.1:30000", max_attempts=0)

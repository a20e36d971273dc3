"""The SGLang /generate test double, checked at the wire level against SGLang 0.5.23's documented behaviour.

The double stands in for a real SGLang server, which cannot run here (no GPU, no model weights); these
tests pin the parts of its wire format that clients depend on (docs: sglang-generate-api.md), using
the real Qwen3 tokenizer, so that tests built on the double mean something.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from openreward_rl.testing import ScriptedCompletion, SGLangTestServer, scripted_logprob

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]  # <|im_start|>user\nHello<|im_end|>\n...


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


async def post(server: SGLangTestServer, body: dict, path: str = "/generate") -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session:
        async with session.post(server.url + path, json=body) as response:
            payload = await response.json() if response.content_type == "application/json" else {}
            return response.status, payload


def generate_body(sampling_params: dict | None = None, **extra) -> dict:
    body = {"input_ids": PROMPT, "return_logprob": True, **extra}
    if sampling_params is not None:
        body["sampling_params"] = sampling_params
    return body


@pytest.mark.anyio
async def test_stop_appends_eos_once_with_aligned_logprobs_and_full_meta(qwen3_tokenizer) -> None:
    text = "The answer is 42."
    async with SGLangTestServer(qwen3_tokenizer, script=[ScriptedCompletion(text=text)], weight_version="7") as server:
        status, answer = await post(server, generate_body({"max_new_tokens": 64}, rid="ep1_t0"))
    assert status == 200
    expected_ids = encode(qwen3_tokenizer, text) + [qwen3_tokenizer.eos_token_id]
    assert answer["output_ids"] == expected_ids
    assert answer["text"] == text  # the matched EOS is trimmed from text only
    meta = answer["meta_info"]
    assert meta["finish_reason"] == {"type": "stop", "matched": qwen3_tokenizer.eos_token_id}
    assert meta["id"] == "ep1_t0"
    assert meta["prompt_tokens"] == len(PROMPT)
    assert meta["completion_tokens"] == len(expected_ids)
    assert meta["cached_tokens"] == 0 and meta["weight_version"] == "7"
    assert meta["output_token_logprobs_length"] == len(expected_ids)
    assert meta["output_token_logprobs"] == [
        [scripted_logprob(token, len(PROMPT) + index), token, None] for index, token in enumerate(expected_ids)
    ]
    assert all(entry[0] < 0 for entry in meta["output_token_logprobs"])
    assert len({entry[0] for entry in meta["output_token_logprobs"]}) > 1


@pytest.mark.anyio
async def test_max_new_tokens_cuts_with_length_and_default_is_128(qwen3_tokenizer) -> None:
    script = [ScriptedCompletion(text="one two three four five"), ScriptedCompletion(text="la", finish="length")]
    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        _, cut = await post(server, generate_body({"max_new_tokens": 3}))
        _, default = await post(server, generate_body())
    assert cut["output_ids"] == encode(qwen3_tokenizer, "one two three four five")[:3]
    assert cut["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert len(default["output_ids"]) == 128
    assert default["meta_info"]["finish_reason"] == {"type": "length", "length": 128}


@pytest.mark.anyio
async def test_length_check_comes_before_eos_like_sglang(qwen3_tokenizer) -> None:
    text_ids = encode(qwen3_tokenizer, "short")
    async with SGLangTestServer(qwen3_tokenizer, script=[ScriptedCompletion(ids=text_ids)]) as server:
        _, answer = await post(server, generate_body({"max_new_tokens": len(text_ids) + 1}))
    assert answer["output_ids"] == text_ids + [qwen3_tokenizer.eos_token_id]
    assert answer["meta_info"]["finish_reason"] == {"type": "length", "length": len(text_ids) + 1}


@pytest.mark.anyio
async def test_stop_string_ends_on_completing_token_and_trims_text(qwen3_tokenizer) -> None:
    text = 'Sure.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\nnever sampled'
    script = [ScriptedCompletion(text=text), ScriptedCompletion(text=text)]
    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        _, trimmed = await post(server, generate_body({"max_new_tokens": 100, "stop": ["</tool_call>"]}))
        untrimmed = {"max_new_tokens": 100, "stop": "</tool_call>", "no_stop_trim": True}
        _, kept = await post(server, generate_body(untrimmed))
    full = encode(qwen3_tokenizer, text)
    end = full.index(151658) + 1  # </tool_call> is one token in Qwen3
    assert trimmed["output_ids"] == full[:end] == kept["output_ids"]
    assert trimmed["meta_info"]["finish_reason"] == {"type": "stop", "matched": "</tool_call>"}
    assert trimmed["text"] == 'Sure.\n<tool_call>\n{"name": "f", "arguments": {}}\n'
    assert kept["text"].endswith("</tool_call>")


@pytest.mark.anyio
async def test_stop_token_ids_and_ignore_eos(qwen3_tokenizer) -> None:
    ids = encode(qwen3_tokenizer, "alpha beta gamma")
    script = [ScriptedCompletion(ids=ids), ScriptedCompletion(ids=ids)]
    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        _, by_id = await post(server, generate_body({"stop_token_ids": [ids[1]]}))
        _, ignored = await post(server, generate_body({"ignore_eos": True, "max_new_tokens": 10}))
    assert by_id["output_ids"] == ids[:2]
    assert by_id["meta_info"]["finish_reason"] == {"type": "stop", "matched": ids[1]}
    assert ignored["meta_info"]["finish_reason"] == {"type": "length", "length": 10}
    assert ignored["output_ids"][: len(ids) + 1] == ids + [qwen3_tokenizer.eos_token_id]


@pytest.mark.anyio
async def test_text_follows_skip_special_tokens_and_logprob_text(qwen3_tokenizer) -> None:
    script = [ScriptedCompletion(text="<think>\nhm\n</think>\n\nYes")] * 3
    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        _, raw = await post(
            server,
            generate_body({"skip_special_tokens": False, "no_stop_trim": True}, return_text_in_logprobs=True),
        )
        _, untrimmed = await post(server, generate_body({"no_stop_trim": True}))
        _, default = await post(server, generate_body())
    assert raw["text"] == "<think>\nhm\n</think>\n\nYes<|im_end|>"
    assert untrimmed["text"] == default["text"] == "<think>\nhm\n</think>\n\nYes"  # <|im_end|> is special
    assert raw["output_ids"] == untrimmed["output_ids"] == default["output_ids"]  # text options never touch ids
    assert [entry[2] for entry in raw["meta_info"]["output_token_logprobs"]][-1] == "<|im_end|>"


@pytest.mark.anyio
async def test_validation_rejects_like_sglang(qwen3_tokenizer) -> None:
    async with SGLangTestServer(qwen3_tokenizer, script=[], context_len=64) as server:
        unknown = await post(server, generate_body({"max_new_tokens": 8, "include_stop_str_in_output": True}))
        too_long = await post(server, {"input_ids": list(range(64)), "sampling_params": {"max_new_tokens": 1}})
        overflow = await post(server, {"input_ids": list(range(60)), "sampling_params": {"max_new_tokens": 5}})
        default_overflow = await post(server, {"input_ids": list(range(10))})  # default max_new_tokens 128
        temperature = await post(server, generate_body({"temperature": -1}))
        top_p = await post(server, generate_body({"max_new_tokens": 8, "top_p": 0}))
        both_inputs = await post(server, {"input_ids": [1], "text": "x"})
    assert unknown[0] == 400 and "include_stop_str_in_output" in unknown[1]["error"]["message"]
    assert too_long[0] == 400 and "longer than the model's context length" in too_long[1]["error"]["message"]
    assert overflow[0] == 400 and "maximum context length of 64" in overflow[1]["error"]["message"]
    assert default_overflow[0] == 400 and "138 tokens" in default_overflow[1]["error"]["message"]
    assert temperature[0] == 400 and "temperature" in temperature[1]["error"]["message"]
    assert top_p[0] == 400 and "top_p" in top_p[1]["error"]["message"]
    assert both_inputs[0] == 400
    assert server.pending_script == 0 and not server.script_errors  # rejected requests never reach the script
    assert len(server.requests) == 7


@pytest.mark.anyio
async def test_abort_request_matches_rid_prefix_and_returns_partial_output(qwen3_tokenizer) -> None:
    partial = "I was about to"
    script = [ScriptedCompletion(text=partial, hold=True), ScriptedCompletion(text="other", hold=True)]
    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        first = asyncio.ensure_future(post(server, generate_body({"max_new_tokens": 50}, rid="aaa_t1")))
        await server.wait_in_flight(1)
        second = asyncio.ensure_future(post(server, generate_body({"max_new_tokens": 50}, rid="bbb_t1")))
        await server.wait_in_flight(2)
        assert (await post(server, {"rid": "aaa"}, "/abort_request"))[0] == 200
        status, answer = await first
        assert not second.done()
        assert (await post(server, {"rid": ""}, "/abort_request"))[0] == 200  # empty rid is ignored
        assert server.in_flight == ["bbb_t1"]
        await post(server, {"abort_all": True}, "/abort_request")
        _, other = await second
    assert status == 200
    assert answer["output_ids"] == encode(qwen3_tokenizer, partial)
    assert answer["meta_info"]["finish_reason"] == {
        "type": "abort",
        "message": "Aborted",
        "status_code": None,
        "err_type": None,
    }
    assert len(answer["meta_info"]["output_token_logprobs"]) == len(answer["output_ids"])
    assert other["output_ids"] == encode(qwen3_tokenizer, "other")
    assert other["meta_info"]["finish_reason"]["type"] == "abort"


@pytest.mark.anyio
async def test_pause_generation_aborts_in_flight_and_holds_new_requests_until_continue(qwen3_tokenizer) -> None:
    """SGLang's `/pause_generation` in its default mode "abort" (tokenizer_manager.pause_generation): in-flight
    requests answer aborted with their partial output; requests arriving while paused wait for `/continue_generation`."""
    script = [ScriptedCompletion(text="half of a", hold=True), ScriptedCompletion(text="the rest")]
    async with SGLangTestServer(qwen3_tokenizer, script=script, weight_version="1") as server:
        cut = asyncio.ensure_future(post(server, generate_body({"max_new_tokens": 50}, rid="a_t0")))
        await server.wait_in_flight(1)
        assert (await post(server, {}, "/pause_generation"))[0] == 200  # Slime sends `{}`: the default mode
        status, aborted = await cut
        held = asyncio.ensure_future(post(server, generate_body({"max_new_tokens": 50}, rid="a_t0_p1")))
        await server.wait_received(2)
        await asyncio.sleep(0.05)
        assert server.held == ["a_t0_p1"] and not held.done() and server.in_flight == []
        server.weight_version = "2"  # the weight update runs while the server is paused
        assert (await post(server, {}, "/continue_generation"))[0] == 200
        _, rest = await held
        assert (await post(server, {"mode": "retract"}, "/pause_generation"))[0] == 400  # not emulated
    assert status == 200 and aborted["output_ids"] == encode(qwen3_tokenizer, "half of a")
    assert aborted["meta_info"]["finish_reason"]["type"] == "abort" and aborted["meta_info"]["weight_version"] == "1"
    assert rest["output_ids"][:-1] == encode(qwen3_tokenizer, "the rest") and rest["meta_info"]["weight_version"] == "2"
    assert server.held == [] and server.pauses == [{}]


@pytest.mark.anyio
async def test_fault_knobs_and_script_exhaustion(qwen3_tokenizer) -> None:
    async with SGLangTestServer(qwen3_tokenizer, script=[ScriptedCompletion(text="fine", finish="nan")]) as server:
        server.fail_next(1, status=429, message="Too Many Requests")
        server.abort_next(1, message="weights updating")
        rate_limited = await post(server, generate_body())
        invalid = await post(server, generate_body({"top_k": 0}))  # the abort waits for a valid request
        aborted = await post(server, generate_body())
        nan = await post(server, generate_body())
        exhausted = await post(server, generate_body())
        health = await post_get(server, "/health")
    assert rate_limited == (429, {"error": {"message": "Too Many Requests"}})
    assert invalid[0] == 400 and "top_k" in invalid[1]["error"]["message"]
    assert aborted[1]["output_ids"] == [] and aborted[1]["meta_info"]["finish_reason"]["message"] == "weights updating"
    assert nan[1]["meta_info"]["finish_reason"] == {"type": "stop", "matched": "NaN happened"}
    assert nan[1]["output_ids"] == encode(qwen3_tokenizer, "fine") + [qwen3_tokenizer.eos_token_id]
    assert exhausted[0] == 500 and "script exhausted" in exhausted[1]["error"]["message"]
    assert server.script_errors and health == 200


@pytest.mark.anyio
async def test_drop_and_hang_faults(qwen3_tokenizer) -> None:
    async with SGLangTestServer(qwen3_tokenizer, script=[]) as server:
        server.drop_next()
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await post(server, generate_body())
        server.hang_next()
        hung = asyncio.ensure_future(post(server, generate_body()))
        await server.wait_received(2)
        assert not hung.done()
    status, answer = await hung  # closing the server releases the hung request
    assert status == 503 and answer["error"]["message"] == "server shutting down"


@pytest.mark.anyio
async def test_records_requests_and_generates_rid_when_absent(qwen3_tokenizer) -> None:
    def script(request):
        return ScriptedCompletion(text=f"echo {len(request.input_ids)}")

    async with SGLangTestServer(qwen3_tokenizer, script=script) as server:
        async with aiohttp.ClientSession() as session:
            async with session.post(
                server.url + "/generate", json=generate_body({"temperature": 0.7}), headers={"X-SMG-Routing-Key": "ep9"}
            ) as response:
                answer = await response.json()
    (recorded,) = server.requests
    assert recorded.input_ids == PROMPT and recorded.sampling_params == {"temperature": 0.7}
    assert recorded.routing_key == "ep9" and recorded.rid is None
    assert len(answer["meta_info"]["id"]) == 32
    assert answer["text"] == f"echo {len(PROMPT)}"


async def post_get(server: SGLangTestServer, path: str) -> int:
    async with aiohttp.ClientSession() as session:
        async with session.get(server.url + path) as response:
            return response.status

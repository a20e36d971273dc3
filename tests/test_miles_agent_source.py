"""Miles' agentic path through Miles' own code (radixark/miles at 31f1ca9, imported as `tests/miles_source.py` says):
`openreward_rl.backends.miles_agent` as the agent function of Miles' `agentic_tool_call.generate`, called by the
class-based rollout's `generate_and_rm`, every model call through Miles' real v1 session server (`SessionServer`:
its TITO tokenizer for Qwen3, strict message matcher, record keeping and sample assembly), served by uvicorn here.

Real parts besides Miles: the SDK's environment server on 127.0.0.1 (Faulty), the Qwen3 tokenizer and chat template.
Stand-ins: the library's SGLang double (`/generate`) behind `ChatCompletionsStandIn`, for SGLang's
`/v1/chat/completions`, the one SGLang endpoint the session server calls (see its docstring).
"""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import attrs
import pytest
from aiohttp import web

from miles_source import load_miles, miles_args
from openreward_rl.assets import offline_tokenizer_dir
from openreward_rl.backends import miles as miles_hooks
from openreward_rl.backends import miles_agent
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.backends.filters import group_verdict
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.loop.rollout import Rollouts
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from openreward_rl.testing.sglang_server import scripted_logprob
from test_miles_source import blocking

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SUMMARIZE = {"name": "summarize", "threshold": 0.6, "keep_recent_turns": 1, "summary_tokens": 128}
SUBMIT_OK = '<tool_call>\n{"name": "submit", "arguments": {"answer": "ok"}}\n</tool_call>'
SUBMIT_WRONG = '<tool_call>\n{"name": "submit", "arguments": {"answer": "nope"}}\n</tool_call>'
EXPLODE = '<tool_call>\n{"name": "explode", "arguments": {"message": "boom"}}\n</tool_call>'
WAIT = 'Let me wait first.\n<tool_call>\n{"name": "hang", "arguments": {"seconds": 0}}\n</tool_call>'

# SGLang's ChatCompletionRequest names of sampling fields, as its chat serving hands them to the engine
_TO_SAMPLING = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens", "seed": "sampling_seed"}
_SAMPLING_FIELDS = {
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "stop_token_ids",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "ignore_eos",
    "no_stop_trim",
}


class ChatCompletionsStandIn:
    """SGLang's `POST /v1/chat/completions` as Miles' session server calls it, over the library's SGLang double.

    Why a stand-in: the session server sends SGLang the chat body with its own `input_ids` (Miles owns the tokens;
    SGLang then skips rendering the messages), `logprobs: true`, `return_meta_info: true` and `no_stop_trim: false`,
    and reads `choices[0].message` (content, with `--tool-call-parser qwen25`'s `<tool_call>` blocks parsed into
    `tool_calls`), `choices[0].finish_reason` and `choices[0].meta_info` (the engine's `meta_info`, whose
    `output_token_logprobs` and `completion_tokens` it records). The double speaks `/generate` only; this adds
    that thin layer: the ids and sampling fields go to `/generate` unchanged, and the reply is built from its answer.
    """

    def __init__(self, tokenizer: Any, generate_url: str) -> None:
        self.tokenizer = tokenizer
        self.generate_url = generate_url
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ChatCompletionsStandIn:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._http = aiohttp.ClientSession()
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._runner is not None and self._http is not None
        await self._runner.cleanup()
        await self._http.close()

    async def _chat(self, request: web.Request) -> web.Response:
        assert self._http is not None
        body = await request.json()
        assert body.get("logprobs") is True and body.get("return_meta_info") is True, "the session server asks for both"
        params = {
            _TO_SAMPLING.get(key, key): value
            for key, value in body.items()
            if value is not None and (key in _TO_SAMPLING or key in _SAMPLING_FIELDS)
        }
        payload = {"input_ids": body["input_ids"], "sampling_params": params, "return_logprob": True}
        headers = {key: value for key, value in request.headers.items() if key.lower().startswith("x-")}
        async with self._http.post(f"{self.generate_url}/generate", json=payload, headers=headers) as upstream:
            if upstream.status != 200:
                return web.Response(status=upstream.status, body=await upstream.read(), content_type="application/json")
            answer = await upstream.json()
        meta = answer["meta_info"]
        ids = [int(entry[1]) for entry in meta["output_token_logprobs"]]
        finish = meta["finish_reason"]
        stopped_on_token = finish.get("type") == "stop" and isinstance(finish.get("matched"), int)
        text = self.tokenizer.decode(
            ids[:-1] if stopped_on_token and not params.get("no_stop_trim") else ids, skip_special_tokens=False
        )
        content, calls = _parse_tool_calls(text)
        message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": calls or None}
        finish_reason = "tool_calls" if calls and finish.get("type") == "stop" else finish.get("type")
        return web.json_response(
            {
                "id": meta.get("id") or uuid.uuid4().hex,
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "meta_info": meta}],
                "usage": {
                    "prompt_tokens": len(body["input_ids"]),
                    "completion_tokens": len(ids),
                    "total_tokens": len(body["input_ids"]) + len(ids),
                },
            }
        )


def _parse_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """SGLang's qwen25 detector: the text before the first `<tool_call>` (stripped) and each block's JSON call."""
    start = text.find("<tool_call>")
    if start < 0:
        return text, []
    calls = []
    for index, block in enumerate(text[start:].split("<tool_call>")[1:]):
        raw = block.split("</tool_call>")[0].strip()
        parsed = json.loads(raw)
        arguments = json.dumps(parsed.get("arguments", {}), ensure_ascii=False)
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "index": index,
                "type": "function",
                "function": {"name": parsed["name"], "arguments": arguments},
            }
        )
    return text[:start].strip(), calls


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Miles' defaults of the flags its session server reads (miles/utils/arguments.py), with the ones its docs give for Qwen3
SESSION_SERVER_ARGS = dict(
    use_session_server=True,
    session_server_ip="127.0.0.1",
    tito_model="qwen3",
    session_message_matcher="strict",
    sglang_speculative_algorithm=None,
    save_debug_trajectory_data=None,
    pause_generation_mode="retract",
)


@attrs.define
class Stack:
    miles: Any
    sglang: SGLangTestServer
    session_port: int
    checkpoint: str

    def args(self, **overrides: Any) -> Any:
        values = dict(
            custom_generate_function_path="openreward_rl.backends.miles_agent.generate",
            custom_agent_function_path="openreward_rl.backends.miles_agent.run",
            **SESSION_SERVER_ARGS,
            session_server_port=self.session_port,
            session_server_ports=[self.session_port],
            max_seq_len=None,
            rollout_max_context_len=4096,
        )
        args = miles_args(
            self.sglang.port, self.checkpoint, **{**values, **overrides}
        )  # the double answers as its own router
        self.miles.http_utils.init_http_client(args)  # RolloutManager does this once at start
        return args

    async def generate_and_rm(self, args: Any, sample: Any) -> Any:
        """Miles' class-based `generate_and_rm` for `sample`, on Miles' rollout event loop as Miles runs it."""
        state = self.miles.common.GenerateState(args)
        coroutine = self.miles.common.generate_and_rm(state, sample, state.sampling_params)
        return await blocking(self.miles.async_utils.run, coroutine, timeout=45.0)


@pytest.fixture(scope="module")
def miles() -> Any:
    return load_miles()


@pytest.fixture
async def stack(miles: Any, qwen3_tokenizer: Any) -> AsyncIterator[Stack]:
    import uvicorn
    from miles.rollout.session.server import SessionServer

    checkpoint = str(offline_tokenizer_dir("qwen3"))
    port = _free_port()
    async with (
        SGLangTestServer(qwen3_tokenizer, weight_version="w3") as sglang,
        ChatCompletionsStandIn(qwen3_tokenizer, sglang.url) as chat,
    ):
        server_args = miles_args(0, checkpoint, **SESSION_SERVER_ARGS, session_server_port=port)
        session_server = SessionServer(server_args, chat.url)
        uvicorn_server = uvicorn.Server(
            uvicorn.Config(session_server.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        )
        serving = asyncio.create_task(uvicorn_server.serve())
        while not uvicorn_server.started:
            assert not serving.done(), "the session server did not start"
            await asyncio.sleep(0.01)
        try:
            yield Stack(miles, sglang, port, checkpoint)
        finally:
            uvicorn_server.should_exit = True
            await serving
            await session_server.client.aclose()  # its shutdown hook, which lifespan="off" does not run
            await blocking(
                miles.async_utils.run, miles_agent.close_agent_states()
            )  # the agent's states live on Miles' loop


def make_sample(miles: Any, index: int = 0, group_index: int = 0) -> Any:
    row = task_row(TaskRef("Faulty", "train", index=index, variant="faulty"))
    return miles.types.Sample(
        index=group_index, group_index=group_index, prompt=row["prompt"], metadata=row["metadata"]
    )


def record_of(sample: Any) -> EpisodeRecord:
    return EpisodeRecord.from_metadata(sample.metadata)


async def test_an_agent_episode_through_miles_session_server_trains_what_it_sampled(
    stack: Stack, served_config: Any, qwen3_tokenizer: Any, monkeypatch: Any
) -> None:
    """Two model calls (a tool turn, then the right answer): Miles' session server owns the tokens, so the sample is
    exactly the two calls' contexts and sampled ids, the sampled ids trained with the log-probs SGLang gave, which
    are the ids and log-probs the episode recorded."""
    served_config({"Faulty": {}})  # the default context policy
    played: list[Trajectory] = []
    play = Rollouts.run

    async def recording(self: Rollouts, *args: Any, **kwargs: Any) -> Trajectory:
        played.append(await play(self, *args, **kwargs))
        return played[-1]

    monkeypatch.setattr(Rollouts, "run", recording)
    stack.sglang.push(ScriptedCompletion(text=WAIT), ScriptedCompletion(text=SUBMIT_OK))
    args = stack.args()
    sample = await stack.generate_and_rm(args, make_sample(stack.miles))
    (episode,) = played
    trained = [index for index, mask in enumerate(sample.loss_mask) if mask]
    response = sample.tokens[-sample.response_length :]
    assert [response[i] for i in trained] == [
        t for t, mask in zip(episode.response_ids, episode.loss_mask, strict=True) if mask
    ]
    assert [sample.rollout_log_probs[i] for i in trained] == [
        p for p, mask in zip(episode.rollout_logprobs, episode.loss_mask, strict=True) if mask
    ]
    record = record_of(sample)
    assert (
        record.stop_reason is StopReason.COMPLETED and record.episode_reward == 1.0 and record.metrics["turns"] == 2.0
    )
    assert (
        sample.status is stack.miles.types.Sample.Status.COMPLETED and sample.reward == 1.0
    )  # Miles' RM call read the record
    first, second = stack.sglang.requests
    end = qwen3_tokenizer.convert_tokens_to_ids("<|im_end|>")
    sampled = [qwen3_tokenizer.encode(WAIT) + [end], qwen3_tokenizer.encode(SUBMIT_OK) + [end]]
    assert (
        second.input_ids[: len(first.input_ids) + len(sampled[0])] == first.input_ids + sampled[0]
    )  # TITO: the history replayed as sampled
    assert sample.tokens == second.input_ids + sampled[1]
    gap = len(second.input_ids) - len(first.input_ids) - len(sampled[0])
    assert gap > 0 and sample.response_length == len(sampled[0]) + gap + len(sampled[1])
    assert sample.loss_mask == [1] * len(sampled[0]) + [0] * gap + [1] * len(sampled[1])
    # the double's log-prob of each sampled id at its absolute position; the tool turn's tokens carry 0.0
    expected = [*_logprobs(first.input_ids, sampled[0]), *[0.0] * gap, *_logprobs(second.input_ids, sampled[1])]
    assert sample.rollout_log_probs == expected
    assert sample.weight_versions == ["w3", "w3"]
    assert sample.metadata["agent_metrics"]["model_calls"] == 2.0 and sample.non_generation_time >= 0.0
    assert (
        first.sampling_params["max_new_tokens"] <= args.rollout_max_response_len
        and first.sampling_params["temperature"] == 1.0
    )


def _logprobs(context: list[int], ids: list[int]) -> list[float]:
    return [scripted_logprob(token, len(context) + index) for index, token in enumerate(ids)]


async def test_a_named_context_policy_is_refused_and_ends_the_rollout_step(stack: Stack, served_config: Any) -> None:
    """Miles' session server takes a later request only if it replays the stored history, which a compacted context
    does not: the agent refuses before any model call, past Miles' `except Exception` around the agent function."""
    served_config({"Faulty": {"context_policy": SUMMARIZE}})
    with pytest.raises(miles_hooks.RolloutStepError, match="context_policy"):
        await stack.generate_and_rm(stack.args(), make_sample(stack.miles))
    assert stack.sglang.requests == []


async def test_an_environment_fault_mid_episode_is_removed_not_a_zero_reward(stack: Stack, served_config: Any) -> None:
    """Miles sets COMPLETED from the last model call; the episode says the environment failed: ABORTED, removed,
    nothing trained, the placeholder reward 0.0 preset (Miles runs no reward model for ABORTED), and the dynamic
    filter drops the group."""
    served_config({"Faulty": {}})
    stack.sglang.push(ScriptedCompletion(text=EXPLODE))
    args = stack.args()
    failed = await stack.generate_and_rm(args, make_sample(stack.miles))
    record = record_of(failed)
    assert (
        record.stop_reason is StopReason.ENV_ERROR and "boom" in record.stop_detail and record.reward_observed is False
    )
    assert failed.status is stack.miles.types.Sample.Status.ABORTED and failed.remove_sample and failed.reward == 0.0
    assert failed.response_length > 0 and not any(failed.loss_mask) and not any(failed.rollout_log_probs)
    stack.sglang.push(ScriptedCompletion(text=SUBMIT_OK))
    ok = await stack.generate_and_rm(args, make_sample(stack.miles, group_index=1))
    assert ok.reward == 1.0 and group_verdict(args, [failed, ok]) == (False, "aborted_member")


async def test_an_environment_that_never_opens_gives_a_removed_placeholder(stack: Stack, served_config: Any) -> None:
    """No model call reached the session: Miles returns a copy of the input sample, ABORTED, without the agent's
    record, and runs no reward model; it comes back as the masked placeholder with the episode's record."""
    served_config({"Faulty": {}})
    sample = await stack.generate_and_rm(stack.args(), make_sample(stack.miles, index=999))
    assert stack.sglang.requests == []
    assert (
        sample.status is stack.miles.types.Sample.Status.ABORTED
        and sample.remove_sample is True
        and sample.reward == 0.0
    )
    assert sample.response_length == 1 and sample.loss_mask == [0] and sample.rollout_log_probs == [0.0]
    record = record_of(sample)
    assert record.stop_reason is StopReason.ENV_ERROR and record.placeholder and record.reward_observed is False


async def broken_agent(**kwargs: Any) -> Any:
    raise RuntimeError("agent broke")


async def test_an_agent_that_raises_gives_a_removed_placeholder(stack: Stack, served_config: Any) -> None:
    """The agent function itself fails: Miles logs it, collects nothing and returns the input sample, ABORTED."""
    served_config({"Faulty": {}})
    args = stack.args(custom_agent_function_path=f"{__name__}.broken_agent")
    sample = await stack.generate_and_rm(args, make_sample(stack.miles))
    assert sample.status is stack.miles.types.Sample.Status.ABORTED and sample.remove_sample and sample.reward == 0.0
    assert (
        record_of(sample).stop_reason is StopReason.ABORTED
        and "without the agent's record" in record_of(sample).stop_detail
    )


async def test_group_rm_scores_the_group_through_miles(stack: Stack, served_config: Any) -> None:
    """`--group-rm`: Miles' `generate_and_rm_group` leaves every reward to the reward hook, a removed member's too."""
    served_config({"Faulty": {}})
    stack.sglang.push(ScriptedCompletion(text=SUBMIT_OK))
    args = stack.args(group_rm=True)
    state = stack.miles.common.GenerateState(args)
    group = [make_sample(stack.miles, index=999), make_sample(stack.miles, group_index=1)]
    coroutine = stack.miles.common.generate_and_rm_group(state, group, state.sampling_params)
    failed, ok = await blocking(stack.miles.async_utils.run, coroutine, timeout=45.0)
    assert ok.reward == 1.0 and ok.status is stack.miles.types.Sample.Status.COMPLETED
    assert failed.reward == 0.0 and failed.remove_sample and failed.status is stack.miles.types.Sample.Status.ABORTED


async def test_miles_generate_used_directly_with_the_tokenizer_variable(
    stack: Stack, served_config: Any, monkeypatch: Any
) -> None:
    """Miles' own agentic generate as `--custom-generate-function-path`: `run` finds the tokenizer through the variable."""
    served_config({"Faulty": {}})
    monkeypatch.setenv(miles_agent.TOKENIZER_ENV, stack.checkpoint)
    stack.sglang.push(ScriptedCompletion(text=SUBMIT_WRONG))
    args = stack.args(custom_generate_function_path=f"{miles_agent.AGENTIC_GENERATE_MODULE}.generate")
    sample = await stack.generate_and_rm(args, make_sample(stack.miles))
    assert sample.status is stack.miles.types.Sample.Status.COMPLETED and sample.reward == 0.0
    assert record_of(sample).episode_reward == 0.0 and record_of(sample).reward_observed is True


async def test_the_agent_without_args_names_the_fix(stack: Stack, served_config: Any, monkeypatch: Any) -> None:
    served_config({"Faulty": {}})
    monkeypatch.delenv(miles_agent.TOKENIZER_ENV, raising=False)
    with pytest.raises(
        miles_hooks.RolloutStepError, match="OPENREWARD_RL_TOKENIZER"
    ):  # a ConfigError Miles would swallow, raised past it
        await miles_agent.run(
            f"http://127.0.0.1:{stack.session_port}/sessions/x", [], {}, make_sample(stack.miles).metadata
        )


def test_request_kwargs_map_back_to_sglang_names(miles: Any) -> None:
    """What Miles' `build_chat_request_kwargs` makes of the rollout's sampling params, `run` turns back into SGLang's."""
    sampling = {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_new_tokens": 64,
        "no_stop_trim": True,
        "sampling_seed": 5,
        "custom_params": {"keep": 1},
    }
    expected = {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_new_tokens": 64,
        "no_stop_trim": True,
        "sampling_seed": 5,
    }
    assert miles_agent.chat_sampling_params(miles.agentic.build_chat_request_kwargs(sampling)) == expected

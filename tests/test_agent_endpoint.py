"""The agent endpoint (`openreward_rl.agent_endpoint`): the plain `openai` client, changed only by its base URL,
talks to `AgentEndpoint` in front of `SGLangEngine` on `SGLangTestServer` (the double of SGLang's `/generate`
with the real Qwen tokenizers and chat templates). Every model call must get exactly the ids the model's
chat template writes for the messages the agent sent, and the recorded segments must be those ids, the
sampled ids verbatim (mask 1, the double's log-probs) and the bridges (mask 0)."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs
import httpx
import openai
import pytest
from openai import AsyncOpenAI

from hermes_calls import call
from openreward_rl.agent_endpoint import AgentEndpoint, EpisodeRecorder, RecorderSettings
from openreward_rl.assets import load_tokenizer
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.families import get_family
from openreward_rl.families.base import ModelFamily
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.loop.trajectory import StopReason
from openreward_rl.parsers import get_parser
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from openreward_rl.testing.sglang_server import RecordedRequest
from scripted_training_view import expected_mask_and_logprobs

pytestmark = pytest.mark.anyio

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@attrs.define
class Stack:
    server: SGLangTestServer
    endpoint: AgentEndpoint
    tokenizer: Any
    family: ModelFamily
    template_kwargs: dict[str, Any]
    sent: list[list[dict[str, Any]]] = attrs.Factory(list)  # what the agent sent, request by request
    clients: list[AsyncOpenAI] = attrs.Factory(list)

    def client(self, key: str = "e1", api_key: str = "unused") -> AsyncOpenAI:
        self.clients.append(AsyncOpenAI(base_url=self.endpoint.base_url(key), api_key=api_key, max_retries=0))
        return self.clients[-1]

    async def create(self, client: AsyncOpenAI, messages: list[Any], **options: Any) -> Any:
        self.sent.append([as_dict(m) for m in messages])
        return await client.chat.completions.create(model="policy", messages=messages, **options)

    def as_template_writes(self, ids: list[int]) -> list[int]:
        rule = self.family.history_rule
        return rule(self.tokenizer, ids) if rule else ids

    def template(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = (ADD,)
    ) -> list[int]:
        return self.as_template_writes(template_ids(self.tokenizer, messages, tools, self.template_kwargs))

    @property
    def generates(self) -> list[RecordedRequest]:
        return [r for r in self.server.requests if r.path == "/generate"]


def as_dict(message: Any) -> dict[str, Any]:
    return message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else copy.deepcopy(message)


def template_ids(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    template_kwargs: dict[str, Any],
) -> list[int]:
    """The chat template's own rendering of what the agent sent (call arguments as objects, as templates read them)."""
    rendered = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                for c in message["tool_calls"]
            ]
        rendered.append(message)
    text = tokenizer.apply_chat_template(
        rendered, tools=list(tools) if tools else None, add_generation_prompt=True, tokenize=False, **template_kwargs
    )
    return tokenizer.encode(text, add_special_tokens=False)


def assert_one_exact_segment(
    stack: Stack, recorder: EpisodeRecorder, tools: Sequence[dict[str, Any]] | None = (ADD,)
) -> None:
    """Each model call got the template's ids for the agent's messages (through the family's history rule,
    `check-model`'s comparison); the one segment is those calls' ids, the sampled ones trained."""
    requests = stack.generates
    assert len(requests) == len(stack.sent)
    for request, messages in zip(requests, stack.sent):
        assert stack.as_template_writes(request.input_ids) == template_ids(
            stack.tokenizer, messages, tools, stack.template_kwargs
        )
    assert len(recorder.ledger.segments) == 1
    sampled = [list(t.sampled_ids) for t in recorder.turns]
    segment = recorder.ledger.segments[0]
    assert segment.prompt_ids == requests[0].input_ids
    assert segment.context() == requests[-1].input_ids + sampled[-1]
    mask, logprobs = expected_mask_and_logprobs(requests, sampled)
    assert segment.loss_mask == mask and segment.rollout_logprobs == pytest.approx(logprobs)


@pytest.fixture(params=[("offline:qwen2.5", "qwen"), ("offline:qwen3", "qwen3")], ids=["qwen2.5", "qwen3"])
async def stack(request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    tokenizer_name, family_name = request.param
    tokenizer, family = load_tokenizer(tokenizer_name), get_family(family_name)
    template_kwargs = {"enable_thinking": False} if family_name == "qwen3" else {}
    async with SGLangTestServer(tokenizer) as server:
        engine = SGLangEngine(server.url, max_attempts=1)
        renderer = family.renderer(tokenizer, template_kwargs)
        try:
            async with AgentEndpoint(
                engine, renderer, get_parser(family.parser), RecorderSettings(max_new_tokens=256)
            ) as endpoint:
                stack = Stack(server, endpoint, tokenizer, family, template_kwargs)
                yield stack
                for client in stack.clients:
                    await client.close()
        finally:
            await engine.aclose()


async def tool_loop(stack: Stack, client: AsyncOpenAI, question: str, **options: Any) -> list[Any]:
    """The `openai` client's function-calling loop, as its docs write it."""
    messages: list[Any] = [{"role": "user", "content": question}]
    while True:
        response = await stack.create(client, messages, tools=[ADD], **options)
        message = response.choices[0].message
        messages.append(message)
        if not message.tool_calls:
            return messages
        for tool_call in message.tool_calls:
            arguments = json.loads(tool_call.function.arguments)
            messages.append(
                {"role": "tool", "tool_call_id": tool_call.id, "content": str(arguments["a"] + arguments["b"])}
            )


async def test_the_openai_tool_loop_records_one_token_exact_sample(stack: Stack) -> None:
    stack.server.push(
        ScriptedCompletion(text="Let me add.\n" + call("add", a=1, b=2) + "\n" + call("add", a=3, b=4)),
        ScriptedCompletion(text=call("add", a=3, b=7)),
        ScriptedCompletion(text="The sum is 10."),
    )
    recorder = stack.endpoint.open_episode("e1")
    messages = await tool_loop(stack, stack.client(), "What is 1+2+3+4?")
    stack.endpoint.close_episode("e1")
    assert messages[-1].content == "The sum is 10."
    first = messages[1]
    assert first.content == "Let me add." and [
        (c.function.name, json.loads(c.function.arguments)) for c in first.tool_calls
    ] == [
        ("add", {"a": 1, "b": 2}),
        ("add", {"a": 3, "b": 4}),
    ]
    assert len(recorder.turns) == 3 and not recorder.compactions and recorder.unchosen == 0
    assert [len(t.parsed.tool_calls) for t in recorder.turns] == [2, 1, 0]
    assert_one_exact_segment(stack, recorder)


async def test_streamed_answers_arrive_in_the_api_shape(stack: Stack) -> None:
    stack.server.push(ScriptedCompletion(text="Sure.\n" + call("add", a=2, b=2)), ScriptedCompletion(text="Four."))
    recorder = stack.endpoint.open_episode("e1")
    client = stack.client()
    messages: list[Any] = [{"role": "user", "content": "2+2?"}]
    stack.sent.append(copy.deepcopy(messages))
    stream = await client.chat.completions.create(
        model="p", messages=messages, tools=[ADD], stream=True, stream_options={"include_usage": True}
    )
    content, calls, finish, usage = "", {}, None, None
    async for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or ():
                entry = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = delta.id or entry["id"]
                entry["name"] += (delta.function.name or "") if delta.function else ""
                entry["arguments"] += (delta.function.arguments or "") if delta.function else ""
            finish = choice.finish_reason or finish
    assert content == "Sure." and finish == "tool_calls" and len(calls) == 1
    assert calls[0]["name"] == "add" and json.loads(calls[0]["arguments"]) == {"a": 2, "b": 2}
    assert usage is not None and usage.prompt_tokens == len(stack.generates[0].input_ids)
    tool_calls = [
        {"id": calls[0]["id"], "type": "function", "function": {"name": "add", "arguments": calls[0]["arguments"]}}
    ]
    messages += [
        {"role": "assistant", "content": content, "tool_calls": tool_calls},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "4"},
    ]
    final = await stack.create(client, messages, tools=[ADD])
    assert final.choices[0].message.content == "Four." and final.choices[0].finish_reason == "stop"
    stack.endpoint.close_episode("e1")
    assert_one_exact_segment(stack, recorder)


async def test_the_chosen_one_of_n_answers_continues_the_sample(stack: Stack) -> None:
    stack.server.push(
        ScriptedCompletion(text=call("add", a=1, b=1)),
        ScriptedCompletion(text=call("add", a=5, b=5)),
        ScriptedCompletion(text="Ten."),
    )
    recorder = stack.endpoint.open_episode("e1")
    client = stack.client()
    messages: list[Any] = [{"role": "user", "content": "Add something."}]
    response = await stack.create(client, messages, tools=[ADD], n=2)
    assert [c.index for c in response.choices] == [0, 1]
    second = response.choices[1].message
    assert json.loads(second.tool_calls[0].function.arguments) == {"a": 5, "b": 5}
    messages += [second, {"role": "tool", "tool_call_id": second.tool_calls[0].id, "content": "10"}]
    await stack.create(client, messages, tools=[ADD])
    stack.endpoint.close_episode("e1")
    assert recorder.unchosen == 1 and len(recorder.turns) == 2
    assert recorder.turns[0].parsed.tool_calls[0].arguments == {"a": 5, "b": 5}
    requests = stack.generates
    assert stack.as_template_writes(requests[2].input_ids) == stack.template(stack.sent[1])
    assert requests[2].input_ids[: len(requests[1].input_ids) + len(recorder.turns[0].sampled_ids)] == requests[
        1
    ].input_ids + list(recorder.turns[0].sampled_ids)


async def test_a_rewritten_history_opens_a_new_segment(stack: Stack) -> None:
    stack.server.push(
        ScriptedCompletion(text=call("add", a=1, b=2)),
        ScriptedCompletion(text="Three."),
        ScriptedCompletion(text="Still three."),
    )
    recorder = stack.endpoint.open_episode("e1")
    client = stack.client()
    messages = await tool_loop(stack, client, "1+2?")
    summary = [
        {"role": "user", "content": "Earlier you found that 1+2 is 3. Say it again."}
    ]  # the agent summarised its history
    await stack.create(client, summary, tools=[ADD])
    stack.endpoint.close_episode("e1")
    assert messages[-1].content == "Three."
    assert len(recorder.ledger.segments) == 2 and [c.kind for c in recorder.compactions] == ["rewrite"]
    first, second = recorder.ledger.segments
    requests = stack.generates
    assert first.context() == requests[1].input_ids + list(
        recorder.turns[1].sampled_ids
    )  # the answer never continued stays
    assert second.prompt_ids == stack.as_template_writes(requests[2].input_ids) == stack.template(summary)
    assert second.response_ids == list(recorder.turns[2].sampled_ids) and second.loss_mask == [1] * len(
        second.response_ids
    )


async def test_an_edited_answer_is_never_continued(stack: Stack) -> None:
    stack.server.push(ScriptedCompletion(text=call("add", a=1, b=2)), ScriptedCompletion(text="Three."))
    recorder = stack.endpoint.open_episode("e1")
    client = stack.client()
    response = await stack.create(client, [{"role": "user", "content": "1+2?"}], tools=[ADD])
    edited = as_dict(response.choices[0].message)
    edited["tool_calls"][0]["function"]["arguments"] = json.dumps({"a": 2, "b": 1})
    messages = [
        {"role": "user", "content": "1+2?"},
        edited,
        {"role": "tool", "tool_call_id": edited["tool_calls"][0]["id"], "content": "3"},
    ]
    await stack.create(client, messages, tools=[ADD])
    stack.endpoint.close_episode("e1")
    assert (
        len(recorder.ledger.segments) == 2
    )  # the model never wrote the edited call: its tokens are the template's, in a new segment
    assert (
        recorder.ledger.segments[1].prompt_ids
        == stack.as_template_writes(stack.generates[1].input_ids)
        == stack.template(messages)
    )


async def test_tool_choice_none_and_required(stack: Stack) -> None:
    stack.server.push(
        ScriptedCompletion(text="No tools: " + call("add", a=1, b=2)),
        ScriptedCompletion(text='\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'),
    )
    recorder = stack.endpoint.open_episode("e1")
    client = stack.client()
    messages: list[Any] = [{"role": "user", "content": "1+2?"}]
    plain = await stack.create(client, messages, tools=[ADD], tool_choice="none")
    assert plain.choices[0].message.tool_calls is None and plain.choices[0].finish_reason == "stop"
    assert plain.choices[0].message.content.startswith("No tools: <tool_call>")
    forced = await stack.create(client, messages, tools=[ADD], tool_choice="required")
    assert forced.choices[0].finish_reason == "tool_calls"
    assert json.loads(forced.choices[0].message.tool_calls[0].function.arguments) == {"a": 1, "b": 2}
    opener = stack.tokenizer.encode("<tool_call>", add_special_tokens=False)
    assert stack.generates[1].input_ids == stack.generates[0].input_ids + opener  # the opener is context, not sampled
    with pytest.raises(openai.BadRequestError, match="tool_choice naming one function is not supported"):
        await client.chat.completions.create(
            model="p", messages=messages, tools=[ADD], tool_choice={"type": "function", "function": {"name": "add"}}
        )
    stack.endpoint.close_episode("e1")
    assert recorder.unchosen == 1 and len(recorder.turns) == 1
    segment = recorder.ledger.current
    assert segment.loss_mask == [0] * len(opener) + [1] * len(recorder.turns[0].sampled_ids)


async def test_limits_stops_and_refusals(stack: Stack) -> None:
    stack.server.push(
        ScriptedCompletion(text="one two three four five six seven"), ScriptedCompletion(text="alpha END beta")
    )
    stack.endpoint.open_episode("e1")
    client = stack.client()
    messages = [{"role": "user", "content": "Count."}]
    cut = await stack.create(client, messages, max_completion_tokens=3)
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 3
    assert stack.generates[0].sampling_params["max_new_tokens"] == 3
    stopped = await stack.create(client, messages, stop=["END"], temperature=0.5, top_p=0.9)
    assert stopped.choices[0].message.content.strip() == "alpha" and stopped.choices[0].finish_reason == "stop"
    params = stack.generates[1].sampling_params
    assert params["stop"] == ["END"] and params["temperature"] == 0.5 and params["top_p"] == 0.9
    with pytest.raises(openai.NotFoundError, match="no episode 'nope'"):
        await stack.client("nope").chat.completions.create(model="p", messages=messages)
    with pytest.raises(openai.BadRequestError, match="logit_bias: not supported"):
        await client.chat.completions.create(model="p", messages=messages, logit_bias={"1": 5})
    with pytest.raises(openai.BadRequestError, match="pre-filled assistant turn"):
        await client.chat.completions.create(model="p", messages=[*messages, {"role": "assistant", "content": "I"}])


async def test_an_engine_failure_is_a_503_and_an_aborted_episode(stack: Stack) -> None:
    recorder = stack.endpoint.open_episode("e1")
    stack.server.fail_next(1)
    with pytest.raises(openai.InternalServerError, match="engine"):
        await stack.client().chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}])
    assert recorder.fault is not None and recorder.fault[0] is StopReason.ABORTED


async def test_the_api_key_is_checked() -> None:
    tokenizer = load_tokenizer("offline:qwen2.5")
    async with AgentEndpoint(None, ChatRenderer(tokenizer), get_parser("hermes"), api_key="secret") as endpoint:  # type: ignore[arg-type]
        endpoint.open_episode("e1")
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                endpoint.base_url("e1") + "/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}]}
            )
            listed = await http.get(endpoint.base_url("e1") + "/models", headers={"Authorization": "Bearer secret"})
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"
    assert listed.status_code == 200 and listed.json()["data"][0]["id"] == "openreward-rl-policy"

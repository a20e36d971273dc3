"""`AgentEpisode`: agent programs not written for this library, changed only by their base URL, run episodes
of PaintOrder (and Faulty) on the SDK's real `Server` on 127.0.0.1, through `AgentEndpoint` in front of
`SGLangEngine` on `SGLangTestServer` (real Qwen2.5 tokenizer and chat template). Every model call must get
exactly the ids the chat template writes for what the agent sent; rewards are the environment's; a hung,
crashing or failing agent is an infrastructure failure with its reason, never a reward."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from openai import AsyncOpenAI
from openreward import AsyncOpenReward

from hermes_calls import call
from openreward_rl import EpisodeSettings, TaskRef, Trajectory, run_episode
from openreward_rl.agent_endpoint import AgentEndpoint, RecorderSettings
from openreward_rl.agent_endpoint.episode import AgentEpisode, AgentTask, SubprocessAgent, agent_episode_builder
from openreward_rl.assets import load_tokenizer
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.env.local_server import LocalEnvServer, import_file, serve_environments
from openreward_rl.families import get_family
from openreward_rl.loop.episode import first_system_prompt
from openreward_rl.loop.trajectory import StopReason
from openreward_rl.parsers import get_parser
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from openreward_rl.testing.sglang_server import RecordedRequest
from scripted_training_view import expected_mask_and_logprobs

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[1]
PAINT_ORDER = import_file(REPO / "examples" / "environments" / "paint_order.py").PaintOrder
EXAMPLE_AGENT = REPO / "examples" / "own_agent" / "openai_tool_loop.py"
solve = import_file(EXAMPLE_AGENT).solve


@pytest.fixture(scope="module")
def paint_server() -> Iterator[LocalEnvServer]:
    with serve_environments(
        [
            f"{REPO / 'examples' / 'environments' / 'paint_order.py'}:PaintOrder",
            f"{REPO / 'examples' / 'environments' / 'faulty.py'}:Faulty",
        ]
    ) as server:
        yield server


@attrs.define
class Stack:
    env_server: LocalEnvServer
    client: AsyncOpenReward
    server: SGLangTestServer
    endpoint: AgentEndpoint
    tokenizer: Any
    sent: list[list[dict[str, Any]]] = attrs.Factory(list)

    def task(self, index: int = 0, environment: str = "PaintOrder") -> TaskRef:
        spec = PAINT_ORDER.task("train", index) if environment == "PaintOrder" else None
        return TaskRef(
            environment,
            "train",
            index=index,
            task_spec=spec,
            base_url=self.env_server.base_url,
            variant=self.env_server.variant_for(environment),
        )

    async def run(
        self, agent: Any, *, index: int = 0, environment: str = "PaintOrder", agent_timeout: float | None = 60.0
    ) -> Trajectory:
        return await run_episode(
            lambda: AgentEpisode(self.endpoint, agent, agent_timeout=agent_timeout),
            self.client,
            self.task(index, environment),
            attempts=1,
        )

    @property
    def generates(self) -> list[RecordedRequest]:
        return [r for r in self.server.requests if r.path == "/generate"]


@pytest.fixture
async def stack(paint_server: LocalEnvServer) -> AsyncIterator[Stack]:
    tokenizer = load_tokenizer("offline:qwen2.5")
    client = AsyncOpenReward(api_key="local")
    family = get_family("qwen")
    async with SGLangTestServer(tokenizer) as server:
        engine = SGLangEngine(server.url, max_attempts=1)
        try:
            async with AgentEndpoint(
                engine, family.renderer(tokenizer), get_parser(family.parser), RecorderSettings(max_new_tokens=256)
            ) as endpoint:
                yield Stack(paint_server, client, server, endpoint, tokenizer)
        finally:
            await engine.aclose()
            await client.environments.aclose()


def script_right_answer(stack: Stack, index: int) -> str:
    task = PAINT_ORDER.task("train", index)
    stack.server.push(
        ScriptedCompletion(text="I will read it.\n" + call("read_order", order=task["order"])),
        ScriptedCompletion(text=task["colour"]),
    )
    return task["colour"]


def template_ids(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
    rendered = []
    for message in messages:
        if message.get("tool_calls"):
            calls = [
                {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                for c in message["tool_calls"]
            ]
            message = {**message, "tool_calls": calls}
        rendered.append(message)
    return tokenizer.encode(
        tokenizer.apply_chat_template(rendered, tools=tools, add_generation_prompt=True, tokenize=False),
        add_special_tokens=False,
    )


def assert_token_exact(stack: Stack, trajectory: Trajectory, tools: list[dict[str, Any]]) -> None:
    """Each model call got the template's ids for the conversation the agent held (its messages are the
    trajectory's, up to each turn's answer); the one segment is those calls' ids, the sampled ones trained."""
    requests = stack.generates
    assert len(requests) == len(trajectory.turns) and len(trajectory.segments) == 1
    for request, turn in zip(requests, trajectory.turns):
        assert request.input_ids == template_ids(stack.tokenizer, trajectory.messages[: turn.message_index], tools)
    sampled = [list(t.sampled_ids) for t in trajectory.turns]
    assert trajectory.tokens == requests[-1].input_ids + sampled[-1]
    mask, logprobs = expected_mask_and_logprobs(requests, sampled)
    assert trajectory.loss_mask == mask and trajectory.rollout_logprobs == pytest.approx(logprobs)
    assert trajectory.token_exact and trajectory.trainable and trajectory.prefix_breaks == 0


async def test_the_openai_tool_loop_in_process_earns_the_environments_rewards(stack: Stack) -> None:
    colour = script_right_answer(stack, 3)
    seen: list[AgentTask] = []

    async def agent(task: AgentTask) -> str:
        seen.append(task)
        return await solve(task)

    trajectory = await stack.run(agent, index=3)
    assert trajectory.stop_reason is StopReason.COMPLETED, trajectory.stop_detail
    assert trajectory.finished and trajectory.step_rewards == [0.2, 1.0] and trajectory.reward == pytest.approx(1.2)
    tools = seen[0].tools
    assert [t["function"]["name"] for t in tools] == ["read_order"]  # the terminal tool `paint` takes the final answer
    assert seen[0].base_url.startswith("http://127.0.0.1:") and "/episodes/" in seen[0].base_url
    first, last = trajectory.turns
    assert [r.call.name for r in first.tool_results] == ["read_order"] and first.rewards == (0.2,)
    assert (
        [r.call.name for r in last.tool_results] == ["__terminal__"]
        and last.rewards == (1.0,)
        and last.parsed.content == colour
    )
    assert trajectory.metrics["tool_calls"] == 2.0 and trajectory.metrics["turns"] == 2.0
    assert_token_exact(stack, trajectory, tools)
    assert Trajectory.from_dict(trajectory.to_dict()).turns == trajectory.turns
    assert stack.endpoint.episodes == {}  # closed


async def test_the_openai_tool_loop_as_a_subprocess(stack: Stack) -> None:
    script_right_answer(stack, 5)
    seen: list[AgentTask] = []

    async def agent(task: AgentTask) -> str | None:
        seen.append(task)
        return await SubprocessAgent([sys.executable, str(EXAMPLE_AGENT)])(task)

    trajectory = await stack.run(agent, index=5)
    assert trajectory.stop_reason is StopReason.COMPLETED, trajectory.stop_detail
    assert trajectory.step_rewards == [0.2, 1.0] and trajectory.reward == pytest.approx(1.2)
    assert [r.call.name for t in trajectory.turns for r in t.tool_results] == ["read_order", "__terminal__"]
    assert_token_exact(stack, trajectory, seen[0].tools)


async def test_an_agent_that_ends_without_finishing_scores_what_it_earned(stack: Stack) -> None:
    task = PAINT_ORDER.task("train", 1)
    stack.server.push(ScriptedCompletion(text=call("read_order", order=task["order"])))

    async def agent(agent_task: AgentTask) -> None:
        async with AsyncOpenAI(base_url=agent_task.base_url, api_key=agent_task.api_key, max_retries=0) as client:
            response = await client.chat.completions.create(
                model="p", messages=agent_task.prompt, tools=agent_task.tools
            )
            tool_call = response.choices[0].message.tool_calls[0]
            await agent_task.call_tool(tool_call.function.name, json.loads(tool_call.function.arguments))
        return None  # gives up without an answer

    trajectory = await stack.run(agent, index=1)
    assert trajectory.stop_reason is StopReason.NO_TOOL_CALL and not trajectory.finished
    assert trajectory.step_rewards == [0.2] and trajectory.reward == pytest.approx(0.2)
    assert trajectory.turns[0].tool_results[0].reward == 0.2  # the call after the answer it followed


@pytest.mark.parametrize("form", ["callable", "subprocess"])
async def test_a_hung_agent_is_a_timeout(stack: Stack, form: str, tmp_path: Path) -> None:
    marker = tmp_path / "started"

    async def hangs(task: AgentTask) -> str:
        await asyncio.sleep(3600)
        return "never"

    agent: Any = hangs
    if form == "subprocess":
        agent = SubprocessAgent(
            [
                sys.executable,
                "-c",
                f"import pathlib, time; pathlib.Path({str(marker)!r}).write_text('x'); time.sleep(3600)",
            ]
        )
    trajectory = await stack.run(agent, agent_timeout=1.0)
    assert trajectory.stop_reason is StopReason.TIMEOUT and "agent_timeout=1s" in trajectory.stop_detail
    assert trajectory.reward is None and trajectory.trained_reward is None and not trajectory.trainable
    if form == "subprocess":
        assert marker.exists()  # it ran, and was killed: the test returns well before its sleep ends


@pytest.mark.parametrize("form", ["callable", "subprocess"])
async def test_a_crashing_agent_is_aborted_with_its_reason(stack: Stack, form: str) -> None:
    async def crashes(task: AgentTask) -> str:
        raise RuntimeError("the agent's own bug")

    agent: Any = crashes
    if form == "subprocess":
        agent = SubprocessAgent(
            [sys.executable, "-c", "import sys; sys.stderr.write('Traceback: the agent died'); sys.exit(3)"]
        )
    trajectory = await stack.run(agent)
    assert trajectory.stop_reason is StopReason.ABORTED and trajectory.reward is None
    expected = (
        "RuntimeError: the agent's own bug" if form == "callable" else "exited with status 3: Traceback: the agent died"
    )
    assert expected in trajectory.stop_detail


async def test_an_environment_fault_the_agent_swallowed_is_still_an_env_error(stack: Stack) -> None:
    async def agent(task: AgentTask) -> str:
        try:
            await task.call_tool("explode", {"message": "boom"})
        except Exception:
            pass
        return "done"

    trajectory = await stack.run(agent, environment="Faulty")
    assert trajectory.stop_reason is StopReason.ENV_ERROR and trajectory.reward is None, trajectory.stop_detail


async def test_an_engine_failure_is_aborted(stack: Stack) -> None:
    stack.server.fail_next(1)

    async def agent(task: AgentTask) -> str:
        try:
            return await solve(task)
        except Exception:
            return "white"  # an agent that shrugs the 503 off and answers anyway

    trajectory = await stack.run(agent)
    assert (
        trajectory.stop_reason is StopReason.ABORTED
        and "engine" in trajectory.stop_detail
        and trajectory.reward is None
    )


async def test_the_builder_serves_the_runners_parts_and_the_tool_preamble(paint_server: LocalEnvServer) -> None:
    """`agent_episode_builder` (the config's `episode:`) on SmolLM2's plain ChatML, whose template drops the
    tools: the first prompt is the one `ToolEpisode` writes (the Hermes preamble with its worked call as the
    system prompt), the environment's limits reach the engine, and the endpoint starts with the first episode."""
    tokenizer, family = load_tokenizer("offline:smollm2"), get_family("chatml")
    renderer, parser = family.renderer(tokenizer), get_parser(family.parser)
    task = PAINT_ORDER.task("train", 2)
    settings = EpisodeSettings(max_new_tokens=77, tool_call_example=True)
    seen: list[AgentTask] = []

    async def agent(agent_task: AgentTask) -> str:
        seen.append(agent_task)
        return await solve(agent_task)

    build = agent_episode_builder(agent, agent_timeout=60)
    client = AsyncOpenReward(api_key="local")
    script = [ScriptedCompletion(text=call("read_order", order=task["order"])), ScriptedCompletion(text=task["colour"])]
    async with SGLangTestServer(tokenizer, script=script) as server:
        engine = SGLangEngine(server.url, max_attempts=1)
        ref = TaskRef(
            "PaintOrder",
            "train",
            index=2,
            task_spec=task,
            base_url=paint_server.base_url,
            variant=paint_server.variant_for("PaintOrder"),
        )
        try:
            episode = build(engine, renderer, parser, settings)
            trajectory = await run_episode(lambda: episode, client, ref, attempts=1)
            port = episode.endpoint.port
            assert list(build.endpoints.values()) == [episode.endpoint] and await _answers(port)
        finally:
            await build.aclose()  # what the runner's owner calls when it closes (Rollouts.aclose)
            await engine.aclose()
            await client.environments.aclose()
    assert build.endpoints == {} and not await _answers(port)  # no idle server left behind
    assert trajectory.task == ref.without_deployment()  # the session's TaskRef, as ToolEpisode records it
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.step_rewards == [0.2, 1.0], (
        trajectory.stop_detail
    )
    requests = [r for r in server.requests if r.path == "/generate"]
    assert [r.sampling_params["max_new_tokens"] for r in requests] == [77, 77]
    prompt = trajectory.messages[: trajectory.turns[0].message_index]
    tools = seen[0].tools
    agents_system, *task_prompt = prompt
    assert agents_system["role"] == "system"
    system = first_system_prompt(
        agents_system["content"], tools, renderer, parser=parser, example=True
    )  # the agent's, then the preamble
    assert system and "<tool_call>" in system and system.startswith(agents_system["content"])
    assert requests[0].input_ids == renderer.render_prompt([{"role": "system", "content": system}, *task_prompt], tools)
    assert requests[1].input_ids[: len(requests[0].input_ids)] == requests[0].input_ids
    assert trajectory.tokens == requests[1].input_ids + list(trajectory.turns[1].sampled_ids)


async def _answers(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port`."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


async def test_a_pydantic_ai_agent_runs_through_the_endpoint(stack: Stack) -> None:
    """An agent built with pydantic-ai, pointed at the episode's base URL the way its docs point it at any
    OpenAI-compatible provider (`OpenAIChatModel` with an `OpenAIProvider(base_url=..., api_key=...)`): its tool
    runs on the session, and its conversation is one token-exact segment."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    colour = script_right_answer(stack, 4)

    async def agent(task: AgentTask) -> str:
        model = OpenAIChatModel("policy", provider=OpenAIProvider(base_url=task.base_url, api_key=task.api_key))
        painter = Agent(model, instructions="You paint walls.")

        @painter.tool_plain
        async def read_order(order: int) -> str:
            """Read an order from the order book: it names the colour to paint.

            Args:
                order: The order number.
            """
            return (await task.call_tool("read_order", {"order": order})).text

        result = await painter.run(task.prompt[0]["content"])
        return result.output

    trajectory = await stack.run(agent, index=4)
    assert trajectory.stop_reason is StopReason.COMPLETED, trajectory.stop_detail
    assert trajectory.step_rewards == [0.2, 1.0] and trajectory.turns[-1].parsed.content == colour
    requests = stack.generates
    assert len(requests) == len(trajectory.turns) == 2 and len(trajectory.segments) == 1 and not trajectory.compactions
    first = requests[0].input_ids + list(trajectory.turns[0].sampled_ids)
    assert (
        requests[1].input_ids[: len(first)] == first
    )  # the framework sent the answer back as given: the sample went on
    framework_messages = trajectory.messages[: trajectory.turns[1].message_index]
    framework_tools = _tools_in_prompt(stack.tokenizer, requests[0].input_ids)
    assert requests[1].input_ids == template_ids(stack.tokenizer, framework_messages, framework_tools)
    mask, logprobs = expected_mask_and_logprobs(requests, [list(t.sampled_ids) for t in trajectory.turns])
    assert trajectory.loss_mask == mask and trajectory.rollout_logprobs == pytest.approx(logprobs)


def _tools_in_prompt(tokenizer: Any, ids: list[int]) -> list[dict[str, Any]]:
    """The tools the agent framework sent (it writes its own specs), as Qwen2.5's template wrote them."""
    block = tokenizer.decode(ids).split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    return [json.loads(line) for line in block.splitlines()]


async def test_an_answer_cut_at_the_token_cap_is_not_painted(stack: Stack) -> None:
    stack.server.push(ScriptedCompletion(text="The colour is", finish="length"))
    trajectory = await stack.run(solve, index=6)
    assert trajectory.stop_reason is StopReason.TRUNCATED and "cap" in trajectory.stop_detail
    assert trajectory.step_rewards == [] and not trajectory.turns[0].tool_results and trajectory.trained_reward == 0.0

"""The agent program's episodes (examples/own_agent: the `openai` client's tool loop, in process, as the config's
`episode:`) through the Slime and Miles hooks, driven by the trainers' own rollout code (tests/slime_source.py and
tests/miles_source.py say what runs and what stands in): Slime's `generate_and_rm`, Miles' default class-based
rollout (`InferenceRolloutFn`) and its train-data conversion.

Real parts: the SDK's environment server on 127.0.0.1 serving PaintOrder (examples/environments/paint_order.py),
the SGLang double with the real Qwen3 tokenizer, the trainers' code at their pinned commits. The double is
scripted per request: a prompt without a tool response gets a `read_order` call, one with it gets the colour.
The same script runs through a plain `ToolEpisode` config, and each field a trainer reads (tokens, response
length, loss mask, rollout log-probs, reward, status) must be the one the double's recorded requests imply, for
both episodes alike; an agent that sends the task's messages as they are (the example's loop without its own
system prompt) gets the very Sample `ToolEpisode` gets, field by field. A crashing agent is an aborted, removed
Sample, never a reward of 0.0 trained; `--partial-rollout` is refused with its reason before any episode runs.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from openai import AsyncOpenAI

from hermes_calls import call
from openreward_rl.agent_endpoint import agent_episode_builder
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.backends._sample.state import close_states
from openreward_rl.config import ConfigError
from openreward_rl.env.local_server import LocalEnvServer, import_file, serve_environments
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.loop.trajectory import StopReason
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from openreward_rl.testing.sglang_server import RecordedRequest
from scripted_training_view import expected_mask_and_logprobs
from slime_source import SlimeCode, serve_sglang, slime, slime_args  # noqa: F401

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[1]
PAINT_ORDER_FILE = REPO / "examples" / "environments" / "paint_order.py"
PAINT_ORDER = import_file(PAINT_ORDER_FILE).PaintOrder
AGENT_EPISODE = f"{REPO / 'examples' / 'own_agent' / 'episode.py'}:build_in_process"
TASK = 3
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 256, "no_stop_trim": True}


async def _crash(task: Any) -> str:
    raise RuntimeError("the agent's own bug")


crashing_agent = agent_episode_builder(
    _crash, agent_timeout=60
)  # the config's `episode: test_agent_hooks:crashing_agent`
OPENAI_TOOL_LOOP = import_file(REPO / "examples" / "own_agent" / "openai_tool_loop.py")


async def _task_prompt_only(task: Any) -> str:
    """The example's `openai` tool loop on the task's own messages (no system prompt of its own), as `ToolEpisode` sends them."""

    async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return (await task.call_tool(name, arguments)).to_dict()

    async with AsyncOpenAI(base_url=task.base_url, api_key=task.api_key) as client:
        return str(await OPENAI_TOOL_LOOP.run_loop(client, list(task.prompt), task.tools, call_tool))


same_prompt_agent = agent_episode_builder(_task_prompt_only, agent_timeout=60)


class Painter:
    """The scripted model: read the task's order first, then answer its colour."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.task = PAINT_ORDER.task("train", TASK)

    def text(self, request: RecordedRequest) -> str:
        if "<tool_response>" in self.tokenizer.decode(request.input_ids or []):
            return str(self.task["colour"])
        return "I will read it.\n" + call("read_order", order=self.task["order"])

    def __call__(self, request: RecordedRequest) -> ScriptedCompletion:
        return ScriptedCompletion(text=self.text(request))

    def sampled_ids(self, request: RecordedRequest) -> list[int]:
        """What the double answered `request` with: the text's ids, then EOS."""
        return [*self.tokenizer.encode(self.text(request), add_special_tokens=False), self.tokenizer.eos_token_id]


@pytest.fixture(scope="module")
def paint_server() -> Iterator[LocalEnvServer]:
    with serve_environments([f"{PAINT_ORDER_FILE}:PaintOrder"]) as server:
        yield server


@pytest.fixture
def paint_config(train_config: Any, paint_server: LocalEnvServer) -> Any:
    """Writes the config for PaintOrder with `episode` (None: the default `ToolEpisode`)."""

    def write(episode: str | None) -> Path:
        served = {"variant": paint_server.variant_for("PaintOrder"), "base_url": paint_server.base_url, "max_turns": 4}
        config: dict[str, Any] = {
            "environments": {"PaintOrder": served},
            "parser": "hermes",
            "attempts": 1,
            "upload": False,
        }
        if episode is not None:
            config["episode"] = episode
        return train_config(yaml.safe_dump(config, sort_keys=False))

    return write


def paint_row() -> dict[str, Any]:
    return task_row(TaskRef("PaintOrder", "train", index=TASK))


def generates(server: SGLangTestServer, since: int) -> list[RecordedRequest]:
    return [r for r in server.requests[since:] if r.path == "/generate"]


def check_against_requests(sample: Any, requests: list[RecordedRequest], painter: Painter) -> dict[str, Any]:
    """The trainer's fields of a finished PaintOrder sample, each checked against what the double saw and sampled;
    returned for comparing two runs. The second request extends the first one's prompt and answer (one segment)."""
    assert len(requests) == 2, [r.path for r in requests]
    first, last = requests
    sampled = [painter.sampled_ids(request) for request in requests]
    assert last.input_ids[: len(first.input_ids) + len(sampled[0])] == first.input_ids + sampled[0]
    assert sample.tokens == last.input_ids + sampled[1]
    mask, logprobs = expected_mask_and_logprobs(requests, sampled)
    assert sample.response_length == len(sample.tokens) - len(first.input_ids) == len(mask)
    assert sample.loss_mask == mask and sample.rollout_log_probs == pytest.approx(logprobs)
    record = EpisodeRecord.from_metadata(sample.metadata)
    assert record.stop_reason is StopReason.COMPLETED and record.segments == 1
    return {
        "sampled": sampled,
        "loss_mask": sample.loss_mask,
        "rollout_log_probs": sample.rollout_log_probs,
        "reward": sample.reward,
        "status": sample.status,
        "remove_sample": getattr(sample, "remove_sample", False),
    }


def serving(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port`."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


def fresh_process(slime: SlimeCode) -> None:
    """The hooks' process state is built from the config once: a new config needs a new trainer process."""
    slime.run(close_states())
    slime.rollout.GenerateState.clear_instances()


@pytest.fixture
def painter(qwen3_tokenizer: Any) -> Painter:
    return Painter(qwen3_tokenizer)


@pytest.fixture
def painting_sglang(slime: SlimeCode, painter: Painter) -> Iterator[SGLangTestServer]:
    yield from serve_sglang(slime, painter)


def slime_episode(slime: SlimeCode, server: SGLangTestServer, prompts: str) -> tuple[Any, list[RecordedRequest]]:
    """One `generate_and_rm` through Slime's own code; the sample and the generate requests it made."""
    since = len(server.requests)
    args = slime_args(server, prompts)
    row = paint_row()
    sample = slime.Sample(prompt=row["prompt"], label=row["label"], metadata=row["metadata"], index=0, group_index=0)
    out = slime.run(slime.rollout.generate_and_rm(args, sample, copy.deepcopy(SAMPLING)))
    (sample,) = (
        out if isinstance(out, list) else [out]
    )  # plain training returns a rollout's samples as a list: one context here
    return sample, generates(server, since)


def write_prompts(tmp_path: Path) -> str:
    path = tmp_path / "paint.jsonl"
    path.write_text(json.dumps(paint_row()) + "\n")
    return str(path)


def test_slime_trains_the_agents_episode_as_the_tool_episode_of_the_same_tokens(
    slime, painting_sglang, painter, paint_config, tmp_path
) -> None:
    prompts = write_prompts(tmp_path)
    paint_config(None)
    tool_sample, tool_requests = slime_episode(slime, painting_sglang, prompts)
    fresh_process(slime)
    paint_config(AGENT_EPISODE)
    agent_sample, agent_requests = slime_episode(slime, painting_sglang, prompts)
    # each training episode runs on its own engine (a `ContinuingEngine` around the process's): one endpoint serves them all
    endpoints = import_file(REPO / "examples" / "own_agent" / "episode.py").build_in_process.endpoints
    served = dict(endpoints)
    again, _ = slime_episode(slime, painting_sglang, prompts)
    assert (
        again.reward == agent_sample.reward
        and endpoints == served
        and all(e.episodes == {} for e in endpoints.values())
    )
    ports = [e.port for e in served.values()]
    assert ports and all(serving(port) for port in ports)
    fresh_process(slime)  # the hooks' process state closes: so does the builder's endpoint, no idle server left
    assert endpoints == {} and not any(serving(port) for port in ports)
    assert isinstance(agent_sample, slime.Sample) and agent_sample.status is slime.Sample.Status.COMPLETED
    tool, agent = (
        check_against_requests(tool_sample, tool_requests, painter),
        check_against_requests(agent_sample, agent_requests, painter),
    )
    assert agent["reward"] == tool["reward"] == pytest.approx(1.2)  # read the order (0.2), painted its colour (1.0)
    assert (agent["status"], agent["remove_sample"]) == (tool["status"], tool["remove_sample"])
    # the model's own tokens are the same two answers, trained alike (only the context around them differs)
    assert agent["sampled"] == tool["sampled"] and sum(agent["loss_mask"]) == sum(tool["loss_mask"]) == sum(
        map(len, tool["sampled"])
    )


def test_slime_gets_the_tool_episodes_sample_from_an_agent_sending_the_same_conversation(
    slime, painting_sglang, painter, paint_config, tmp_path
) -> None:
    """An agent that sends the task's messages as they are (the example's loop without its system prompt) makes the
    conversation `ToolEpisode` makes: the two Samples are equal field by field."""
    prompts = write_prompts(tmp_path)
    paint_config(None)
    tool_sample, tool_requests = slime_episode(slime, painting_sglang, prompts)
    fresh_process(slime)
    paint_config("test_agent_hooks:same_prompt_agent")
    agent_sample, agent_requests = slime_episode(slime, painting_sglang, prompts)
    assert [r.input_ids for r in agent_requests] == [r.input_ids for r in tool_requests]
    check_against_requests(agent_sample, agent_requests, painter)
    fields = (
        "tokens",
        "response_length",
        "loss_mask",
        "rollout_log_probs",
        "reward",
        "status",
        "remove_sample",
        "label",
        "index",
        "group_index",
    )
    assert {f: getattr(agent_sample, f) for f in fields} == {f: getattr(tool_sample, f) for f in fields}
    assert agent_sample.response_length > 0 and agent_sample.reward == pytest.approx(1.2)


def test_slime_gets_a_crashing_agent_as_an_aborted_sample(slime, painting_sglang, paint_config, tmp_path) -> None:
    paint_config("test_agent_hooks:crashing_agent")
    sample, requests = slime_episode(slime, painting_sglang, write_prompts(tmp_path))
    assert sample.status is slime.Sample.Status.ABORTED and sample.remove_sample and not any(sample.loss_mask)
    record = EpisodeRecord.from_metadata(sample.metadata)
    assert record.stop_reason is StopReason.ABORTED and "RuntimeError: the agent's own bug" in record.stop_detail
    assert requests == []


def test_partial_rollout_refuses_an_agent_episode_through_slime(slime, painting_sglang, paint_config, tmp_path) -> None:
    paint_config(AGENT_EPISODE)
    args = slime_args(painting_sglang, write_prompts(tmp_path), partial_rollout=True)
    row = paint_row()
    sample = slime.Sample(prompt=row["prompt"], label=row["label"], metadata=row["metadata"], index=0, group_index=0)
    with pytest.raises(ConfigError, match=r"--partial-rollout cannot suspend an agent program's episode"):
        slime.run(slime.rollout.generate_and_rm(args, sample, copy.deepcopy(SAMPLING)))
    assert not painting_sglang.requests


# --- Miles ------------------------------------------------------------------------------------------


CLASS_BASED = "miles.rollout.inference_rollout.inference_rollout_common.InferenceRolloutFn"


@pytest.fixture(scope="module")
def miles() -> Any:
    from miles_source import load_miles

    return load_miles()


async def miles_step(miles: Any, router: Any, rows: Path, **overrides: Any) -> tuple[Any, Any]:
    """One training step of Miles' default rollout (`InferenceRolloutFn`, the new-form hook), called as
    `RolloutManager` calls it; (its output, its args). The hooks' process state is closed after it (a new
    config needs a new trainer process)."""
    from miles.utils.misc import SingletonMeta

    from miles_source import miles_args
    from openreward_rl.assets import offline_tokenizer_dir

    SingletonMeta.clear_all_instances()
    args = miles_args(
        router.port or 0,
        str(offline_tokenizer_dir("qwen3")),
        rows,
        rollout_batch_size=1,
        n_samples_per_prompt=1,
        over_sampling_batch_size=1,
        custom_generate_function_path="openreward_rl.backends.miles.generate_fn",
        **overrides,
    )
    miles.http_utils.init_http_client(args)
    rollout = miles.compatibility.load_rollout_function(
        miles.base_types.RolloutFnConstructorInput(
            args=args, data_source=miles.data_source.RolloutDataSourceWithBuffer(args)
        ),
        CLASS_BASED,
    )
    try:
        output = await asyncio.to_thread(
            miles.compatibility.call_rollout_function, rollout, miles.base_types.RolloutFnTrainInput(rollout_id=0)
        )
    finally:
        await asyncio.to_thread(miles.async_utils.run, close_states())  # the hooks' states live on Miles' loop
    return output, args


def test_miles_default_rollout_trains_the_agents_episode_as_the_tool_episode(
    miles, paint_config, tmp_path, qwen3_tokenizer
) -> None:
    from miles_source import RouterStandIn, write_rows

    rows = write_rows(tmp_path / "tasks.jsonl", [paint_row()])

    async def step(server: SGLangTestServer, router: RouterStandIn) -> tuple[Any, list[RecordedRequest]]:
        since = len(server.requests)
        output, args = await miles_step(miles, router, rows)
        ((member,),) = output.samples
        (sample,) = (
            member if isinstance(member, list) else [member]
        )  # a rollout's samples, as a list in plain training: one context here
        data = miles.train_data.convert_samples_to_train_data(
            args,
            *miles.rollout_data.postprocess_rollout_data(args, output.samples, train_parallel_config=None),
            None,
            None,
        )
        assert data["raw_reward"] == [sample.reward] and data["loss_masks"] == [sample.loss_mask]
        return sample, generates(server, since)

    async def steps() -> tuple[dict[str, Any], dict[str, Any], Any, Any]:
        painter = Painter(qwen3_tokenizer)
        async with SGLangTestServer(qwen3_tokenizer, script=painter) as server, RouterStandIn(server.url) as router:
            paint_config(None)
            tool_sample, tool_requests = await step(server, router)
            paint_config(AGENT_EPISODE)
            agent = check_against_requests(*await step(server, router), painter)
            paint_config("test_agent_hooks:same_prompt_agent")
            same_sample, same_requests = await step(server, router)
            assert [r.input_ids for r in same_requests] == [r.input_ids for r in tool_requests]
            return check_against_requests(tool_sample, tool_requests, painter), agent, tool_sample, same_sample

    tool, agent, tool_sample, same_sample = asyncio.run(steps())
    # the agent that sends the task's messages as they are makes ToolEpisode's conversation: the same Sample
    fields = ("tokens", "response_length", "loss_mask", "rollout_log_probs", "reward", "status", "label", "index")
    assert {f: getattr(same_sample, f) for f in fields} == {f: getattr(tool_sample, f) for f in fields}
    assert agent["reward"] == tool["reward"] == pytest.approx(1.2)
    assert agent["status"] == tool["status"] and agent["status"].name == "COMPLETED"
    assert agent["sampled"] == tool["sampled"] and sum(agent["loss_mask"]) == sum(tool["loss_mask"]) == sum(
        map(len, tool["sampled"])
    )


def test_miles_partial_rollout_refuses_an_agent_episode(miles, paint_config, tmp_path, qwen3_tokenizer) -> None:
    """The refusal ends Miles' step (its class-based loop would log a plain error, drop the group and draw again)."""
    from miles_source import RouterStandIn, write_rows
    from openreward_rl.backends.miles import RolloutStepError

    rows = write_rows(tmp_path / "tasks.jsonl", [paint_row()])
    paint_config(AGENT_EPISODE)

    async def step() -> list[RecordedRequest]:
        async with (
            SGLangTestServer(qwen3_tokenizer, script=Painter(qwen3_tokenizer)) as server,
            RouterStandIn(server.url) as router,
        ):
            with pytest.raises(RolloutStepError, match=r"--partial-rollout cannot suspend an agent program's episode"):
                await miles_step(miles, router, rows, partial_rollout=True)
            return server.requests

    assert asyncio.run(step()) == []  # refused before any episode ran

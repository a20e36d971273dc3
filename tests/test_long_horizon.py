"""Long horizons under the default config: LongRead (tests/long_read_env.py: 60 reads of about 2,000 tokens
each, 120k tokens in all) on the SDK's real Server on 127.0.0.1, at a 32k context window, through the real
loop (`Rollouts.from_config`, `ToolEpisode`, `SGLangEngine` over HTTP), the real Qwen3 tokenizer and chat
template. The one double is the model: `SGLangTestServer` speaks SGLang's `/generate` wire format and
answers as a scripted agent that keeps a running total in its own words and in its summaries (no model
can run here). The default-config tests set no context key at all; the others name a policy with its
default options. Every task needs 61 turns, so `max_turns` is raised.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest
from openreward import AsyncOpenReward

from doubles import slime_double
from hermes_calls import call
from long_read_env import PAGES, LongRead, number_of
from openreward_rl.assets import load_tokenizer
from openreward_rl.backends._sample.fill import samples_from_trajectory
from openreward_rl.config import DEFAULT_CONTEXT_POLICY, parse_config
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.env.local_server import serve_environments
from openreward_rl.env.tasks import TaskRef
from openreward_rl.loop.context import DEFAULT_SUMMARY_REQUEST
from openreward_rl.loop.rollout import Rollouts
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from openreward_rl.testing.sglang_server import RecordedRequest
from test_context_policy import Run, assert_segments_token_exact

pytestmark = pytest.mark.anyio
WINDOW = 32768
TOTAL = re.compile(r"Running total after page (\d+): (\d+)\.")
PAGE = re.compile(r"The number on page (\d+) is (\d+)\.")


@attrs.define
class Reader:
    """The scripted model: adds the numbers its context shows to the last running total it wrote down."""

    tokenizer: Any
    summaries: int = 0

    def __call__(self, request: RecordedRequest) -> ScriptedCompletion:
        context = self.tokenizer.decode(request.input_ids)
        totals = TOTAL.findall(context)
        page, total = (int(totals[-1][0]), int(totals[-1][1])) if totals else (0, 0)
        for number, value in PAGE.findall(context):
            if int(number) > page:
                page, total = int(number), total + int(value)
        note = f"Running total after page {page}: {total}."
        if context.rpartition("<|im_start|>user\n")[2].startswith(DEFAULT_SUMMARY_REQUEST):
            self.summaries += 1
            return ScriptedCompletion(text=f"{note} I have read {page} of {PAGES} pages.")
        return ScriptedCompletion(text=note + "\n" + (call("answer", total=total) if page == PAGES else call("read")))


async def read(config: Any, reader: Reader, *, index: int, max_new_tokens: int) -> Trajectory:
    """LongRead task `index` played by `reader` at a `WINDOW`-token context, through the config's runner."""
    client = AsyncOpenReward(api_key="local")
    async with SGLangTestServer(reader.tokenizer, script=reader) as sglang:
        engine = SGLangEngine(sglang.url, max_attempts=1)
        rollouts = Rollouts.from_config(
            config,
            engine=engine,
            tokenizer=reader.tokenizer,
            client=client,
            model="Qwen/Qwen3-8B",
            max_context_len=WINDOW,
            max_new_tokens=max_new_tokens,
        )
        try:
            return await rollouts.run(TaskRef("LongRead", "train", index=index))
        finally:
            await engine.aclose()
            await client.environments.aclose()


@pytest.fixture(scope="module")
def long_read_server() -> Any:
    with serve_environments([LongRead]) as server:
        yield server


@pytest.mark.parametrize("policy", ["summarize", "clear_tool_outputs"])
async def test_a_60_read_task_finishes_at_a_32k_window_with_the_default_compaction_settings(
    long_read_server: Any, policy: str
) -> None:
    tokenizer = load_tokenizer("offline:qwen3")
    config = parse_config(
        {
            "environments": {
                "LongRead": {
                    "base_url": long_read_server.base_url,
                    "variant": long_read_server.variant_for("LongRead"),
                    "context_policy": policy,
                    "max_turns": PAGES + 5,
                }
            },
            "parser": "hermes",
            "attempts": 1,
            "upload": False,
        }
    )
    assert config.environment("LongRead").max_compactions is None  # the default: no cap
    reader = Reader(tokenizer)
    trajectory = await read(config, reader, index=0, max_new_tokens=512)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0, trajectory.stop_detail
    expected = sum(number_of("long-0", p) for p in range(1, PAGES + 1))
    assert f'"total": {expected}' in tokenizer.decode(trajectory.turns[-1].sampled_ids)
    read_tokens = sum(len(tokenizer.encode(m["content"])) for m in trajectory.messages if m.get("role") == "tool")
    assert read_tokens > 110_000  # the task is as long as it claims: far past the window
    assert len(trajectory.compactions) > 3  # more than the old default cap allowed
    assert all(len(s.context()) <= WINDOW for s in trajectory.segments)
    assert (reader.summaries > 0) == (policy == "summarize")


@attrs.define
class VerboseReader(Reader):
    """A reader that copies out a long note every turn: its own words fill the context, so clearing tool
    outputs frees less room at each boundary."""

    def __call__(self, request: RecordedRequest) -> ScriptedCompletion:
        scripted = super().__call__(request)
        note = "I copy the page out in full before going on. " * 120
        return ScriptedCompletion(text=note + (scripted.text or ""))


@pytest.mark.parametrize("cap", [None, 1000])
async def test_uncapped_compaction_stops_when_a_boundary_no_longer_frees_room(
    long_read_server: Any, cap: int | None
) -> None:
    from openreward_rl.loop.tool_episode import STALL_FRACTION

    tokenizer = load_tokenizer("offline:qwen3")
    environment = {
        "base_url": long_read_server.base_url,
        "variant": long_read_server.variant_for("LongRead"),
        "context_policy": "clear_tool_outputs",
        "max_turns": PAGES + 5,
        **({} if cap is None else {"max_compactions": cap}),
    }
    config = parse_config(
        {"environments": {"LongRead": environment}, "parser": "hermes", "attempts": 1, "upload": False}
    )
    trajectory = await read(config, VerboseReader(tokenizer), index=1, max_new_tokens=2048)
    assert trajectory.stop_reason is StopReason.CONTEXT_OVERFLOW
    compactions = trajectory.compactions
    assert len(compactions) > 1
    if (
        cap is None
    ):  # the guard: every boundary taken freed at least a quarter of what the first did, the refused one less
        assert trajectory.stop_detail.startswith("compaction stalled"), trajectory.stop_detail
        assert all(c.tokens_saved >= STALL_FRACTION * compactions[0].tokens_saved for c in compactions)
    else:  # an explicit cap has no guard: it compacts on until a boundary saves nothing and the context overflows
        assert not trajectory.stop_detail.startswith("compaction stalled")
        assert min(c.tokens_saved for c in compactions) < STALL_FRACTION * compactions[0].tokens_saved


@attrs.define
class NoteTaker(Reader):
    """A reader that copies out a long note every action turn (about 1,300 tokens) but writes short summaries:
    its own words fill the context, so after a few boundaries clearing the tool outputs is not enough."""

    def __call__(self, request: RecordedRequest) -> ScriptedCompletion:
        summaries = self.summaries
        scripted = super().__call__(request)
        if self.summaries > summaries:
            return scripted
        return ScriptedCompletion(text="I copy the page out in full before going on. " * 120 + (scripted.text or ""))


def default_config(server: Any) -> Any:
    """The default config: no context key (no context_policy, no max_compactions); the task needs 61 turns."""
    environment = {"base_url": server.base_url, "variant": server.variant_for("LongRead"), "max_turns": PAGES + 5}
    return parse_config({"environments": {"LongRead": environment}, "parser": "hermes", "attempts": 1, "upload": False})


async def play(config: Any, reader: Reader, task: TaskRef, max_new_tokens: int) -> tuple[Any, SGLangTestServer]:
    tokenizer = reader.tokenizer
    client = AsyncOpenReward(api_key="local")
    async with SGLangTestServer(tokenizer, script=reader) as sglang:
        engine = SGLangEngine(sglang.url, max_attempts=1)
        rollouts = Rollouts.from_config(
            config,
            engine=engine,
            tokenizer=tokenizer,
            client=client,
            model="Qwen/Qwen3-8B",
            max_context_len=WINDOW,
            max_new_tokens=max_new_tokens,
        )
        try:
            trajectory = await rollouts.run(task)
        finally:
            await engine.aclose()
            await client.environments.aclose()
    return trajectory, sglang


@pytest.mark.parametrize("index", [0, 1])  # every task of the split
@pytest.mark.parametrize("reader_class", [Reader, NoteTaker])
async def test_the_default_config_finishes_every_60_read_task_at_a_32k_window(
    long_read_server: Any, reader_class: type[Reader], index: int
) -> None:
    tokenizer = load_tokenizer("offline:qwen3")
    config = default_config(long_read_server)
    environment = config.environment("LongRead")
    assert (environment.context_policy, environment.context_policy_chosen, environment.max_compactions) == (
        DEFAULT_CONTEXT_POLICY,
        False,
        None,
    )
    reader = reader_class(tokenizer)
    trajectory, sglang = await play(config, reader, TaskRef("LongRead", "train", index=index), max_new_tokens=2048)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0, trajectory.stop_detail
    expected = sum(number_of(f"long-{index}", p) for p in range(1, PAGES + 1))
    assert f'"total": {expected}' in tokenizer.decode(trajectory.turns[-1].sampled_ids)
    read_tokens = sum(len(tokenizer.encode(m["content"])) for m in trajectory.messages if m.get("role") == "tool")
    assert read_tokens > 110_000  # 60 reads of ~2k tokens: far past the window
    kinds = {c.kind for c in trajectory.compactions}
    if (
        reader_class is Reader
    ):  # short notes: clearing old tool outputs is always enough, no model call spent on a summary
        assert kinds == {"clear_tool_outputs"} and reader.summaries == 0
    else:  # long notes: clearing first, then summaries once clearing would leave over half the window
        assert (
            kinds == {"clear_tool_outputs", DEFAULT_CONTEXT_POLICY}
            and reader.summaries == trajectory.metrics["summary_turns"] > 0
        )
    assert len(trajectory.compactions) > 3 and all(c.tokens_before >= 0.8 * WINDOW for c in trajectory.compactions)
    # each context is token-exact on its own and fits the window; each is one trained sample with the episode's reward
    assert_segments_token_exact(Run(trajectory, sglang, [], reader))
    assert len(trajectory.segments) == len(trajectory.compactions) + 1 and all(
        len(s.context()) <= WINDOW for s in trajectory.segments
    )
    samples = samples_from_trajectory(
        slime_double.Sample(index=3, group_index=1, metadata={}), trajectory, tokenizer=tokenizer
    )
    slime_double.check_output(samples)
    assert [s.tokens for s in samples] == [s.context() for s in trajectory.segments] and {
        s.reward for s in samples
    } == {1.0}


async def test_a_task_that_cannot_fit_is_stopped_by_the_guard_with_its_reason(long_read_server: Any) -> None:
    """The oversized task's prompt (~29k tokens) leaves room for one page: after the first read the default
    policy has no old tool output to clear, so it asks for a summary; the context after it keeps the prompt
    and the page and frees almost nothing. The guard stops the episode there, saying why, instead of
    compacting on every turn or ending as if the model had answered wrong."""
    from openreward_rl.loop.tool_episode import MIN_FREED_FRACTION

    tokenizer = load_tokenizer("offline:qwen3")
    reader = Reader(tokenizer)
    trajectory, _ = await play(
        default_config(long_read_server), reader, TaskRef("LongRead", "oversized", index=0), max_new_tokens=512
    )
    assert trajectory.stop_reason is StopReason.CONTEXT_OVERFLOW
    assert trajectory.stop_detail.startswith(f"compaction stalled: a {DEFAULT_CONTEXT_POLICY} boundary would free"), (
        trajectory.stop_detail
    )
    assert f"less than {MIN_FREED_FRACTION:.0%} of the {WINDOW}-token budget" in trajectory.stop_detail
    assert (
        reader.summaries == 1 and not trajectory.compactions and len(trajectory.segments) == 1
    )  # the boundary was not taken
    assert (
        not trajectory.finished and trajectory.reward is None and trajectory.step_rewards == []
    )  # no reward observed, none made up
    assert [t.summary for t in trajectory.turns] == [False, True]

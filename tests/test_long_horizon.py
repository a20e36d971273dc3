"""Long horizons under the default compaction settings: LongRead (tests/long_read_env.py: 60 reads of about
2,000 tokens each, 120k tokens in all) on the SDK's real Server on 127.0.0.1, at a 32k context window,
with the real Qwen3 tokenizer and template and `SGLangTestServer` answering as a scripted agent that keeps
a running total in its own words and in its summaries. The config names a context policy with its default
options and leaves `max_compactions` at its default; the task needs 61 turns, so `max_turns` is raised.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest
from openreward import AsyncOpenReward

from hermes_calls import call
from long_read_env import PAGES, LongRead, number_of
from openreward_rl.assets import load_tokenizer
from openreward_rl.config import parse_config
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.env.local_server import serve_environments
from openreward_rl.env.tasks import TaskRef
from openreward_rl.loop.context import DEFAULT_SUMMARY_REQUEST
from openreward_rl.loop.rollout import Rollouts
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from openreward_rl.testing.sglang_server import RecordedRequest

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
            config, engine=engine, tokenizer=reader.tokenizer, client=client, model="Qwen/Qwen3-8B", max_context_len=WINDOW, max_new_tokens=max_new_tokens
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
async def test_a_60_read_task_finishes_at_a_32k_window_with_the_default_compaction_settings(long_read_server: Any, policy: str) -> None:
    tokenizer = load_tokenizer("offline:qwen3")
    config = parse_config({
        "environments": {"LongRead": {"base_url": long_read_server.base_url, "variant": long_read_server.variant_for("LongRead"),
                                      "context_policy": policy, "max_turns": PAGES + 5}},
        "parser": "hermes", "attempts": 1, "upload": False,
    })  # fmt: skip
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
async def test_uncapped_compaction_stops_when_a_boundary_no_longer_frees_room(long_read_server: Any, cap: int | None) -> None:
    from openreward_rl.loop.tool_episode import STALL_FRACTION

    tokenizer = load_tokenizer("offline:qwen3")
    environment = {"base_url": long_read_server.base_url, "variant": long_read_server.variant_for("LongRead"), "context_policy": "clear_tool_outputs",
                   "max_turns": PAGES + 5, **({} if cap is None else {"max_compactions": cap})}  # fmt: skip
    config = parse_config({"environments": {"LongRead": environment}, "parser": "hermes", "attempts": 1, "upload": False})
    trajectory = await read(config, VerboseReader(tokenizer), index=1, max_new_tokens=2048)
    assert trajectory.stop_reason is StopReason.CONTEXT_OVERFLOW
    compactions = trajectory.compactions
    assert len(compactions) > 1
    if cap is None:  # the guard: every boundary taken freed at least a quarter of what the first did, the refused one less
        assert trajectory.stop_detail.startswith("compaction stalled"), trajectory.stop_detail
        assert all(c.tokens_saved >= STALL_FRACTION * compactions[0].tokens_saved for c in compactions)
    else:  # an explicit cap has no guard: it compacts on until a boundary saves nothing and the context overflows
        assert not trajectory.stop_detail.startswith("compaction stalled")
        assert min(c.tokens_saved for c in compactions) < STALL_FRACTION * compactions[0].tokens_saved

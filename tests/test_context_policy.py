"""Context policies end to end: the Corridor environment (examples/environments/corridor.py) on the SDK's
real Server on 127.0.0.1, the real Qwen3 tokenizer and chat template, and `SGLangTestServer` answering
as a scripted agent that reads its context: it walks until the last room, repeats the exit key in its own
words once it has seen it, answers a summary request with the key, and leaves with the key it can find
in its context (or a wrong one when the context lost it).

Every context boundary must start a token-exact segment: its prompt is the chat template's rendering of
the new context's messages, every model call of the segment got exactly the segment's tokens so far, and
the sampled ids sit verbatim in the segment's response with mask 1.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import attrs
import pytest
from openreward import AsyncOpenReward

from doubles import slime_double
from hermes_calls import call
from openreward_rl import ChatRenderer, EpisodeSettings, StopReason, TaskRef, ToolEpisode, Trajectory, run_episode
from openreward_rl.assets import load_tokenizer
from openreward_rl.backends._sample.fill import samples_from_trajectory
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.config import ConfigError, parse_config
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.env.environment import open_session
from openreward_rl.env.local_server import LocalEnvServer
from openreward_rl.loop.context import (
    CLEARED_MARKER,
    DEFAULT_SUMMARY_REQUEST,
    SUMMARY_PREFIX,
    ClearThenSummarize,
    ClearToolOutputs,
    SummarizeContext,
    context_policy,
)
from openreward_rl.loop.rollout import context_policies
from openreward_rl.parsers import get_parser
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from openreward_rl.testing.sglang_server import RecordedRequest
from scripted_training_view import expected_mask_and_logprobs

pytestmark = pytest.mark.anyio
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 256}
BUDGET = 2048  # tokens: the corridor's 6 rooms need about 3,000 without compaction
KEY = re.compile(r"(?:THE EXIT KEY IS|The exit key is) ([a-z]+-\d{4})")


@attrs.define
class CorridorAgent:
    """The scripted model: answers each request from what its context holds."""

    tokenizer: Any
    abort_summary: bool = False
    endless_summary: bool = False
    summaries: int = 0

    def __call__(self, request: RecordedRequest) -> ScriptedCompletion:
        context = self.tokenizer.decode(request.input_ids)
        last_user = context.rpartition("<|im_start|>user\n")[2]
        keys = KEY.findall(context)
        key = keys[-1] if keys else "none-0000"
        if last_user.startswith(DEFAULT_SUMMARY_REQUEST):
            self.summaries += 1
            if self.abort_summary:
                return ScriptedCompletion(text="The exit key", finish="abort")
            if self.endless_summary:
                return ScriptedCompletion(text="and then I walked on and on", finish="length")
            rooms = re.findall(r"Room (\d+) of", context)
            return ScriptedCompletion(text=f"The exit key is {key}. I have walked to room {rooms[-1] if rooms else 0}.")
        if "This is the last room" in last_user or "no further room" in last_user:
            return ScriptedCompletion(text=call("leave", key=key))
        words = f"The exit key is {key}. " if keys else ""
        return ScriptedCompletion(text=words + "Onward.\n" + call("walk"))


@attrs.define
class Run:
    trajectory: Trajectory
    server: SGLangTestServer
    tools: list[dict[str, Any]]
    agent: CorridorAgent
    tokenizer_name: str = "offline:qwen3"
    renderer: Any = None


@attrs.define
class Harness:
    env_server: LocalEnvServer
    client: AsyncOpenReward

    async def run(
        self,
        policy: Any,
        *,
        max_compactions: int = 3,
        abort_summary: bool = False,
        endless_summary: bool = False,
        index: int = 0,
        tokenizer_name: str = "offline:qwen3",
        family: bool = False,
    ) -> Run:
        """`family`: the model family's renderer (its stop tokens and hand-written bridge), else the template-derived one."""
        tokenizer = load_tokenizer(tokenizer_name)
        renderer = ChatRenderer(tokenizer)
        if family:
            from openreward_rl.families import find_family

            renderer = find_family(tokenizer).renderer(tokenizer, {})
        agent = CorridorAgent(tokenizer, abort_summary=abort_summary, endless_summary=endless_summary)
        settings = EpisodeSettings(
            sampling_params=SAMPLING, max_context_len=BUDGET, context_policy=policy, max_compactions=max_compactions
        )
        task = TaskRef(
            "Corridor",
            "train",
            index=index,
            base_url=self.env_server.base_url,
            variant=self.env_server.variant_for("Corridor"),
        )
        async with open_session(self.client, task) as session:
            tools = await session.tools()
        async with SGLangTestServer(tokenizer, script=agent) as server:
            engine = SGLangEngine(server.url, max_attempts=1)
            try:
                trajectory = await run_episode(
                    lambda: ToolEpisode(engine, renderer, get_parser("hermes"), settings), self.client, task, attempts=1
                )
            finally:
                await engine.aclose()
        return Run(trajectory, server, tools, agent, tokenizer_name, renderer)


@pytest.fixture
async def harness(env_server: LocalEnvServer, openreward_client: AsyncOpenReward) -> Harness:
    return Harness(env_server, openreward_client)


def assert_segments_token_exact(run: Run) -> None:
    """Each model call got exactly its segment's tokens so far; each segment's response is the bridges
    (mask 0) and the sampled ids verbatim (mask 1, the double's log-probs)."""
    trajectory, tokenizer = run.trajectory, load_tokenizer(run.tokenizer_name)
    requests = [r for r in run.server.requests if r.path == "/generate"]
    assert len(requests) == len(trajectory.turns)
    position = 0
    for number, segment in enumerate(trajectory.segments):
        context = segment.context()
        mine = []
        while position < len(requests) and context[: len(requests[position].input_ids)] == requests[position].input_ids:
            mine.append(position)
            position += 1
        assert mine, f"segment {number} served no model call"
        assert requests[mine[0]].input_ids == segment.prompt_ids  # the segment starts where its first call started
        sampled = [list(trajectory.turns[i].sampled_ids) for i in mine]
        last = requests[mine[-1]].input_ids + sampled[-1]
        assert context == last, f"segment {number} ends with its last call's context and sample"
        mask, logprobs = expected_mask_and_logprobs([requests[i] for i in mine], sampled)
        assert segment.loss_mask == mask and segment.rollout_logprobs == pytest.approx(logprobs)
        # the generation prompt: the template's, or the Qwen3 family's with thinking off (an empty think block)
        assert tokenizer.decode(segment.prompt_ids).endswith(
            ("<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n")
        )
    assert position == len(requests)
    assert trajectory.prefix_breaks == 0


async def test_without_compaction_the_corridor_overflows(harness: Harness) -> None:
    run = await harness.run(None)
    trajectory = run.trajectory
    assert trajectory.stop_reason is StopReason.CONTEXT_OVERFLOW, trajectory.stop_detail
    assert len(trajectory.segments) == 1 and not trajectory.compactions and trajectory.metrics["num_compactions"] == 0.0
    assert not trajectory.finished


@pytest.mark.parametrize(
    ("tokenizer_name", "family"), [("offline:qwen3", False), ("offline:qwen3", True), ("offline:qwen2.5", False)]
)
async def test_summarize_finishes_the_corridor_in_token_exact_segments(
    harness: Harness, tokenizer_name: str, family: bool
) -> None:
    policy = SummarizeContext(threshold=0.6, keep_recent_turns=1, summary_tokens=128)
    run = await harness.run(policy, tokenizer_name=tokenizer_name, family=family)
    trajectory = run.trajectory
    assert trajectory.stop_reason is StopReason.COMPLETED, trajectory.stop_detail
    assert trajectory.reward == 1.0  # the key survived in the summary
    compactions = trajectory.compactions
    assert compactions and all(c.kind == "summarize" for c in compactions)
    assert len(trajectory.segments) == len(compactions) + 1 == run.agent.summaries + 1
    assert [c.segment for c in compactions] == list(range(1, len(compactions) + 1))
    summary_turns = [t for t in trajectory.turns if t.summary]
    assert len(summary_turns) == len(compactions) and not any(t.tool_results for t in summary_turns)
    assert trajectory.metrics["num_compactions"] == len(compactions) and trajectory.metrics["summary_turns"] == len(
        compactions
    )
    assert trajectory.metrics["context_tokens_saved"] == sum(c.tokens_before - c.tokens_after for c in compactions) > 0
    assert_segments_token_exact(run)
    renderer = run.renderer
    messages = trajectory.messages
    assert renderer.render_prompt(messages[:1], run.tools) == trajectory.segments[0].prompt_ids
    for compaction in compactions:
        # the new context: the task's prompt, the summary, the last turn before the summary request
        request, summary = messages[compaction.message_index - 2], messages[compaction.message_index - 1]
        assert request == {"role": "user", "content": DEFAULT_SUMMARY_REQUEST} and summary["role"] == "assistant"
        expected = [
            messages[0],
            {"role": "user", "content": SUMMARY_PREFIX + summary["content"]},
            *messages[compaction.message_index - 4 : compaction.message_index - 2],
        ]
        assert expected[2]["role"] == "assistant" and expected[3]["role"] == "tool"
        segment = trajectory.segments[compaction.segment]
        assert renderer.render_prompt(expected, run.tools) == segment.prompt_ids
        assert compaction.tokens_after == len(segment.prompt_ids) < compaction.tokens_before
        summary_turn = trajectory.turns[compaction.turn - 1]
        assert summary_turn.summary and summary_turn.message_index == compaction.message_index - 1
    # the summary turn is trained: its tokens are in its segment's response with mask 1
    first = trajectory.segments[0]
    sampled = list(summary_turns[0].sampled_ids)
    assert first.response_ids[-len(sampled) :] == sampled and first.loss_mask[-len(sampled) :] == [1] * len(sampled)


async def test_clear_tool_outputs_finishes_the_corridor(harness: Harness) -> None:
    run = await harness.run(ClearToolOutputs(threshold=0.7, keep_last=1))
    trajectory = run.trajectory
    assert trajectory.stop_reason is StopReason.COMPLETED, trajectory.stop_detail
    assert trajectory.reward == 1.0  # the agent repeated the key in its own words, which are kept
    assert trajectory.compactions and all(c.kind == "clear_tool_outputs" for c in trajectory.compactions)
    assert not any(t.summary for t in trajectory.turns)
    assert_segments_token_exact(run)
    tokenizer = load_tokenizer("offline:qwen3")
    for compaction in trajectory.compactions:
        prompt = tokenizer.decode(trajectory.segments[compaction.segment].prompt_ids)
        assert CLEARED_MARKER in prompt and prompt.count("Room ") == 1  # only the newest output kept
        assert "THE EXIT KEY IS" not in prompt


async def test_the_cap_on_compactions_ends_in_context_overflow(harness: Harness) -> None:
    run = await harness.run(ClearToolOutputs(threshold=0.5, keep_last=1), max_compactions=1)
    trajectory = run.trajectory
    assert len(trajectory.compactions) == 1 and len(trajectory.segments) == 2
    assert trajectory.stop_reason is StopReason.CONTEXT_OVERFLOW, trajectory.stop_detail
    assert_segments_token_exact(run)


async def test_summary_that_does_not_fit_falls_back_to_clearing(harness: Harness) -> None:
    run = await harness.run(
        SummarizeContext(
            threshold=0.9, summary_tokens=256, fallback_policy=ClearToolOutputs(threshold=1.0, keep_last=1)
        )
    )
    trajectory = run.trajectory
    # past 90% of the budget a 256-token summary turn never fits: the fallback clears instead
    assert run.agent.summaries == 0 and trajectory.compactions
    assert {c.kind for c in trajectory.compactions} == {"clear_tool_outputs"}
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0
    assert_segments_token_exact(run)


async def test_an_aborted_summary_turn_is_aborted_never_a_reward(harness: Harness, qwen3_tokenizer: Any) -> None:
    run = await harness.run(SummarizeContext(threshold=0.6, summary_tokens=128), abort_summary=True)
    trajectory = run.trajectory
    assert trajectory.stop_reason is StopReason.ABORTED and run.agent.summaries == 1
    assert trajectory.turns[-1].summary and not trajectory.compactions and len(trajectory.segments) == 1
    samples = samples_from_trajectory(slime_double.Sample(index=0, metadata={}), trajectory, tokenizer=qwen3_tokenizer)
    (sample,) = samples
    slime_double.check_output(sample)
    assert sample.status is slime_double.Sample.Status.ABORTED and sample.remove_sample and not any(sample.loss_mask)
    assert EpisodeRecord.from_metadata(sample.metadata).reward_observed is False


async def test_each_context_is_a_sample_with_the_episode_reward(harness: Harness, qwen3_tokenizer: Any) -> None:
    run = await harness.run(SummarizeContext(threshold=0.6, keep_recent_turns=1, summary_tokens=128))
    trajectory = run.trajectory
    samples = samples_from_trajectory(
        slime_double.Sample(index=5, group_index=2, metadata={}), trajectory, tokenizer=qwen3_tokenizer
    )
    slime_double.check_output(samples)
    assert len(samples) == len(trajectory.segments) >= 2
    assert [s.tokens for s in samples] == [seg.context() for seg in trajectory.segments]
    assert (
        {s.reward for s in samples} == {1.0}
        and {s.rollout_id for s in samples} == {5}
        and {s.group_index for s in samples} == {2}
    )
    assert [EpisodeRecord.from_metadata(s.metadata).segment for s in samples] == list(range(len(samples)))


def test_config_chooses_and_validates_the_policy() -> None:
    config = parse_config(
        {
            "environments": {
                "A": {},
                "B": {"context_policy": "clear_tool_outputs"},
                "C": {
                    "context_policy": {"name": "summarize", "threshold": 0.5, "keep_recent_turns": 2},
                    "max_compactions": 5,
                },
                "D": {"context_policy": "none"},
                "E": {"context_policy": None},
                "F": {"context_policy": {"name": "clear_then_summarize", "clear_target": 0.4, "summary_tokens": 512}},
            }
        }
    )
    policies = context_policies(config)
    assert policies["A"] == ClearThenSummarize(
        threshold=0.8, clear_target=0.5, keep_last=2, keep_recent_turns=1, summary_tokens=1024
    )
    assert isinstance(policies["B"], ClearToolOutputs) and policies["D"] is None and policies["E"] is None
    assert policies["C"] == SummarizeContext(threshold=0.5, keep_recent_turns=2)
    assert policies["F"] == ClearThenSummarize(clear_target=0.4, summary_tokens=512)
    assert config.environment("C").max_compactions == 5 and config.compacts and not config.environment("D").compacts
    # the default compacts too, but a path that cannot carry several contexts turns only the default off
    assert config.environment("A").compacts and not config.environment("A").context_policy_chosen
    plain = config.without_default_compaction()
    assert {n: e.context_policy for n, e in plain.environments.items()} == {
        "A": "none",
        "B": "clear_tool_outputs",
        "C": "summarize",
        "D": "none",
        "E": "none",
        "F": "clear_then_summarize",
    }
    assert not parse_config({"environments": {"A": {}}}).without_default_compaction().compacts
    for bad, message in [
        ({"context_policy": 3}, "policy name or a mapping"),
        ({"context_policy": {"threshold": 0.5}}, "needs a 'name'"),
        ({"context_policy": {"name": "none", "threshold": 0.5}}, "takes no options"),
        ({"max_compactions": -1}, "non-negative"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_config({"environments": {"E": bad}})
    for bad, message in [
        ({"context_policy": "squash"}, "unknown context policy 'squash'"),
        ({"context_policy": {"name": "summarize", "threshold": 0}}, r"threshold must be in \(0, 1\]"),
        ({"context_policy": {"name": "clear_tool_outputs", "keep": 1}}, "unexpected keyword argument 'keep'"),
        (
            {"context_policy": {"name": "clear_then_summarize", "clear_target": 1.5}},
            r"clear_target must be in \(0, 1\]",
        ),
        (
            {"context_policy": {"name": "clear_then_summarize", "summary_tokens": 0}},
            "summary_tokens must be at least 1",
        ),
        ({"context_policy": "no_such_module:Policy"}, "cannot import module 'no_such_module'"),
        ({"context_policy": "fractions:Fraction"}, "built Fraction"),
    ]:
        with pytest.raises(ConfigError, match=message):
            context_policies(parse_config({"environments": {"E": bad}}))


async def test_a_custom_policy_from_examples(harness: Harness, monkeypatch) -> None:
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "examples"))
    policy = context_policy("custom_context_policy:KeepKeyLines", {"threshold": 0.6})
    run = await harness.run(policy, max_compactions=6)
    trajectory = run.trajectory
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0
    assert {c.kind for c in trajectory.compactions} == {"keep_key_lines"}
    assert_segments_token_exact(run)
    sys.modules.pop("custom_context_policy", None)


@attrs.define
class SuspendedSummaryAgent(CorridorAgent):
    """Starts the first summary, then keeps generating (held) until the request is aborted; the continuation
    request (the context ends inside the assistant's turn) gets the rest of the summary."""

    held: Any = None

    def __call__(self, request: RecordedRequest) -> ScriptedCompletion:
        context = self.tokenizer.decode(request.input_ids)
        if context.endswith("The exit key is"):
            key = KEY.findall(context)[-1]
            return ScriptedCompletion(text=f" {key}. I have walked on.")
        last_user = context.rpartition("<|im_start|>user\n")[2]
        if last_user.startswith(DEFAULT_SUMMARY_REQUEST) and self.held is not None and not self.held.is_set():
            self.summaries += 1
            self.held.set()
            return ScriptedCompletion(text="The exit key is", hold=True)
        return super().__call__(request)


async def test_a_suspended_summary_turn_resumes_and_keeps_every_context(harness: Harness) -> None:
    """Partial rollout's machinery (loop/resumable.py) on a compacting episode: parked inside the summary
    turn, resumed from its tokens; the finished episode keeps all its contexts."""
    import asyncio

    import aiohttp

    from openreward_rl.loop.resumable import Finished, LiveEpisode, ParkingEngine, Suspended

    tokenizer = load_tokenizer("offline:qwen3")
    agent = SuspendedSummaryAgent(tokenizer)
    agent.held = asyncio.Event()
    policy = SummarizeContext(threshold=0.6, keep_recent_turns=1, summary_tokens=128)
    settings = EpisodeSettings(sampling_params=SAMPLING, max_context_len=BUDGET, context_policy=policy)
    task = TaskRef(
        "Corridor",
        "train",
        index=0,
        base_url=harness.env_server.base_url,
        variant=harness.env_server.variant_for("Corridor"),
    )
    async with SGLangTestServer(tokenizer, script=agent) as server:
        sglang = SGLangEngine(server.url, max_attempts=1)
        engine = ParkingEngine(sglang)
        live = LiveEpisode.start(
            engine,
            run_episode(
                lambda: ToolEpisode(engine, ChatRenderer(tokenizer), get_parser("hermes"), settings),
                harness.client,
                task,
                attempts=1,
            ),
        )
        await agent.held.wait()
        await server.wait_in_flight()
        async with aiohttp.ClientSession() as http:
            await http.post(server.url + "/abort_request", json={"abort_all": True})
        suspended = await live.next_outcome()
        assert isinstance(suspended, Suspended)
        snapshot = suspended.trajectory
        assert snapshot.stop_reason is StopReason.ABORTED and len(snapshot.segments) == 1 and not snapshot.compactions
        partial = tokenizer.encode("The exit key is")
        assert snapshot.segments[0].response_ids[-len(partial) :] == partial  # the partly sampled summary is kept
        finished = await live.resume(None)
        await sglang.aclose()
    assert isinstance(finished, Finished)
    trajectory = finished.trajectory
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0, trajectory.stop_detail
    assert trajectory.compactions and len(trajectory.segments) == len(trajectory.compactions) + 1
    first_summary = next(t for t in trajectory.turns if t.summary)
    assert re.fullmatch(
        r"The exit key is [a-z]+-\d{4}\. I have walked on\.<\|im_end\|>", tokenizer.decode(first_summary.sampled_ids)
    )
    assert engine.suspensions == 1
    first = trajectory.segments[0]
    assert first.response_ids[-len(first_summary.sampled_ids) :] == list(
        first_summary.sampled_ids
    )  # one turn, sampled in two pieces


async def test_compaction_metrics_per_environment(harness: Harness) -> None:
    from openreward_rl.observe.metrics import aggregate

    compacted = (await harness.run(SummarizeContext(threshold=0.6, keep_recent_turns=1, summary_tokens=128))).trajectory
    overflowed = (await harness.run(None)).trajectory
    metrics = aggregate([compacted, overflowed])
    n = len(compacted.compactions)
    assert metrics["openreward/Corridor/compaction_rate"] == 0.5
    assert metrics["openreward/Corridor/num_compactions_mean"] == n / 2
    assert metrics["openreward/Corridor/summary_turns_mean"] == n / 2
    saved = sum(c.tokens_saved for c in compacted.compactions)
    assert metrics["openreward/Corridor/context_tokens_saved_mean"] == saved / 2 > 0
    assert metrics["openreward/Corridor/turns_mean"] == (compacted.metrics["turns"] + overflowed.metrics["turns"]) / 2
    assert compacted.metrics["turns"] == len([t for t in compacted.turns if not t.summary])  # summary turns apart


async def test_the_viewer_marks_boundaries_and_summaries(harness: Harness, qwen3_tokenizer: Any) -> None:
    import io

    from rich.console import Console

    from openreward_rl.show.episode import conversation, render_html, render_terminal, summary_rows

    trajectory = (
        await harness.run(SummarizeContext(threshold=0.6, keep_recent_turns=1, summary_tokens=128))
    ).trajectory
    trajectory = Trajectory.from_dict(trajectory.to_dict())  # what `openreward-rl show` reads from a dump
    assert trajectory.compactions and any(t.summary for t in trajectory.turns)
    entries = list(conversation(trajectory))
    roles = [e.role for e in entries]
    contexts = len(trajectory.segments)
    assert roles.count("boundary") == len(trajectory.compactions) and roles.count("summary") == len(
        trajectory.compactions
    )
    for number, position in enumerate(i for i, role in enumerate(roles) if role == "boundary"):
        assert roles[position - 1] == "summary"  # the boundary follows the summary it was built from
        assert entries[position].title == f"context {number + 2} of {contexts} starts here (summarize)"
    assert dict(summary_rows(trajectory))["contexts"].startswith(
        f"{contexts} ({len(trajectory.compactions)} compactions: summarize;"
    )
    page = render_html(trajectory, qwen3_tokenizer)
    assert page.count("starts here (summarize)") == len(trajectory.compactions) and page.count(
        "summary turn (turn"
    ) == len(trajectory.compactions)
    assert all(f"context {i} of {contexts}</h3>" in page for i in range(1, contexts + 1))  # every context's tokens
    out = io.StringIO()
    render_terminal(trajectory, Console(file=out, width=200, color_system=None), qwen3_tokenizer)
    text = out.getvalue()
    assert text.count("boundary context") == len(trajectory.compactions) and f"context {contexts} of {contexts}" in text


async def test_a_summary_turn_is_capped_at_summary_tokens(harness: Harness) -> None:
    run = await harness.run(SummarizeContext(threshold=0.6, summary_tokens=48), endless_summary=True)
    trajectory = run.trajectory
    requests = [r for r in run.server.requests if r.path == "/generate"]
    assert run.agent.summaries == 1 and requests[-1].sampling_params["max_new_tokens"] == 48
    assert all(
        r.sampling_params["max_new_tokens"] == 256 for r in requests[:-1]
    )  # environment turns keep the per-call cap
    assert (
        trajectory.stop_reason is StopReason.TRUNCATED
        and trajectory.stop_detail == "the summary turn hit its cap of 48 tokens"
    )
    assert trajectory.turns[-1].summary and len(trajectory.turns[-1].sampled_ids) == 48 and not trajectory.compactions

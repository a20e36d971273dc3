"""Partial rollout end to end: Slime's rollout driver (tests/doubles/slime_rollout_double.py, written from
THUDM/slime 624b824) aborts a rollout step while an episode is in flight; the next step resumes it.

Real parts: the SDK's environment server on 127.0.0.1 serving `Journal` (tests/journal_env.py, it
counts sessions and tool calls), the SGLang wire-format double with its `/abort_request`, the real
Qwen3 tokenizer and chat template. The "model" is a function of the context (`JournalModel`): given
the same context it continues the same turn, so an interrupted run and an uninterrupted one must
produce the same tokens.
"""

from __future__ import annotations

import asyncio
import copy
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

import journal_env
from doubles import slime_double
from doubles import slime_rollout_double as slime_rollout
from doubles.slime_rollout_double import aborter
from openreward_rl.assets import load_tokenizer
from openreward_rl.backends import slime as slime_hooks
from openreward_rl.backends._sample import state as _state
from openreward_rl.backends._sample import suspended as _suspended
from openreward_rl.env.local_server import serve_environments
from openreward_rl.env.tasks import TaskRef
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from openreward_rl.testing.sglang_server import RecordedRequest
from test_backend_slime import make_args as hook_args
from test_backend_slime import record_of

pytestmark = pytest.mark.anyio

Sample = slime_double.Sample
ASSISTANT = (151644, 77091)  # "<|im_start|>" "assistant": one per model turn in the context
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 96, "no_stop_trim": True}
FINISH_LATE_S = 0.3  # a JournalModel's `finish_late` where a test's abort must find the long tail mid-turn


def note_turn(task: int, turn: int) -> str:
    return f'<tool_call>\n{{"name": "note", "arguments": {{"text": "task {task} entry {turn}: the long tail of this episode"}}}}\n</tool_call>'


def call_turn(tool: str, text: str) -> str:
    return f'<tool_call>\n{{"name": "{tool}", "arguments": {{"{"answer" if tool == "submit" else "text"}": "{text}"}}}}\n</tool_call>'


class JournalModel:
    """Task i writes `lengths[i]` notes (turns listed in `waits` call `wait` instead), then submits.

    `interrupt[(task, turn)] = m`: the first request for that turn samples m tokens and stays in
    flight until aborted (mid-turn). `interrupt_continued[(task, turn)] = m`: the same for the first
    request that continues an already started turn. Otherwise the turn continues from whatever part
    of it the context already ends with.

    `finish_late` (seconds): a task's last turn (its submit) is answered that late while another task
    still has an interrupt to reach. The trainer aborts a step as soon as enough groups are done; a test
    whose long tail must be cut mid-turn by that abort needs its interrupted request in flight first,
    which would otherwise follow the event loop's scheduling (the long tail runs a turn or two more
    than the task that finishes).
    """

    def __init__(
        self,
        tokenizer: Any,
        lengths: dict[int, int],
        waits: set[tuple[int, int]] = frozenset(),
        *,
        interrupt: dict[tuple[int, int], int] | None = None,
        interrupt_continued: dict[tuple[int, int], int] | None = None,
        finish_late: float = 0.0,
    ) -> None:
        self.tokenizer, self.lengths, self.waits, self.finish_late = tokenizer, lengths, set(waits), finish_late
        self.interrupt: dict[tuple[int, int], int] = dict(interrupt or {})
        self.interrupt_continued: dict[tuple[int, int], int] = dict(interrupt_continued or {})
        self.turn_ids: dict[tuple[int, int], list[int]] = {}

    def planned(self, task: int, turn: int) -> list[int]:
        if (task, turn) not in self.turn_ids:
            if turn >= self.lengths.get(task, 0):
                text = call_turn("submit", "done")
            elif (task, turn) in self.waits:
                text = call_turn("wait", f"task {task} waits at {turn}")
            else:
                text = note_turn(task, turn)
            self.turn_ids[(task, turn)] = self.tokenizer.encode(text)
        return self.turn_ids[(task, turn)]

    def __call__(self, request: RecordedRequest) -> ScriptedCompletion:
        ids = request.input_ids or []
        turn = sum(1 for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) == ASSISTANT) - 1
        task = int(self.tokenizer.decode(ids).split("Task journal-")[1].split(":")[0])
        plan = self.planned(task, turn)
        done = max(m for m in range(len(plan) + 1) if m == 0 or ids[-m:] == plan[:m])
        cut = (self.interrupt if done == 0 else self.interrupt_continued).pop((task, turn), None)
        if cut is not None:
            return ScriptedCompletion(ids=plan[done : done + cut], hold=True)
        pending = {other for other, _ in (*self.interrupt, *self.interrupt_continued)} - {task}
        late = self.finish_late if turn >= self.lengths.get(task, 0) and pending else 0.0
        return ScriptedCompletion(ids=plan[done:], latency_s=late)


@pytest.fixture(scope="module")
def journal_server() -> Any:
    with serve_environments([journal_env.Journal]) as server:
        yield server


@pytest.fixture
def config_file(train_config, journal_server) -> Any:
    file = train_config(
        f"""
environments:
  Journal:
    base_url: {journal_server.base_url}
    max_turns: 12
parser: hermes
attempts: 1
upload: false
suspended_episode_ttl: 600
max_suspended_episodes: 8
"""
    )
    journal_env.reset()
    return file


@pytest.fixture
def tokenizer() -> Any:
    return load_tokenizer("offline:qwen3")


@pytest.fixture
def loop_thread(monkeypatch) -> Any:
    """Slime's background loop thread, with the driver double installed where the hooks look for Slime's state."""
    monkeypatch.setitem(sys.modules, slime_rollout.MODULE_NAME, slime_rollout)
    slime_rollout.GenerateState.clear_instances()
    thread = slime_rollout.AsyncLoopThread()
    yield thread
    close_loop_thread(thread)


def close_loop_thread(thread: Any) -> None:
    """Close what the hooks left on the loop thread (suspended episodes, backend states), then stop it."""
    store = _suspended.reset_store()
    if store is not None:
        thread.run(store.aclose())
    thread.run(_state.close_states())
    thread.stop()


async def make_server(tokenizer: Any, model: JournalModel) -> SGLangTestServer:
    return await SGLangTestServer(tokenizer, model, weight_version="w1").start()


def make_args(server: SGLangTestServer, **overrides: Any) -> SimpleNamespace:
    """The hook's args (test_backend_slime's) with partial rollout on and what the rollout driver reads."""
    values = dict(
        rollout_max_response_len=96,
        partial_rollout=True,
        mask_offpolicy_in_partial_rollout=False,
        rollout_batch_size=1,
        over_sampling_batch_size=2,
        n_samples_per_prompt=1,
        custom_generate_function_path="openreward_rl.backends.slime.generate",
        custom_rm_path="openreward_rl.backends.slime.reward",
        sampling_params=SAMPLING,
    )
    return hook_args(server, **{**values, **overrides})


def prompt_sample(index: int) -> Sample:
    return slime_double.task_sample(TaskRef("Journal", "train", index=index))


async def step(loop_thread: Any, args: Any, rollout_id: int, source: Any, abort_servers: Any) -> list[list[Sample]]:
    return await asyncio.to_thread(slime_rollout.generate_rollout, loop_thread, args, rollout_id, source, abort_servers)


async def uninterrupted(
    loop_thread: Any, tokenizer: Any, lengths: dict[int, int], task: int, waits: set = frozenset(), *, hook: Any = None
) -> Sample:
    """The reference: the same model and task, one episode without partial rollout; the journal is
    emptied after it. `hook(server, sample)`: the generate call (default: Slime's, without partial rollout)."""
    server = await make_server(tokenizer, JournalModel(tokenizer, lengths, waits))
    try:
        sample = prompt_sample(task)
        sample.index = 0
        call = hook or (
            lambda server, sample: slime_double.call_generate(
                slime_hooks.generate, make_args(server, partial_rollout=False), sample, copy.deepcopy(SAMPLING)
            )
        )
        out = await asyncio.to_thread(loop_thread.run, call(server, sample))
        (only,) = out  # the default context policy is on without partial rollout: a list for every rollout
        return only
    finally:
        await server.close()
        journal_env.reset()  # the run under test starts from an empty journal


def session_calls(session: str) -> list[tuple[str, str]]:
    return [(tool, text) for s, tool, text in journal_env.CALLS if s == session]


@pytest.mark.parametrize("mask_offpolicy", [False, True])
async def test_mid_turn_abort_resumes_token_exactly(config_file, tokenizer, loop_thread, mask_offpolicy) -> None:
    lengths = {0: 1, 1: 4}  # task 0 finishes at once; task 1 is the long tail
    reference = await uninterrupted(loop_thread, tokenizer, lengths, task=1)

    model = JournalModel(
        tokenizer, lengths, interrupt={(1, 2): 7}, finish_late=FINISH_LATE_S
    )  # the third turn of task 1 is cut after 7 tokens
    server = await make_server(tokenizer, model)
    try:
        args = make_args(server, mask_offpolicy_in_partial_rollout=mask_offpolicy)
        source = slime_rollout.RolloutDataSourceWithBuffer(args, prompt_sample)
        (first,) = await step(loop_thread, args, 0, source, aborter(server))
        assert record_of(first[0]).environment == "Journal" and first[0].status is Sample.Status.COMPLETED
        ((parked,),) = source.buffer  # task 1 went back to the buffer, suspended
        assert parked.status is Sample.Status.ABORTED and parked.remove_sample and not any(parked.loss_mask)
        assert parked.metadata["resume"]["suspensions"] == 1 and parked.metadata["start_rollout_id"] == 0
        two_turns = tokenizer.encode(note_turn(1, 0)) + tokenizer.encode(note_turn(1, 1))
        assert parked.tokens[-7:] == model.planned(1, 2)[:7]  # the partial turn's tokens are in the sample
        assert len(parked.tokens) > len(two_turns) + 7
        assert len(journal_env.SESSIONS) == 2

        server.weight_version = "w2"  # the trainer updated the weights between the steps
        args.over_sampling_batch_size = 1  # the next step takes only the buffered group
        (second,) = await step(loop_thread, args, 1, source, aborter(server))
        (resumed,) = second
        assert resumed is parked and resumed.status is Sample.Status.COMPLETED and resumed.reward == 1.0
        slime_double.check_output(resumed, args)
        assert "resume" not in resumed.metadata and record_of(resumed).metrics["suspensions"] == 1.0
    finally:
        await server.close()

    assert resumed.tokens == reference.tokens  # token-exact with the uninterrupted run
    assert resumed.response_length == reference.response_length
    task_sessions = [s for s in journal_env.SESSIONS if any(c[0] == s and "task 1" in c[2] for c in journal_env.CALLS)]
    assert len(task_sessions) == 1  # one environment session for the whole resumed episode
    calls = session_calls(task_sessions[0])
    assert calls == [("note", f"task 1 entry {t}: the long tail of this episode") for t in range(4)] + [
        ("submit", "done")
    ]  # each call once
    spans = resumed.metadata["weight_version_spans"]
    assert [s["weight_version"] for s in spans] == [
        "w1",
        "w1",
        "w1",
        "w2",
        "w2",
        "w2",
    ]  # turns 0-1, the cut piece, its rest, turns 3-4
    assert spans[2]["tokens"] == 7 and spans[3]["request"].endswith("_t2_p1")
    assert resumed.weight_versions == ["w1", "w1", "w1", "w2", "w2", "w2"]
    # the cut turn is one turn: the per-turn credit of the resumed episode is the uninterrupted run's
    assert {k: resumed.metadata[k] for k in ("turn_rewards", "turn_returns", "turn_spans", "turn_ends")} == {
        k: reference.metadata[k] for k in ("turn_rewards", "turn_returns", "turn_spans", "turn_ends")
    }
    assert len(resumed.metadata["turn_spans"]) == 5
    if not mask_offpolicy:
        assert resumed.loss_mask == reference.loss_mask and resumed.rollout_log_probs == reference.rollout_log_probs
    else:
        prompt_length = len(resumed.tokens) - resumed.response_length
        boundary = (
            len(server.requests[-3].input_ids) - prompt_length
        )  # the continuation request: context + the 7 old tokens
        assert (
            resumed.loss_mask[:boundary] == [0] * boundary and resumed.rollout_log_probs[:boundary] == [0.0] * boundary
        )
        assert resumed.loss_mask[boundary:] == reference.loss_mask[boundary:] and 1 in resumed.loss_mask[boundary:]
        assert resumed.rollout_log_probs[boundary:] == reference.rollout_log_probs[boundary:]


async def test_abort_between_turns_parks_after_the_tool_call(config_file, tokenizer, loop_thread) -> None:
    lengths = {0: 1, 1: 3}
    waits = {(1, 1)}  # task 1's second turn calls `wait`, which runs while the trainer aborts
    reference = await uninterrupted(loop_thread, tokenizer, lengths, task=1, waits=waits)
    journal_env.GATE.clear()

    server = await make_server(tokenizer, JournalModel(tokenizer, lengths, waits))
    try:
        args = make_args(server)
        source = slime_rollout.RolloutDataSourceWithBuffer(args, prompt_sample)
        (first,) = await step(loop_thread, args, 0, source, aborter(server, then=journal_env.GATE.set))
        ((parked,),) = source.buffer
        assert parked.status is Sample.Status.ABORTED
        assert "before this call" in record_of(parked).stop_detail  # parked at the next engine call, not sent
        waited = [c for c in journal_env.CALLS if c[1] == "wait"]
        assert len(waited) == 1
        requests_before = len(server.requests)
        args.over_sampling_batch_size = 1
        ((resumed,),) = await step(loop_thread, args, 1, source, aborter(server))
        assert resumed.status is Sample.Status.COMPLETED and resumed.tokens == reference.tokens
        assert len(server.requests) - requests_before == 2  # the third turn and the submit; nothing re-run
    finally:
        await server.close()
    assert len([c for c in journal_env.CALLS if c[1] == "wait"]) == 1  # the tool call ran once


async def test_process_restart_leaves_an_aborted_placeholder(config_file, tokenizer, loop_thread) -> None:
    model = JournalModel(tokenizer, {0: 1, 1: 4}, interrupt={(1, 1): 5})
    server = await make_server(tokenizer, model)
    try:
        args = make_args(server)
        source = slime_rollout.RolloutDataSourceWithBuffer(args, prompt_sample)
        await step(loop_thread, args, 0, source, aborter(server))
        ((parked,),) = source.buffer
        store = _suspended.reset_store()  # the rollout process restarted: its suspended episodes are gone
        loop_thread.run(store.aclose())
        parked.metadata["resume"]["pid"] = parked.metadata["resume"]["pid"] + 1
        args.over_sampling_batch_size = 1
        ((lost,),) = await step(loop_thread, args, 1, source, aborter(server))
    finally:
        await server.close()
    assert (
        lost.status is Sample.Status.ABORTED and lost.remove_sample and lost.reward == 0.0 and not any(lost.loss_mask)
    )
    assert record_of(lost).reward_observed is False and record_of(lost).placeholder is True
    assert "rollout process restarted" in record_of(lost).stop_detail
    slime_double.check_output(lost, args)


async def test_expired_and_evicted_episodes_become_placeholders(config_file, tokenizer, loop_thread) -> None:
    config_file.write_text(config_file.read_text().replace("max_suspended_episodes: 8", "max_suspended_episodes: 2"))
    model = JournalModel(tokenizer, {1: 4, 2: 4, 3: 4}, interrupt={(task, 1): 4 for task in (1, 2, 3)})
    server = await make_server(tokenizer, model)
    try:
        args = make_args(server, over_sampling_batch_size=4)
        source = slime_rollout.RolloutDataSourceWithBuffer(args, prompt_sample)
        await step(loop_thread, args, 0, source, aborter(server))
        store = _suspended.store_for(600, 2)
        assert len(source.buffer) == 3 and len(store) == 2  # three suspended; the oldest was closed for the cap
        parked = store.episodes()
        store.clock = lambda: time.monotonic() + 10_000  # past the TTL
        args.over_sampling_batch_size = args.rollout_batch_size = 3
        groups = await step(loop_thread, args, 1, source, aborter(server))
    finally:
        await server.close()
    details = [record_of(g[0]).stop_detail for g in groups]
    assert all(
        g[0].status is Sample.Status.ABORTED and g[0].remove_sample and record_of(g[0]).placeholder for g in groups
    )
    assert sum("max_suspended_episodes=2" in d for d in details) == 1 and sum("expired" in d for d in details) == 2, (
        details
    )
    assert len(store) == 0 and all(live.task.done() for live in parked)  # their sessions were closed
    for group in groups:
        slime_double.check_output(group[0], args)


async def test_abort_storm_keeps_one_session_and_exact_tokens(config_file, tokenizer, loop_thread) -> None:
    lengths = {1: 5}  # every other task submits at once, ending each step while task 1 is cut
    reference = await uninterrupted(loop_thread, tokenizer, lengths, task=1)
    model = JournalModel(
        tokenizer, lengths, interrupt={(1, turn): cut for turn, cut in ((0, 3), (1, 9), (2, 1), (4, 6))}
    )
    server = await make_server(tokenizer, model)
    finished: list[Sample] = []
    try:
        args = make_args(server)
        source = slime_rollout.RolloutDataSourceWithBuffer(args, prompt_sample)
        for rollout_id in range(12):
            finished += [g[0] for g in await step(loop_thread, args, rollout_id, source, aborter(server))]
            if any(s.metadata["index"] == 1 for s in finished):
                break
    finally:
        await server.close()
    (resumed,) = [s for s in finished if s.metadata["index"] == 1]
    assert resumed.status is Sample.Status.COMPLETED and resumed.tokens == reference.tokens
    assert resumed.rollout_log_probs == reference.rollout_log_probs and resumed.loss_mask == reference.loss_mask
    assert record_of(resumed).metrics["suspensions"] >= 4.0
    sessions = {c[0] for c in journal_env.CALLS if "task 1 " in c[2]}
    assert len(sessions) == 1 and [c[1] for c in journal_env.CALLS if c[0] in sessions] == ["note"] * 5 + ["submit"]

"""Our hooks under fully-async rollout, where generation never stops for training and the weights
change while episodes are in flight.

Drivers (Slime and Miles cannot run here; doubles written from their source, not copied):
- Slime (THUDM/slime 624b824, `slime/rollout/fully_async_rollout.py`, `train_async.py`): a worker
  thread running its own event loop (`asyncio.run`) keeps groups in flight through
  `generate_and_rm_group` and the custom generate hook; the rollout function, on Slime's loop thread,
  drains finished groups; a group with an ABORTED sample goes back to the data buffer instead of to
  training. The weight updaters call SGLang's `/pause_generation` with `{}`, i.e. SGLang's default mode
  "abort" (slime/backends/sglang_utils/sglang_engine.py; SGLang io_struct `PauseGenerationReqInput`),
  then `/continue_generation`: the SGLang double emulates both (in-flight requests answer aborted
  with their tokens so far; new requests wait for the continue). `GenerateState.aborted` is never set
  by this worker, so the hook reads such an abort as one the trainer did not order and continues
  the cut turn in place.
- Miles (radixark/miles 31f1ca9, `miles/rollout/fully_async_rollout.py`,
  `fully_async_data_buffer.py`): one producer task on the rollout loop, a buffer that rejects aborted
  groups (their prompts are reset and retried) and filters groups by staleness computed from each
  sample's `weight_versions`. Class-based rollout, new-form `generate_fn`; Miles refuses
  `--partial-rollout` with `--fully-async`. Miles' weight updaters pause with `--pause-generation-mode`
  (default "retract") and `--fully-async` refuses mode "abort" (miles/utils/arguments.py), so on
  Miles a weight update does not abort a turn; the Miles tests below inject that abort all the
  same (an older Miles, whose default was "abort", or any pause in mode "abort" of a shared engine)
  to show what the hook does with an abort its driver did not order.

Real parts: the SDK's environment server serving `Journal` (sessions and tool calls counted), the
SGLang wire double (its `weight_version` is what a weight update changes), the Qwen3 tokenizer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import attrs
import pytest

import journal_env
from doubles import miles_double, slime_double
from doubles import miles_rollout_double as miles_rollout
from doubles import slime_rollout_double as slime_rollout
from openreward_rl.cli.launcher import SLIME_FULLY_ASYNC_ROLLOUT
from openreward_rl.testing import SGLangTestServer
from test_backend_slime import record_of
from test_partial_rollout import (  # noqa: F401
    JournalModel,
    aborter,
    config_file,
    journal_server,
    loop_thread,
    make_args,
    make_server,
    prompt_sample,
    step,
    tokenizer,
    uninterrupted,
)

pytestmark = pytest.mark.anyio


def miles_fully_async_args(server: SGLangTestServer) -> Any:
    """Miles' hooks (generate_fn, reward) under its fully async rollout, two prompts a step."""
    return make_args(
        server,
        partial_rollout=False,
        fully_async=True,  # `--fully-async`: one Sample per rollout, so no default context policy
        rollout_batch_size=2,
        custom_generate_function_path="openreward_rl.backends.miles.generate_fn",
        custom_rm_path="openreward_rl.backends.miles.reward",
        async_data_buffer_capacity_factor=1.0,
        max_weight_staleness=None,
    )


def task_sessions(task: int) -> list[str]:
    return sorted({s for s, _, text in journal_env.CALLS if f"task {task} " in text})


def session_tools(session: str) -> list[str]:
    return [tool for s, tool, _ in journal_env.CALLS if s == session]


async def until(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def post(server: SGLangTestServer, path: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(server.url + path, json={}) as response:
            assert response.status == 200


async def weight_update(server: SGLangTestServer, version: str, *, cut: str, held: str | None) -> None:
    """What Slime's `update_weights` does to SGLang while a request whose rid ends with `cut` is in flight:
    `/pause_generation` (`{}`: mode "abort"), the new weights (`version`), `/continue_generation`. With `held`,
    it first waits until the hook's continuation (rid ending with `held`) is held by the pause."""
    await until(lambda: any(rid.endswith(cut) for rid in server.in_flight), f"a request ending with {cut} in flight")
    await post(server, "/pause_generation")
    if held is not None:
        await until(
            lambda: any(rid.endswith(held) for rid in server.held), f"the continuation {held} held by the pause"
        )
    server.weight_version = version
    await post(server, "/continue_generation")


def task_rids(server: SGLangTestServer, task: int) -> list[str]:
    return [
        r.rid
        for r in server.requests
        if r.rid and f"Task journal-{task}:" in server.tokenizer.decode(r.input_ids or [])
    ]


async def start_slime_worker(tokenizer: Any, model: Any) -> tuple[SGLangTestServer, Any, Any]:
    """The SGLang double serving `model` at weight version "1", and a started Slime fully-async worker
    on it (two prompts a batch, two in flight, no partial rollout): the server, the args, the worker."""
    server = await SGLangTestServer(tokenizer, model, weight_version="1").start()
    args = make_args(
        server, partial_rollout=False, rollout_batch_size=2, rollout_function_path=SLIME_FULLY_ASYNC_ROLLOUT
    )  # what `train --rollout-mode fully-async` passes
    worker = slime_rollout.AsyncRolloutWorker(
        args, slime_rollout.RolloutDataSourceWithBuffer(args, prompt_sample), concurrency=2
    )
    worker.start()
    return server, args, worker


async def slime_steps(loop_thread: Any, worker: Any, args: Any, task: int, steps: int = 8) -> list[Any]:
    """Training steps of `train_async.py`: each drains `rollout_batch_size` groups; stop once `task` came through."""
    trained = []
    for _ in range(steps):
        groups = await asyncio.to_thread(
            loop_thread.run, slime_rollout.drain_fully_async(worker, args.rollout_batch_size)
        )
        trained += [g[0] for g in groups]
        if any(s.metadata["index"] == task for s in trained):
            return trained
    raise AssertionError(f"task {task} never reached training")


async def miles_steps(loop_thread: Any, rollout_fn: Any, task: int) -> list[Any]:
    """Miles' rollout steps 1 to 7 of two prompts each; stop once `task` came through."""
    trained: list[Any] = []
    for rollout_id in range(1, 8):
        trained += [g[0] for g in await asyncio.to_thread(loop_thread.run, rollout_fn(rollout_id, 2))]
        if any(s.metadata["index"] == task for s in trained):
            return trained
    raise AssertionError(f"task {task} never reached training")


async def test_slime_fully_async_records_a_weight_update_between_turns(config_file, tokenizer, loop_thread) -> None:
    lengths, waits = {1: 3}, {(1, 1)}  # task 1 writes a note, waits, writes a note, submits; the rest submit at once
    reference = await uninterrupted(loop_thread, tokenizer, lengths, task=1, waits=waits)
    journal_env.GATE.clear()
    server, args, worker = await start_slime_worker(tokenizer, JournalModel(tokenizer, lengths, waits))
    try:
        first = await asyncio.to_thread(loop_thread.run, slime_rollout.drain_fully_async(worker, 2))
        await asyncio.to_thread(journal_env.IN_WAIT.wait, 60)  # task 1 is inside its `wait` tool call
        assert all(s.weight_versions == ["1"] for g in first for s in g)
        server.weight_version = "2"  # the trainer updated the weights while task 1 is mid-episode
        journal_env.GATE.set()
        trained = await slime_steps(loop_thread, worker, args, task=1)
    finally:
        await asyncio.to_thread(worker.stop)
        await server.close()
    (sample,) = [s for s in trained if s.metadata["index"] == 1]
    assert sample.status is slime_double.Sample.Status.COMPLETED and sample.reward == 1.0
    slime_double.check_output(sample, args)
    assert sample.weight_versions == ["1", "1", "2", "2"]  # turns 1-2 sampled by the old weights, 3-4 by the new
    assert sample.tokens == reference.tokens and sample.loss_mask == reference.loss_mask
    assert sample.rollout_log_probs == reference.rollout_log_probs
    (session,) = task_sessions(1)
    assert session_tools(session) == ["note", "wait", "note", "submit"]
    assert worker.requeued == 0


async def test_slime_fully_async_weight_update_continues_the_cut_turn_in_place(
    config_file, tokenizer, loop_thread
) -> None:
    """The update's pause aborts task 1's second turn after 6 tokens. Slime's flag says the trainer is not
    aborting, so the hook sends the turn's continuation at once; SGLang holds it until the update is done and
    the new weights sample the rest: the uninterrupted run's tokens, one session, each tool call once."""
    lengths = {1: 3}
    reference = await uninterrupted(loop_thread, tokenizer, lengths, task=1)
    model = JournalModel(
        tokenizer, lengths, interrupt={(1, 1): 6}
    )  # the second turn is still generating when the weights are updated
    server, args, worker = await start_slime_worker(tokenizer, model)
    try:
        await weight_update(server, "2", cut="_t1", held="_t1_p1")
        trained = await slime_steps(loop_thread, worker, args, task=1)
    finally:
        await asyncio.to_thread(worker.stop)
        await server.close()
    assert worker.requeued == 0  # nothing went back to the data buffer
    (sample,) = [s for s in trained if s.metadata["index"] == 1]
    slime_double.check_output(sample, args)
    assert sample.status is slime_double.Sample.Status.COMPLETED and sample.reward == 1.0
    assert sample.tokens == reference.tokens and sample.loss_mask == reference.loss_mask
    assert sample.rollout_log_probs == reference.rollout_log_probs
    assert sample.weight_versions == [
        "1",
        "1",
        "2",
        "2",
        "2",
    ]  # one per engine call: turn 1, the cut turn's two calls, turns 3-4
    spans = sample.metadata["weight_version_spans"]
    second_turn = len(model.planned(1, 1))
    cut_call, continuation = spans[1], spans[2]
    assert cut_call["request"].endswith("_t1") and (cut_call["tokens"], cut_call["weight_version"]) == (6, "1")
    assert continuation["request"].endswith("_t1_p1") and (continuation["tokens"], continuation["weight_version"]) == (
        second_turn - 6 + 1,
        "2",
    )  # + the EOS
    assert record_of(sample).metrics["continuations"] == 1.0
    (session,) = task_sessions(1)
    assert session_tools(session) == ["note", "note", "note", "submit"]


async def test_slime_fully_async_continuations_are_bounded(config_file, tokenizer, loop_thread) -> None:
    """`max_turn_continuations: 1`: a second update cuts the continued turn again, which ends the episode
    ABORTED as before (never trained); Slime's worker requeues the group and the episode runs again in a
    fresh session."""
    config_file.write_text(config_file.read_text() + "max_turn_continuations: 1\n")
    lengths = {1: 3}
    reference = await uninterrupted(loop_thread, tokenizer, lengths, task=1)
    model = JournalModel(
        tokenizer, lengths, interrupt={(1, 1): 6}, interrupt_continued={(1, 1): 4}
    )  # the continuation is still generating at the next update
    server, args, worker = await start_slime_worker(tokenizer, model)
    try:
        await weight_update(server, "2", cut="_t1", held="_t1_p1")
        await weight_update(server, "3", cut="_t1_p1", held=None)
        trained = await slime_steps(loop_thread, worker, args, task=1)
    finally:
        await asyncio.to_thread(worker.stop)
        await server.close()
    assert worker.requeued == 1
    assert all(s.status is not slime_double.Sample.Status.ABORTED for s in trained)  # nothing aborted reached training
    cut_turn = [rid for rid in task_rids(server, 1) if "_t1_p" in rid]
    assert len(cut_turn) == 1 and cut_turn[0].endswith("_t1_p1")  # one continuation, no second
    (sample,) = [s for s in trained if s.metadata["index"] == 1]
    slime_double.check_output(sample, args)
    assert sample.status is slime_double.Sample.Status.COMPLETED and sample.reward == 1.0
    assert sample.tokens == reference.tokens and sample.loss_mask == reference.loss_mask
    assert sample.weight_versions == ["3"] * 4  # the trained run is the second attempt, all on the newest weights
    by_length = sorted((session_tools(s) for s in task_sessions(1)), key=len)
    assert by_length == [
        ["note"],
        ["note", "note", "note", "submit"],
    ]  # the lost attempt's first note ran in its own session


async def test_trainer_abort_is_not_continued(config_file, tokenizer, loop_thread) -> None:
    """Slime's sync rollout sets `GenerateState.aborted` before its `abort_all` at the end of a step: that abort
    is the trainer's, so the cut turn ends the episode ABORTED (discarded without `--partial-rollout`), nothing continued."""
    model = JournalModel(tokenizer, {0: 1, 1: 4}, interrupt={(1, 1): 5})
    server = await make_server(tokenizer, model)
    try:
        args = make_args(server, partial_rollout=False)
        source = slime_rollout.RolloutDataSourceWithBuffer(args, prompt_sample)
        (((first,),),) = await step(
            loop_thread, args, 0, source, aborter(server)
        )  # sync: the default context policy makes a list of each rollout
    finally:
        await server.close()
    assert first.metadata["index"] == 0 and first.status is slime_double.Sample.Status.COMPLETED
    assert source.buffer == []
    assert any(rid.endswith("_t1") for rid in task_rids(server, 1)) and not any(
        "_p" in rid for rid in task_rids(server, 1)
    )
    (session,) = task_sessions(1)
    assert session_tools(session) == ["note"]


async def test_miles_fully_async_records_weight_versions_for_the_staleness_filter(
    config_file, tokenizer, loop_thread
) -> None:
    lengths, waits = {1: 3}, {(1, 1)}
    reference = await uninterrupted(loop_thread, tokenizer, lengths, task=1, waits=waits)
    journal_env.GATE.clear()
    server = await SGLangTestServer(tokenizer, JournalModel(tokenizer, lengths, waits), weight_version="1").start()
    args = miles_fully_async_args(server)
    source = slime_rollout.RolloutDataSourceWithBuffer(args, lambda i: miles_sample(i))
    rollout_fn = miles_rollout.FullyAsyncRolloutFn(args, source)
    trained: list[Any] = []
    try:
        first = await asyncio.to_thread(loop_thread.run, rollout_fn(0, 1))
        await asyncio.to_thread(journal_env.IN_WAIT.wait, 60)
        assert all(s.weight_versions == ["1"] for g in first for s in g)
        server.weight_version = "2"
        journal_env.GATE.set()
        trained += await miles_steps(loop_thread, rollout_fn, task=1)
    finally:
        await asyncio.to_thread(loop_thread.run, rollout_fn.stop())
        await server.close()
    (sample,) = [s for s in trained if s.metadata["index"] == 1]
    miles_double.check_trainable(sample, args)
    assert sample.status is miles_double.Sample.Status.COMPLETED and sample.reward == 1.0
    assert sample.weight_versions == ["1", "1", "2", "2"]
    assert sample.oldest_weight_version == 1  # what Miles' --max-weight-staleness compares: staleness 1 at version 2
    assert sample.tokens == reference.tokens and sample.loss_mask == reference.loss_mask
    (session,) = task_sessions(1)
    assert session_tools(session) == ["note", "wait", "note", "submit"]
    assert rollout_fn.output.aborted_groups == 0


def miles_sample(index: int) -> Any:
    row = prompt_sample(index)
    return miles_double.Sample(prompt=row.prompt, label=row.label, metadata=row.metadata)


@attrs.define
class MilesCutRun:
    reference: Any
    server: SGLangTestServer
    args: Any
    rollout_fn: Any
    trained: list[Any]


async def miles_run_with_a_cut_turn(tokenizer: Any, loop_thread: Any, held: str | None) -> MilesCutRun:
    """Task 1 (3 turns) under Miles' fully-async rollout; a weight update to "2" in mode "abort" cuts its second
    turn after 6 tokens (`held`: the request the paused server must hold, if any); runs until task 1 is trained."""
    lengths = {1: 3}
    reference = await uninterrupted(loop_thread, tokenizer, lengths, task=1)
    model = JournalModel(tokenizer, lengths, interrupt={(1, 1): 6})
    server = await SGLangTestServer(tokenizer, model, weight_version="1").start()
    args = miles_fully_async_args(server)
    rollout_fn = miles_rollout.FullyAsyncRolloutFn(
        args, slime_rollout.RolloutDataSourceWithBuffer(args, lambda i: miles_sample(i))
    )
    trained: list[Any] = []
    try:
        trained += [g[0] for g in await asyncio.to_thread(loop_thread.run, rollout_fn(0, 1))]
        await weight_update(server, "2", cut="_t1", held=held)
        trained += await miles_steps(loop_thread, rollout_fn, task=1)
    finally:
        await asyncio.to_thread(loop_thread.run, rollout_fn.stop())
        await server.close()
    return MilesCutRun(reference, server, args, rollout_fn, trained)


async def test_miles_fully_async_abort_continues_the_cut_turn_in_place(config_file, tokenizer, loop_thread) -> None:
    """A pause in mode "abort" cuts task 1's second turn under Miles' fully-async rollout: its `GenerateState`
    (`input.state`) is not aborting, so `generate_fn` continues the turn in place; the buffer sees no aborted group."""
    run = await miles_run_with_a_cut_turn(tokenizer, loop_thread, held="_t1_p1")
    reference, args, rollout_fn, trained = run.reference, run.args, run.rollout_fn, run.trained
    assert rollout_fn.output.aborted_groups == 0
    (sample,) = [s for s in trained if s.metadata["index"] == 1]
    miles_double.check_trainable(sample, args)
    assert sample.status is miles_double.Sample.Status.COMPLETED and sample.reward == 1.0
    assert sample.tokens == reference.tokens and sample.loss_mask == reference.loss_mask
    assert sample.rollout_log_probs == reference.rollout_log_probs
    assert sample.weight_versions == ["1", "1", "2", "2", "2"]
    assert sample.oldest_weight_version == 1  # the cut turn's first part counts for --max-weight-staleness
    assert [s["request"].rsplit("_", 1)[-1] for s in sample.metadata["weight_version_spans"]] == [
        "t0",
        "t1",
        "p1",
        "t2",
        "t3",
    ]
    (session,) = task_sessions(1)
    assert session_tools(session) == ["note", "note", "note", "submit"]


async def test_miles_fully_async_without_continuations_retries_the_prompt(config_file, tokenizer, loop_thread) -> None:
    """`max_turn_continuations: 0` keeps the old behaviour: the cut turn ends the episode ABORTED, Miles' buffer
    rejects the group and, under `--async-unused-samples-handler retry`, resets its prompt (`reset_for_retry`) back
    into the data source; the retried episode is trained, all on the new weights, in a fresh session."""
    config_file.write_text(config_file.read_text() + "max_turn_continuations: 0\n")
    run = await miles_run_with_a_cut_turn(tokenizer, loop_thread, held=None)
    reference, server, args, rollout_fn, trained = run.reference, run.server, run.args, run.rollout_fn, run.trained
    assert rollout_fn.output.aborted_groups == 1
    assert all(s.status is not miles_double.Sample.Status.ABORTED for s in trained)
    assert not any("_p" in rid for rid in task_rids(server, 1))
    (sample,) = [s for s in trained if s.metadata["index"] == 1]
    miles_double.check_trainable(sample, args)
    assert sample.status is miles_double.Sample.Status.COMPLETED and sample.reward == 1.0
    assert sample.tokens == reference.tokens and sample.loss_mask == reference.loss_mask
    assert sample.weight_versions == ["2"] * 4
    by_length = sorted((session_tools(s) for s in task_sessions(1)), key=len)
    assert by_length == [["note"], ["note", "note", "note", "submit"]]

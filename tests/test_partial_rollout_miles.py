"""Partial rollout through the Miles hooks: Miles' rollout driver (tests/doubles/miles_rollout_double.py,
written from radixark/miles 31f1ca9) aborts a step while an episode is in flight; the next step
resumes it. Both of Miles' rollouts — the legacy one (`MILES_USE_LEGACY_ROLLOUT_V1=1`, a singleton
`GenerateState` in `miles.rollout.sglang_rollout`) and the class-based one (a per-rollout
`GenerateState` handed to the generate as `input.state`) — and both generate forms: the legacy
function `backends.miles.generate`, which Miles wraps in its `LegacyGenerateFnAdapter`, and the new
form `backends.miles.generate_fn`. The legacy function reads the abort flag from the singleton, so
under the class-based rollout it cannot park between turns (a turn started after the abort runs
to its end); mid-turn aborts resume token-exactly under all four pairs. Miles allows
`--mask-offpolicy-in-partial-rollout` only under the legacy rollout (miles/utils/arguments.py).

Real parts as in test_partial_rollout.py: the SDK's environment server serving `Journal` (it counts
sessions and tool calls), the SGLang wire double with `/abort_request`, the Qwen3 tokenizer.
"""

from __future__ import annotations

import asyncio
import copy
import sys
import types
from typing import Any

import pytest

import journal_env
from doubles import miles_double, slime_double
from doubles import miles_rollout_double as miles_rollout
from doubles import slime_rollout_double as slime_rollout
from openreward_rl.backends import miles as miles_hooks
from openreward_rl.env.tasks import TaskRef
from test_backend_slime import record_of
from test_partial_rollout import (  # noqa: F401
    FINISH_LATE_S,
    SAMPLING,
    JournalModel,
    aborter,
    close_loop_thread,
    config_file,
    journal_server,
    make_args,
    make_server,
    tokenizer,
)
from test_partial_rollout import uninterrupted as slime_reference

pytestmark = pytest.mark.anyio

Sample = miles_double.Sample
FORMS = {
    "legacy-rollout/legacy-fn": ("openreward_rl.backends.miles.generate", miles_rollout.LegacyGenerateState),
    "legacy-rollout/new-fn": ("openreward_rl.backends.miles.generate_fn", miles_rollout.LegacyGenerateState),
    "class-rollout/new-fn": ("openreward_rl.backends.miles.generate_fn", miles_rollout.GenerateState),
    "class-rollout/legacy-fn": ("openreward_rl.backends.miles.generate", miles_rollout.GenerateState),
}
SEES_ABORT_FLAG = [form for form in FORMS if form != "class-rollout/legacy-fn"]
LEGACY_ROLLOUT = [form for form in FORMS if form.startswith("legacy-rollout")]


@pytest.fixture
def loop_thread(monkeypatch, request) -> Any:
    """Miles' background loop thread. Under the legacy rollout its module is loaded (the legacy hook reads
    the singleton there); the class-based rollout does not import `miles.rollout.sglang_rollout`."""
    form = getattr(request.node, "callspec", None) and request.node.callspec.params.get("form")
    if form is None or form.startswith("legacy-rollout"):
        legacy = types.ModuleType(miles_rollout.LEGACY_MODULE_NAME)
        legacy.GenerateState = miles_rollout.LegacyGenerateState
        monkeypatch.setitem(sys.modules, miles_rollout.LEGACY_MODULE_NAME, legacy)
    else:
        monkeypatch.delitem(sys.modules, miles_rollout.LEGACY_MODULE_NAME, raising=False)
    miles_rollout.LegacyGenerateState.clear_instances()
    thread = slime_rollout.AsyncLoopThread()
    yield thread
    close_loop_thread(thread)


def miles_args(server: Any, form: str, **overrides: Any) -> Any:
    path, _ = FORMS[form]
    return make_args(
        server,
        custom_generate_function_path=path,
        custom_rm_path="openreward_rl.backends.miles.reward",
        router_policy="consistent_hashing",
        **overrides,
    )


def prompt_sample(index: int) -> Sample:
    return slime_double.task_sample(TaskRef("Journal", "train", index=index), Sample)


def rollout_parts(server: Any, form: str, **overrides: Any) -> tuple[Any, miles_rollout.GenerateState, Any]:
    """For `form`: the args (`miles_args`), the rollout's generate state, and a buffered source of Journal prompts."""
    args = miles_args(server, form, **overrides)
    _, state_class = FORMS[form]
    return args, state_class(args), slime_rollout.RolloutDataSourceWithBuffer(args, prompt_sample)


async def step(loop_thread: Any, state: Any, rollout_id: int, source: Any, abort_servers: Any) -> list[list[Sample]]:
    return await asyncio.to_thread(
        miles_rollout.generate_rollout, loop_thread, state, rollout_id, source, abort_servers
    )


async def uninterrupted(
    loop_thread: Any, tokenizer: Any, lengths: dict[int, int], task: int, waits: set = frozenset()
) -> Sample:
    """The reference through the Miles hook, as test_partial_rollout's; the journal is emptied after it."""

    def hook(server: Any, sample: Any) -> Any:
        args = miles_args(server, "legacy-rollout/legacy-fn", partial_rollout=False)
        return miles_double.call_generate(miles_hooks.generate, args, sample, copy.deepcopy(SAMPLING))

    return await slime_reference(loop_thread, tokenizer, lengths, task, waits, hook=hook)


async def interrupted(
    loop_thread: Any,
    tokenizer: Any,
    lengths: dict[int, int],
    interrupt: dict[tuple[int, int], int],
    finish_late: float = 0.0,
) -> tuple[Sample, JournalModel, Any]:
    """Task 1's uninterrupted reference, then a server whose model cuts the turns `interrupt` names."""
    reference = await uninterrupted(loop_thread, tokenizer, lengths, task=1)
    model = JournalModel(tokenizer, lengths, interrupt=interrupt, finish_late=finish_late)
    return reference, model, await make_server(tokenizer, model)


@pytest.mark.parametrize("form", list(FORMS))
async def test_mid_turn_abort_resumes_token_exactly(config_file, tokenizer, loop_thread, form) -> None:
    lengths = {0: 1, 1: 4}
    reference, model, server = await interrupted(
        loop_thread, tokenizer, lengths, {(1, 2): 7}, finish_late=FINISH_LATE_S
    )
    try:
        args, state, source = rollout_parts(server, form)
        (first,) = await step(loop_thread, state, 0, source, aborter(server))
        assert first[0].status is Sample.Status.COMPLETED and first[0].reward == 1.0
        ((parked,),) = source.buffer
        assert parked.status is Sample.Status.ABORTED and parked.remove_sample and not any(parked.loss_mask)
        assert parked.metadata["resume"]["suspensions"] == 1 and parked.metadata["start_rollout_id"] == 0
        assert parked.tokens[-7:] == model.planned(1, 2)[:7]
        assert parked.routing_key is not None
        server.weight_version = "w2"
        args.over_sampling_batch_size = 1
        ((resumed,),) = await step(loop_thread, state, 1, source, aborter(server))
        assert resumed is parked and resumed.status is Sample.Status.COMPLETED and resumed.reward == 1.0
        miles_double.check_trainable(resumed, args)
    finally:
        await server.close()
    assert resumed.tokens == reference.tokens and resumed.loss_mask == reference.loss_mask
    assert resumed.rollout_log_probs == reference.rollout_log_probs
    sessions = {c[0] for c in journal_env.CALLS if "task 1 " in c[2]}
    assert len(sessions) == 1
    assert [(tool, text) for s, tool, text in journal_env.CALLS if s in sessions] == [
        ("note", f"task 1 entry {t}: the long tail of this episode") for t in range(4)
    ] + [("submit", "done")]
    assert resumed.weight_versions == ["w1", "w1", "w1", "w2", "w2", "w2"]
    routes = {
        r.routing_key for r in server.requests if r.input_ids and "Task journal-1:" in tokenizer.decode(r.input_ids)
    }
    assert routes == {resumed.routing_key}  # every turn of the resumed episode pinned to one worker


@pytest.mark.parametrize("form", SEES_ABORT_FLAG)
async def test_abort_between_turns_parks_at_the_next_model_call(config_file, tokenizer, loop_thread, form) -> None:
    lengths = {0: 1, 1: 3}
    waits = {(1, 1)}
    reference = await uninterrupted(loop_thread, tokenizer, lengths, task=1, waits=waits)
    journal_env.GATE.clear()
    server = await make_server(tokenizer, JournalModel(tokenizer, lengths, waits))
    try:
        args, state, source = rollout_parts(server, form)
        await step(loop_thread, state, 0, source, aborter(server, then=journal_env.GATE.set))
        ((parked,),) = source.buffer
        assert parked.status is Sample.Status.ABORTED
        assert "before this call" in record_of(parked).stop_detail  # the hook saw this rollout's abort flag
        requests_before = len(server.requests)
        args.over_sampling_batch_size = 1
        ((resumed,),) = await step(loop_thread, state, 1, source, aborter(server))
        assert resumed.status is Sample.Status.COMPLETED and resumed.tokens == reference.tokens
        assert len(server.requests) - requests_before == 2  # the third turn and the submit; nothing re-run
    finally:
        await server.close()
    sessions = {c[0] for c in journal_env.CALLS if "task 1 " in c[2]}
    assert len(sessions) == 1
    assert [c[1] for c in journal_env.CALLS if c[0] in sessions] == [
        "note",
        "wait",
        "note",
        "submit",
    ]  # each tool call once


@pytest.mark.parametrize("form", LEGACY_ROLLOUT)
async def test_mask_offpolicy_on_the_legacy_rollout(config_file, tokenizer, loop_thread, form) -> None:
    lengths = {0: 1, 1: 3}
    reference, _, server = await interrupted(loop_thread, tokenizer, lengths, {(1, 1): 5})
    try:
        args, state, source = rollout_parts(server, form, mask_offpolicy_in_partial_rollout=True)
        await step(loop_thread, state, 0, source, aborter(server))
        args.over_sampling_batch_size = 1
        ((resumed,),) = await step(loop_thread, state, 1, source, aborter(server))
    finally:
        await server.close()
    assert resumed.tokens == reference.tokens
    prompt_length = len(resumed.tokens) - resumed.response_length
    continuation = next(r for r in server.requests if r.rid and r.rid.endswith("_t1_p1"))
    boundary = len(continuation.input_ids) - prompt_length
    assert resumed.loss_mask[:boundary] == [0] * boundary and resumed.rollout_log_probs[:boundary] == [0.0] * boundary
    assert resumed.loss_mask[boundary:] == reference.loss_mask[boundary:] and 1 in resumed.loss_mask[boundary:]
    miles_double.check_trainable(resumed, args)

"""The Miles hooks driven by Miles' own rollout code (radixark/miles at 31f1ca9; `tests/miles_source.py` says
how it is imported and what stands in for the GPU-only parts).

Real parts: Miles' data source (`RolloutDataSourceWithBuffer` over rows as `openreward-rl prepare` writes them),
its legacy rollout loop (`sglang_rollout.generate_rollout`) and its class-based one (`InferenceRolloutFn`,
called as `RolloutManager` calls it), `generate_and_rm` / `generate_and_rm_group`, the RM hub's
`batched_async_rm`, the dynamic-filter reader, `FullyAsyncRolloutFn` and the train-data conversion
(`postprocess_rollout_data`, `convert_samples_to_train_data`); the SDK's environment server with the Corridor
environment, whose walk crosses a 2,048-token budget (a context policy compacts it); the Qwen3 tokenizer.
Stand-ins: the library's SGLang double behind a router stand-in, and the three lines of `RolloutManager` (a
Ray actor) between the rollout function and the conversion (`train_data`).

Walkers and quitters: of the two episodes of each prompt group, the first to reach the model walks the corridor
and leaves with the key (1.0; it crosses the budget, so a context policy forks it), the other leaves at once with
a wrong key (0.0).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from miles_source import RouterStandIn, load_miles, miles_args, write_rows
from openreward_rl.assets import offline_tokenizer_dir
from openreward_rl.backends import miles as miles_hooks
from openreward_rl.backends._sample import state as _state
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.loop.trajectory import StopReason
from openreward_rl.testing import SGLangTestServer
from openreward_rl.testing.sglang_server import RecordedRequest, ScriptedCompletion
from test_context_policy import CorridorAgent

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

SUMMARIZE = {"name": "summarize", "threshold": 0.6, "keep_recent_turns": 1, "summary_tokens": 128}
FILTER = "openreward_rl.backends.filters.keep_informative_groups"


@pytest.fixture(scope="module")
def miles() -> Any:
    return load_miles()


@pytest.fixture(autouse=True)
def fresh_singletons(miles: Any) -> Iterator[None]:
    """Miles keeps the legacy rollout's `GenerateState` per process (`SingletonMeta`); each test starts anew."""
    from miles.utils.misc import SingletonMeta

    SingletonMeta.clear_all_instances()
    yield
    SingletonMeta.clear_all_instances()


@attrs.define
class WalkersAndQuitters:
    """The scripted model: per prompt, the first episode (by routing key) walks, the others quit."""

    agent: CorridorAgent
    roles: dict[str, str] = attrs.field(factory=dict)
    episodes_per_prompt: dict[tuple[int, ...], int] = attrs.field(factory=dict)
    hold_walker_of: str | None = (
        None  # "corridor of N rooms": that walker's third call stays in flight until aborted, once
    )
    held: int = 0
    calls: dict[str, int] = attrs.field(factory=dict)

    def __call__(self, request: RecordedRequest) -> ScriptedCompletion:
        key = request.routing_key or ""
        role = self.roles.get(key)
        if role is None:
            prompt = tuple(request.input_ids)
            seen = self.episodes_per_prompt[prompt] = self.episodes_per_prompt.get(prompt, 0) + 1
            role = self.roles[key] = "walk" if seen == 1 else "quit"
        if role == "quit":
            return ScriptedCompletion(text=_call("leave", key="none-0000"))
        self.calls[key] = self.calls.get(key, 0) + 1
        if (
            self.hold_walker_of
            and not self.held
            and self.calls[key] == 3
            and self.hold_walker_of in self.agent.tokenizer.decode(request.input_ids)
        ):
            self.held += 1
            return ScriptedCompletion(text="Onward.", hold=True)
        return self.agent(request)

    @property
    def walkers(self) -> int:
        return sum(role == "walk" for role in self.roles.values())


def _call(name: str, **arguments: Any) -> str:
    from hermes_calls import call

    return call(name, **arguments)


@attrs.define
class Stack:
    miles: Any
    sglang: SGLangTestServer
    router: RouterStandIn
    script: WalkersAndQuitters
    checkpoint: str
    rows: Path

    def args(self, **overrides: Any) -> Any:
        values = {"sglang_router_policy": "consistent_hashing", "dynamic_sampling_filter_path": FILTER, **overrides}
        args = miles_args(self.router.port or 0, self.checkpoint, self.rows, **values)
        self.miles.http_utils.init_http_client(args)  # RolloutManager does this once at start
        return args

    def data_source(self, args: Any) -> Any:
        return self.miles.data_source.RolloutDataSourceWithBuffer(args)

    def run_on_miles_loop(self, coroutine: Any) -> Any:
        """Run `coroutine` on Miles' rollout event loop (its background thread), as Miles runs its rollouts."""
        return self.miles.async_utils.run(coroutine)


async def blocking(function: Any, *args: Any, timeout: float = 90.0) -> Any:
    """`function(*args)` (a blocking Miles entry point) in a daemon thread, awaited for at most `timeout` seconds:
    a rollout that never ends (Miles drawing groups for ever) fails the test and cannot hold the process at exit."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def target() -> None:
        try:
            result = function(*args)
        except BaseException as error:  # RolloutStepError included: handed to the test as raised
            loop.call_soon_threadsafe(lambda error=error: done.done() or done.set_exception(error))
        else:
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(result))

    threading.Thread(target=target, daemon=True).start()
    try:
        return await asyncio.wait_for(asyncio.shield(done), timeout)
    except TimeoutError:
        raise AssertionError(f"{getattr(function, '__name__', function)} did not return within {timeout:g}s") from None


@pytest.fixture
async def stack(miles: Any, qwen3_tokenizer: Any, tmp_path: Path) -> Any:
    rows = write_rows(tmp_path / "tasks.jsonl", [task_row(TaskRef("Corridor", "train", index=i)) for i in range(3)])
    script = WalkersAndQuitters(CorridorAgent(qwen3_tokenizer))
    async with (
        SGLangTestServer(qwen3_tokenizer, script=script, weight_version="3") as sglang,
        RouterStandIn(sglang.url) as router,
    ):
        stack = Stack(miles, sglang, router, script, str(offline_tokenizer_dir("qwen3")), rows)
        try:
            yield stack
        finally:
            await blocking(stack.run_on_miles_loop, _state.close_states())  # the hooks' states live on Miles' loop
            await _state.close_states()


@pytest.fixture(params=["default", "summarize"])
def policy(request: pytest.FixtureRequest, served_config: Any) -> str:
    """The config: Corridor at the default context policy, or naming one; both compact a walk at 2,048 tokens."""
    settings = {"max_turns": 24} if request.param == "default" else {"max_turns": 24, "context_policy": SUMMARIZE}
    served_config({"Corridor": settings})
    return request.param


def record_of(sample: Any) -> EpisodeRecord:
    return EpisodeRecord.from_metadata(sample.metadata)


def train_data(miles: Any, args: Any, groups: list[Any]) -> dict[str, Any]:
    """What `RolloutManager.generate` (a Ray actor) does with a step's groups: Miles' own flattening, check of
    fan-out `rollout_id`s, and conversion to train data (GRPO rewards normalized per rollout)."""
    flat, metadata = miles.rollout_data.postprocess_rollout_data(args, groups, train_parallel_config=None)
    return miles.train_data.convert_samples_to_train_data(args, flat, metadata, None, None)


def rollouts_of(data: dict[str, Any]) -> dict[int, set[float]]:
    """Normalized reward by rollout, rounded."""
    out: dict[int, set[float]] = {}
    for rollout, reward in zip(data["rollout_ids"], data["rewards"]):
        out.setdefault(rollout, set()).add(round(float(reward), 4))
    return out


def assert_one_sample(miles: Any, member: Any) -> None:
    """A member Miles reads as one Sample: its own `Sample` class, never a list."""
    assert isinstance(member, miles.types.Sample), (
        f"Miles reads each group member as one Sample here, got {type(member).__name__}"
    )


def check_trained_step(miles: Any, args: Any, groups: list[list[Any]], *, forked: bool) -> dict[str, Any]:
    """The step's groups train: walkers win, quitters lose, a forked walker's siblings share its advantage."""
    assert len(groups) == args.rollout_batch_size and all(len(group) == args.n_samples_per_prompt for group in groups)
    walkers = [
        member
        for group in groups
        for member in group
        if record_of(member if not isinstance(member, list) else member[0]).episode_reward == 1.0
    ]
    assert len(walkers) == len(groups)  # one per prompt
    for walker in walkers:
        if forked:
            assert isinstance(walker, list) and len(walker) >= 2, (
                "the walk crosses the budget: the context policy forks it"
            )
            assert len({s.rollout_id for s in walker}) == 1 and {s.reward for s in walker} == {1.0}
            assert record_of(walker[0]).segments == len(walker)
        else:
            assert_one_sample(miles, walker)
    data = train_data(miles, args, groups)
    assert set(data["raw_reward"]) == {0.0, 1.0} and len(data["tokens"]) == sum(
        len(m) if isinstance(m, list) else 1 for g in groups for m in g
    )
    by_rollout = rollouts_of(data)
    assert all(len(values) == 1 for values in by_rollout.values())  # siblings share their rollout's advantage
    assert sorted(value for (value,) in by_rollout.values()) == pytest.approx(
        [-0.7071] * len(groups) + [0.7071] * len(groups), abs=1e-3
    )
    assert all(any(mask) for mask in data["loss_masks"])
    return data


# --- plain synchronous rollout: the legacy loop and the class-based one --------------------------------


async def test_legacy_rollout_trains_compacted_episodes(stack: Stack, policy: str) -> None:
    """`MILES_USE_LEGACY_ROLLOUT_V1=1`: Miles' `generate_rollout` with the legacy `generate` hook. A walk forks into
    a list of samples (Miles' `generate_and_rm` takes a list there), the dynamic filter reads the nested group."""
    args = stack.args()
    data_source = stack.data_source(args)
    output = await blocking(stack.miles.legacy.generate_rollout, args, 0, data_source)
    check_trained_step(stack.miles, args, output.samples, forked=True)


async def test_class_based_rollout_trains_compacted_episodes_through_generate_fn(stack: Stack, policy: str) -> None:
    """Miles' default rollout (`InferenceRolloutFn`), called as `RolloutManager` calls it, with the new-form hook."""
    miles = stack.miles
    args = stack.args(custom_generate_function_path="openreward_rl.backends.miles.generate_fn")
    data_source = stack.data_source(args)
    rollout = miles.compatibility.load_rollout_function(
        miles.base_types.RolloutFnConstructorInput(args=args, data_source=data_source),
        "miles.rollout.inference_rollout.inference_rollout_common.InferenceRolloutFn",
    )
    output = await blocking(
        miles.compatibility.call_rollout_function, rollout, miles.base_types.RolloutFnTrainInput(rollout_id=0)
    )
    check_trained_step(miles, args, output.samples, forked=True)


# --- the modes that read one Sample per rollout: --group-rm, partial rollout, fully-async --------------

CLASS_BASED = "miles.rollout.inference_rollout.inference_rollout_common.InferenceRolloutFn"
FULLY_ASYNC = "miles.rollout.fully_async_rollout.FullyAsyncRolloutFn"
MODES = {
    # --group-rm: Miles' batched_async_rm sets `.reward` on each group member (rm_hub/__init__.py)
    "group-rm": ({"group_rm": True, "dynamic_sampling_filter_path": None}, CLASS_BASED),
    # --partial-rollout: abort() reads each member as one Sample; the new-form hook sees the abort flag
    "partial": (
        {
            "partial_rollout": True,
            "custom_generate_function_path": "openreward_rl.backends.miles.generate_fn",
            "dynamic_sampling_filter_path": None,
        },
        CLASS_BASED,
    ),
    # train_async.py --fully-async: the data buffer sorts and dates groups by their members
    "fully-async": (
        {"fully_async": True, "rollout_function_path": FULLY_ASYNC, "dynamic_sampling_filter_path": None},
        FULLY_ASYNC,
    ),
}


async def run_step(stack: Stack, args: Any, rollout_path: str) -> Any:
    """One training step of the rollout function at `rollout_path`, called as `RolloutManager.generate` calls it; the
    data source it drew from. A fully-async worker is stopped afterwards (Miles keeps it for the next step)."""
    miles = stack.miles
    data_source = stack.data_source(args)
    rollout = miles.compatibility.load_rollout_function(
        miles.base_types.RolloutFnConstructorInput(args=args, data_source=data_source), rollout_path
    )
    try:
        output = await blocking(
            miles.compatibility.call_rollout_function,
            rollout,
            miles.base_types.RolloutFnTrainInput(rollout_id=0, weight_version=3),
        )
    finally:
        await blocking(
            stack.run_on_miles_loop, _cancel_the_rest()
        )  # FullyAsyncRolloutFn's producer runs until cancelled
    return output, data_source


async def _cancel_the_rest() -> None:
    """Cancel every task but this one on the running loop (Miles' rollout loop), and wait for them."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("mode", list(MODES))
async def test_one_sample_modes_train_under_the_default_policy_and_refuse_a_named_one(
    stack: Stack, policy: str, mode: str
) -> None:
    """Under the default config these modes run Corridor without a context policy: every member is one Sample
    and the step trains (for --group-rm through Miles' own group RM, `batched_async_rm`). A policy named for the
    environment is refused, and the refusal ends the step instead of Miles' class-based loop logging it, dropping
    the group and drawing the next one for ever."""
    overrides, rollout_path = MODES[mode]
    args = stack.args(rollout_batch_size=1, over_sampling_batch_size=1, **overrides)
    if policy == "summarize":
        with pytest.raises(
            miles_hooks.RolloutStepError, match=r"cannot take the fan-out samples a context policy makes \(Corridor\)"
        ) as refused:
            await run_step(stack, args, rollout_path)
        assert {"group-rm": "--group-rm", "partial": "--partial-rollout", "fully-async": "fully-async rollout"}[
            mode
        ] in str(refused.value)
        assert stack.sglang.requests == []  # refused before any episode ran
        return
    output, data_source = await run_step(stack, args, rollout_path)
    (group,) = output.samples  # no dynamic filter: both episodes score 0.0, the filter would drop every group
    for member in group:
        assert_one_sample(stack.miles, member)
        assert member.reward is not None and member.status is not stack.miles.types.Sample.Status.ABORTED
    walker = next(member for member in group if record_of(member).stop_reason is not StopReason.COMPLETED)
    # the walk crosses the budget and, with no policy, ends context_overflow in one context (trained, 0.0)
    assert (
        record_of(walker).stop_reason is StopReason.CONTEXT_OVERFLOW
        and record_of(walker).segments == 1
        and walker.reward == 0.0
    )
    if mode == "group-rm":
        assert all(
            record_of(member).transcript is not None for member in group
        )  # what an environment's score_group reads
    data = train_data(stack.miles, args, output.samples)
    assert len(data["tokens"]) == args.n_samples_per_prompt and data["raw_reward"] == [
        member.reward for member in group
    ]


async def listing_generate(args: Any, sample: Any, sampling_params: Any, evaluation: bool = False) -> Any:
    """A generate hook that breaks the contract: the library's, its one Sample wrapped in a list."""
    out = await miles_hooks.generate(args, sample, sampling_params, evaluation=evaluation)
    return out if isinstance(out, list) else [out]


async def test_a_list_where_miles_group_rm_reads_one_sample_fails_the_step(stack: Stack, served_config: Any) -> None:
    """Were a hook to return a list under --group-rm, Miles' `batched_async_rm` would meet `'list' object has no
    attribute 'reward'`, which its class-based loop logs and swallows for ever: the reward hook refuses it first."""
    served_config({"Corridor": {"max_turns": 24}})
    args = stack.args(
        group_rm=True,
        dynamic_sampling_filter_path=None,
        rollout_batch_size=1,
        over_sampling_batch_size=1,
        custom_generate_function_path=f"{__name__}.listing_generate",
    )
    with pytest.raises(miles_hooks.RolloutStepError, match=r"--group-rm: members \[0, 1\] of the group are lists"):
        await run_step(stack, args, CLASS_BASED)


async def test_the_generate_hook_refuses_to_return_a_list_where_one_sample_is_read(
    stack: Stack, served_config: Any, monkeypatch: Any
) -> None:
    served_config({"Corridor": {"max_turns": 24}})

    async def forked(*args: Any, **kwargs: Any) -> list[Any]:
        return [kwargs.get("sample", args[1]), kwargs.get("sample", args[1])]

    monkeypatch.setattr(miles_hooks, "generate_samples", forked)
    sample = stack.miles.types.Sample(index=0, metadata=task_row(TaskRef("Corridor", "train", index=0))["metadata"])
    with pytest.raises(
        miles_hooks.RolloutStepError, match="2 samples of one rollout, which --partial-rollout cannot take"
    ):
        await miles_hooks.generate(stack.args(partial_rollout=True), sample, {})


# --- evaluation --------------------------------------------------------------------------------------


async def test_evaluation_gives_one_sample_per_compacted_episode(stack: Stack, policy: str) -> None:
    """Miles' eval calls `generate_and_rm(..., evaluation=True)` per sample and reads one reward each: a walk
    that compacts comes back as one Sample (its first context) with the episode's reward."""
    miles = stack.miles
    args = stack.args()
    state = miles.common.GenerateState(args)
    row = task_row(TaskRef("Corridor", "train", index=0))
    sample = miles.types.Sample(index=0, prompt=row["prompt"], metadata=row["metadata"], routing_key="eval-walker")
    params = dict(state.sampling_params)
    out = await blocking(stack.run_on_miles_loop, miles.common.generate_and_rm(state, sample, params, evaluation=True))
    assert_one_sample(miles, out)
    assert (
        out.reward == 1.0 and record_of(out).evaluation and record_of(out).segments >= 2 and record_of(out).segment == 0
    )


# --- partial rollout: an episode Miles' abort() cuts is suspended and resumed in the next step ----------


async def test_partial_rollout_resumes_an_episode_miles_aborted(stack: Stack, served_config: Any) -> None:
    """Miles' class-based rollout draws two prompt groups for a step of one; the second group's walker is mid-turn
    when the first group is done, so Miles' `abort()` posts `abort_all` (through the router's `/workers`), collects
    the group and puts it back in its data source. The hook parked the walk with its environment session open: in
    the next step Miles hands the group back and the walk resumes where it stopped and wins."""
    served_config(
        {"Corridor": {"max_turns": 24}}
    )  # the default policy (off under partial rollout); 8,192 tokens: no overflow
    stack.script.hold_walker_of = "corridor of 7 rooms"
    args = stack.args(
        rollout_max_context_len=8192, rollout_batch_size=1, over_sampling_batch_size=2, **MODES["partial"][0]
    )
    miles = stack.miles
    data_source = stack.data_source(args)
    rollout = miles.compatibility.load_rollout_function(
        miles.base_types.RolloutFnConstructorInput(args=args, data_source=data_source), CLASS_BASED
    )
    steps = []
    for rollout_id in range(2):
        output = await blocking(
            miles.compatibility.call_rollout_function,
            rollout,
            miles.base_types.RolloutFnTrainInput(rollout_id=rollout_id),
        )
        steps.append(output.samples)
        if rollout_id == 0:  # the aborted group waits in Miles' buffer: its walker suspended, its quitter done
            (parked,) = data_source.buffer
            walker = next((member for member in parked if member.status is miles.types.Sample.Status.ABORTED), None)
            assert walker is not None, [
                (m.index, m.status, record_of(m).stop_reason if m.metadata.get("stop_reason") else None) for m in parked
            ]
            assert (
                record_of(walker).resume is not None
                and walker.metadata["start_rollout_id"] == 0
                and walker.response_length > 0
            )
            assert stack.sglang.aborts  # Miles' abort reached the worker through the router
            stack.script.hold_walker_of = (
                None  # (had the walk been between calls then, it parked at the next: hold no more)
            )
    (first,), (second,) = steps
    assert {member.metadata["index"] for member in first} == {0}  # the step trained the group that finished
    resumed = next(member for member in second if record_of(member).episode_reward == 1.0)
    assert (
        resumed.metadata["index"] == 1
        and record_of(resumed).metrics["suspensions"] == 1.0
        and record_of(resumed).resume is None
    )
    assert resumed.status is miles.types.Sample.Status.COMPLETED and resumed.reward == 1.0
    for groups in steps:
        assert sorted(train_data(miles, args, groups)["raw_reward"]) == [0.0, 1.0]


# --- the hook's forms, and the group RM with a failed member ---


def test_miles_loads_the_legacy_form_with_evaluation_and_the_new_forms_as_they_are(miles: Any) -> None:
    """Miles' `load_generate_function`: `generate` is wrapped as a legacy function that receives `evaluation`;
    `generate_fn` and the agent path's `generate` are called as they are, with `GenerateFnInput`."""
    load = miles.compatibility.load_generate_function
    legacy = load("openreward_rl.backends.miles.generate")
    assert isinstance(legacy, miles.compatibility.LegacyGenerateFnAdapter) and legacy.fn is miles_hooks.generate
    assert load("openreward_rl.backends.miles.generate_fn") is miles_hooks.generate_fn
    from openreward_rl.backends import miles_agent

    assert load("openreward_rl.backends.miles_agent.generate") is miles_agent.generate


async def test_group_rm_scores_a_group_with_a_failed_member_through_miles(
    miles: Any, served_config: Any, qwen3_tokenizer: Any
) -> None:
    """Faulty at the default config under --group-rm, through Miles' legacy `generate_and_rm_group`: the hook leaves
    every reward None (Miles asserts a group RM meets none preset), Miles' `batched_async_rm` calls the reward hook
    with the group, the failed member (the server rejects its index) gets the placeholder 0.0 and is removed."""
    served_config({"Faulty": {}})
    submit_ok, submit_wrong = (
        f'<tool_call>\n{{"name": "submit", "arguments": {{"answer": "{a}"}}}}\n</tool_call>' for a in ("ok", "nope")
    )
    script = [ScriptedCompletion(text=submit_ok), ScriptedCompletion(text=submit_wrong)]
    async with (
        SGLangTestServer(qwen3_tokenizer, script=script, weight_version="5") as sglang,
        RouterStandIn(sglang.url) as router,
    ):
        args = miles_args(
            router.port or 0,
            str(offline_tokenizer_dir("qwen3")),
            group_rm=True,
            n_samples_per_prompt=3,
            rollout_batch_size=1,
        )
        miles.http_utils.init_http_client(args)
        rows = [task_row(TaskRef("Faulty", "train", index=index, variant="faulty")) for index in (0, 0, 999)]
        group = [
            miles.types.Sample(group_index=0, index=i, prompt=row["prompt"], metadata=row["metadata"])
            for i, row in enumerate(rows)
        ]
        params = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64, "no_stop_trim": True}
        try:
            out = await blocking(miles.async_utils.run, miles.legacy.generate_and_rm_group(args, group, params))
        finally:
            await blocking(miles.async_utils.run, _state.close_states())
    for member in out:
        assert_one_sample(miles, member)
    live, failed = out[:2], out[2]
    assert sorted(member.reward for member in live) == [0.0, 1.0] and all(
        record_of(m).transcript is not None for m in live
    )
    assert (
        failed.reward == 0.0
        and failed.status is miles.types.Sample.Status.ABORTED
        and failed.remove_sample
        and not any(failed.loss_mask)
    )
    assert {tuple(member.weight_versions) for member in live} == {("5",)}
    data = train_data(miles, args, [out])
    assert (
        data["raw_reward"] == [member.reward for member in out]
        and data["loss_masks"][2] == [0] * failed.response_length
    )

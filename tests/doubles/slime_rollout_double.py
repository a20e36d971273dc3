"""Test double of Slime's rollout driver: the part of `slime/rollout/sglang_rollout.py`,
`slime/rollout/data_source.py`, `slime/utils/async_utils.py` and `slime/rollout/fully_async_rollout.py`
that decides when a custom generate is called, aborted and called again (THUDM/slime 624b824,
2026-08-21). Slime cannot run here (torch+CUDA, Megatron, Ray); this is written from that code's
behaviour, not copied:

- `GenerateState`: one per process (`SingletonMeta`, instance in the metaclass's `_instances`),
  `aborted` set by `abort()` and cleared by `reset()` at the end of each rollout step; a semaphore
  held for the whole generate call;
- `generate_and_rm`: with `partial_rollout and mask_offpolicy_in_partial_rollout` an existing
  response gets its loss mask zeroed; COMPLETED/TRUNCATED samples return at once; under an
  aborting state the sample is marked ABORTED without calling the generate; the custom generate
  is loaded from `args.custom_generate_function_path` and called with Slime's `evaluation` rule;
  an ABORTED result skips the reward;
- `generate_and_rm_group`: returns the group untouched once aborting; gives each sample a
  `session_id`;
- `abort()`: sets `aborted`, POSTs `{"abort_all": true}` to every SGLang worker until it is idle,
  waits for every pending group task and, under `--partial-rollout`, collects those groups (with
  `metadata["start_rollout_id"]` where a response exists) for the data buffer;
- `generate_rollout_async`: tops up by `over_sampling_batch_size` groups while fewer than
  `rollout_batch_size` are pending, keeps finished groups that pass the dynamic filter until it has
  `rollout_batch_size`, then aborts the rest and resets the state;
- `RolloutDataSourceWithBuffer`: `get_samples` takes buffered groups first (`pop_first`, the same
  objects, no copy), then fresh prompts (deep copies of one prompt sample per group member);
  `add_samples` appends groups; the buffer is not saved with a checkpoint;
- `AsyncLoopThread`/`run`: every rollout step runs on one background event loop thread;
- `AsyncRolloutWorker` (fully async): its own thread running `asyncio.run(loop)`, topping up
  groups one at a time, requeueing any group with an ABORTED sample into the data buffer and
  queueing the rest for training; `generate_rollout_fully_async` (on the loop thread) polls that
  queue until it has `rollout_batch_size` groups (`drain_fully_async`). `train_async.py` updates
  the weights between steps while this worker keeps generating; the weight updaters call SGLang's
  `/pause_generation` (default mode "abort": in-flight requests come back aborted) and then
  `/continue_generation`.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import queue
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from doubles import slime_double
from doubles.slime_double import Sample

MODULE_NAME = "slime.rollout.sglang_rollout"  # where Slime's GenerateState lives (the hooks look it up there)


class SingletonMeta(type):
    _instances: dict[type, Any] = {}

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls not in cls._instances:
            cls._instances[cls] = super().__call__(*args, **kwargs)
        return cls._instances[cls]

    def clear_instances(cls) -> None:
        cls._instances = {}


class GenerateState(metaclass=SingletonMeta):
    def __init__(self, args: Any) -> None:
        self.args = args
        self.semaphore = asyncio.Semaphore(getattr(args, "sglang_server_concurrency", 512))
        self.sampling_params = dict(getattr(args, "sampling_params", {}))
        self.reset()

    def reset(self) -> None:
        self.remaining_batch_size = 0
        self.pendings: set[asyncio.Task] = set()
        self.aborted = False

    def submit_generate_tasks(self, groups: list[list[Sample]]) -> None:
        for group in groups:
            self.pendings.add(
                asyncio.create_task(
                    generate_and_rm_group(self.args, group, sampling_params=self.sampling_params.copy())
                )
            )
        self.remaining_batch_size += len(groups)


def load_function(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def aborter(server: Any, then: Callable[[], Any] | None = None) -> Callable[[], Awaitable[None]]:
    """Slime's `abort_servers_until_idle`: POST abort_all until the server (an `SGLangTestServer`) has nothing
    in flight; `then` runs after each abort (a test's hook to release what the episode waits on)."""

    async def abort_servers() -> None:
        async with aiohttp.ClientSession() as http:
            while True:
                async with http.post(server.url + "/abort_request", json={"abort_all": True}) as response:
                    assert response.status == 200
                if then is not None:
                    then()
                if not server.in_flight:
                    return
                await asyncio.sleep(0.01)

    return abort_servers


async def generate_and_rm(args: Any, sample: Sample, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    if args.partial_rollout and args.mask_offpolicy_in_partial_rollout and sample.response_length > 0:
        sample.loss_mask = [0] * sample.response_length
    if sample.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED):
        assert sample.response is not None and sample.reward is not None
        return sample
    state = GenerateState(args)
    async with state.semaphore:
        if state.aborted:
            sample.status = Sample.Status.ABORTED
            return sample
        generate = load_function(args.custom_generate_function_path)
        sample = await slime_double.call_generate(generate, args, sample, sampling_params, evaluation=evaluation)
    return await reward_unless_aborted(args, sample)


async def reward_unless_aborted(args: Any, sample: Any) -> Any:
    """The end of `generate_and_rm` (Slime's, kept by Miles): nothing for a sample (or list) with an aborted member,
    else the custom RM for each sample still without a reward."""
    samples = sample if isinstance(sample, list) else [sample]
    if any(s.status is type(s).Status.ABORTED for s in samples):
        return sample
    rm = load_function(args.custom_rm_path)
    for s in samples:
        if s.reward is None:
            s.reward = await rm(args, s)
    return sample


async def generate_and_rm_group(
    args: Any, group: list[Sample], sampling_params: dict[str, Any], evaluation: bool = False
) -> list[Any]:
    state = GenerateState(args)
    if state.aborted:
        return group
    for sample in group:
        if sample.session_id is None:
            sample.session_id = str(uuid.uuid4())
    return list(
        await asyncio.gather(*(generate_and_rm(args, s, sampling_params.copy(), evaluation=evaluation) for s in group))
    )


async def abort(args: Any, rollout_id: int, abort_servers: Callable[[], Awaitable[None]]) -> list[list[Sample]]:
    state = GenerateState(args)
    assert not state.aborted
    state.aborted = True
    await abort_servers()
    collected = []
    while state.pendings:
        done, state.pendings = await asyncio.wait(state.pendings, return_when=asyncio.FIRST_COMPLETED)
        if not args.partial_rollout:
            continue
        for task in done:
            group = task.result()
            for sample in group:
                if sample.response and "start_rollout_id" not in sample.metadata:
                    sample.metadata["start_rollout_id"] = rollout_id
            collected.append(group)
    return collected


class RolloutDataSourceWithBuffer:
    """Fresh groups are deep copies of `make_prompt(i)` for the i-th prompt; buffered groups come back as they were added."""

    def __init__(self, args: Any, make_prompt: Callable[[int], Sample]) -> None:
        self.args = args
        self.make_prompt = make_prompt
        self.buffer: list[list[Sample]] = []
        self.offset = 0

    def get_samples(self, num_samples: int) -> list[list[Sample]]:
        groups = self.buffer[:num_samples]
        del self.buffer[:num_samples]
        for _ in range(num_samples - len(groups)):
            prompt = self.make_prompt(self.offset)
            group = []
            for member in range(self.args.n_samples_per_prompt):
                sample = copy.deepcopy(prompt)
                sample.group_index = self.offset
                sample.index = self.offset * self.args.n_samples_per_prompt + member
                group.append(sample)
            self.offset += 1
            groups.append(group)
        return groups

    def add_samples(self, groups: list[list[Sample]]) -> None:
        for group in groups:
            assert isinstance(group, list) and len(group) == self.args.n_samples_per_prompt
            self.buffer.append(group)


async def generate_rollout_async(
    args: Any,
    rollout_id: int,
    data_source: Callable[[int], list[list[Sample]]],
    abort_servers: Callable[[], Awaitable[None]],
    dynamic_filter: Any = None,
) -> tuple[list[list[Sample]], list[list[Sample]]]:
    state = GenerateState(args)
    target = args.rollout_batch_size
    data: list[list[Sample]] = []
    while len(data) < target:
        while state.remaining_batch_size < target:
            state.submit_generate_tasks(data_source(args.over_sampling_batch_size))
        done, state.pendings = await asyncio.wait(state.pendings, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            group = task.result()
            assert len(group) == args.n_samples_per_prompt
            if dynamic_filter is not None and not dynamic_filter(args, group).keep:
                state.remaining_batch_size -= 1
                continue
            if len(data) < target:
                data.append(group)
    aborted = await abort(args, rollout_id, abort_servers)
    data.sort(key=lambda group: group[0][0].index if isinstance(group[0], list) else group[0].index)
    state.reset()
    return data, aborted


class AsyncLoopThread:
    """Slime's background event loop: every rollout step's coroutine runs on it, one thread for the process."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def generate_rollout(
    loop_thread: AsyncLoopThread,
    args: Any,
    rollout_id: int,
    data_source: RolloutDataSourceWithBuffer,
    abort_servers: Callable[[], Awaitable[None]],
    dynamic_filter: Any = None,
) -> list[list[Sample]]:
    """One training rollout step as Slime's `generate_rollout` runs it: on the loop thread; aborted groups go back to the buffer."""
    data, aborted = loop_thread.run(
        generate_rollout_async(args, rollout_id, data_source.get_samples, abort_servers, dynamic_filter)
    )
    if aborted:
        data_source.add_samples(aborted)
    return data


class AsyncRolloutWorker:
    """Fully async: a thread running its own loop (`asyncio.run`), generating groups continuously."""

    def __init__(
        self, args: Any, data_buffer: RolloutDataSourceWithBuffer, concurrency: int = 4, poll_interval: float = 0.01
    ) -> None:
        self.args, self.data_buffer, self.concurrency, self.poll_interval = (
            args,
            data_buffer,
            concurrency,
            poll_interval,
        )
        self.running = True
        self.output_queue: queue.Queue[list[Sample]] = queue.Queue()
        self.requeued = 0
        self.state = GenerateState(args)
        self.thread = threading.Thread(
            target=lambda: asyncio.run(self._loop()), name="fully-async-rollout", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.running = False
        self.thread.join(timeout=30)

    async def _loop(self) -> None:
        active: set[asyncio.Task] = set()
        while self.running:
            active = {t for t in active if not t.done()}
            while len(active) < self.concurrency and self.output_queue.qsize() < self.concurrency and self.running:
                for group in self.data_buffer.get_samples(1):
                    task = asyncio.create_task(
                        generate_and_rm_group(self.args, group, sampling_params=self.state.sampling_params.copy())
                    )
                    task.add_done_callback(self._done)
                    active.add(task)
            await asyncio.sleep(self.poll_interval)
        if active:
            await asyncio.wait(active, timeout=30)

    def _done(self, task: asyncio.Task) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        group = task.result()
        if any(getattr(s, "status", None) is Sample.Status.ABORTED for s in group):
            self.requeued += 1
            self.data_buffer.add_samples([group])
            return
        self.output_queue.put(group)

    def take(self, count: int, timeout: float = 60.0) -> list[list[Sample]]:
        return [self.output_queue.get(timeout=timeout) for _ in range(count)]

    def get_completed_groups(self, limit: int) -> list[list[Sample]]:
        completed: list[list[Sample]] = []
        while len(completed) < limit:
            try:
                completed.append(self.output_queue.get_nowait())
            except queue.Empty:
                break
        return completed


async def drain_fully_async(worker: AsyncRolloutWorker, target: int) -> list[list[Sample]]:
    """`generate_rollout_fully_async`'s body, run on Slime's loop thread: poll the worker's queue for `target` groups."""
    collected: list[list[Sample]] = []
    while len(collected) < target:
        drained = worker.get_completed_groups(target - len(collected))
        collected += drained
        if not drained:
            await asyncio.sleep(0.05)
    return sorted(collected, key=lambda group: group[0].index)

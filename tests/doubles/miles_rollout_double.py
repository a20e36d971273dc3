"""Test double of Miles' rollout driver: when a custom generate is called, aborted and called again.

Miles cannot run here (torch+CUDA, Megatron, Ray, SGLang). Written from radixark/miles 31f1ca9
(miles/rollout/inference_rollout/{inference_rollout_common,inference_rollout_train,compatibility}.py,
the legacy miles/rollout/sglang_rollout.py behind `MILES_USE_LEGACY_ROLLOUT_V1=1`,
miles/rollout/fully_async_rollout.py), not copied:

- `load_generate_function`: a class is instantiated; a function with >= 3 parameters whose first
  is not `input` is wrapped by `LegacyGenerateFnAdapter` (Slime's call, `evaluation=` only to a
  parameter of that name, the result wrapped as `.samples`); otherwise the function is the new form;
- `GenerateState` (class-based rollout): one per rollout function, not a singleton; `aborted`;
  `generate_fn_semaphore`; the generate function loaded once;
  `LegacyGenerateState` (legacy rollout): a process singleton (`SingletonMeta`, instance in the
  metaclass's `_instances`) living in `miles.rollout.sglang_rollout`, where the legacy hook reads it;
- `generate_and_rm` (the same in both rollouts; the legacy one passes its singleton as `state`): under `partial_rollout and mask_offpolicy_in_partial_rollout` an existing response
  gets its loss mask zeroed; COMPLETED/TRUNCATED return at once; under the semaphore an aborting state
  marks the sample ABORTED without calling the generate; the generate is called with
  `GenerateFnInput(state, sample, deepcopy(sampling_params), evaluation)` and `.samples` read back;
  no reward for ABORTED; otherwise the custom RM (`args.custom_rm_path`) fills a None reward;
- `generate_and_rm_group`: returns the group untouched once aborting; a `routing_key` per sample
  under `--router-policy consistent_hashing`; the group RM only when the step is not aborting;
- `abort`: sets `aborted`, POSTs `abort_all` to the workers, calls the agent module's `abort(args)`
  hook when `--custom-agent-function-path` has one, awaits every pending group and, under
  `--partial-rollout`, returns them (with `metadata["start_rollout_id"]` where a response exists);
- `generate_rollout_async`: tops up `over_sampling_batch_size` groups while short of
  `rollout_batch_size`, keeps finished groups until it has `rollout_batch_size`, aborts the rest,
  resets the state; the caller (`InferenceRolloutFn._call_train`) puts the aborted groups in the buffer.
The data buffer and the background loop thread are Slime's, unchanged in Miles (slime_rollout_double).

Fully async (`train_async.py --fully-async`, class-based rollout only, `--partial-rollout` refused):
- `FullyAsyncRolloutFn`: the first train call starts one long-lived worker task on the shared
  rollout loop; the worker keeps up to `rollout_batch_size` groups in flight (group-level budget;
  Miles defaults to sample-level backfill, which only paces submission), taking one prompt group at
  a time from the data source, and puts each finished group into the output buffer; a train call
  drains `rollout_batch_size` groups from that buffer, passing the trainer's current weight version;
- `DefaultDataBuffer`: `put` rejects a group with an ABORTED sample and hands its prompt group to
  `--async-unused-samples-handler` (retry: `reset_for_retry()` on each sample, back into the data
  source); `get` filters groups staler than `--max-weight-staleness`, where staleness is the
  current version minus the oldest numeric entry of any sample's `weight_versions`.
Weight updates pause SGLang with `--pause-generation-mode` (default "retract"; `--fully-async` asserts
it is not "abort", miles/utils/arguments.py): the driver itself never aborts a turn nor sets `aborted`.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import inspect
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from doubles.miles_double import GenerateFnInput, GenerateFnOutput, Sample
from doubles.slime_rollout_double import SingletonMeta, reward_unless_aborted

LEGACY_MODULE_NAME = "miles.rollout.sglang_rollout"


def load_function(path: str | None) -> Any:
    if not path:
        return None
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class LegacyGenerateFnAdapter:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.has_evaluation = "evaluation" in inspect.signature(fn).parameters

    async def __call__(self, input: GenerateFnInput) -> Any:  # noqa: A002
        if self.has_evaluation:
            output = await self.fn(input.args, input.sample, input.sampling_params, evaluation=input.evaluation)
        else:
            output = await self.fn(input.args, input.sample, input.sampling_params)
        return output if hasattr(output, "samples") else GenerateFnOutput(samples=output)


def load_generate_function(path: str | None) -> Any:
    fn = load_function(path)
    if fn is None:
        return None
    if inspect.isclass(fn):
        return fn()
    parameters = list(inspect.signature(fn).parameters)
    if len(parameters) >= 3 and parameters[0] != "input":
        return LegacyGenerateFnAdapter(fn)
    return fn


class GenerateState:
    """The class-based rollout's state: passed to a new-form generate as `input.state`."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.generate_fn_semaphore = asyncio.Semaphore(getattr(args, "sglang_server_concurrency", 512))
        self.sampling_params = dict(getattr(args, "sampling_params", {}))
        self.generate_function = load_generate_function(args.custom_generate_function_path)
        self.reset()

    def reset(self) -> None:
        self.aborted = False


class LegacyGenerateState(GenerateState, metaclass=SingletonMeta):
    """The legacy rollout's state: one per process."""


# the legacy hook looks up `GenerateState` in `miles.rollout.sglang_rollout`
legacy_module_attributes = {"GenerateState": LegacyGenerateState}


async def generate_and_rm(
    state: GenerateState, sample: Sample, sampling_params: dict[str, Any], evaluation: bool = False
) -> Any:
    args = state.args
    if args.partial_rollout and args.mask_offpolicy_in_partial_rollout and sample.response_length > 0:
        sample.loss_mask = [0] * sample.response_length
    if sample.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED):
        assert sample.response is not None and (args.group_rm or sample.reward is not None)
        return sample
    async with state.generate_fn_semaphore:
        if state.aborted:
            sample.status = Sample.Status.ABORTED
            return sample
        generate_fn = load_generate_function(sample.generate_function_path) or state.generate_function
        output = await generate_fn(
            GenerateFnInput(
                state=state, sample=sample, sampling_params=copy.deepcopy(sampling_params), evaluation=evaluation
            )
        )
        sample = output.samples
    if args.group_rm:
        return sample
    return await reward_unless_aborted(args, sample)


async def generate_and_rm_group(
    state: GenerateState, group: list[Sample], sampling_params: dict[str, Any], evaluation: bool = False
) -> list[Any]:
    if state.aborted:
        return group
    if getattr(state.args, "router_policy", None) == "consistent_hashing":
        for sample in group:
            if sample.routing_key is None:
                sample.routing_key = str(uuid.uuid4())
    group = list(
        await asyncio.gather(*(generate_and_rm(state, s, sampling_params.copy(), evaluation=evaluation) for s in group))
    )
    if state.aborted or not state.args.group_rm:
        return group
    rm = load_function(state.args.custom_rm_path)
    for sample in group:
        sample.reward = await rm(state.args, sample)
    return group


async def call_agent_abort_hook(args: Any) -> None:
    path = getattr(args, "custom_agent_function_path", None)
    if path:
        hook = getattr(importlib.import_module(path.rpartition(".")[0]), "abort", None)
        if hook is not None:
            await hook(args)


async def abort(
    state: GenerateState, pendings: set[asyncio.Task], rollout_id: int, abort_servers: Callable[[], Awaitable[None]]
) -> list[list[Sample]]:
    args = state.args
    assert not state.aborted
    state.aborted = True
    await abort_servers()
    await call_agent_abort_hook(args)
    collected = []
    for future in asyncio.as_completed(pendings):
        group = await future
        if not args.partial_rollout:
            continue
        for sample in group:
            if sample.response and "start_rollout_id" not in sample.metadata:
                sample.metadata["start_rollout_id"] = rollout_id
        collected.append(group)
    return collected


async def generate_rollout_async(
    state: GenerateState,
    rollout_id: int,
    data_source: Callable[[int], list[list[Sample]]],
    abort_servers: Callable[[], Awaitable[None]],
) -> tuple[list[list[Sample]], list[list[Sample]]]:
    args = state.args
    target = args.rollout_batch_size
    pendings: set[asyncio.Task] = set()
    data: list[list[Sample]] = []
    while len(data) < target:
        while len(pendings) + len(data) < target:
            for group in data_source(args.over_sampling_batch_size):
                pendings.add(asyncio.create_task(generate_and_rm_group(state, group, state.sampling_params.copy())))
        done, pendings = await asyncio.wait(pendings, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            group = task.result()
            assert len(group) == args.n_samples_per_prompt
            if len(data) < target:
                data.append(group)
    aborted = await abort(state, pendings, rollout_id, abort_servers)
    data.sort(key=lambda group: group[0][0].index if isinstance(group[0], list) else group[0].index)
    state.reset()
    return data, aborted


def generate_rollout(
    loop_thread: Any,
    state: GenerateState,
    rollout_id: int,
    data_source: Any,
    abort_servers: Callable[[], Awaitable[None]],
) -> list[list[Sample]]:
    """One training step as `InferenceRolloutFn._call_train` (or the legacy `generate_rollout`) runs it."""
    data, aborted = loop_thread.run(generate_rollout_async(state, rollout_id, data_source.get_samples, abort_servers))
    data_source.add_samples(aborted)
    return data


def group_oldest_weight_version(group: list[Sample]) -> int | None:
    versions = [v for s in group if (v := s.oldest_weight_version) is not None]
    return min(versions) if versions else None


class DefaultDataBuffer:
    """Miles' FIFO of finished groups between the fully-async producer and the trainer."""

    def __init__(self, args: Any, unused_handler: Callable[[list[Sample]], None]) -> None:
        self.args, self.unused_handler = args, unused_handler
        self.capacity = int(getattr(args, "async_data_buffer_capacity_factor", 1.0) * args.rollout_batch_size)
        self.buffer: list[tuple[list[Sample], list[Sample]]] = []
        self.cond = asyncio.Condition()
        self.aborted_groups = 0
        self.stale_groups = 0

    async def put(self, prompt_group: list[Sample], group: list[Sample]) -> None:
        if any(s.status is Sample.Status.ABORTED for s in group):
            self.aborted_groups += 1
            self.unused_handler(prompt_group)
            return
        async with self.cond:
            while len(self.buffer) >= self.capacity:  # full: the producer waits for the trainer
                await self.cond.wait()
            self.buffer.append((prompt_group, group))
            self.cond.notify_all()

    async def get(self, current_version: int | None) -> list[Sample]:
        async with self.cond:
            while True:
                while not self.buffer:
                    await self.cond.wait()
                prompt_group, group = self.buffer.pop(0)
                self.cond.notify_all()
                oldest = group_oldest_weight_version(group)
                limit = getattr(self.args, "max_weight_staleness", None)
                if oldest is None or current_version is None or limit is None or current_version - oldest <= limit:
                    return group
                self.stale_groups += 1
                self.unused_handler(prompt_group)


class FullyAsyncRolloutFn:
    """Miles' fully-async rollout function: a producer task on the rollout loop, train calls drain its buffer."""

    def __init__(self, args: Any, data_source: Any) -> None:
        self.args, self.data_source = args, data_source
        self.state = GenerateState(args)
        self.output = DefaultDataBuffer(args, self._recycle)
        self.worker: asyncio.Task | None = None
        self.active: set[asyncio.Task] = set()

    def _recycle(self, prompt_group: list[Sample]) -> None:
        for sample in prompt_group:
            sample.reset_for_retry()
        self.data_source.add_samples([prompt_group])

    async def _generate_group(self, prompt_group: list[Sample]) -> tuple[list[Sample], list[Sample]]:
        return prompt_group, await generate_and_rm_group(self.state, prompt_group, self.state.sampling_params.copy())

    async def _worker_loop(self) -> None:
        while True:
            while len(self.active) < self.args.rollout_batch_size:
                (prompt_group,) = self.data_source.get_samples(1)
                self.active.add(asyncio.create_task(self._generate_group(prompt_group)))
            done, self.active = await asyncio.wait(self.active, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                await self.output.put(*task.result())

    async def __call__(self, rollout_id: int, weight_version: int | None) -> list[list[Sample]]:
        if self.worker is None:
            self.worker = asyncio.create_task(self._worker_loop())
        data = []
        while len(data) < self.args.rollout_batch_size:
            getter = asyncio.create_task(self.output.get(weight_version))
            done, _ = await asyncio.wait({getter, self.worker}, return_when=asyncio.FIRST_COMPLETED)
            if self.worker in done:
                getter.cancel()
                self.worker.result()
                raise RuntimeError("fully-async rollout worker exited")
            data.append(getter.result())
        data.sort(key=lambda group: group[0].index)
        return data

    async def stop(self) -> None:
        """Not Miles' (its worker lives until the process ends): cancel the producer and its groups for a clean test exit."""
        tasks = [t for t in (self.worker, *self.active) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

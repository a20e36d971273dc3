"""Episodes that run in worker processes while the calling process only awaits their trajectories.

Under Slime and Miles every `generate` call runs on one event loop of one process, so that
process's CPU caps the rollout rate. With `rollout_workers: N` in the training config the hooks
hand each episode to one of N workers and await its `Trajectory`; the hook's process keeps only
the trainer-facing work (filling the `Sample`, uploads, metrics).

Each worker builds its own runner from the same inputs (the trainer's `args` and the config file),
so an episode runs the same code with the same settings as in process, and its trajectory (turns,
faults, metrics) comes back unchanged. A worker that dies turns every episode it held into an
ABORTED trajectory naming the cause (an infrastructure fault: never a reward, never a lost
sample), and the next episode starts a fresh worker.

Two kinds of workers:

- `ProcessWorkers`: `multiprocessing` processes (`spawn`), one event loop each, any number of
  episodes at once per worker; requests and trajectories travel as pickles over a pipe.
- `RayWorkers`: Ray actors (`rollout_worker_backend: ray`), for a rollout manager that runs inside
  Slime's or Miles' Ray cluster and should place its workers through Ray. `auto` (the default)
  picks processes, which also work inside a Ray actor.

A runner is made in each worker by `factory()`, a picklable zero-argument callable, and must have
`async run(task, *, sampling_params, routing_key, evaluation) -> Trajectory`; the Slime/Miles hooks
use `functools.partial(HookRunner, args)` (`openreward_rl.backends._sample.state`).
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import attrs

from openreward_rl.env.tasks import TaskRef
from openreward_rl.loop.episode import failed_trajectory
from openreward_rl.loop.trajectory import StopReason, Trajectory

__all__ = [
    "EpisodeWorkers",
    "ProcessWorkers",
    "RayWorkers",
    "WorkerRollouts",
    "make_workers",
    "IN_WORKER_ENV",
]

# Set in every worker process: a worker runs its episodes itself, never in further workers.
IN_WORKER_ENV = "OPENREWARD_RL_EPISODE_WORKER"


class EpisodeWorkers:
    """What `WorkerRollouts` needs of a set of workers."""

    async def run(
        self, task: TaskRef, *, sampling_params: Mapping[str, Any] | None, routing_key: str | None, evaluation: bool
    ) -> Trajectory:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError


def _aborted(task: TaskRef, detail: str) -> Trajectory:
    return failed_trajectory(task, StopReason.ABORTED, detail)


# ---------------------------------------------------------------------------------------------- processes


def _worker_main(connection: Connection, factory: Callable[[], Any]) -> None:
    """A worker process: run the episodes the pipe asks for, concurrently, and send back each trajectory."""
    os.environ[IN_WORKER_ENV] = "1"
    asyncio.run(_serve(connection, factory))


def _send_reply(connection: Connection, reply: tuple[Any, ...]) -> None:
    """Send one reply (in the worker's writer thread). A trajectory that cannot be pickled comes
    back as a failure naming why, so its episode is aborted instead of awaited forever."""
    try:
        connection.send(reply)
    except (EOFError, OSError):  # the parent is gone; the reader side notices and stops
        pass
    except Exception as error:  # pickling failed before anything was written
        if reply[0] != "done":
            raise
        connection.send(("failed", reply[1], f"its trajectory could not be sent back: {type(error).__name__}: {error}"))


async def _serve(connection: Connection, factory: Callable[[], Any]) -> None:
    loop = asyncio.get_running_loop()
    runner = factory()
    stopped = asyncio.Event()
    running: set[asyncio.Task[None]] = set()
    # Replies leave through one writer thread: the loop never blocks on a full pipe, so it keeps
    # reading the parent's requests (a parent and a worker both blocked in send would deadlock).
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="openreward-rl-replies")

    async def run_one(
        number: int, task: TaskRef, sampling_params: Any, routing_key: str | None, evaluation: bool
    ) -> None:
        try:
            trajectory = await runner.run(
                task, sampling_params=sampling_params, routing_key=routing_key, evaluation=evaluation
            )
            reply: tuple[Any, ...] = ("done", number, trajectory)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the runner itself failed: the episode is aborted, never lost
            reply = ("failed", number, "".join(traceback.format_exception_only(type(error), error)).strip())
        await loop.run_in_executor(writer, _send_reply, connection, reply)

    def on_readable() -> None:
        try:
            message = connection.recv()
        except (EOFError, OSError):  # the parent is gone
            stopped.set()
            return
        if message[0] == "stop":
            stopped.set()
        elif message[0] == "run":
            episode = loop.create_task(run_one(*message[1:]))
            running.add(episode)
            episode.add_done_callback(running.discard)

    loop.add_reader(connection.fileno(), on_readable)
    connection.send(("ready", os.getpid()))
    await stopped.wait()
    loop.remove_reader(connection.fileno())
    for episode in running:
        episode.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    writer.shutdown(wait=True)
    closer = getattr(runner, "aclose", None)
    if closer is not None:
        await closer()


@attrs.define(eq=False)
class _Process:
    """One worker process and the episodes it holds (request number -> (task, future))."""

    number: int
    process: Any
    connection: Connection
    pending: dict[int, tuple[TaskRef, asyncio.Future[Trajectory]]] = attrs.field(factory=dict)
    alive: bool = True


@attrs.define(eq=False)
class ProcessWorkers(EpisodeWorkers):
    """`count` worker processes on this event loop's side, started on first use (see the module)."""

    factory: Callable[[], Any]
    count: int
    _workers: list[_Process | None] = attrs.field(init=False)
    _numbers: Any = attrs.field(factory=itertools.count, init=False)
    _loop: asyncio.AbstractEventLoop | None = attrs.field(default=None, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"ProcessWorkers needs a positive worker count, got {self.count!r}")
        self._workers = [None] * self.count

    def _start(self, slot: int) -> _Process:
        context = multiprocessing.get_context("spawn")
        parent_end, child_end = context.Pipe(duplex=True)
        process = context.Process(
            target=_worker_main, args=(child_end, self.factory), name=f"openreward-rl-episodes-{slot}", daemon=True
        )
        process.start()
        child_end.close()
        worker = _Process(slot, process, parent_end)
        loop = self._loop = asyncio.get_running_loop()
        loop.add_reader(parent_end.fileno(), self._on_message, worker)
        loop.add_reader(process.sentinel, self._on_exit, worker)
        self._workers[slot] = worker
        return worker

    def _pick(self) -> _Process:
        for slot, worker in enumerate(self._workers):
            if worker is None or not worker.alive:
                return self._start(slot)
        return min((w for w in self._workers if w is not None), key=lambda w: len(w.pending))

    async def run(
        self, task: TaskRef, *, sampling_params: Mapping[str, Any] | None, routing_key: str | None, evaluation: bool
    ) -> Trajectory:
        if self._closed:
            raise RuntimeError("these episode workers are closed")
        worker = self._pick()
        number = next(self._numbers)
        future: asyncio.Future[Trajectory] = asyncio.get_running_loop().create_future()
        worker.pending[number] = (task, future)
        try:
            worker.connection.send(
                (
                    "run",
                    number,
                    task,
                    dict(sampling_params) if sampling_params is not None else None,
                    routing_key,
                    evaluation,
                )
            )
        except (OSError, ValueError) as error:  # the pipe broke: the worker is dying
            self._lost(worker, f"could not reach it: {error}")
        try:
            return await future
        finally:
            worker.pending.pop(number, None)

    def _on_message(self, worker: _Process) -> None:
        try:
            message = worker.connection.recv()
        except (EOFError, OSError):
            self._lost(worker, "its pipe closed")
            return
        kind = message[0]
        if kind == "ready":
            return
        _, number, payload = message
        entry = worker.pending.pop(number, None)
        if entry is None or entry[1].done():
            return
        task, future = entry
        if kind == "done":
            future.set_result(payload)
        else:
            future.set_result(_aborted(task, f"episode worker {worker.number} could not run the episode: {payload}"))

    def _on_exit(self, worker: _Process) -> None:
        worker.process.join(0)
        self._lost(worker, f"it exited with code {worker.process.exitcode}")

    def _lost(self, worker: _Process, why: str) -> None:
        """The worker is gone: every episode it held becomes an ABORTED trajectory."""
        if not worker.alive:
            return
        worker.alive = False
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.remove_reader(worker.connection.fileno())
            loop.remove_reader(worker.process.sentinel)
        for task, future in worker.pending.values():
            if not future.done():
                future.set_result(
                    _aborted(task, f"episode worker {worker.number} (pid {worker.process.pid}) died: {why}")
                )
        worker.pending.clear()
        worker.connection.close()

    def pids(self) -> list[int | None]:
        """The process ids of the live workers (None for a slot with none), for tests and logs."""
        return [w.process.pid if w is not None and w.alive else None for w in self._workers]

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """Stop the workers (episodes still running in them are cancelled there)."""
        self._closed = True
        for worker in self._workers:
            if worker is None or not worker.alive:
                continue
            try:
                worker.connection.send(("stop",))
            except (OSError, ValueError):
                pass
        for worker in self._workers:
            if worker is None:
                continue
            await asyncio.get_running_loop().run_in_executor(None, worker.process.join, timeout_s)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            self._lost(worker, "the workers were closed")


# ---------------------------------------------------------------------------------------------- ray


class _RayEpisodeActor:
    """A Ray actor holding one runner (made by `factory` on the actor's event loop)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        os.environ[IN_WORKER_ENV] = "1"
        self.factory = factory
        self.runner: Any = None

    def pid(self) -> int:
        return os.getpid()

    async def run(self, task: TaskRef, sampling_params: Any, routing_key: str | None, evaluation: bool) -> Trajectory:
        if self.runner is None:
            self.runner = self.factory()
        return await self.runner.run(
            task, sampling_params=sampling_params, routing_key=routing_key, evaluation=evaluation
        )


def _ray_errors() -> tuple[tuple[type[BaseException], ...], type[BaseException]]:
    """Ray's "the actor is gone" errors (the set differs between Ray versions) and its task error."""
    import ray.exceptions as errors

    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError")
    return tuple(e for e in (getattr(errors, n, None) for n in names) if e is not None), errors.RayTaskError


@attrs.define(eq=False)
class RayWorkers(EpisodeWorkers):
    """`count` Ray actors (one CPU each); an episode goes to the actor holding the fewest.

    An actor that dies fails its in-flight calls with a Ray actor error: those episodes come back
    ABORTED and the slot gets a fresh actor for the next episode. Ray's own restarts and task
    retries are off: a retried episode would run its tools twice, and a restarting actor refuses
    calls for a while instead of running them."""

    factory: Callable[[], Any]
    count: int
    max_concurrency: int = 1000
    _actors: list[Any] = attrs.field(init=False)
    _load: list[int] = attrs.field(init=False)
    _remote: Any = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"RayWorkers needs a positive worker count, got {self.count!r}")
        self._actors = [None] * self.count
        self._load = [0] * self.count

    def _pick(self) -> tuple[int, Any]:
        import ray

        slot = min(range(self.count), key=lambda i: (self._actors[i] is not None, self._load[i]))
        if self._actors[slot] is None:
            if self._remote is None:
                self._remote = ray.remote(
                    num_cpus=1, max_restarts=0, max_task_retries=0, max_concurrency=self.max_concurrency
                )(_RayEpisodeActor)  # type: ignore[call-overload]  # Ray's overloads omit the actor option max_concurrency
            self._actors[slot] = self._remote.remote(self.factory)
        return slot, self._actors[slot]

    async def run(
        self, task: TaskRef, *, sampling_params: Mapping[str, Any] | None, routing_key: str | None, evaluation: bool
    ) -> Trajectory:
        gone, task_error = _ray_errors()
        slot, actor = self._pick()
        self._load[slot] += 1
        try:
            return await actor.run.remote(
                task, dict(sampling_params) if sampling_params is not None else None, routing_key, evaluation
            )
        except gone as error:
            if self._actors[slot] is actor:  # the first of its episodes to hear: replace it
                self._actors[slot] = None
            return _aborted(task, f"episode actor {slot} died: {type(error).__name__}: {error}")
        except task_error as error:
            cause = getattr(error, "cause", None) or error
            return _aborted(task, f"episode actor {slot} could not run the episode: {type(cause).__name__}: {cause}")
        finally:
            self._load[slot] -= 1

    def actors(self) -> list[Any]:
        """The live actor handles (None for a slot with none), for tests and logs."""
        return list(self._actors)

    async def aclose(self) -> None:
        import ray

        for actor in self._actors:
            if actor is not None:
                ray.kill(actor)
        self._actors = [None] * self.count


def _ray_running() -> bool:
    try:
        import ray
    except ImportError:
        return False
    return bool(ray.is_initialized())


def make_workers(factory: Callable[[], Any], count: int, backend: str = "auto") -> EpisodeWorkers:
    """`count` workers of `backend`: "process" (also what "auto" picks) or "ray" (Ray actors; Ray must
    be initialised in this process, as it is inside Slime's and Miles' rollout manager)."""
    if backend not in ("auto", "process", "ray"):
        raise ValueError(f"rollout_worker_backend must be auto, process or ray, got {backend!r}")
    if backend == "ray":
        if not _ray_running():
            raise RuntimeError(
                "rollout_worker_backend: ray, but Ray is not initialised in this process (run inside the trainer's Ray cluster, or use process)"
            )
        return RayWorkers(factory, count)
    return ProcessWorkers(factory, count)


# ---------------------------------------------------------------------------------------------- the hooks' runner


@attrs.define(eq=False)
class WorkerRollouts:
    """A `Rollouts` stand-in for the hooks: `run` sends the episode to the workers; an episode with its
    own `engine` (partial rollout's parking engine, which lives in this process) runs in process."""

    local: Any  # the in-process `Rollouts`
    workers: EpisodeWorkers
    evaluation: bool = False

    @property
    def engine(self) -> Any:
        return self.local.engine

    async def run(
        self,
        task: TaskRef,
        *,
        sampling_params: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        engine: Any = None,
    ) -> Trajectory:
        if engine is not None:
            return await self.local.run(task, sampling_params=sampling_params, routing_key=routing_key, engine=engine)
        return await self.workers.run(
            task, sampling_params=sampling_params, routing_key=routing_key, evaluation=self.evaluation
        )

    async def aclose(self) -> None:
        await self.workers.aclose()
        await self.local.aclose()

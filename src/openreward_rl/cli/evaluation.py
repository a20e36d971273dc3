"""Evaluation runs: N episodes per task with a concurrency limit, one JSON line per episode, resumable.

Each line is `Trajectory.to_dict()` plus `eval_key` (task identity + sample index), `sample` and the
full task reference (`task_ref`), so `openreward-rl show` can read it and a restarted run can skip
the (task, sample) pairs already written. Lines are appended and flushed as episodes finish; a
half-written last line (the process was killed mid-write) is dropped on restart.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from openreward_rl.observe.dumps import DumpError, TrajectoryWriter, iter_records, record_to_trajectory
from openreward_rl.env.tasks import TaskRef
from openreward_rl.loop.episode import failed_trajectory
from openreward_rl.loop.trajectory import StopReason, Trajectory

__all__ = ["EvalJob", "eval_key", "read_results", "evaluate", "ResultsFile"]

logger = logging.getLogger(__name__)


def eval_key(task: TaskRef, sample: int) -> str:
    """A stable identity for one (task, sample) pair.

    >>> eval_key(TaskRef("MathEnv", "test", index=3), 1)
    'MathEnv|test|-|3|1'
    """
    return f"{task.environment}|{task.split}|{task.variant or '-'}|{task.identity}|{sample}"


@attrs.frozen
class EvalJob:
    task: TaskRef
    sample: int

    @property
    def key(self) -> str:
        return eval_key(self.task, self.sample)


def read_results(path: str | os.PathLike[str]) -> dict[str, Trajectory]:
    """Trajectories already written to `path` (a results file, see `openreward_rl.observe.dumps`), by `eval_key`.

    A missing file is an empty run; a last line that is not valid JSON (an interrupted write) is
    dropped from the file; a bad line elsewhere is an error naming it.
    """
    done: dict[str, Trajectory] = {}
    try:
        for number, record in enumerate(iter_records(path, resume=True)):
            where = f"{path} record {number}"
            if "eval_key" not in record:
                raise DumpError(f"{where}: no eval_key")
            done[record["eval_key"]] = record_to_trajectory(record, where)
    except DumpError as error:
        raise ValueError(f"{error}: not an evaluation results file; use another --output") from None
    return done


@attrs.define
class ResultsFile:
    """An evaluation's results: a trajectory dump (`TrajectoryWriter`) whose lines also carry the
    job's `eval_key`, `sample` and `task_ref`, and `metadata`."""

    path: Path
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    _writer: TrajectoryWriter | None = attrs.field(init=False, default=None)

    def __enter__(self) -> ResultsFile:
        self._writer = TrajectoryWriter(self.path)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._writer is not None:
            self._writer.close()

    def write(self, job: EvalJob, trajectory: Trajectory) -> None:
        assert self._writer is not None, "ResultsFile is written inside `with`"
        self._writer.write(trajectory, eval_key=job.key, sample=job.sample, task_ref=attrs.asdict(job.task), **self.metadata)


def plan(tasks: Sequence[TaskRef], n: int, done: Mapping[str, Trajectory], *, retry_failures: bool = False) -> list[EvalJob]:
    """The (task, sample) jobs still to run: all N samples of each task minus those already done.

    With `retry_failures`, pairs whose recorded episode was an infrastructure failure run again.

    >>> tasks = [TaskRef("E", "test", index=0), TaskRef("E", "test", index=1)]
    >>> [job.key for job in plan(tasks, 2, {"E|test|-|0|1": None})]
    ['E|test|-|0|0', 'E|test|-|1|0', 'E|test|-|1|1']
    """
    if n < 1:
        raise ValueError(f"n (samples per task) must be at least 1, got {n}")
    jobs = []
    for task in tasks:
        for sample in range(n):
            job = EvalJob(task, sample)
            previous = done.get(job.key, False)
            if previous is False:
                jobs.append(job)
            elif retry_failures and previous is not None and previous.stop_reason.is_infrastructure_failure:
                jobs.append(job)
    return jobs


async def evaluate(
    jobs: Iterable[EvalJob],
    run: Callable[[EvalJob], Awaitable[Trajectory]],
    *,
    concurrency: int,
    results: ResultsFile | None = None,
    on_done: Callable[[EvalJob, Trajectory], None] | None = None,
) -> list[tuple[EvalJob, Trajectory]]:
    """Run `jobs` with at most `concurrency` episodes in flight; write and report each as it finishes.

    An exception escaping `run` (a bug, not an environment or engine fault, which episodes report
    themselves) becomes an `aborted` trajectory naming it, so one bad episode does not lose the run.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    limiter = asyncio.Semaphore(concurrency)
    finished: list[tuple[EvalJob, Trajectory]] = []

    async def one(job: EvalJob) -> None:
        async with limiter:
            try:
                trajectory = await run(job)
            except Exception as error:  # noqa: BLE001 - recorded as an infrastructure failure, never a reward
                logger.exception("episode %s raised", job.key)
                trajectory = failed_trajectory(job.task, StopReason.ABORTED, f"unexpected error: {type(error).__name__}: {error}")
        if results is not None:
            results.write(job, trajectory)
        finished.append((job, trajectory))
        if on_done is not None:
            on_done(job, trajectory)

    async with asyncio.TaskGroup() as group:
        for job in jobs:
            group.create_task(one(job))
    return finished

"""Evaluation runs: N episodes per task with a concurrency limit, one JSON line per episode, resumable.

Each line is `Trajectory.to_dict()` plus `eval_key` (task identity + sample index), `sample`, the
full task reference (`task_ref`) and `eval`, the run's settings (engine, model, sampling, a digest
of the config's episode settings), so `openreward-rl show` can read it and a restarted run can skip
the (task, sample) pairs already written, and refuse a file written with other settings.

The file a user reads holds one line per episode: a rerun episode (an infrastructure failure run
again) is appended as it finishes and the older line is dropped when the run ends, by an atomic
rewrite (`ResultsFile`); a reader meanwhile takes the latest line of each key (`latest_records`).
One process writes a file at a time (an exclusive `fcntl` lock; a second gets `ResultsError`). A
half-written last line (the process was killed mid-write) is dropped; any other line that is not an
episode record is skipped with a warning naming file:line and moved to `<file>.bad-lines` at the
next rewrite, so every good record is kept.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import attrs

from openreward_rl.env.tasks import TaskRef
from openreward_rl.errors import ResultsError
from openreward_rl.loop.episode import failed_trajectory
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.observe.dumps import DumpError, TrajectoryWriter, _drop_unfinished_last_line, record_to_trajectory

__all__ = [
    "EvalJob",
    "eval_key",
    "read_results",
    "evaluate",
    "plan",
    "ResultsFile",
    "ResultsError",
    "ResultsScan",
    "scan_results",
    "latest_records",
]

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


@attrs.frozen
class ResultsScan:
    """What a results file holds: the latest record of each `eval_key`, in file order (its trajectory
    and the `eval` settings it was written with)."""

    settings: dict[str, Any]
    trajectories: dict[str, Trajectory]
    latest_lines: frozenset[int]  # 1-based numbers of the lines kept
    bad_lines: tuple[tuple[int, str], ...]  # (number, why)
    record_lines: int  # lines that hold a record, older duplicates included

    @property
    def needs_rewrite(self) -> bool:
        """Whether the file holds more than one line per episode, or lines that are not records."""
        return bool(self.bad_lines) or self.record_lines != len(self.latest_lines)


def _parse_line(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """(record, "") or (None, why the line is not a results record)."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except json.JSONDecodeError as error:
        return None, f"not JSON ({error.msg} at column {error.colno})"
    if not isinstance(record, dict):
        return None, f"expected a JSON object, got {type(record).__name__}"
    if not isinstance(record.get("eval_key"), str):
        return None, "no eval_key"
    return record, ""


def scan_results(path: str | os.PathLike[str]) -> ResultsScan:
    """Read a results file; a missing file is an empty run. A line that is not a record is listed in
    `bad_lines`, never fatal, unless no line is a record: then it is not a results file (`ResultsError`)."""
    file = Path(path)
    records: dict[str, tuple[int, Any, Trajectory]] = {}  # eval_key -> (line number, its `eval`, trajectory)
    bad: list[tuple[int, str]] = []
    count = 0
    if file.exists():
        with file.open("rb") as lines:
            for number, raw in enumerate(lines, start=1):
                if not raw.strip():
                    continue
                record, why = _parse_line(raw)
                if record is not None:
                    try:
                        trajectory = record_to_trajectory(record)
                    except DumpError as error:
                        record, why = None, str(error).removeprefix("record: ")
                if record is None:
                    bad.append((number, why))
                    continue
                count += 1
                records.pop(record["eval_key"], None)  # the latest line of a key takes its place in file order
                records[record["eval_key"]] = (number, record.get("eval"), trajectory)
    if bad and not records:
        number, why = bad[0]
        raise ResultsError(f"{file}:{number}: {why}: not an evaluation results file; use another --output")
    return ResultsScan(
        settings={key: settings for key, (_, settings, _) in records.items()},
        trajectories={key: trajectory for key, (_, _, trajectory) in records.items()},
        latest_lines=frozenset(number for number, _, _ in records.values()),
        bad_lines=tuple(bad),
        record_lines=count,
    )


def read_results(path: str | os.PathLike[str], *, warn: Callable[[str], None] | None = None) -> dict[str, Trajectory]:
    """Trajectories already written to `path` (a results file, see `openreward_rl.observe.dumps`), by `eval_key`,
    the latest of each. Lines that are not records are skipped, each reported through `warn`."""
    scan = scan_results(path)
    for number, why in scan.bad_lines:
        (warn or logger.warning)(f"{path}:{number}: skipped: {why}")
    return scan.trajectories


def latest_records(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One record per `eval_key` (the latest, where the later line stands), in order; records
    without an `eval_key` (a plain trajectory dump) are all kept.

    >>> [r["n"] for r in latest_records([{"eval_key": "a", "n": 0}, {"n": 1}, {"eval_key": "a", "n": 2}])]
    [1, 2]
    """
    last = {
        record["eval_key"]: position
        for position, record in enumerate(records)
        if isinstance(record.get("eval_key"), str)
    }
    return [
        record
        for position, record in enumerate(records)
        if not isinstance(record.get("eval_key"), str) or last[record["eval_key"]] == position
    ]


def _flag(name: str) -> str:
    return "the config's episode settings" if name == "config" else "--" + name.replace("_", "-")


def settings_differences(written: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """What differs between a record's `eval` settings and this run's, as "--model 'a' (this run: 'b')";
    a setting the record does not carry (an older file) is not compared.

    >>> settings_differences({"model": "a", "temperature": 1.0}, {"model": "b", "temperature": 1.0, "top_p": 1.0})
    ["--model 'a' (this run: 'b')"]
    """
    return [
        f"{_flag(name)} {written[name]!r} (this run: {value!r})"
        for name, value in wanted.items()
        if name in written and written[name] != value
    ]


def _lock(path: Path) -> IO[bytes]:
    """An open handle of `path` holding its exclusive lock; `ResultsError` when another process holds it."""
    while True:
        handle = path.open("a+b")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise ResultsError(
                f"{path} is being written by another `openreward-rl eval` process (it holds the file's lock); "
                "wait for it to finish, or use another --output"
            ) from None
        try:
            if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                return handle
        except FileNotFoundError:
            pass
        handle.close()  # the file was replaced (rewritten) between open and lock: lock the new one


def _rewrite(path: Path, scan: ResultsScan, handle: IO[bytes]) -> IO[bytes]:
    """Atomically replace `path` by its latest line per episode; lines that are not records are
    appended to `<path>.bad-lines`. Returns the locked handle of the new file (the old lock is let go)."""
    temporary = path.with_name(f".{path.name}.rewrite")
    new = temporary.open("w+b")
    fcntl.flock(new.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else knows this file yet
    bad = {number for number, _ in scan.bad_lines}
    try:
        rejected = []
        with path.open("rb") as lines:
            for number, raw in enumerate(lines, start=1):
                if number in scan.latest_lines:
                    new.write(_line(raw))
                elif number in bad:
                    rejected.append(raw)
        if rejected:
            with path.with_name(path.name + ".bad-lines").open("ab") as aside:
                aside.writelines(_line(raw) for raw in rejected)
        new.flush()
        os.fsync(new.fileno())
        os.replace(temporary, path)
    except BaseException:
        new.close()
        temporary.unlink(missing_ok=True)
        raise
    handle.close()
    return new


def _line(raw: bytes) -> bytes:
    return raw if raw.endswith(b"\n") else raw + b"\n"


def _aside(path: Path) -> Path:
    """A free name beside `path` for its old contents: results.jsonl -> results.old-1.jsonl, ..."""
    number = 1
    while True:
        candidate = path.with_name(f"{path.stem}.old-{number}{path.suffix}")
        if not candidate.exists():
            return candidate
        number += 1


@attrs.define
class ResultsFile:
    """An evaluation's results file, open for this run: locked against a second writer, read
    (`done`: the latest trajectory of each `eval_key`), checked against this run's settings
    (`metadata["eval"]`), rewritten with one line per episode when it holds more, and appended to
    (`write`: a trajectory dump line that also carries the job's `eval_key`, `sample`, `task_ref` and
    `metadata`). Closing rewrites it again when episodes were rerun, then lets the lock go.

    `overwrite` moves an existing file aside (`moved_to`) and starts a new one; `warn` gets each
    skipped line ("file:line: skipped: why") and each rewrite.
    """

    path: Path = attrs.field(converter=Path)
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    warn: Callable[[str], None] | None = None
    overwrite: bool = False
    done: dict[str, Trajectory] = attrs.field(init=False, factory=dict)
    moved_to: Path | None = attrs.field(init=False, default=None)
    _handle: IO[bytes] | None = attrs.field(init=False, default=None)
    _writer: TrajectoryWriter | None = attrs.field(init=False, default=None)
    _rerun: int = attrs.field(init=False, default=0)

    def _say(self, message: str) -> None:
        (self.warn or logger.warning)(message)

    def open(self) -> ResultsFile:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = _lock(self.path)
        try:
            if self.overwrite and os.fstat(handle.fileno()).st_size > 0:
                self.moved_to = _aside(self.path)
                os.replace(self.path, self.moved_to)
                old, handle = handle, _lock(self.path)
                old.close()
            _drop_unfinished_last_line(self.path)
            scan = scan_results(self.path)
            self._check_settings(scan)
            for number, why in scan.bad_lines:
                self._say(f"{self.path}:{number}: skipped: {why} (moved to {self.path.name}.bad-lines)")
            if scan.needs_rewrite:
                handle = _rewrite(self.path, scan, handle)
        except BaseException:
            handle.close()
            raise
        self._handle = handle
        self.done = dict(scan.trajectories)
        self._writer = TrajectoryWriter(self.path)
        return self

    def _check_settings(self, scan: ResultsScan) -> None:
        wanted = self.metadata.get("eval")
        if not isinstance(wanted, Mapping):
            return
        for written in scan.settings.values():
            differences = settings_differences(written, wanted) if isinstance(written, Mapping) else []
            if differences:
                raise ResultsError(
                    f"{self.path} holds results of other settings: {'; '.join(differences)}. Rerun with its settings to resume it, "
                    "pass --overwrite to move it aside and start a new file, or use another --output"
                )

    def __enter__(self) -> ResultsFile:
        if self._handle is None:
            self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def write(self, job: EvalJob, trajectory: Trajectory) -> None:
        assert self._writer is not None, "ResultsFile is written after open() or inside `with`"
        self._writer.write(
            trajectory, eval_key=job.key, sample=job.sample, task_ref=attrs.asdict(job.task), **self.metadata
        )
        if job.key in self.done:
            self._rerun += 1
        self.done[job.key] = trajectory

    def close(self) -> None:
        """Close the writer, rewrite the file with one line per episode if episodes were rerun, unlock."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._handle is None:
            return
        try:
            if self._rerun:
                scan = scan_results(self.path)
                if scan.needs_rewrite:
                    self._handle = _rewrite(self.path, scan, self._handle)
            if os.fstat(self._handle.fileno()).st_size == 0:
                self.path.unlink(missing_ok=True)  # nothing was written: leave no empty file behind
        finally:
            self._handle.close()
            self._handle = None


def plan(
    tasks: Sequence[TaskRef], n: int, done: Mapping[str, Trajectory], *, keep_failures: bool = False
) -> list[EvalJob]:
    """The (task, sample) jobs still to run: all N samples of each task minus those already done.

    An episode recorded as an infrastructure failure (the model server or the environment failed,
    not the model) is not done: it runs again, unless `keep_failures`.

    >>> from openreward_rl.loop.episode import failed_trajectory
    >>> tasks = [TaskRef("E", "test", index=0), TaskRef("E", "test", index=1)]
    >>> done = {"E|test|-|0|1": failed_trajectory(tasks[0], StopReason.COMPLETED, ""), "E|test|-|1|0": failed_trajectory(tasks[1], StopReason.ABORTED, "")}
    >>> [job.key for job in plan(tasks, 2, done)]
    ['E|test|-|0|0', 'E|test|-|1|0', 'E|test|-|1|1']
    >>> [job.key for job in plan(tasks, 2, done, keep_failures=True)]
    ['E|test|-|0|0', 'E|test|-|1|1']
    """
    if n < 1:
        raise ValueError(f"n (samples per task) must be at least 1, got {n}")
    jobs = []
    for task in tasks:
        for sample in range(n):
            job = EvalJob(task, sample)
            previous = done.get(job.key)
            if previous is None or (not keep_failures and previous.stop_reason.is_infrastructure_failure):
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
                trajectory = failed_trajectory(
                    job.task, StopReason.ABORTED, f"unexpected error: {type(error).__name__}: {error}"
                )
        if results is not None:
            results.write(job, trajectory)
        finished.append((job, trajectory))
        if on_done is not None:
            on_done(job, trajectory)

    async with asyncio.TaskGroup() as group:
        for job in jobs:
            group.create_task(one(job))
    return finished

"""Trajectory dumps: one `Trajectory.to_dict()` JSON object per line.

This is the one JSONL format of the library: `openreward-rl eval` results are dumps whose lines
carry extra keys beside the trajectory's own (its `eval_key`, the model name); `read_records`
keeps them, `read_trajectories` drops them. A run that resumes a file reads it with
`resume=True`: a last line cut short by a killed writer is dropped from the file. Trajectories hold no
secrets by construction (sessions get them, trajectories record only task identity and text).

>>> import tempfile, pathlib
>>> from openreward_rl.loop.trajectory import StopReason, Trajectory
>>> from openreward_rl.task import TaskRef
>>> path = pathlib.Path(tempfile.mkdtemp()) / "dump.jsonl"
>>> empty = Trajectory(task=TaskRef("e", "train", index=0), segments=[], turns=[],
...                    messages=[], step_rewards=[], reward=None, stop_reason=StopReason.ENV_ERROR)
>>> with TrajectoryWriter(path) as writer:
...     writer.write(empty, model="m")
>>> [t.stop_reason.value for t in read_trajectories(path)]
['env_error']
>>> read_records(path)[0]["model"]
'm'
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from openreward_rl.errors import ConfigError
from openreward_rl.loop.trajectory import Trajectory

__all__ = ["TrajectoryWriter", "iter_records", "read_records", "read_trajectories", "record_to_trajectory", "DumpError"]


logger = logging.getLogger(__name__)


class DumpError(ConfigError):
    """A dump line is not a trajectory record; the message names the file and line."""


class TrajectoryWriter:
    """Appends trajectories to a JSONL file, one line each, flushed as written (safe to tail).

    Thread-safe; usable as a context manager. `extra` keys are written beside the trajectory's
    own and must not collide with them.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self.written = 0

    def write(self, trajectory: Trajectory | Mapping[str, Any], **extra: Any) -> None:
        record = dict(trajectory.to_dict() if isinstance(trajectory, Trajectory) else trajectory)
        clashes = sorted(set(extra) & set(record))
        if clashes:
            raise ValueError(f"extra keys {clashes} would overwrite trajectory fields")
        record.update(extra)
        line = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
        with self._lock:
            if self._file is None:
                raise ValueError(f"{self.path}: the writer is closed")
            self._file.write(line)
            self._file.flush()
            self.written += 1

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_records(
    path: str | os.PathLike[str], *, resume: bool = False, on_bad_line: Callable[[str], None] | None = None
) -> Iterator[dict[str, Any]]:
    """The JSON objects of a dump, in order; blank lines are skipped.

    `resume`: the file is one this process goes on appending to; a missing file has no records,
    and a last line that a killed writer left unfinished (no newline, not JSON) is cut off the file.
    A line that is not a JSON object is a `DumpError` naming file:line, or, with `on_bad_line`,
    skipped after passing that message to it.
    """
    file = Path(path)
    if not file.exists():
        if resume:
            return
        raise DumpError(f"{file}: no such file")
    if resume:
        _drop_unfinished_last_line(file)
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise DumpError(f"{file}:{number}: expected a JSON object, got {type(record).__name__}")
            except json.JSONDecodeError as error:
                problem = DumpError(f"{file}:{number}: not JSON ({error.msg} at column {error.colno})")
            except DumpError as error:
                problem = error
            else:
                yield record
                continue
            if on_bad_line is None:
                raise problem
            on_bad_line(str(problem))


def _drop_unfinished_last_line(file: Path) -> None:
    with file.open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        # the last line: from just after the previous newline to the end
        start = max(0, size - 65536)
        while True:
            handle.seek(start)
            newline = handle.read(size - start).rfind(b"\n")
            if newline >= 0 or start == 0:
                break
            start = max(0, start - 65536)
        cut = start + newline + 1 if newline >= 0 else 0
        handle.seek(cut)
        tail = handle.read()
        try:
            json.loads(tail)
            return  # a whole record without its newline: keep it
        except ValueError as error:
            logger.warning("%s: dropping a half-written last line (%s)", file, error)
        handle.truncate(cut)


def read_records(
    path: str | os.PathLike[str], *, resume: bool = False, on_bad_line: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    return list(iter_records(path, resume=resume, on_bad_line=on_bad_line))


def read_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Every line as a `Trajectory` (extra keys ignored). A line that is not one names its number."""
    trajectories = []
    for number, record in enumerate(iter_records(path)):  # 0-based, as `show --index` counts
        trajectories.append(record_to_trajectory(record, f"{path} record {number}"))
    return trajectories


def record_to_trajectory(record: Mapping[str, Any], where: str = "record") -> Trajectory:
    try:
        return Trajectory.from_dict(record)
    except (KeyError, TypeError, ValueError) as error:
        missing = f"missing key {error}" if isinstance(error, KeyError) else str(error)
        raise DumpError(f"{where}: not a trajectory ({missing})") from None

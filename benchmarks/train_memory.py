"""Where a TRL-backend command's resident memory goes: runs an `openreward-rl` command in this process while a thread
reads the process's resident memory (`VmRSS` of /proc/self/status) every 50 ms, each reading marked with the phase
the command is in, and prints each phase's peak.

    python benchmarks/train_memory.py sft --config examples/train_tool_agent_config.yaml ...      # the quickstart's sft
    python benchmarks/train_memory.py train --framework trl --config ... --csv rss.csv           # every reading too

Phases: `load` (until the first episode), `sample` (a training step's episodes: TRL's `rollout_func`), `teacher`
(sft's teacher episodes), `eval` (evaluations), `forward` (the trainer's loss), `backward`, `optimizer` (the
optimizer's step), `other` (everything else: scoring, saving, logging). Linux only (reads /proc). A tracing allocator
(tracemalloc) sees none of torch's memory, so resident memory is what is read.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


class RssSampler:
    """Resident memory read every `interval` seconds from a thread, each reading under the phase set last."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.phase = "load"
        self.readings: list[tuple[float, int, str]] = []  # (seconds since start, resident KiB, phase)
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")

    @staticmethod
    def status_kib(field: str) -> int:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.readings.append((time.monotonic() - self._started, self.status_kib("VmRSS"), self.phase))
            self._stop.wait(self.interval)

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @contextlib.contextmanager
    def during(self, phase: str) -> Iterator[None]:
        before, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = before

    def peaks(self) -> dict[str, tuple[int, float, int]]:
        """Per phase, in order of first reading: (peak KiB, seconds at the peak, readings)."""
        peaks: dict[str, tuple[int, float, int]] = {}
        for seconds, kib, phase in self.readings:
            peak, at, count = peaks.get(phase, (0, 0.0, 0))
            peaks[phase] = (kib, seconds, count + 1) if kib > peak else (peak, at, count + 1)
        return peaks


def _wrap(owner: Any, name: str, sampler: RssSampler, phase: str) -> None:
    original: Callable[..., Any] = getattr(owner, name)

    def marked(*args: Any, **kwargs: Any) -> Any:
        with sampler.during(phase):
            return original(*args, **kwargs)

    setattr(owner, name, marked)


def mark_phases(sampler: RssSampler) -> None:
    """Phase marks on the public entry points a TRL-backend command passes through."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from transformers import Trainer
    from trl import GRPOTrainer, SFTTrainer

    from openreward_rl.backends.trl.adapter import TrlAdapter
    from openreward_rl.backends.trl.run import TrlSession

    _wrap(TrlAdapter, "__call__", sampler, "sample")
    _wrap(TrlSession, "evaluate", sampler, "eval")
    for trainer_class in (Trainer, GRPOTrainer, SFTTrainer):  # each defines its own compute_loss
        if "compute_loss" in vars(trainer_class):
            _wrap(trainer_class, "compute_loss", sampler, "forward")
    _wrap(torch.Tensor, "backward", sampler, "backward")
    original_run_episodes = TrlAdapter.run_episodes

    def run_episodes(self: Any, *args: Any, **kwargs: Any) -> Any:
        teaching = kwargs.get("engine") is not None and sampler.phase == "other"
        with sampler.during("teacher") if teaching else contextlib.nullcontext():
            return original_run_episodes(self, *args, **kwargs)

    TrlAdapter.run_episodes = run_episodes  # type: ignore[method-assign]

    def optimizer_begins(optimizer: Any, args: Any, kwargs: Any) -> None:
        sampler.phase = "optimizer"

    def optimizer_ends(optimizer: Any, args: Any, kwargs: Any) -> None:
        sampler.phase = "other"

    register_optimizer_step_pre_hook(optimizer_begins)
    register_optimizer_step_post_hook(optimizer_ends)
    original_open = TrlSession.open.__func__  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def open_session(cls: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with original_open(cls, *args, **kwargs) as session:
            sampler.phase = "other"  # loaded
            yield session

    TrlSession.open = classmethod(open_session)  # type: ignore[method-assign, assignment]


def main(argv: list[str]) -> int:
    csv = None
    if "--csv" in argv:
        at = argv.index("--csv")
        csv, argv = argv[at + 1], argv[:at] + argv[at + 2 :]
    sampler = RssSampler().start()
    from openreward_rl.cli import main as cli

    mark_phases(sampler)
    try:
        code = cli(argv)
    finally:
        sampler.stop()
    print(f"{'phase':<10} {'peak GiB':>9} {'at s':>8} {'readings':>9}", file=sys.stderr)
    for phase, (kib, at, count) in sampler.peaks().items():
        print(f"{phase:<10} {kib / 2**20:9.3f} {at:8.1f} {count:9d}", file=sys.stderr)
    print(
        f"VmHWM {RssSampler.status_kib('VmHWM') / 2**20:.3f} GiB (the process's peak resident memory)", file=sys.stderr
    )
    if csv:
        with open(csv, "w") as out:
            out.write("seconds,rss_kib,phase\n")
            out.writelines(f"{seconds:.2f},{kib},{phase}\n" for seconds, kib, phase in sampler.readings)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

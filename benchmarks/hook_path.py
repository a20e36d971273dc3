"""Client CPU per turn on the trainer hook path (`openreward_rl.backends.slime.generate`), with its split.

What runs: Slime's call into the hook, as Slime makes it (a Slime-like `args` namespace and the
`Sample` double of tests/doubles/slime_double.py, rows written by `task_row`), for 5, 10, 20 and 50-turn
`Corridor` episodes whose tool replies are 300 words (~1,930 characters, ~440 Qwen3 tokens). The
hook builds its own state from `args` and a training config file, exactly as under Slime: the
Qwen3 tokenizer and template, `SGLangEngine` on the zero-latency SGLang double (a child process)
and the SDK's `AsyncOpenReward` client to the SDK's environment `Server` (a child process) on
127.0.0.1.

What is measured is this process's CPU (`getrusage`: user + system, all threads), not wall time:
the machine is shared, and a turn's wall time here is mostly other processes' work. The main
thread's share (`time.thread_time`) is printed apart from other threads' (the SDK's `trust_env`
look-ups run in a thread pool, uploads on their own threads). Each row is the least and the median
of `--repeats` episodes after one warm-up episode; the load average is printed before and after.

`--profile TURNS` samples this process's CPU (SIGPROF every 0.5 ms of CPU, see `CpuSampler`) over
that many-turn episodes and splits it into buckets: the library (openreward_rl), the SDK
(openreward), aiohttp and the event loop (aiohttp, asyncio, yarl, multidict, selectors, sockets),
the tokenizer (tokenizers, transformers' tokenization code) and the chat template
(apply_chat_template, jinja2); other code (the standard library, attrs, pydantic) counts as its
nearest caller's.

`--throughput 0 1 2` runs `--episodes` 20-turn episodes (`--turns N` for another length) with
`--concurrency` in flight through the hook, in process (0) and with `rollout_workers` 1 and 2, and
prints turns per second and the CPU per turn of the hook's process, the workers and both servers.

    PYTHONPATH=src python benchmarks/hook_path.py [--turns 5 10 20 50] [--repeats 5] [--profile 20]
    PYTHONPATH=src python benchmarks/hook_path.py --throughput 0 1 2 [--concurrency 16] [--episodes 48]

Run it against another checkout's code ("before") by pointing PYTHONPATH at that checkout's src.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import signal
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS))
sys.path.insert(0, str(BENCHMARKS.parent / "tests"))  # slime_double: the Sample double

from common import CORRIDOR_SPEC, SGLangDoubleProcess, corridor_task, machine, median, write_corridor_config  # noqa: E402

REPLY_WORDS = 300
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 512}
CONTEXT_LEN = 65536


def write_config(directory: Path, base_url: str, workers: int = 0) -> Path:
    return write_corridor_config(
        directory,
        base_url,
        max_turns=60,
        name=f"train_config_{workers}.yaml",
        extra=f"rollout_workers: {workers}\nrollout_worker_backend: process\n",
    )


def slime_args(sglang_url: str) -> SimpleNamespace:
    from doubles import slime_double

    host, port = sglang_url.removeprefix("http://").rsplit(":", 1)
    return slime_double.rollout_args(host, int(port), rollout_max_context_len=CONTEXT_LEN, rollout_max_response_len=512)


def new_sample(turns: int, number: int) -> Any:
    from doubles import slime_double

    return slime_double.task_sample(
        corridor_task(turns, REPLY_WORDS), index=number, group_index=0, session_id=f"bench-{number}"
    )


def check(sample: Any, turns: int) -> None:
    from doubles import slime_double

    if isinstance(sample, list):  # the default context policy hands back a list (of one: nothing compacted here)
        if len(sample) != 1:
            raise RuntimeError(f"expected one sample (no compaction), got {len(sample)}")
        sample = sample[0]
    if sample.status is not slime_double.Sample.Status.COMPLETED or sample.reward != 1.0:
        raise RuntimeError(
            f"episode did not complete: {sample.status} {sample.metadata.get('stop_reason')} {sample.metadata.get('stop_detail')}"
        )
    if sample.metadata["metrics"].get("turns") != turns:
        raise RuntimeError(f"expected {turns} turns, got {sample.metadata['metrics'].get('turns')}")


def cpu_now() -> tuple[float, float]:
    """(this process's CPU, all threads; this thread's CPU) in seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, time.thread_time()


class HookBench:
    """The two child servers, the config file and the Slime-like args, for one benchmark run."""

    def __enter__(self) -> HookBench:
        from openreward_rl.env.local_server import serve_environments

        self.directory = tempfile.TemporaryDirectory()
        self.double = SGLangDoubleProcess(context_len=CONTEXT_LEN)
        self.env_server = serve_environments([CORRIDOR_SPEC], subprocess=True).__enter__()
        self.args = slime_args(self.double.url)
        self.count = 0
        self.configure(0)
        return self

    def configure(self, workers: int) -> None:
        """Point the hook at a config with `rollout_workers: workers` (a new config file, so a new state)."""
        os.environ["OPENREWARD_RL_CONFIG"] = str(
            write_config(Path(self.directory.name), self.env_server.base_url, workers)
        )

    def __exit__(self, *exc: object) -> None:
        self.env_server.__exit__(None, None, None)
        self.double.close()
        self.directory.cleanup()

    async def episode(self, turns: int) -> Any:
        from openreward_rl.backends import slime

        self.count += 1
        sample = await slime.generate(self.args, new_sample(turns, self.count), dict(SAMPLING))
        check(sample, turns)
        return sample

    async def measure(self, turns: int, repeats: int) -> dict[str, float]:
        await self.episode(turns)  # warm-up: state, template compile, connections
        process, main = [], []
        for _ in range(repeats):
            gc.collect()
            p0, m0 = cpu_now()
            await self.episode(turns)
            p1, m1 = cpu_now()
            process.append((p1 - p0) / turns)
            main.append((m1 - m0) / turns)
        return {
            "least": min(process),
            "median": median(process),
            "main": median(main),
            "threads": median(process) - median(main),
        }

    async def close(self) -> None:
        from openreward_rl.backends._sample import state as _state

        await _state.close_states()


async def per_turn(turns_list: list[int], repeats: int) -> None:
    print(f"machine: {machine()}")
    with HookBench() as bench:
        try:
            print(f"\nhook path (slime.generate), {REPLY_WORDS}-word tool replies: this process's CPU, ms per turn")
            print(f"{'turns':>6} {'least':>8} {'median':>8} {'main thread':>12} {'other threads':>14}")
            for turns in turns_list:
                row = await bench.measure(turns, repeats)
                print(
                    f"{turns:>6} {row['least'] * 1000:>8.2f} {row['median'] * 1000:>8.2f} {row['main'] * 1000:>12.2f} {row['threads'] * 1000:>14.2f}",
                    flush=True,
                )
        finally:
            await bench.close()
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


# ---------------------------------------------------------------------------------------------- throughput


async def keep_busy(bench: HookBench, turns: int, concurrency: int, episodes: int) -> None:
    """Run `episodes` episodes, `concurrency` in flight at any time."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            await bench.episode(turns)

    await asyncio.gather(*(one() for _ in range(episodes)))


async def throughput(worker_counts: list[int], turns: int, concurrency: int, episodes: int) -> None:
    """Turns per second at saturation through the hook, episodes in process (0) or in N workers,
    with the CPU each process spent per turn."""
    from common import process_cpu_seconds

    from openreward_rl.backends._sample import state as _state

    print(f"machine: {machine()}")
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        f"\nthroughput through slime.generate: {episodes} episodes of {turns} turns ({REPLY_WORDS}-word tool replies), {concurrency} in flight"
    )
    print(
        f"{'workers':>7} {'wall s':>7} {'turns/s':>8} {'hook ms/turn':>13} {'workers ms/turn':>16} {'env server ms/turn':>19} {'SGLang double ms/turn':>22}"
    )
    with HookBench() as bench:
        env_pid = bench.env_server.pid
        for workers in worker_counts:
            bench.configure(workers)
            try:
                await keep_busy(bench, turns, concurrency, concurrency)  # warm-up: workers started, templates compiled
                rollouts = _state.state_for(bench.args).rollouts
                worker_pids = [pid for pid in rollouts.workers.pids() if pid is not None] if workers else []
                gc.collect()
                hook0, _ = cpu_now()
                workers0 = sum(process_cpu_seconds(pid) for pid in worker_pids)
                env0, double0 = process_cpu_seconds(env_pid), bench.double.cpu_seconds()
                started = time.perf_counter()
                await keep_busy(bench, turns, concurrency, episodes)
                wall = time.perf_counter() - started
                hook1, _ = cpu_now()
                workers1 = sum(process_cpu_seconds(pid) for pid in worker_pids)
                env1, double1 = process_cpu_seconds(env_pid), bench.double.cpu_seconds()
            finally:
                await _state.close_states()
            done = episodes * turns
            per_turn = lambda seconds, done=done: seconds * 1000 / done  # noqa: E731
            print(
                f"{workers:>7} {wall:>7.1f} {done / wall:>8.1f} {per_turn(hook1 - hook0):>13.2f} {per_turn(workers1 - workers0):>16.2f}"
                f" {per_turn(env1 - env0):>19.2f} {per_turn(double1 - double0):>22.2f}",
                flush=True,
            )
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


# ---------------------------------------------------------------------------------------------- profile

BUCKETS = ("library", "SDK", "aiohttp/event loop", "tokenizer", "template", "harness", "other")
_TEMPLATE_FUNCTIONS = {"apply_chat_template", "render_jinja_template"}
_LOOP_PARTS = (
    "/aiohttp/",
    "/asyncio/",
    "/yarl/",
    "/multidict/",
    "/propcache/",
    "/aiohappyeyeballs/",
    "/selectors.py",
    "/selector_events.py",
    "/socket.py",
    "/ssl.py",
)


def bucket_of(code: Any) -> str | None:
    path, name = code.co_filename.replace("\\", "/"), code.co_name
    if name in _TEMPLATE_FUNCTIONS or "/jinja2/" in path or "chat_template_utils" in path or path == "<template>":
        return "template"
    if "/openreward_rl/" in path:
        return "library"
    if "/openreward/" in path:
        return "SDK"
    if "/tenacity/" in path:  # its asyncio module is retry machinery, not the event loop
        return None
    if "/tokenizers/" in path or "/transformers/tokenization" in path:
        return "tokenizer"
    if any(part in path for part in _LOOP_PARTS):
        return "aiohttp/event loop"
    if path.startswith(str(BENCHMARKS)) or "slime_double" in path:
        return "harness"
    return None


class CpuSampler:
    """A sampling profiler on the process's CPU clock: `ITIMER_PROF` raises SIGPROF every `interval_s`
    of CPU, and the handler (run on the main thread) charges one sample to the bucket of the
    innermost frame that has one (standard library, attrs, pydantic, ... count as their caller's).
    Python runs the handler at the next bytecode, so time in a C call (the Rust tokenizer, JSON) is
    charged to the Python function that made it. Low overhead, unlike cProfile's per-call clock reads."""

    def __init__(self, interval_s: float = 0.0005) -> None:
        self.interval_s = interval_s
        self.samples: dict[str, int] = defaultdict(int)
        self.places: dict[tuple[str, str, str], int] = defaultdict(int)  # (bucket, function, library caller)

    def _sample(self, signum: int, frame: Any) -> None:
        bucket, function = "other", "?"
        while frame is not None:
            found = bucket_of(frame.f_code)
            if found is not None:
                bucket, function = found, f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"
                break
            frame = frame.f_back
        caller = "-"
        while frame is not None:
            if "/openreward_rl/" in frame.f_code.co_filename:
                caller = f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"
                break
            frame = frame.f_back
        self.samples[bucket] += 1
        self.places[(bucket, function, caller)] += 1

    def __enter__(self) -> CpuSampler:
        self._previous = signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, self.interval_s, self.interval_s)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, self._previous)


async def profile(turns: int, repeats: int, detail: int = 0) -> None:
    print(f"machine: {machine()}")
    with HookBench() as bench:
        try:
            await bench.episode(turns)  # warm-up
            sampler = CpuSampler()
            p0, _ = cpu_now()
            with sampler:
                for _ in range(repeats):
                    await bench.episode(turns)
            p1, _ = cpu_now()
        finally:
            await bench.close()
    per_turn_ms = (p1 - p0) * 1000 / (turns * repeats)
    whole = sum(sampler.samples.values())
    print(
        f"\nsplit of this process's CPU, {turns}-turn hook-path episodes ({repeats} sampled, {whole} samples):"
        f" {per_turn_ms:.2f} ms/turn while sampling"
    )
    print(f"{'bucket':>20} {'share':>7} {'ms/turn':>8}")
    for bucket in BUCKETS:
        share = sampler.samples.get(bucket, 0) / whole
        print(f"{bucket:>20} {share * 100:>6.1f}% {share * per_turn_ms:>8.2f}")
    if detail:
        print("\nwhere (innermost bucketed function, innermost library caller), most samples first:")
        for (bucket, function, caller), count in sorted(sampler.places.items(), key=lambda item: -item[1])[:detail]:
            print(f"{count / whole * 100:>6.1f}%  {bucket:<20} {function:<45} {caller}")
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[5, 10, 20, 50])
    parser.add_argument("--repeats", type=int, default=5, help="measured episodes per row")
    parser.add_argument(
        "--profile", type=int, metavar="TURNS", help="profile episodes of this many turns and print the split"
    )
    parser.add_argument(
        "--detail", type=int, default=0, metavar="N", help="with --profile: also print the N places with most samples"
    )
    parser.add_argument(
        "--throughput",
        type=int,
        nargs="+",
        metavar="WORKERS",
        help="turns/s at saturation with these worker counts (0: in process)",
    )
    parser.add_argument("--concurrency", type=int, default=16, help="with --throughput: episodes in flight")
    parser.add_argument("--episodes", type=int, default=48, help="with --throughput: measured episodes per row")
    args = parser.parse_args()
    if args.throughput:
        asyncio.run(
            throughput(args.throughput, args.turns[0] if len(args.turns) == 1 else 20, args.concurrency, args.episodes)
        )
    elif args.profile:
        asyncio.run(profile(args.profile, args.repeats, args.detail))
    else:
        asyncio.run(per_turn(args.turns, args.repeats))


if __name__ == "__main__":
    main()

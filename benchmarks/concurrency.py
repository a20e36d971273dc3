"""Many concurrent `ToolEpisode`s in one process against the SDK's local env server and the SGLang double.

Each level of `--episodes` starts that many episodes at once (`asyncio.gather`); all share one
`SGLangEngine`, one `AsyncOpenReward` client and one `ChatRenderer` (one tokenizer), as `Rollouts`
does, and the levels run one after another in the same process against the same servers (level 1
runs `--serial` episodes one at a time). The env server (the SDK's `Server` under uvicorn,
`LocalEnvServer` subprocess mode) and the `SGLangTestServer` double (`--latency` seconds per answer,
0 by default) each run in a child process, so on 2 cores the three processes share the CPUs: the
figures say how the CPU time splits between the episode process (the library plus its HTTP clients)
and the two servers, which are stand-ins and cost what they cost.

Printed, one row per level: wall time, episodes/s, turns/s, errors (episodes that did not
complete), CPU ms per turn of each process (the episode process's: `time.process_time`, all
threads), the episode process's peak RSS so far and the load average at the level's end; then the largest level's CPU per turn over the
100 level's, and each level's failures by stop reason (with the tool errors the model was shown in them).

    PYTHONPATH=src python benchmarks/concurrency.py [--episodes 1 100 1000 2000] [--turns 5] [--reply-words 40]
    PYTHONPATH=src python benchmarks/concurrency.py --episodes 10000 --latency 1.0
    PYTHONPATH=src python benchmarks/concurrency.py --in-process --episodes 10000 [--latency 1.0]

`--in-process`: the memory of many live episodes in one rollout process, without the servers: the
environment (`InProcessSdkSession`) and the engine (`in_process_engine`, each answer `--latency`
seconds late so that every episode stays alive at once) answer in process. Printed: how many episodes
were alive at once at most, RSS before the episodes and at its peak, and MiB per live episode.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import resource
import sys
import time
from collections.abc import Awaitable
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import CORRIDOR_SPEC, TOKENIZER, SGLangDoubleProcess, corridor_task, machine, process_cpu_seconds  # noqa: E402

from openreward_rl import ChatRenderer, EpisodeSettings, StopReason, ToolEpisode, Trajectory, run_episode  # noqa: E402
from openreward_rl.assets import load_tokenizer  # noqa: E402
from openreward_rl.parsers import get_parser  # noqa: E402

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 512}


def peak_rss_mib(pid: int | None = None) -> float:
    """Peak resident set size: this process (getrusage) or a child (/proc VmHWM)."""
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@attrs.define
class Level:
    """One level's results: trajectories (or exceptions) and the CPU each process spent."""

    concurrency: int
    results: list[Trajectory | BaseException]
    wall: float
    cpu: float
    env_cpu: float
    double_cpu: float
    peak_rss: float

    @property
    def turns(self) -> int:
        return sum(len(r.turns) for r in self.results if isinstance(r, Trajectory))

    @property
    def errors(self) -> int:
        return sum(not isinstance(r, Trajectory) or r.stop_reason is not StopReason.COMPLETED for r in self.results)

    def per_turn(self, seconds: float) -> float:
        return seconds * 1000 / max(self.turns, 1)


async def run(
    levels: list[int],
    serial: int,
    turns: int,
    reply_words: int,
    env_pid: int,
    env_url: str,
    double: SGLangDoubleProcess,
) -> list[Level]:
    from openreward import AsyncOpenReward

    from openreward_rl.engines.sglang import SGLangEngine

    tokenizer = load_tokenizer(TOKENIZER)
    renderer, parser = ChatRenderer(tokenizer), get_parser("hermes")
    settings = EpisodeSettings(max_turns=turns, max_context_len=65536, sampling_params=SAMPLING)
    engine = SGLangEngine(double.url)
    client = AsyncOpenReward(api_key="local")
    task = corridor_task(turns, reply_words, env_url)

    def episode(i: int) -> Awaitable[Trajectory]:
        return run_episode(
            lambda: ToolEpisode(engine, renderer, parser, settings, routing_key=f"ep{i}"), client, task, attempts=1
        )

    measured: list[Level] = []
    try:
        await episode(-1)  # warm-up: template compile, connection pools
        for count in levels:
            cpu0, env0, double0 = time.process_time(), process_cpu_seconds(env_pid), double.cpu_seconds()
            started = time.perf_counter()
            if count == 1:
                results: list[Trajectory | BaseException] = [await episode(i) for i in range(serial)]
            else:
                results = await asyncio.gather(*(episode(i) for i in range(count)), return_exceptions=True)
            wall = time.perf_counter() - started
            level = Level(
                count,
                results,
                wall,
                time.process_time() - cpu0,
                process_cpu_seconds(env_pid) - env0,
                double.cpu_seconds() - double0,
                peak_rss_mib(),
            )
            measured.append(level)
            report_level(level, serial, turns)
    finally:
        await engine.aclose()
        await client.environments.aclose()
    return measured


HEADER = (
    f"{'concurrent':>10} {'wall s':>7} {'episodes/s':>10} {'turns/s':>8} {'errors':>6} {'episode ms/turn':>15}"
    f" {'env server ms/turn':>18} {'SGLang ms/turn':>14} {'peak RSS MiB':>12} {'load':>5}"
)


def report_level(level: Level, serial: int, turns: int) -> None:
    name = f"1 (x{serial})" if level.concurrency == 1 else str(level.concurrency)
    print(
        f"{name:>10} {level.wall:>7.1f} {len(level.results) / level.wall:>10.1f} {level.turns / level.wall:>8.0f} {level.errors:>6}"
        f" {level.per_turn(level.cpu):>15.2f} {level.per_turn(level.env_cpu):>18.2f} {level.per_turn(level.double_cpu):>14.2f}"
        f" {level.peak_rss:>12.0f} {os.getloadavg()[0]:>5.1f}",
        flush=True,
    )


def report_outcomes(levels: list[Level]) -> None:
    by_level = {level.concurrency: level for level in levels}
    largest = max(by_level)
    if 100 in by_level and largest != 100:
        ratio = by_level[largest].per_turn(by_level[largest].cpu) / by_level[100].per_turn(by_level[100].cpu)
        print(f"episode process CPU per turn at {largest} / at 100: {ratio:.2f}")
    for level in levels:
        done = [r for r in level.results if isinstance(r, Trajectory)]
        mean = {
            key: sum(r.metrics.get(key, 0.0) for r in done) / max(len(done), 1)
            for key in ("model_seconds", "env_seconds", "episode_seconds")
        }
        print(
            f"{level.concurrency}: mean per episode {mean['episode_seconds']:.2f} s in the loop, waiting on the model "
            f"{mean['model_seconds']:.2f} s and on tools {mean['env_seconds']:.2f} s"
        )
        outcomes: collections.Counter[str] = collections.Counter()
        for result in level.results:
            if isinstance(result, BaseException):
                outcomes[f"exception {type(result).__name__}: {str(result)[:120]}"] += 1
            elif result.stop_reason is not StopReason.COMPLETED:
                tool_errors = sorted({r.error for turn in result.turns for r in turn.tool_results if r.error})
                seen = f" (tool errors: {', '.join(tool_errors)})" if tool_errors else ""
                outcomes[f"{result.stop_reason.value}: {result.stop_detail[:160]}{seen}"] += 1
        for outcome, count in sorted(outcomes.items()):
            print(f"  {count} x {outcome}")


async def run_in_process(episodes: int, turns: int, reply_words: int, latency: float) -> None:
    from common import InProcessSdkSession, in_process_engine

    from openreward_rl.env.environment import EnvSession

    tokenizer = load_tokenizer(TOKENIZER)
    renderer, parser = ChatRenderer(tokenizer), get_parser("hermes")
    settings = EpisodeSettings(max_turns=turns, max_context_len=65536, sampling_params=SAMPLING)
    engine = in_process_engine(tokenizer, latency_s=latency)
    task = corridor_task(turns, reply_words)
    live, most = 0, 0

    async def one(i: int) -> Trajectory:
        nonlocal live, most
        live += 1
        most = max(most, live)
        try:
            session = EnvSession(sdk_session=InProcessSdkSession(turns, reply_words), task=task)
            return await ToolEpisode(engine, renderer, parser, settings, routing_key=f"ep{i}").run(session)
        finally:
            live -= 1

    await one(-1)  # warm-up: template compile, caches
    import gc

    gc.collect()
    before = current_rss_mib()
    cpu_started, wall_started = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(episodes)))
    wall, cpu = time.perf_counter() - wall_started, time.process_time() - cpu_started
    peak = peak_rss_mib()
    completed = sum(r.stop_reason is StopReason.COMPLETED for r in results)
    turns_done = sum(len(r.turns) for r in results)
    tokens = sum(len(r.tokens) for r in results) / len(results)
    print(
        f"\n{episodes} episodes x {turns} turns in process (Corridor, {reply_words}-word replies, {latency:g} s per model call)"
    )
    print(
        f"alive at once at most: {most}   completed: {completed}   wall {wall:.1f} s   CPU {cpu:.1f} s ({cpu * 1000 / max(turns_done, 1):.2f} ms/turn)"
    )
    print(
        f"RSS before the episodes {before:.0f} MiB, peak {peak:.0f} MiB: {peak - before:.0f} MiB for {most} live episodes, "
        f"{(peak - before) * 1024 / max(most, 1):.0f} KiB each (final context {tokens:.0f} tokens)"
    )


def current_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--episodes", type=int, nargs="+", default=[1, 100, 1000, 2000], help="concurrency levels, run in turn"
    )
    parser.add_argument("--serial", type=int, default=20, help="level 1: episodes run one at a time")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--reply-words", type=int, default=40)
    parser.add_argument(
        "--in-process", action="store_true", help="memory of live episodes, environment and engine in process"
    )
    parser.add_argument(
        "--latency", type=float, help="seconds each model call waits (default: 1.0 in process, 0 over HTTP)"
    )
    args = parser.parse_args()
    if args.in_process:
        print(f"machine: {machine()}")
        asyncio.run(
            run_in_process(
                max(args.episodes), args.turns, args.reply_words, 1.0 if args.latency is None else args.latency
            )
        )
        return
    from openreward_rl.env.local_server import serve_environments

    args.latency = args.latency or 0.0
    print(f"machine: {machine()}")
    print(
        f"\n{args.turns}-turn Corridor episodes ({args.reply_words}-word replies), model answers {args.latency:g} s late; levels one after another"
    )
    print(HEADER)
    with (
        SGLangDoubleProcess(latency_s=args.latency) as double,
        serve_environments([CORRIDOR_SPEC], subprocess=True) as env_server,
    ):
        assert env_server.pid is not None
        levels = asyncio.run(
            run(args.episodes, args.serial, args.turns, args.reply_words, env_server.pid, env_server.base_url, double)
        )
        env_rss, double_rss = peak_rss_mib(env_server.pid), peak_rss_mib(double.process.pid)
    print(
        f"peak RSS MiB: episode process {peak_rss_mib():.0f}, env server {env_rss:.0f}, SGLang double {double_rss:.0f}"
    )
    report_outcomes(levels)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()

"""Many concurrent `ToolEpisode`s in one process against the SDK's local env server and the SGLang double.

All episodes start at once (`asyncio.gather`) and share one `SGLangEngine`, one `AsyncOpenReward`
client and one `ChatRenderer` (one tokenizer), as `Rollouts` does. The env server (the SDK's
`Server` under uvicorn, `LocalEnvServer` subprocess mode) and the zero-latency `SGLangTestServer`
each run in a child process, so on 2 cores the three processes share the CPUs: the figures say
how the CPU time splits between the episode process (the library plus its HTTP clients) and the
two servers, which are stand-ins and cost what they cost.

Printed: wall time, episodes/s, turns/s, errors (episodes that did not complete, by stop reason),
peak RSS of each process, CPU seconds of each process, and CPU ms per turn in the episode process.

    PYTHONPATH=src python benchmarks/concurrency.py [--episodes 1000] [--turns 5] [--reply-words 40]
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
import resource
import sys
import time
from pathlib import Path

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


async def run(episodes: int, turns: int, reply_words: int, env_url: str, sglang_url: str) -> tuple[list[Trajectory | BaseException], float, float]:
    from openreward import AsyncOpenReward

    from openreward_rl.engines.sglang import SGLangEngine

    tokenizer = load_tokenizer(TOKENIZER)
    renderer, parser = ChatRenderer(tokenizer), get_parser("hermes")
    settings = EpisodeSettings(max_turns=turns, max_context_len=65536, sampling_params=SAMPLING)
    engine = SGLangEngine(sglang_url)
    client = AsyncOpenReward(api_key="local")
    task = corridor_task(turns, reply_words, env_url)
    try:
        # warm-up: template compile, connection pools
        await run_episode(lambda: ToolEpisode(engine, renderer, parser, settings), client, task, attempts=1)
        cpu_started, wall_started = time.process_time(), time.perf_counter()
        results = await asyncio.gather(
            *(run_episode(lambda i=i: ToolEpisode(engine, renderer, parser, settings, routing_key=f"ep{i}"), client, task, attempts=1)
              for i in range(episodes)),
            return_exceptions=True,
        )
        return results, time.perf_counter() - wall_started, time.process_time() - cpu_started
    finally:
        await engine.aclose()
        await client.environments.aclose()


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
    print(f"\n{episodes} episodes x {turns} turns in process (Corridor, {reply_words}-word replies, {latency:g} s per model call)")
    print(f"alive at once at most: {most}   completed: {completed}   wall {wall:.1f} s   CPU {cpu:.1f} s ({cpu * 1000 / max(turns_done, 1):.2f} ms/turn)")
    print(f"RSS before the episodes {before:.0f} MiB, peak {peak:.0f} MiB: {peak - before:.0f} MiB for {most} live episodes, "
          f"{(peak - before) * 1024 / max(most, 1):.0f} KiB each (final context {tokens:.0f} tokens)")


def current_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--reply-words", type=int, default=40)
    parser.add_argument("--in-process", action="store_true", help="memory of live episodes, environment and engine in process")
    parser.add_argument("--latency", type=float, default=1.0, help="--in-process: seconds each model call waits")
    args = parser.parse_args()
    if args.in_process:
        print(f"machine: {machine()}")
        asyncio.run(run_in_process(args.episodes, args.turns, args.reply_words, args.latency))
        return
    from openreward_rl.env.local_server import serve_environments

    print(f"machine: {machine()}")
    with SGLangDoubleProcess() as double, serve_environments([CORRIDOR_SPEC], subprocess=True) as env_server:
        assert env_server.pid is not None
        env_cpu0, double_cpu0 = process_cpu_seconds(env_server.pid), double.cpu_seconds()
        results, wall, cpu = asyncio.run(run(args.episodes, args.turns, args.reply_words, env_server.base_url, double.url))
        env_cpu, double_cpu = process_cpu_seconds(env_server.pid) - env_cpu0, double.cpu_seconds() - double_cpu0
        env_rss, double_rss = peak_rss_mib(env_server.pid), peak_rss_mib(double.process.pid)
    outcomes: collections.Counter[str] = collections.Counter()
    turns_done = 0
    for result in results:
        if isinstance(result, BaseException):
            outcomes[f"exception {type(result).__name__}: {str(result)[:120]}"] += 1
            continue
        turns_done += len(result.turns)
        outcomes[result.stop_reason.value if result.stop_reason is not StopReason.COMPLETED else "completed"] += 1
        if result.stop_reason is not StopReason.COMPLETED:
            outcomes[f"  detail: {result.stop_detail[:160]}"] += 1
    errors = args.episodes - outcomes["completed"]
    done = [r for r in results if isinstance(r, Trajectory)]
    mean = {key: sum(r.metrics.get(key, 0.0) for r in done) / max(len(done), 1) for key in ("model_seconds", "env_seconds", "episode_seconds")}
    print(f"\n{args.episodes} concurrent episodes x {args.turns} turns (Corridor, {args.reply_words}-word replies)")
    print(f"wall {wall:.1f} s   episodes/s {args.episodes / wall:.1f}   turns/s {turns_done / wall:.0f}   errors {errors}")
    print(f"mean per episode: {mean['episode_seconds']:.2f} s in the loop, of which waiting on the model "
          f"{mean['model_seconds']:.2f} s and on tools {mean['env_seconds']:.2f} s (the rest of the wall time: opening "
          "and closing sessions, and queueing for the CPU)")
    for outcome, count in sorted(outcomes.items()):
        print(f"  {outcome}: {count}")
    print(f"{'process':<22} {'CPU s':>8} {'CPU ms/turn':>12} {'peak RSS MiB':>13}")
    for name, seconds, rss in (("episode process", cpu, peak_rss_mib()), ("env server (SDK)", env_cpu, env_rss),
                               ("SGLang double", double_cpu, double_rss)):
        print(f"{name:<22} {seconds:>8.1f} {seconds * 1000 / max(turns_done, 1):>12.2f} {rss:>13.0f}")


if __name__ == "__main__":
    main()

"""Library CPU per turn of `ToolEpisode` for 5, 10, 20 and 50-turn episodes (Qwen3 tokenizer and template).

Three measurements, all of this process's CPU time (user + system, all threads; `getrusage`), with the
kernel's (system) share shown apart: over loopback the kernel work of both ends of a send is charged
to the sender:

- `library`: the two transports replaced by in-process doubles (see benchmarks/common.py), so the
  time is the library's own: the loop, the chat-template bridge, parsing, the ledger, `EnvSession`,
  and `SGLangEngine`'s payload building, JSON encoding of `input_ids` and response parsing.
- `engine-wire`: the SGLang double over HTTP (aiohttp in `SGLangEngine`), the environment in process:
  `engine-wire` minus `library` is what the engine's HTTP exchange costs the client.
- `wire`: the real thing over HTTP on 127.0.0.1: the zero-latency `SGLangTestServer` and the SDK's
  environment `Server` each in a child process, the SDK's `AsyncOpenReward` client and `SGLangEngine`
  with aiohttp here. This adds what any client pays (aiohttp, the SDK client, the event loop); the
  servers' CPU is in the children and not counted.

The workload (`Corridor`): every model turn samples the same ~75-token thinking block + tool call;
every tool reply is 40 words. The extra `20 (8k)` row uses longer replies so that 20 turns reach
~8k tokens, the shape of the seed's measurement (16.8 ms/turn at 20 turns, 8k).

    PYTHONPATH=src python benchmarks/episode_overhead.py [--mode library|engine-wire|wire|all] [--repeats N]
    PYTHONPATH=src python benchmarks/episode_overhead.py --profile 50   # pyinstrument, library mode
    PYTHONPATH=src python benchmarks/episode_overhead.py --compaction   # CPU per turn past the context window

`--compaction`: library mode, episodes of 50 to 400 turns in a 4,096-token context window with the
`summarize` context policy (threshold 0.75, the last turn kept, summaries of ~20 tokens from the
scripted model), next to the same episodes without a policy in a window they never fill. CPU per
environment turn should stay flat however long the episode runs: each context stays below the window,
and a compaction costs one render of the new context.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    CORRIDOR_SPEC,
    TOKENIZER,
    InProcessSdkSession,
    SGLangDoubleProcess,
    corridor_task,
    in_process_engine,
    machine,
)

from openreward_rl import ChatRenderer, EpisodeSettings, StopReason, ToolEpisode, Trajectory  # noqa: E402
from openreward_rl.assets import load_tokenizer  # noqa: E402
from openreward_rl.env.environment import EnvSession  # noqa: E402
from openreward_rl.parsers import get_parser  # noqa: E402

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 512}
# (label, turns, reply words)
WORKLOADS = [("5", 5, 40), ("10", 10, 40), ("20", 20, 40), ("50", 50, 40), ("20 (8k)", 20, 230)]


def settings_for(turns: int) -> EpisodeSettings:
    return EpisodeSettings(max_turns=turns, max_context_len=65536, sampling_params=SAMPLING)


def check(trajectory: Trajectory, turns: int) -> None:
    if trajectory.stop_reason is not StopReason.COMPLETED or trajectory.metrics["turns"] != turns:
        raise RuntimeError(
            f"benchmark episode ended {trajectory.stop_reason.value} after {len(trajectory.turns)} turns: {trajectory.stop_detail}"
        )


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def in_process_episode(
    engine: Any, renderer: ChatRenderer, parser: Any, turns: int, words: int, settings: EpisodeSettings | None = None
) -> Callable[[], Awaitable[Trajectory]]:
    """One corridor episode of `turns` turns against the environment in process (no HTTP)."""
    task = corridor_task(turns, words)
    settings = settings or settings_for(turns)

    async def run_one() -> Trajectory:
        session = EnvSession(sdk_session=InProcessSdkSession(turns, words), task=task)
        return await ToolEpisode(engine, renderer, parser, settings).run(session)

    return run_one


async def measure(
    run_one: Callable[[], Awaitable[Trajectory]], turns: int, repeats: int, last: list[Trajectory] | None = None
) -> tuple[float, float, int]:
    """Least CPU seconds (user + system) of one episode over the repeats (the least disturbed by other
    load on a shared machine), least system seconds, final context length. `last` gets the last trajectory."""
    check(await run_one(), turns)  # warm-up: template compile, caches, connections
    totals, system = [], []
    length = 0
    trajectory = None
    for _ in range(repeats):
        gc.collect()
        user0, sys0 = _cpu()
        trajectory = await run_one()
        user1, sys1 = _cpu()
        totals.append(user1 - user0 + sys1 - sys0)
        system.append(sys1 - sys0)
        check(trajectory, turns)
        length = len(trajectory.tokens)
    if last is not None and trajectory is not None:
        last.append(trajectory)
    return min(totals), min(system), length


async def library_runs(repeats: int, workloads: list[tuple[str, int, int]]) -> dict[str, tuple[float, float, int]]:
    tokenizer = load_tokenizer(TOKENIZER)
    renderer, parser, engine = ChatRenderer(tokenizer), get_parser("hermes"), in_process_engine(tokenizer)
    return {
        label: await measure(in_process_episode(engine, renderer, parser, turns, words), turns, repeats)
        for label, turns, words in workloads
    }


async def engine_wire_runs(repeats: int, workloads: list[tuple[str, int, int]]) -> dict[str, tuple[float, float, int]]:
    """The SGLang double over HTTP (child process), the environment in process."""
    from openreward_rl.engines.sglang import SGLangEngine

    tokenizer = load_tokenizer(TOKENIZER)
    renderer, parser = ChatRenderer(tokenizer), get_parser("hermes")
    results = {}
    with SGLangDoubleProcess() as double:
        engine = SGLangEngine(double.url)
        try:
            for label, turns, words in workloads:
                results[label] = await measure(
                    in_process_episode(engine, renderer, parser, turns, words), turns, repeats
                )
        finally:
            await engine.aclose()
    return results


async def wire_runs(repeats: int, workloads: list[tuple[str, int, int]]) -> dict[str, tuple[float, float, int]]:
    from openreward import AsyncOpenReward

    from openreward_rl import run_episode
    from openreward_rl.engines.sglang import SGLangEngine
    from openreward_rl.env.local_server import serve_environments

    tokenizer = load_tokenizer(TOKENIZER)
    renderer, parser = ChatRenderer(tokenizer), get_parser("hermes")
    results = {}
    with SGLangDoubleProcess() as double, serve_environments([CORRIDOR_SPEC], subprocess=True) as env_server:
        engine = SGLangEngine(double.url)
        client = AsyncOpenReward(api_key="local")
        try:
            for label, turns, words in workloads:
                task = corridor_task(turns, words, env_server.base_url)

                async def run_one(turns: int = turns, task: Any = task) -> Trajectory:
                    return await run_episode(
                        lambda: ToolEpisode(engine, renderer, parser, settings_for(turns)), client, task, attempts=1
                    )

                results[label] = await measure(run_one, turns, repeats)
        finally:
            await engine.aclose()
            await client.environments.aclose()
    return results


def table(title: str, results: dict[str, tuple[float, float, int]]) -> None:
    print(f"\n{title}")
    print(f"{'turns':>8} {'context tokens':>15} {'CPU ms/episode':>15} {'CPU ms/turn':>12} {'of which kernel':>16}")
    for label, turns, _ in WORKLOADS:
        if label not in results:
            continue
        seconds, system, length = results[label]
        print(
            f"{label:>8} {length:>15} {seconds * 1000:>15.1f} {seconds * 1000 / turns:>12.2f} {system * 1000 / turns:>16.2f}"
        )
    if "10" in results and "50" in results:
        ratio = results["50"][0] / results["10"][0]
        print(f"cost(50 turns) / cost(10 turns) = {ratio:.2f}  (linear: 5.0; target <= 5.5)")


COMPACTION_TURNS = (50, 100, 200, 400)
COMPACTION_WINDOW = 4096


async def compaction_runs(repeats: int) -> None:
    """CPU per environment turn with and without compaction, library mode (see the module docstring)."""
    from openreward_rl.loop.context import SummarizeContext

    tokenizer = load_tokenizer(TOKENIZER)
    renderer, parser, engine = ChatRenderer(tokenizer), get_parser("hermes"), in_process_engine(tokenizer)
    policy = SummarizeContext(threshold=0.75, keep_recent_turns=1, summary_tokens=256)
    print(
        f"\nlibrary mode, 40-word replies; summarize in a {COMPACTION_WINDOW}-token window vs no policy in a 65,536-token one"
    )
    print(
        f"{'turns':>6} {'policy':>10} {'contexts':>9} {'last context':>13} {'CPU ms/turn':>12} {'incl. summary turns':>20}"
    )
    for turns in COMPACTION_TURNS:
        for name, settings in (
            (
                "summarize",
                EpisodeSettings(
                    max_turns=turns,
                    max_context_len=COMPACTION_WINDOW,
                    sampling_params=SAMPLING,
                    context_policy=policy,
                    max_compactions=10**6,
                ),
            ),
            ("none", settings_for(turns) if turns * 170 < 65536 else None),
        ):
            if settings is None:
                continue
            last: list[Trajectory] = []
            seconds, _, length = await measure(
                in_process_episode(engine, renderer, parser, turns, 40, settings), turns, repeats, last
            )
            trajectory = last[0]
            print(
                f"{turns:>6} {name:>10} {len(trajectory.segments):>9} {length:>13} {seconds * 1000 / turns:>12.2f} {len(trajectory.turns):>20}"
            )


def profile(turns: int, repeats: int) -> None:
    """pyinstrument over `repeats` library-mode episodes of `turns` turns (after a warm-up episode)."""
    from pyinstrument import Profiler

    words = next((w for label, t, w in WORKLOADS if t == turns), 40)
    tokenizer = load_tokenizer(TOKENIZER)
    run_one = in_process_episode(
        in_process_engine(tokenizer), ChatRenderer(tokenizer), get_parser("hermes"), turns, words
    )

    async def episodes(count: int) -> None:
        for _ in range(count):
            check(await run_one(), turns)

    asyncio.run(episodes(1))
    profiler = Profiler(interval=0.0001)
    profiler.start()
    asyncio.run(episodes(repeats))
    profiler.stop()
    print(profiler.output_text(unicode=False, color=False, show_all=True, timeline=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["library", "engine-wire", "wire", "all"], default="all")
    parser.add_argument(
        "--repeats", type=int, default=5, help="measured episodes per workload (the least CPU is reported)"
    )
    parser.add_argument(
        "--profile", type=int, metavar="TURNS", help="profile the library mode at this many turns and exit"
    )
    parser.add_argument(
        "--compaction", action="store_true", help="CPU per turn past the context window (library mode) and exit"
    )
    args = parser.parse_args()
    if args.compaction:
        print(f"machine: {machine()}")
        asyncio.run(compaction_runs(args.repeats))
        return
    if args.profile:
        profile(args.profile, args.repeats)
        return
    print(f"machine: {machine()}")
    if args.mode in ("library", "all"):
        table("library (in-process transports): this process's CPU", asyncio.run(library_runs(args.repeats, WORKLOADS)))
    if args.mode in ("engine-wire", "all"):
        table(
            "engine-wire (HTTP to the SGLang double in a child process; environment in process): this process's CPU",
            asyncio.run(engine_wire_runs(args.repeats, WORKLOADS)),
        )
    if args.mode in ("wire", "all"):
        table(
            "wire (HTTP to the SGLang double and the SDK env server, both in child processes): this process's CPU",
            asyncio.run(wire_runs(args.repeats, WORKLOADS)),
        )


if __name__ == "__main__":
    main()

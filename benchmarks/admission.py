"""Episodes in flight: static limits against the adaptive `AdmissionController`, on the SGLang double's KV cache.

The SGLang double (`SGLangTestServer` with a `KVCacheModel`, in a child process) plays one engine with a
KV-cache pool of `--kv-tokens` tokens, SGLang's prefix (radix) cache in it and SGLang's scheduler over it:
a request prefills only what is not cached, the least recently used cached histories are evicted when the
pool fills (the episode's next turn then prefills its whole history again), requests queue when the pool
is full, are admitted with SGLang's reservation of their `max_new_tokens`, retracted and prefilled again
when decoding overflows the pool, and each scheduler step takes time (`--step-ms` plus `--kv-token-us` per
token of KV in the batch, `--prefill-token-us` per token prefilled). `--engines N` runs N such doubles,
each episode kept on one (as the router's routing key keeps it), their loads summed as the router's
`/workers` poll sums them. The episodes are `ToolEpisode`s of the scripted Corridor walk
(benchmarks/common.py: `--turns` model turns of about 90 tokens each, replies of `--reply-words` words)
over HTTP to the doubles through `SGLangEngine`s; each episode samples its own words (unless
`--same-samples`), so episodes share only their prompt in the prefix cache. The environment answers in
process after `--tool-ms` per tool call, the time a real tool takes, during which an episode holds no
request in the engine.

Each setting runs the same `--episodes` episodes and keeps at most its limit in flight: a fixed
number (an `asyncio.Semaphore`, what a static `--sglang-server-concurrency` does) or `auto` (the
controller polling the double's `/v1/loads` every `--poll-s`, between `--floor` and `--ceiling`).
Printed per setting: wall seconds, episodes/s, generated tokens/s, episodes aborted (must be 0) or not
completed, the mean of the engine's running and waiting requests and KV-cache usage (sampled every
0.25 s from `/v1/loads`), and for `auto` the limit it reached. Then the adaptive run over the best
static one.

    PYTHONPATH=src python benchmarks/admission.py [--static 8 16 32 64 128 256] [--episodes 192] [--engines 1]
        [--turns 4] [--reply-words 60]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import TOKENIZER, InProcessSdkSession, SGLangDoubleProcess, corridor_task, machine  # noqa: E402

from openreward_rl import ChatRenderer, EpisodeSettings, StopReason, ToolEpisode, Trajectory  # noqa: E402
from openreward_rl.assets import load_tokenizer  # noqa: E402
from openreward_rl.engines.admission import AdmissionController, EngineLoad, SGLangLoads  # noqa: E402
from openreward_rl.env.environment import EnvSession  # noqa: E402
from openreward_rl.parsers import get_parser  # noqa: E402


class SlowTools(InProcessSdkSession):
    """Corridor's tool, answering after `tool_s` seconds."""

    def __init__(self, turns: int, reply_words: int, tool_s: float) -> None:
        super().__init__(turns, reply_words)
        self.tool_s = tool_s

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        await asyncio.sleep(self.tool_s)
        return await super().call_tool(name, arguments)


@attrs.define
class Result:
    setting: str
    results: list[Trajectory | BaseException]
    wall: float
    running: float
    waiting: float
    usage: float
    limit: int | None = None

    @property
    def tokens(self) -> int:
        return sum(len(turn.sampled_ids) for r in self.results if isinstance(r, Trajectory) for turn in r.turns)

    @property
    def aborted(self) -> int:
        return sum(isinstance(r, Trajectory) and r.stop_reason is StopReason.ABORTED for r in self.results)

    @property
    def not_completed(self) -> int:
        return sum(not isinstance(r, Trajectory) or r.stop_reason is not StopReason.COMPLETED for r in self.results)

    @property
    def episodes_per_s(self) -> float:
        return len(self.results) / self.wall

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall


class AllEngines:
    """The engines' loads summed, as a router over them reports: one `SGLangLoads` per engine."""

    def __init__(self, urls: list[str]) -> None:
        self.readers = [SGLangLoads(url) for url in urls]

    async def __call__(self) -> EngineLoad | None:
        loads = await asyncio.gather(*(reader() for reader in self.readers))
        if any(load is None for load in loads):
            return None
        return EngineLoad(
            sum(load.running for load in loads if load),
            sum(load.waiting for load in loads if load),
            sum(load.used_tokens for load in loads if load),
            sum(load.total_tokens for load in loads if load),
        )

    async def aclose(self) -> None:
        for reader in self.readers:
            await reader.aclose()


async def sample_load(loads: AllEngines, into: list[tuple[int, int, float]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        load = await loads()
        if load is not None:
            into.append((load.running, load.waiting, load.token_usage))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)


async def run_setting(
    setting: str,
    gate: Callable[[], contextlib.AbstractAsyncContextManager[None]],
    episode: Callable[[int], Any],
    count: int,
    urls: list[str],
) -> Result:
    samples: list[tuple[int, int, float]] = []
    stop = asyncio.Event()
    loads = AllEngines(urls)
    sampler = asyncio.create_task(sample_load(loads, samples, stop))

    async def one(i: int) -> Trajectory:
        async with gate():
            return await episode(i)

    started = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(count)), return_exceptions=True)
    wall = time.perf_counter() - started
    stop.set()
    await sampler
    await loads.aclose()
    mean = (lambda k: statistics.fmean(s[k] for s in samples)) if samples else (lambda k: float("nan"))
    return Result(setting, list(results), wall, mean(0), mean(1), mean(2))


HEADER = f"{'in flight':>10} {'wall s':>7} {'episodes/s':>10} {'tokens/s':>9} {'aborted':>7} {'not done':>8} {'running':>8} {'waiting':>8} {'KV usage':>8}"


def report(result: Result) -> None:
    name = result.setting if result.limit is None else f"{result.setting} ({result.limit})"
    print(
        f"{name:>10} {result.wall:>7.1f} {result.episodes_per_s:>10.2f} {result.tokens_per_s:>9.0f} {result.aborted:>7} {result.not_completed:>8}"
        f" {result.running:>8.1f} {result.waiting:>8.1f} {result.usage:>8.2f}",
        flush=True,
    )


async def run(args: argparse.Namespace, urls: list[str]) -> list[Result]:
    from openreward_rl.engines.sglang import SGLangEngine

    tokenizer = load_tokenizer(TOKENIZER)
    renderer, parser = ChatRenderer(tokenizer), get_parser("hermes")
    settings = EpisodeSettings(
        max_turns=args.turns,
        max_context_len=args.context,
        sampling_params={"temperature": 1.0, "max_new_tokens": args.max_new_tokens},
    )
    engines = [SGLangEngine(url) for url in urls]
    task = corridor_task(args.turns, args.reply_words)
    run_id = 0

    async def episode(i: int) -> Trajectory:
        session = EnvSession(sdk_session=SlowTools(args.turns, args.reply_words, args.tool_ms / 1000), task=task)
        engine = engines[i % len(engines)]  # sticky per episode, as the router's routing key keeps it
        return await ToolEpisode(engine, renderer, parser, settings, routing_key=f"r{run_id}e{i}").run(session)

    measured: list[Result] = []
    try:
        await episode(-1)  # warm-up: template compile, connection pool
        for level in args.static:
            run_id += 1
            semaphore = asyncio.Semaphore(level)

            @contextlib.asynccontextmanager
            async def static_gate(semaphore: asyncio.Semaphore = semaphore) -> AsyncIterator[None]:
                async with semaphore:
                    yield

            measured.append(await run_setting(str(level), static_gate, episode, args.episodes, urls))
            report(measured[-1])
        run_id += 1
        reader = AllEngines(urls)
        started = time.perf_counter()

        async def read_load() -> Any:
            load = await reader()
            if args.trace and load is not None:
                print(
                    f"  t={time.perf_counter() - started:6.1f}s limit {controller.limit:>4} in flight {controller.in_flight:>4} waiting for a slot {controller.queued:>4}"
                    f" | engine running {load.running:>3} waiting {load.waiting:>4} KV {load.token_usage:.2f}",
                    flush=True,
                )
            return load

        controller = AdmissionController(read_load, floor=args.floor, ceiling=args.ceiling, interval_s=args.poll_s)
        adaptive = await run_setting("auto", controller.admitted, episode, args.episodes, urls)
        adaptive.limit = controller.limit
        await controller.aclose()
        await reader.aclose()
        measured.append(adaptive)
        report(adaptive)
    finally:
        for engine in engines:
            await engine.aclose()
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--static", type=int, nargs="*", default=[8, 16, 32, 64, 128, 256], help="static limits, run in turn"
    )
    parser.add_argument("--episodes", type=int, default=192, help="episodes per setting")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--reply-words", type=int, default=60)
    parser.add_argument("--tool-ms", type=float, default=500.0, help="milliseconds each tool call takes")
    parser.add_argument("--max-new-tokens", type=int, default=1024, help="per model call (what SGLang reserves from)")
    parser.add_argument("--context", type=int, default=8192, help="tokens per episode")
    parser.add_argument(
        "--kv-tokens", type=int, default=24576, help="the engine's KV-cache pool (max_total_num_tokens)"
    )
    parser.add_argument("--step-ms", type=float, default=15.0, help="fixed cost of a scheduler step")
    parser.add_argument(
        "--kv-token-us", type=float, default=0.5, help="decode cost per token of KV in the batch (microseconds)"
    )
    parser.add_argument("--prefill-token-us", type=float, default=20.0, help="prefill cost per token (microseconds)")
    parser.add_argument("--engines", type=int, default=1, help="SGLang doubles, each episode kept on one")
    parser.add_argument(
        "--same-samples",
        action="store_true",
        help="every episode samples the same words (they then share their whole history in the prefix cache)",
    )
    parser.add_argument("--floor", type=int, default=8)
    parser.add_argument("--ceiling", type=int, default=512)
    parser.add_argument("--poll-s", type=float, default=0.5, help="the controller's poll interval")
    parser.add_argument(
        "--trace", action="store_true", help="print the controller's limit and the engine's load at every poll"
    )
    args = parser.parse_args()
    kv = {
        "max_total_tokens": args.kv_tokens,
        "step_s": args.step_ms / 1000,
        "kv_token_s": args.kv_token_us / 1e6,
        "prefill_token_s": args.prefill_token_us / 1e6,
    }
    print(f"machine: {machine()}")
    print(
        f"{args.episodes} episodes per setting, {args.turns} turns, replies of {args.reply_words} words, tools {args.tool_ms:g} ms;"
        f" {args.engines} engine(s) of {args.kv_tokens} KV tokens, step {args.step_ms:g} ms"
        f" + {args.kv_token_us:g} us/KV token, prefill {args.prefill_token_us:g} us/token; max_new_tokens {args.max_new_tokens}"
    )
    print(HEADER)
    with contextlib.ExitStack() as doubles:
        urls = [
            doubles.enter_context(
                SGLangDoubleProcess(context_len=args.context, kv_cache=kv, distinct=not args.same_samples)
            ).url
            for _ in range(args.engines)
        ]
        results = asyncio.run(run(args, urls))
    static = [r for r in results if r.setting != "auto"]
    adaptive = next(r for r in results if r.setting == "auto")
    if static:
        best = max(static, key=lambda r: r.episodes_per_s)
        print(
            f"auto / best static ({best.setting}): episodes/s {adaptive.episodes_per_s / best.episodes_per_s:.2f}, tokens/s {adaptive.tokens_per_s / best.tokens_per_s:.2f}"
        )
    print(f"aborted episodes in all settings: {sum(r.aborted for r in results)}")


if __name__ == "__main__":
    main()

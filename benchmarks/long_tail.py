"""Rollout-step wall time on a long-tailed multi-turn workload, with and without partial rollout.

What runs: Slime's rollout driver as tests/doubles/slime_rollout_double.py reproduces it (written from
THUDM/slime: `generate_rollout_async`, `abort`, the data buffer, the background loop thread) calling
this library's hooks (`openreward_rl.backends.slime.generate` / `.reward`) for `Corridor` episodes on
the SDK's environment `Server` (a child process on 127.0.0.1), against `SGLangTestServer` (the SGLang
wire double, in this process) with a fixed latency per model call, so that an episode's wall time
grows with its number of turns as on a real server. Episode lengths are drawn from a Pareto
distribution (seeded; `--alpha`, `--min-turns`, capped at `--max-turns`): most episodes take a few
turns, a few take tens.

Two modes over the same prompt sequence, each for `--steps` rollout steps of `--batch` groups (one
sample per group):

- sync: `--over-sampling-batch-size` = batch, no partial rollout: a step ends when its slowest
  episode ends;
- partial: `--partial-rollout --over-sampling-batch-size 2×batch` (what `openreward-rl train
  --rollout-mode partial` passes): a step ends when `batch` groups have finished; the rest are
  aborted, suspended with their environment sessions open, and resumed in later steps.

Printed: each step's wall time and its trained episodes' turns, the mean step time of each mode, the
ratio sync/partial, trained turns per second (partial rollout trains short episodes first; the
long ones finish in later steps, so turns per second is the fairer throughput figure), and how many
episodes of 10 turns or more were trained (within the run, partial rollout still holds the longest
ones: they advance a few turns per step). Partial rollout runs up to 2×batch episodes at once (its
over-sampling); the sync mode runs `batch`.

    PYTHONPATH=src python benchmarks/long_tail.py [--steps 8] [--batch 8] [--latency 0.1] [--alpha 1.2]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS))
sys.path.insert(0, str(BENCHMARKS.parent / "tests"))  # the Slime driver and Sample doubles

from common import CORRIDOR_SPEC, TOKENIZER, corridor_task, machine, model_turn_ids, write_corridor_config  # noqa: E402

REPLY_WORDS = 20
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 256, "no_stop_trim": True}


def episode_lengths(count: int, alpha: float, min_turns: int, max_turns: int, seed: int) -> list[int]:
    """`count` Pareto(alpha)-distributed turn counts, at least `min_turns`, at most `max_turns`."""
    rng = random.Random(seed)
    return [min(max_turns, int(min_turns * rng.paretovariate(alpha))) for _ in range(count)]


class CorridorModel:
    """The scripted model: turn k of any episode samples `model_turn_ids(k)` (a thought and one `step` call).

    The turn index is read from the context (one `<|im_start|>assistant` per turn), and a context that
    already ends with part of the turn (a resumed, partly sampled turn) gets the rest of it.
    """

    def __init__(self, tokenizer: Any, latency_s: float) -> None:
        from openreward_rl.testing import ScriptedCompletion

        self.completion = ScriptedCompletion
        self.latency_s = latency_s
        self.marker = tuple(tokenizer.convert_tokens_to_ids(["<|im_start|>", "assistant"]))
        self.turns = [model_turn_ids(tokenizer, k) for k in range(64)]

    def __call__(self, request: Any) -> Any:
        ids = request.input_ids or []
        turn = sum(1 for i in range(len(ids) - 1) if (ids[i], ids[i + 1]) == self.marker) - 1
        plan = self.turns[turn % len(self.turns)]
        done = max(m for m in range(len(plan) + 1) if m == 0 or tuple(ids[-m:]) == plan[:m])
        return self.completion(ids=plan[done:], latency_s=self.latency_s)


def slime_args(port: int, batch: int, partial: bool) -> SimpleNamespace:
    return SimpleNamespace(
        sglang_router_ip="127.0.0.1",
        sglang_router_port=port,
        hf_checkpoint=TOKENIZER,
        rollout_max_context_len=65536,
        eval_max_context_len=None,
        rollout_max_response_len=256,
        partial_rollout=partial,
        mask_offpolicy_in_partial_rollout=False,
        group_rm=False,
        rollout_top_p=1.0,
        reward_key=None,
        rollout_batch_size=batch,
        over_sampling_batch_size=2 * batch if partial else batch,
        n_samples_per_prompt=1,
        custom_generate_function_path="openreward_rl.backends.slime.generate",
        custom_rm_path="openreward_rl.backends.slime.reward",
        sampling_params=SAMPLING,
    )


def run_mode(
    name: str, loop_thread: Any, server: Any, lengths: list[int], env_url: str, steps: int, batch: int
) -> dict[str, Any]:
    from doubles import slime_double
    from doubles import slime_rollout_double as slime_rollout
    from openreward_rl.backends._sample import suspended as _suspended

    def prompt(index: int) -> Any:
        return slime_double.task_sample(corridor_task(lengths[index], REPLY_WORDS, base_url=env_url))

    args = slime_args(server.port, batch, partial=name == "partial")
    slime_rollout.GenerateState.clear_instances()
    source = slime_rollout.RolloutDataSourceWithBuffer(args, prompt)
    abort_servers = slime_rollout.aborter(server)
    rows = []
    for rollout_id in range(steps):
        started = time.perf_counter()
        groups = slime_rollout.generate_rollout(loop_thread, args, rollout_id, source, abort_servers)
        seconds = time.perf_counter() - started
        trained = [g[0] for g in groups]
        for sample in trained:
            if sample.status is not slime_double.Sample.Status.COMPLETED or sample.reward != 1.0:
                raise RuntimeError(
                    f"{name}: an episode did not complete: {sample.status} {sample.metadata.get('stop_detail')}"
                )
        turns = [int(s.metadata["metrics"]["turns"]) for s in trained]
        rows.append(
            {
                "seconds": seconds,
                "turns": turns,
                "resumed": sum(1 for s in trained if s.metadata["metrics"].get("suspensions")),
            }
        )
        print(
            f"  {name:>7} step {rollout_id}: {seconds:6.2f} s, trained turns {sorted(turns)}, resumed {rows[-1]['resumed']}, buffered {len(source.buffer)}",
            flush=True,
        )
    store = _suspended.reset_store()
    if store is not None:
        loop_thread.run(store.aclose())
    return {"steps": rows, "prompts": source.offset}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8, help="rollout_batch_size (groups of one sample)")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per model call on the SGLang double")
    parser.add_argument("--alpha", type=float, default=1.2, help="Pareto shape of the episode lengths")
    parser.add_argument("--min-turns", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")

    from doubles import slime_rollout_double as slime_rollout
    from openreward_rl.assets import load_tokenizer
    from openreward_rl.backends._sample import state as _state
    from openreward_rl.env.local_server import serve_environments
    from openreward_rl.testing import SGLangTestServer

    lengths = episode_lengths(
        options.steps * options.batch * 3, options.alpha, options.min_turns, options.max_turns, options.seed
    )
    print(f"machine: {machine()}")
    print(
        f"workload: {options.steps} steps × {options.batch} episodes; turns ~ min({options.max_turns}, int({options.min_turns}·Pareto({options.alpha}))), "
        f"seed {options.seed}; {options.latency} s per model call"
    )
    sync_lengths = lengths[: options.steps * options.batch]
    print(
        f"  the sync run's episodes: mean {sum(sync_lengths) / len(sync_lengths):.1f} turns, max {max(sync_lengths)}, ≥10 turns: {sum(t >= 10 for t in sync_lengths)} of {len(sync_lengths)}"
    )

    sys.modules[slime_rollout.MODULE_NAME] = slime_rollout  # where the hook reads Slime's abort flag
    tokenizer = load_tokenizer(TOKENIZER)
    loop_thread = slime_rollout.AsyncLoopThread()
    results = {}
    with tempfile.TemporaryDirectory() as directory, serve_environments([CORRIDOR_SPEC], subprocess=True) as env_server:
        os.environ["OPENREWARD_RL_CONFIG"] = str(
            write_corridor_config(Path(directory), env_server.base_url, max_turns=options.max_turns + 5)
        )
        server = loop_thread.run(
            SGLangTestServer(
                tokenizer, CorridorModel(tokenizer, options.latency), context_len=65536, record=False
            ).start()
        )
        try:
            for name in ("sync", "partial"):
                results[name] = run_mode(
                    name, loop_thread, server, lengths, env_server.base_url, options.steps, options.batch
                )
        finally:
            loop_thread.run(server.close())
            loop_thread.run(_state.close_states())
            loop_thread.stop()

    print()
    print(
        f"{'mode':>8} {'mean step s':>12} {'min':>6} {'max':>6} {'trained turns/s':>16} {'trained ≥10 turns':>18} {'prompts started':>16}"
    )
    means = {}
    for name, result in results.items():
        seconds = [r["seconds"] for r in result["steps"]]
        turns = sum(sum(r["turns"]) for r in result["steps"])
        means[name] = sum(seconds) / len(seconds)
        rate = turns / sum(seconds)
        long = sum(1 for r in result["steps"] for t in r["turns"] if t >= 10)
        print(
            f"{name:>8} {means[name]:>12.2f} {min(seconds):>6.2f} {max(seconds):>6.2f} {rate:>16.1f} {long:>18} {result['prompts']:>16}"
        )
        means[name + "_rate"] = rate
    print(
        f"\nstep-time ratio sync/partial: {means['sync'] / means['partial']:.2f}×; trained turns/s ratio partial/sync: {means['partial_rate'] / means['sync_rate']:.2f}×"
    )
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()

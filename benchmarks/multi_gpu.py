"""`train --framework trl` on N GPUs against one: seconds per step and the reward curve, in one call.

Three runs of the same environment, model, seed and settings, one after another, each `--warmup` + `--steps` GRPO
steps through `TrlSession` (what `train --framework trl` runs; the N-process run under `accelerate launch`):

- `1 GPU, B`: one process at `--tasks` B tasks x `--n` samples per step;
- `N GPUs, N*B`: `--processes` N processes (`accelerate launch --multi_gpu`) at N*B tasks per step, B per process;
- `1 GPU, N*B`: one process at N*B tasks per step, the N-GPU run's global batch.

Prints each run's seconds per timed step and the ratio `N GPUs, N*B` / `1 GPU, B` (a step of N times the work on N
GPUs: 1.0 is perfect scaling), then the reward of every step of `1 GPU, N*B` beside `N GPUs, N*B` (same global batch,
same seed: the curves should agree within noise). `--json FILE` writes every figure.

Timing at a model's size, random weights (`--model` a folder with config.json and tokenizer files; seeded, so every
run and process starts from the same weights; every reply runs to `--max-new-tokens`, the reward stays 0):

    python benchmarks/multi_gpu.py --model SHAPE_DIR --random-weights --processes 2 --tasks 8 --n 8 \\
        --max-new-tokens 128 --bf16 --steps 3

The reward curve, on a model that learns (SmolLM2-135M-Instruct on PaintColour):

    python benchmarks/multi_gpu.py --model offline:smollm2 --processes 2 --tasks 4 --n 8 --steps 20 --bf16

`--device cpu` runs the same on this machine's CPU (gloo; each "GPU" of the table is then a process), e.g. to check
the script with a tiny model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "OPENREWARD_DISABLE_UPDATE_CHECK": "1",
    "OPENREWARD_LOG_LEVEL": "WARNING",
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "WANDB_MODE": "disabled",
}.items():
    os.environ.setdefault(_key, _value)
for _key in ("NO_PROXY", "no_proxy"):
    os.environ[_key] = ",".join(
        dict.fromkeys([e for e in os.environ.get(_key, "").split(",") if e] + ["127.0.0.1", "localhost"])
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(REPO / "examples" / "train_quickstart_config.yaml"))
    parser.add_argument(
        "--serve", default=f"{REPO / 'examples' / 'environments' / 'paint.py'}:PaintColour", metavar="FILE.py:Class"
    )
    parser.add_argument("--model", default="offline:smollm2")
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="--model is a folder with config.json and tokenizer files only: random weights of that shape (seeded)",
    )
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--bf16", action="store_true", help="train under bf16 autocast (GPU)")
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help="N: processes (GPUs) of the multi-process run (default: every GPU, at least 2)",
    )
    parser.add_argument(
        "--tasks", type=int, default=4, help="B: tasks per step of the one-GPU run, and per process of the N-GPU run"
    )
    parser.add_argument("--n", type=int, default=8, help="samples per task (GRPO group)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first (counted in the reward curve)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps")
    parser.add_argument("--json", default=None, metavar="FILE", help="write every figure here")
    parser.add_argument(
        "--worker", default=None, metavar="FILE", help=argparse.SUPPRESS
    )  # one run, in this process (or each launched one); its figures to FILE
    return parser.parse_args(argv)


def fresh_model(options: Any, random_weights: bool) -> tuple[Any, Any]:
    """The model on this process's device: loaded, or random weights of `options.model`'s shape seeded by `options.seed`."""
    import torch

    from openreward_rl.engines.transformers import load_model

    if not random_weights:
        return load_model(options.model, device=options.resolved_device, dtype="float32")
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(options.seed)
    with torch.device(options.resolved_device):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(options.model), dtype=torch.float32)
    return model, AutoTokenizer.from_pretrained(options.model)


def work(args: argparse.Namespace) -> None:
    """One run in this process: train, time each step (from its start to its optimizer step), keep each step's reward;
    the main process writes `--worker`'s file."""
    import torch
    from transformers import TrainerCallback

    from openreward_rl.backends.trl import TrlOptions, TrlSession, quiet_trainer
    from openreward_rl.config import load_config
    from openreward_rl.env.local_server import load_environment_class

    cuda = args.device == "cuda"
    steps: list[dict[str, Any]] = []

    class Record(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            torch.cuda.synchronize() if cuda else None
            self.started = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            torch.cuda.synchronize() if cuda else None
            steps.append({"seconds": time.perf_counter() - self.started})

        def on_log(self, args_: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
            if logs and "reward" in logs and steps:
                episodes = sum(
                    value for key, value in logs.items() if key.startswith("openreward/") and key.endswith("/episodes")
                )
                steps[-1].update(reward=logs["reward"], episodes=episodes)

    with tempfile.TemporaryDirectory() as output_dir:
        options = TrlOptions(
            model=args.model,
            device=args.device,
            bf16=args.bf16,
            max_steps=args.warmup + args.steps,
            prompts_per_step=args.tasks,
            n_samples=args.n,
            lr=args.lr,
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            save_interval=0,
            seed=args.seed,
            output_dir=output_dir,
            max_untrained_steps=0,
            max_failed_steps=0,
        )
        options.ranks.start(options.resolved_device)  # before the model: NCCL binds this process to its GPU
        model, tokenizer = fresh_model(options, args.random_weights)
        with TrlSession.open(
            load_config(args.config),
            options,
            serve=[load_environment_class(args.serve)],
            model=model,
            tokenizer=tokenizer,
        ) as session:
            if len(session.train_tasks) < args.tasks:  # TRL would form no batch and train no step
                raise SystemExit(f"--tasks {args.tasks}: the split has only {len(session.train_tasks)} tasks")
            trainer = session.trainer(callbacks=[Record()])
            quiet_trainer(trainer)
            trainer.train()
        peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
        peaks = options.ranks.gather([peak])
        if options.ranks.main:
            Path(args.worker).write_text(
                json.dumps(
                    {"processes": options.ranks.count, "tasks": args.tasks, "steps": steps, "peak_gpu_gib": peaks}
                )
            )


def launch(args: argparse.Namespace, processes: int, tasks: int, figures: Path) -> dict[str, Any]:
    """One run as its own command (`accelerate launch` for several processes), its figures read back."""
    shared = (
        "config",
        "serve",
        "model",
        "device",
        "n",
        "max_new_tokens",
        "lr",
        "temperature",
        "seed",
        "warmup",
        "steps",
    )
    run = [
        *(item for name in shared for item in (f"--{name.replace('_', '-')}", str(getattr(args, name)))),
        "--tasks",
        str(tasks),
        "--worker",
        str(figures),
    ]
    run += ["--random-weights"] * args.random_weights + ["--bf16"] * args.bf16
    if processes == 1:
        command = [sys.executable, __file__, *run]
    else:
        command = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(processes),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            __file__,
            *run,
        ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    if processes == 1 and args.device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    print(f"$ {' '.join(command)}", flush=True)
    started = time.monotonic()
    subprocess.run(command, env=env, check=True)
    result = json.loads(figures.read_text())
    result["wall_s"] = time.monotonic() - started
    return result


def seconds_per_step(result: dict[str, Any], warmup: int) -> float:
    return statistics.mean(step["seconds"] for step in result["steps"][warmup:])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        work(args)
        return
    processes = args.processes
    if processes is None:
        import torch

        processes = max(torch.cuda.device_count(), 2) if args.device == "cuda" else 2
    plan = {
        "1 GPU, B": (1, args.tasks),
        f"{processes} GPUs, {processes}*B": (processes, processes * args.tasks),
        f"1 GPU, {processes}*B": (1, processes * args.tasks),
    }
    with tempfile.TemporaryDirectory() as scratch:
        runs = {
            name: launch(args, n, tasks, Path(scratch) / f"run{i}.json")
            for i, (name, (n, tasks)) in enumerate(plan.items())
        }
    one, many, one_global = runs.values()
    print(
        f"\n{args.model}{' (random weights)' if args.random_weights else ''}, {args.device}, bf16 {args.bf16}; B = {args.tasks} tasks x {args.n} samples, "
        f"<= {args.max_new_tokens} tokens a reply, seed {args.seed}; {args.warmup} warm-up + {args.steps} timed steps\n"
    )
    print(f"{'run':<20} {'episodes/step':>13} {'s/step':>8} {'peak GiB (per process)':>24}")
    for name, result in runs.items():
        episodes = result["steps"][-1].get("episodes", float("nan"))
        peaks = ", ".join(f"{p:.1f}" for p in result["peak_gpu_gib"] if p is not None) or "-"
        print(f"{name:<20} {episodes:>13.0f} {seconds_per_step(result, args.warmup):>8.2f} {peaks:>24}")
    ratio = seconds_per_step(many, args.warmup) / seconds_per_step(one, args.warmup)
    print(f"\n{processes} GPUs at {processes}*B / 1 GPU at B: {ratio:.2f}x the seconds per step (1.0: perfect scaling)")
    print(f"\nreward per step, global batch {processes}*B = {processes * args.tasks} tasks x {args.n}:")
    print(f"{'step':>4} {'1 GPU':>8} {f'{processes} GPUs':>8}")
    for index, (a, b) in enumerate(zip(one_global["steps"], many["steps"], strict=False), start=1):
        print(f"{index:>4} {a.get('reward', float('nan')):>8.3f} {b.get('reward', float('nan')):>8.3f}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "processes": processes, "ratio": ratio, "runs": runs}, indent=2)
        )


if __name__ == "__main__":
    main()

"""`openreward-rl sft`: a warm start by supervised fine-tuning on whole episodes (TRL's `SFTTrainer`).

    openreward-rl sft --config examples/train_tool_agent_config.yaml \\
        --serve examples/environments/paint_order.py:PaintOrder --model offline:smollm2 --device cpu \\
        --teacher examples/paint_order_teacher.py:teacher --eval-split test --output-dir runs/warm
    openreward-rl train --framework trl --model runs/warm ...     # RL from the warm start

The episodes come from a scripted `--teacher FILE.py:function` (run on the training tasks, each turn
written in the student model's own format by `engines.teacher`), or from `--from-results FILE.jsonl`
(`openreward-rl eval --output`: a hosted teacher's episodes, or the model's own, kept by reward:
rejection sampling); both together are fine. Episodes with reward >= `--min-reward` are kept; the
loss covers the tokens the policy produced, never prompts, tool output or bridge tokens
(`backends.trl.sft`). `--eval-split` evaluates the model on that split before and after, as
`train --framework trl` does. The fine-tuned model and tokenizer are saved to `--output-dir`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="train_config.yaml: the environments and the episode settings")
    parser.add_argument("--model", required=True, help="the student: hub name, local path or offline:smollm2")
    parser.add_argument("--serve", action="append", default=[], metavar="FILE.py:Class", help="serve this environment class on 127.0.0.1 (repeatable)")
    parser.add_argument("--teacher", default=None, metavar="FILE.py:function", help="a scripted teacher: function(messages, tools) -> engines.teacher.TeacherTurn")
    parser.add_argument("--teacher-n", type=int, default=1, help="teacher episodes per training task (default 1)")
    parser.add_argument("--max-tasks", type=int, default=None, help="cap on the training tasks the teacher plays (a lighter warm start)")
    parser.add_argument("--from-results", action="append", default=[], metavar="FILE.jsonl", help="recorded episodes (openreward-rl eval --output) of this model's tokenizer (repeatable)")
    parser.add_argument("--min-reward", type=float, default=1.0, help="keep episodes rewarded at least this (default 1.0)")
    parser.add_argument("--epochs", type=float, default=2.0, help="passes over the kept episodes (default 2)")
    parser.add_argument("--lr", type=float, default=5e-5, help="learning rate (default 5e-5, constant)")
    parser.add_argument("--batch-size", type=int, default=8, help="episode contexts per optimizer step (default 8)")
    parser.add_argument("--output-dir", default="sft_output", help="where the fine-tuned model is saved (default ./sft_output)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--bf16", action="store_true", help="train under bf16 autocast (GPU)")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True,
                        help="recompute activations in the backward pass: far less memory, a slower step (default on; --no-gradient-checkpointing: off)")
    parser.add_argument("--max-response-len", type=int, default=256, help="tokens per model call in evaluations (default 256)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature in evaluations (default 1.0)")
    parser.add_argument("--eval-split", default=None, help="evaluate this split before and after (e.g. test)")
    parser.add_argument("--eval-n", type=int, default=2, help="episodes per evaluation task (default 2)")
    parser.add_argument("--eval-max-tasks", type=int, default=None, help="cap on evaluation tasks per environment")
    parser.add_argument("--family", default=None, help="model family, overriding the config's model_family (docs/families.md)")
    parser.add_argument("--seed", type=int, default=0, help="training seed and task shuffle seed (default 0)")


def _check(args: argparse.Namespace) -> None:
    if not args.teacher and not args.from_results:
        raise ValueError("give the episodes to learn from: --teacher FILE.py:function and/or --from-results FILE.jsonl")
    if args.teacher and ":" not in args.teacher:
        raise ValueError(f"--teacher {args.teacher!r} must look like path/to/file.py:function")
    for name in ("teacher_n", "batch_size", "eval_n", "max_response_len"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not args.epochs > 0 or not args.lr > 0:
        raise ValueError(f"--epochs and --lr must be positive, got {args.epochs:g} and {args.lr:g}")


def _teacher(spec: str) -> Any:
    from pathlib import Path

    from openreward_rl.env.local_server import import_file

    path, _, name = spec.rpartition(":")
    function = getattr(import_file(Path(path)), name, None)
    if not callable(function):
        raise ValueError(f"--teacher {spec}: {path} defines no function {name!r}")
    return function


def _recorded(paths: list[str], tokenizer: Any) -> list[Any]:
    from openreward_rl.observe.dumps import read_trajectories

    episodes = []
    for path in paths:
        episodes.extend(read_trajectories(path))
    vocabulary = len(tokenizer)
    for episode in episodes:
        for segment in episode.segments:
            if any(i >= vocabulary for i in segment.context()):
                raise ValueError(f"--from-results: an episode's ids are not this model's tokenizer's ({vocabulary} tokens); record them with this tokenizer")
    return episodes


def run(args: argparse.Namespace) -> int:
    from openreward_rl.backends.trl import TrlOptions, TrlSession, eval_stats, sft_rows, train_sft
    from openreward_rl.cli.train_trl import print_summary
    from openreward_rl.config import ConfigError, load_config
    from openreward_rl.engines.teacher import TeacherEngine
    from openreward_rl.env.local_server import load_environment_class

    def fail(message: str) -> int:
        print(f"openreward-rl sft: {message}", file=sys.stderr)
        return 2

    started = time.monotonic()
    try:
        _check(args)
        config = load_config(args.config)
        teacher = _teacher(args.teacher) if args.teacher else None
        classes = [load_environment_class(spec) for spec in args.serve]
        options = TrlOptions(
            model=args.model, output_dir=args.output_dir, device=args.device, bf16=args.bf16, max_new_tokens=args.max_response_len,
            temperature=args.temperature, seed=args.seed, family=args.family, save_interval=0, max_tasks=args.max_tasks,
        )  # fmt: skip
    except (ValueError, ConfigError) as error:
        return fail(str(error))
    from transformers import set_seed

    set_seed(args.seed)
    print(f"loading {args.model} on {options.resolved_device}", flush=True)
    try:
        with TrlSession.open(config, options, serve=classes) as session:
            eval_tasks = session.tasks_of(args.eval_split, args.eval_max_tasks) if args.eval_split else []
            before = eval_stats(session.evaluate(eval_tasks, args.eval_n)) if eval_tasks else None
            episodes = _recorded(args.from_results, session.tokenizer)
            if teacher is not None:
                tasks = [task for task in session.train_tasks for _ in range(args.teacher_n)]
                engine = TeacherEngine(session.adapter.rollouts.renderer, teacher)
                taught = session.adapter.run_episodes(tasks, engine=engine)
                print_summary("teacher", eval_stats(taught))
                episodes.extend(taught)
            rows = sft_rows(episodes, min_reward=args.min_reward)
            if not rows:
                return fail(f"no episode of {len(episodes)} was trainable with reward >= {args.min_reward:g}: nothing to fine-tune on")
            trained = sum(sum(row["assistant_masks"]) for row in rows)
            print(f"fine-tuning on {len(rows)} episode contexts of {len(episodes)} episodes ({trained} trained tokens), {args.epochs:g} epochs", flush=True)
            trainer = train_sft(session.model, session.tokenizer, rows, output_dir=args.output_dir, epochs=args.epochs, lr=args.lr,
                                batch_size=args.batch_size, seed=args.seed, bf16=args.bf16,
                                gradient_checkpointing=args.gradient_checkpointing)  # fmt: skip
            losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
            if losses:
                print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps", flush=True)
            session.model.save_pretrained(args.output_dir)
            session.tokenizer.save_pretrained(args.output_dir)
            print(f"model saved to {args.output_dir}", flush=True)
            if eval_tasks:
                after = eval_stats(session.evaluate(eval_tasks, args.eval_n))
                print_summary("before", before)
                print_summary("after", after)
    except (ValueError, ConfigError) as error:
        return fail(str(error))
    print(f"done in {time.monotonic() - started:.0f}s", flush=True)
    return 0

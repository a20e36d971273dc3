"""`openreward-rl sft`: a warm start by supervised fine-tuning on whole episodes (TRL's `SFTTrainer`).

    openreward-rl sft --config examples/train_tool_agent_config.yaml \\
        --serve examples/environments/paint_order.py:PaintOrder --model offline:smollm2 --device cpu \\
        --teacher examples/paint_order_teacher.py:teacher --eval-split test --output-dir runs/warm
    openreward-rl train --framework trl --model runs/warm ...     # RL from the warm start

The episodes come from a scripted `--teacher FILE.py:function` (run on the training tasks, each turn
written in the student model's own format by `engines.teacher`; a function taking a third argument gets
the task it plays, `TeacherTask`: its spec and prompt), or from `--from-results FILE.jsonl` (`openreward-rl
eval --output` of any model: another tokenizer's, a hosted model's through `--engine openai`, or the
student's own, kept by reward: rejection sampling); both together are fine. Recorded episodes rewarded
>= `--min-reward` are replayed against the environment, their turns (content, tool calls) re-written in
the student's own format and token ids as a teacher's are (`engines.teacher.Replay`); the files are checked
before any model or environment loads. Episodes (taught or replayed) with reward >= `--min-reward` are
kept; the loss covers the tokens the policy produced, never prompts, tool output or bridge tokens
(`backends.trl.sft`). `--eval-split` evaluates the model on that split before and after, as
`train --framework trl` does; without it the fine-tuned student plays a few training tasks. Either way
`sft` ends saying whether the student now calls tools (tool calls and parse errors per episode), and
what to try when it calls none. The fine-tuned model and tokenizer are saved to `--output-dir`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from openreward_rl.errors import ConfigError

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from openreward_rl.cli.train_trl import add_trainer_arguments

    parser.add_argument("--config", required=True, help="train_config.yaml: the environments and the episode settings")
    parser.add_argument("--model", required=True, help="the student: hub name, local path or offline:smollm2")
    parser.add_argument(
        "--serve",
        action="append",
        default=[],
        metavar="FILE.py:Class",
        help="serve this environment class on 127.0.0.1 (repeatable)",
    )
    parser.add_argument(
        "--teacher",
        default=None,
        metavar="FILE.py:function",
        help="a scripted teacher: function(messages, tools[, task: TeacherTask]) -> TeacherTurn (engines.teacher)",
    )
    parser.add_argument("--teacher-n", type=int, default=1, help="teacher episodes per training task (default 1)")
    parser.add_argument(
        "--max-tasks", type=int, default=None, help="cap on the training tasks the teacher plays (a lighter warm start)"
    )
    parser.add_argument(
        "--from-results",
        action="append",
        default=[],
        metavar="FILE.jsonl",
        help="episodes eval --output recorded (any model's), replayed in the student's format (repeatable)",
    )
    parser.add_argument(
        "--min-reward", type=float, default=1.0, help="keep episodes rewarded at least this (default 1.0)"
    )
    parser.add_argument("--epochs", type=float, default=2.0, help="passes over the kept episodes (default 2)")
    parser.add_argument("--lr", type=float, default=5e-5, help="learning rate (default 5e-5, constant)")
    parser.add_argument("--batch-size", type=int, default=8, help="episode contexts per optimizer step (default 8)")
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=2,
        metavar="N",
        help="episode contexts per forward and backward pass (the largest divisor of --batch-size at most N); their gradients "
        "accumulate into one optimizer step: less memory, the same update (default 2)",
    )
    parser.add_argument(
        "--output-dir", default="sft_output", help="where the fine-tuned model is saved (default ./sft_output)"
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    add_trainer_arguments(parser, quickstart_verb="fine-tunes")
    parser.add_argument(
        "--max-response-len", type=int, default=256, help="tokens per model call in evaluations (default 256)"
    )
    parser.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature in evaluations (default 1.0)"
    )
    parser.add_argument("--eval-split", default=None, help="evaluate this split before and after (e.g. test)")
    parser.add_argument("--eval-n", type=int, default=2, help="episodes per evaluation task (default 2)")
    parser.add_argument(
        "--eval-max-tasks",
        type=int,
        default=None,
        help="cap on evaluation tasks per environment (without --eval-split: training tasks the student plays after, default 8)",
    )
    parser.add_argument(
        "--family", default=None, help="model family, overriding the config's model_family (docs/families.md)"
    )
    parser.add_argument("--seed", type=int, default=0, help="training seed and task shuffle seed (default 0)")


# Training tasks the fine-tuned student plays to show its tool use, where no --eval-split is given.
CHECK_TASKS = 8


def tool_use(stats: Mapping[str, Any], split: str) -> str:
    """One line on whether the fine-tuned student calls tools (`stats`: `EvalStats` per environment on `split`),
    with what to try when it calls none.

    >>> from openreward_rl.backends.trl.run import EvalStats
    >>> def stats(calls): return {"E": EvalStats("E", 4, 4, 0.0, 0.0, 0.0, 0.0, 0, {}, tool_calls=calls, parse_errors=0.5)}
    >>> tool_use(stats(1.25), "test")
    'the student calls tools: 1.25 tool calls/ep, 0.50 parse errors/ep on 4 test episodes'
    >>> print(tool_use(stats(0.0), "test"))
    the student still calls no tool (0.00 tool calls/ep, 0.50 parse errors/ep on 4 test episodes): fine-tune on more episodes (--teacher-n, a larger --max-tasks), for more --epochs or at a higher --lr
    """
    scored = sum(item.scored for item in stats.values())
    if not scored:
        return f"the student's tool use is unknown: none of its {split} episodes was scored (infrastructure failures)"
    calls = sum(item.tool_calls * item.scored for item in stats.values()) / scored
    errors = sum(item.parse_errors * item.scored for item in stats.values()) / scored
    figures = f"{calls:.2f} tool calls/ep, {errors:.2f} parse errors/ep on {scored} {split} episodes"
    if calls > 0:
        return f"the student calls tools: {figures}"
    return f"the student still calls no tool ({figures}): fine-tune on more episodes (--teacher-n, a larger --max-tasks), for more --epochs or at a higher --lr"


def _check(args: argparse.Namespace) -> None:
    if not args.teacher and not args.from_results:
        raise ConfigError(
            "give the episodes to learn from: --teacher FILE.py:function and/or --from-results FILE.jsonl"
        )
    if args.teacher and ":" not in args.teacher:
        raise ConfigError(f"--teacher {args.teacher!r} must look like path/to/file.py:function")
    for name in ("teacher_n", "batch_size", "micro_batch", "eval_n", "max_response_len"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not args.epochs > 0 or not args.lr > 0:
        raise ConfigError(f"--epochs and --lr must be positive, got {args.epochs:g} and {args.lr:g}")
    from openreward_rl.backends.trl.run import check_optimizer

    check_optimizer(args.optim)


def _teacher(spec: str) -> Any:
    from openreward_rl._registry import import_plugin

    path, _, name = spec.rpartition(":")
    try:
        module = import_plugin(path)
    except ValueError as error:  # no such file, or one that does not import
        raise ConfigError(f"--teacher {spec}: {error}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigError(f"--teacher {spec}: {path} defines no function {name!r}")
    return function


def recorded_episodes(paths: list[str], config: Any, min_reward: float) -> list[Any]:
    """The episodes of `paths` (`openreward-rl eval --output`, any engine and tokenizer) to replay: those whose
    recorded reward is at least `min_reward`, infrastructure failures left out. Checked before any model or
    environment loads: a file that is not episodes (an episode that names no task among them), an episode of an
    environment `config` does not configure, or no episode rewarded enough, is a ConfigError naming it."""
    from openreward_rl.observe.dumps import read_trajectories

    kept = []
    for path in paths:
        episodes = read_trajectories(path)
        if not episodes:
            raise ConfigError(f"--from-results {path}: no episodes in it")
        for number, episode in enumerate(episodes):
            if episode.task.environment not in config.environments:
                raise ConfigError(
                    f"--from-results {path} record {number}: an episode of {episode.task.environment!r}, which {config.source} does not configure "
                    f"(configured: {', '.join(config.environments)})"
                )
        rewarded = [e for e in episodes if e.turns and e.trained_reward is not None and e.trained_reward >= min_reward]
        print(
            f"{path}: {len(rewarded)} of {len(episodes)} episodes rewarded >= {min_reward:g}, to replay in the student's format",
            flush=True,
        )
        kept.extend(rewarded)
    if paths and not kept:
        raise ConfigError(
            f"--from-results: no recorded episode is rewarded >= {min_reward:g} (--min-reward): nothing to learn from"
        )
    return kept


def replays(renderer: Any, config: Any, episodes: list[Any]) -> list[tuple[Any, Any]]:
    """A (teacher engine, task) per recorded episode: its turns played again in the student's format, on its task
    (at the address and variant the run's config gives the environment, where it gives one)."""
    import attrs

    from openreward_rl.engines.teacher import Replay, TeacherEngine

    reasoning = (
        renderer.family is not None and renderer.family.thinking is not None
    )  # the student's format marks reasoning
    plays = []
    for episode in episodes:
        task = episode.task
        if config.environment(task.environment).variant is not None:
            task = attrs.evolve(task, variant=None)  # the served class's variant, not the recording's
        plays.append(
            (TeacherEngine(renderer, Replay.of((turn.parsed for turn in episode.turns), reasoning=reasoning)), task)
        )
    return plays


def _play(adapter: Any, plays: list[tuple[Any, Any]]) -> list[Any]:
    """One episode per (teacher engine, task), each engine bound to its task (a teacher may read it); with several
    processes each plays its share and every one gets them all, in order."""
    mine = adapter.ranks.share(plays)
    return adapter.ranks.gather(
        adapter.run_episodes([task for _, task in mine], engine=[engine.for_task(task) for engine, task in mine])
    )


def run(args: argparse.Namespace) -> int:
    """`sft` in this process; under `accelerate launch` every process runs it (each plays and evaluates its share, and
    `SFTTrainer` splits the rows and averages the gradients), and only the main one prints and saves the model."""
    from openreward_rl.backends.trl import Ranks

    with contextlib.ExitStack() as stack:
        if not Ranks.current().main:
            quiet = stack.enter_context(open(os.devnull, "w"))
            stack.enter_context(contextlib.redirect_stdout(quiet))
            stack.enter_context(contextlib.redirect_stderr(quiet))
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from openreward_rl.backends.trl import TrlOptions, TrlSession, eval_stats, sft_rows, train_sft
    from openreward_rl.backends.trl.adapter import failures
    from openreward_rl.cli.train_trl import check_output_dir, print_summary
    from openreward_rl.config import load_config
    from openreward_rl.engines.teacher import TeacherEngine
    from openreward_rl.env.local_server import load_environment_class

    def fail(message: str) -> int:
        print(f"openreward-rl sft: {message}", file=sys.stderr)
        return 2

    started = time.monotonic()
    try:
        _check(args)
        check_output_dir(args.output_dir)
        config = load_config(args.config)
        teacher = _teacher(args.teacher) if args.teacher else None
        recorded = recorded_episodes(args.from_results, config, args.min_reward)
        classes = [load_environment_class(spec) for spec in args.serve]
        options = TrlOptions(
            model=args.model,
            output_dir=args.output_dir,
            device=args.device,
            bf16=args.bf16,
            max_new_tokens=args.max_response_len,
            temperature=args.temperature,
            seed=args.seed,
            family=args.family,
            save_interval=0,
            max_tasks=args.max_tasks,
        )
    except ConfigError as error:
        return fail(str(error))
    from transformers import set_seed

    from openreward_rl.cli.memory import return_freed_memory

    return_freed_memory()
    set_seed(args.seed)
    try:
        with TrlSession.open(config, options, serve=classes, announce=lambda line: print(line, flush=True)) as session:
            eval_tasks = session.tasks_of(args.eval_split, args.eval_max_tasks) if args.eval_split else []
            before = eval_stats(session.evaluate(eval_tasks, args.eval_n)) if eval_tasks else None
            renderer, episodes = session.adapter.rollouts.renderer, []
            if recorded:
                replayed = _play(session.adapter, replays(renderer, session.adapter.rollouts.config, recorded))
                print_summary("replay", eval_stats(replayed))
                episodes.extend(replayed)
            if teacher is not None:
                engine = TeacherEngine(renderer, teacher)
                taught = _play(
                    session.adapter, [(engine, task) for task in session.train_tasks for _ in range(args.teacher_n)]
                )
                print_summary("teacher", eval_stats(taught))
                if taught and not any(t.trainable for t in taught):
                    return fail(
                        f"every one of the {len(taught)} teacher episodes failed ({failures(taught)}; the first: {taught[0].stop_detail}): nothing to learn from"
                    )
                episodes.extend(taught)
            rows = sft_rows(episodes, min_reward=args.min_reward)
            if not rows:
                return fail(
                    f"no episode of {len(episodes)} was trainable with reward >= {args.min_reward:g}: nothing to fine-tune on"
                )
            trained = sum(sum(row["assistant_masks"]) for row in rows)
            print(
                f"fine-tuning on {len(rows)} episode contexts of {len(episodes)} episodes ({trained} trained tokens), {args.epochs:g} epochs",
                flush=True,
            )
            trainer = train_sft(
                session.model,
                session.tokenizer,
                rows,
                output_dir=args.output_dir,
                epochs=args.epochs,
                lr=args.lr,
                batch_size=args.batch_size,
                seed=args.seed,
                bf16=args.bf16,
                gradient_checkpointing=args.gradient_checkpointing,
                micro_batch=args.micro_batch,
                optim=args.optim,
            )
            losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
            if losses:
                print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps", flush=True)
            if options.ranks.main:
                session.model.save_pretrained(args.output_dir)
                session.tokenizer.save_pretrained(args.output_dir)
            print(f"model saved to {args.output_dir}", flush=True)
            checked = eval_tasks or session.train_tasks[: args.eval_max_tasks or CHECK_TASKS]
            after = eval_stats(session.evaluate(checked, args.eval_n))
            if before is not None:
                print_summary("before", before)
            print_summary("after" if eval_tasks else "after (train tasks)", after)
            print(tool_use(after, args.eval_split or "train"), flush=True)
    except ConfigError as error:
        return fail(str(error))
    print(f"done in {time.monotonic() - started:.0f}s", flush=True)
    return 0

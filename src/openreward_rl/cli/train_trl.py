"""`openreward-rl train --framework trl`: GRPO with TRL in this process, on one machine, no Ray.

    openreward-rl train --framework trl --config examples/quickstart_config.yaml \\
        --serve examples/environments/paint.py:PaintColour --model offline:smollm2 --device cpu \\
        --max-steps 8 --eval-split test --output-dir runs/paint

The policy is the model being trained: each step samples `--rollout-batch-size` tasks x
`--n-samples` episodes from it (`openreward_rl.backends.trl`), scores them with the environments'
rewards and takes one GRPO step. Checkpoints go to `--output-dir/checkpoint-N` every
`--save-interval` steps and at the end (0: none); `--resume` continues from the newest one (the step count,
optimizer and scheduler included). `--eval-split` evaluates that split before and after training.

Failures: a step in which every episode failed (infrastructure failures) is one line, "all N episodes
failed: <stop reasons>", and trains nothing; after `--max-failed-steps` such steps in a row (default 3)
training stops with one line and exit status 1, keeping the checkpoints written so far; an environment
server that is gone (refused connections) or hung (answers nothing for 60 s) fails every episode that
way (docs/reliability.md), and a `--serve` server that has stopped stops training at the step's end. A
before-evaluation in which every episode of an environment failed stops the run before training, also
with one line and status 1.

Several GPUs of one machine: `accelerate launch --multi_gpu --num_processes N -m openreward_rl.cli train --framework trl
...` runs one process per GPU, each sampling its share of every step (`--rollout-batch-size` is over all of them)
with gradients averaged (DDP); the main process alone prints and writes (docs/training.md).

After `--max-untrained-steps` steps in a row that trained nothing (default 5; no group had reward
spread, e.g. a model that never calls a tool), training stops with one line on stderr saying why and
what to try (a warm start with `openreward-rl sft`); the model is then saved and evaluated as at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

import openreward_rl._compat as _compat
from openreward_rl.backends.trl import SAMPLERS, TrlOptions
from openreward_rl.cli.interrupts import Interrupts
from openreward_rl.errors import ConfigError

__all__ = [
    "SHARED_FLAGS",
    "TRL_DEFAULTS",
    "add_trainer_arguments",
    "add_trl_arguments",
    "check_output_dir",
    "options_from_args",
    "run",
    "print_summary",
]

# `TrlOptions` is the table of this command's defaults; nothing here restates one.
_DEFAULT: dict[str, Any] = {
    field.name: field.default for field in attrs.fields(TrlOptions) if field.default is not attrs.NOTHING
}
# The flags `train` shares with Slime/Miles, by the `TrlOptions` field each sets (Slime/Miles take theirs from `LaunchSpec`).
SHARED_FLAGS = {
    "lr": "lr",
    "n_samples": "n_samples",
    "rollout_batch_size": "prompts_per_step",
    "max_response_len": "max_new_tokens",
    "max_context_len": "max_context_len",
    "temperature": "temperature",
    "save_interval": "save_interval",
}
# What `train --framework trl` uses where a shared flag is not given.
TRL_DEFAULTS = {"model": None, **{flag: _DEFAULT[field] for flag, field in SHARED_FLAGS.items()}}


def add_trainer_arguments(parser: Any, *, quickstart_verb: str) -> None:
    """The trainer settings `train --framework trl` and `sft` share: `--bf16`, `--gradient-checkpointing` and `--optim`
    (defaults `TrlOptions`'); `quickstart_verb` says in `--optim`'s help what the quickstart does with it."""
    parser.add_argument("--bf16", action="store_true", help="train under bf16 autocast (GPU)")
    parser.add_argument(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=_DEFAULT["gradient_checkpointing"],
        help="recompute activations in the backward pass: far less memory, a slower step (default on; --no-gradient-checkpointing: off)",
    )
    parser.add_argument(
        "--optim",
        default=_DEFAULT["optim"],
        metavar="NAME",
        help="the optimizer, by transformers' TrainingArguments name (default: TRL's, adamw_torch, whose two moments take twice "
        "the float32 weights' memory); adafactor keeps a factored second moment and no first moment, ~1 GiB less for "
        f"SmolLM2-135M: the quickstart {quickstart_verb} with it to stay under 3 GB",
    )


def add_trl_arguments(parser: Any) -> None:
    """The flags only `--framework trl` reads (an argument group of `openreward-rl train`)."""
    group = parser.add_argument_group(
        "--framework trl (GRPO with TRL in this process)",
        "Shared flags mean the same here: --config, --model (required; offline:smollm2 is the packaged SmolLM2-135M), "
        f"--lr (default {TRL_DEFAULTS['lr']:g}), --n-samples (GRPO group size, default {TRL_DEFAULTS['n_samples']}), "
        f"--rollout-batch-size (tasks per step, default {TRL_DEFAULTS['rollout_batch_size']}), --max-response-len "
        f"(tokens per model call, default {TRL_DEFAULTS['max_response_len']}), --max-context-len, --temperature "
        f"(default {TRL_DEFAULTS['temperature']:g}), --save-interval (steps, default {TRL_DEFAULTS['save_interval']}), "
        "--wandb-project/--wandb-run (TRL logs to WandB), --dry-run (print the trainer config, load nothing).",
    )
    group.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    group.add_argument(
        "--dtype",
        default=None,
        help="model weights: float32 (default, also on CUDA; add --bf16 for autocast), bfloat16, ...",
    )
    add_trainer_arguments(group, quickstart_verb="trains")
    group.add_argument(
        "--micro-batch",
        type=int,
        default=_DEFAULT["micro_batch"],
        metavar="N",
        help="episodes per forward and backward pass of a step (the largest divisor of the step's episodes at most N); "
        "their gradients accumulate into one optimizer step: less memory, the same update; 0: the whole step in one pass "
        "(default: 4 on the CPU, the whole step on a GPU)",
    )
    group.add_argument(
        "--max-steps",
        type=int,
        default=_DEFAULT["max_steps"],
        help=f"optimizer steps (default {_DEFAULT['max_steps']})",
    )
    group.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --output-dir")
    group.add_argument("--lora", action="store_true", help="train a LoRA adapter (peft) instead of all weights")
    group.add_argument(
        "--lora-rank", type=int, default=_DEFAULT["lora_rank"], help=f"LoRA rank (default {_DEFAULT['lora_rank']})"
    )
    group.add_argument(
        "--beta",
        type=float,
        default=_DEFAULT["beta"],
        help=f"KL coefficient against the initial model (default {_DEFAULT['beta']:g}; 0: no reference model)",
    )
    group.add_argument(
        "--top-p", type=float, default=_DEFAULT["top_p"], help=f"sampling top-p (default {_DEFAULT['top_p']:g})"
    )
    group.add_argument(
        "--serve",
        action="append",
        default=[],
        metavar="FILE.py:Class",
        help="serve this environment class on 127.0.0.1 for the run (repeatable); sets env_base_url",
    )
    group.add_argument(
        "--max-tasks",
        type=int,
        default=None,
        help="cap on training tasks per split where an environment sets no num_samples",
    )
    group.add_argument("--eval-split", default=None, help="evaluate this split before and after training (e.g. test)")
    group.add_argument("--eval-n", type=int, default=4, help="episodes per evaluation task (default 4)")
    group.add_argument("--eval-max-tasks", type=int, default=None, help="cap on evaluation tasks per environment")
    group.add_argument(
        "--eval-output",
        default=None,
        metavar="FILE.jsonl",
        help="write the evaluation episodes: after training to FILE.jsonl, before to FILE.before.jsonl (for `openreward-rl show`)",
    )
    group.add_argument(
        "--train-output",
        default=None,
        metavar="FILE.jsonl",
        help="write each step's training episodes to FILE.jsonl, each line with its step (for `openreward-rl show`; "
        "under accelerate, the main process's share)",
    )
    group.add_argument("--no-save-model", action="store_true", help="do not write the final model to --output-dir")
    group.add_argument(
        "--no-eval-before",
        action="store_true",
        help="with --eval-split: evaluate after training only (e.g. the model was just evaluated)",
    )
    group.add_argument(
        "--group-rm", action="store_true", help="score each group with the environment's score_group where it has one"
    )
    group.add_argument(
        "--family", default=None, help="model family, overriding the config's model_family (docs/families.md)"
    )
    group.add_argument(
        "--seed",
        type=int,
        default=_DEFAULT["seed"],
        help=f"training seed and task shuffle seed (default {_DEFAULT['seed']})",
    )
    group.add_argument(
        "--concurrency",
        type=int,
        default=_DEFAULT["concurrency"],
        help="episodes in flight at once (default: all of a step's, rollout batch x n samples)",
    )
    group.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default=_DEFAULT["sampler"],
        help="how the model samples: waves (a step's waiting turns as one padded batch, as TRL generates) or continuous "
        f"(transformers' continuous batching) (default {_DEFAULT['sampler']})",
    )
    group.add_argument(
        "--sampler-memory",
        type=float,
        default=_DEFAULT["sampler_memory"],
        help=f"--sampler continuous on a GPU: the most of its free memory the paged KV cache may take; it is sized to a step's episodes (default {_DEFAULT['sampler_memory']:g})",
    )
    group.add_argument(
        "--resample-zero-spread",
        type=int,
        default=_DEFAULT["resample_zero_spread"],
        metavar="N",
        help="rerun groups that would train nothing (no reward spread), at most N rounds per step (default: the config's resample_zero_spread, 0: off)",
    )
    group.add_argument(
        "--max-failed-steps",
        type=int,
        default=_DEFAULT["max_failed_steps"],
        help="stop after this many steps in a row in which every episode failed (infrastructure failures), keeping the checkpoints; "
        f"0: never (default {_DEFAULT['max_failed_steps']})",
    )
    group.add_argument(
        "--max-untrained-steps",
        type=int,
        default=_DEFAULT["max_untrained_steps"],
        help="stop after this many steps in a row that trained nothing (no group had reward spread), saying why and what to try; "
        f"the model is saved and evaluated as at the end; 0: never (default {_DEFAULT['max_untrained_steps']})",
    )


def _shared(args: Any, name: str) -> Any:
    value = getattr(args, name, None)
    return TRL_DEFAULTS[name] if value is None else value


def options_from_args(args: Any) -> Any:
    """`TrlOptions` from the parsed flags; `ConfigError` names a bad one."""
    from openreward_rl._options import from_attributes

    model = getattr(args, "model", None)
    if not model:
        raise ConfigError(
            "--framework trl needs --model (e.g. offline:smollm2, HuggingFaceTB/SmolLM2-135M-Instruct or a local path)"
        )
    from openreward_rl.engines.transformers import check_model_name

    check_model_name(model)
    if args.eval_n < 1:
        raise ConfigError(f"--eval-n must be at least 1, got {args.eval_n}")
    for spec in args.serve:
        if ":" not in spec:
            raise ConfigError(f"--serve {spec!r} must look like path/to/file.py:ClassName")
    output_dir = getattr(args, "output_dir", None) or _DEFAULT["output_dir"]
    check_output_dir(output_dir)
    try:
        options = from_attributes(
            TrlOptions,
            args,
            model=model,
            output_dir=output_dir,
            **{field: _shared(args, flag) for flag, field in SHARED_FLAGS.items()},
            report_to="wandb" if getattr(args, "wandb_project", None) else "none",
            run_name=getattr(args, "wandb_run", None),
        )
        options.check_split()  # under accelerate launch: before anything loads
        return options
    except ConfigError as error:
        raise ConfigError(_as_typed(str(error))) from None


def _as_typed(message: str) -> str:
    """A `TrlOptions` message about a field a shared flag of another name sets, naming that flag.

    >>> _as_typed("prompts-per-step must be at least 1, got 0")
    '--rollout-batch-size must be at least 1, got 0'
    >>> _as_typed("lr must be > 0 (the learning rate), got -1")
    'lr must be > 0 (the learning rate), got -1'
    """
    for flag, field in SHARED_FLAGS.items():
        option = field.replace("_", "-")
        if flag != field and message.startswith(f"{option} "):
            return f"--{flag.replace('_', '-')}{message[len(option) :]}"
    return message


def check_output_dir(path: str, flag: str = "--output-dir") -> None:
    """`ConfigError` where `path` cannot be made a folder (it, or a folder above it, is a file): checked
    before anything loads, not when the trainer first writes there."""
    from pathlib import Path

    target = Path(path).expanduser()
    for place in (target, *target.parents):
        if place.is_dir():
            return
        if place.exists():
            problem = "is a file" if place == target else f"cannot be a folder: {place} is a file"
            raise ConfigError(f"{flag} {path} {problem}; name a folder (a new one, or the one of an earlier run)")


def print_summary(label: str, stats: Mapping[str, Any], out: Any = None) -> None:
    """One line per environment (`EvalStats.line`: reward mean ± std with unrewarded episodes as 0, success, n, ...)."""
    for item in stats.values():
        print(f"{label:<7} {item.line()}", file=out or sys.stdout, flush=True)


def _number(value: Any, spec: str) -> str:
    """`value` formatted by `spec`, or "n/a" where TRL logged none (None or NaN: a step with no scored episode).

    >>> _number(0.25, ".3f"), _number(None, ".3f"), _number(float("nan"), ".4f")
    ('0.250', 'n/a', 'n/a')
    """
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    return format(value, spec)


class _Progress:
    """A TrainerCallback printing one line per logged step: reward, per-environment reward and failures;
    for a step in which every episode failed, that and why (the adapter's `last_failure`)."""

    def __init__(self, out: Any, adapter: Any = None) -> None:
        self.out = out
        self.adapter = adapter
        self.started = time.monotonic()

    def line(self, step: str, logs: Mapping[str, Any]) -> str:
        """The line for one step's `logs` (never raises on a missing or empty value)."""
        elapsed = f"{time.monotonic() - self.started:.0f}s"
        failure = getattr(self.adapter, "last_failure", None)
        if failure is not None:
            return f"step {step}  {failure}; nothing trained  {elapsed}"

        def per_environment(metric: str) -> dict[str, Any]:  # environment names may hold "/" (Org/Env)
            prefix, suffix = "openreward/", f"/{metric}"
            return {
                key[len(prefix) : -len(suffix)]: value
                for key, value in logs.items()
                if key.startswith(prefix) and key.endswith(suffix)
            }

        parts = [f"{env} {_number(value, '.3f')}" for env, value in sorted(per_environment("reward_mean").items())]
        failures = sum(int(value or 0) for value in per_environment("infra_failures").values())
        signal = (
            f"  zero-spread {_number(logs.get('openreward/zero_spread_share'), '.2f')}  untrained {_number(logs.get('openreward/untrained_share'), '.2f')}"
            if "openreward/untrained_share" in logs
            else ""
        )
        return (
            f"step {step}  reward {_number(logs.get('reward'), '.3f')} ± {_number(logs.get('reward_std'), '.3f')}  "
            f"[{', '.join(parts)}]  infra failures {failures}{signal}  loss {_number(logs.get('loss'), '.4f')}  {elapsed}"
        )

    def callback(self) -> Any:
        from transformers import TrainerCallback

        progress = self

        class Progress(TrainerCallback):
            def on_log(
                self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **_: Any
            ) -> None:
                if not logs or "reward" not in logs:
                    return
                print(progress.line(f"{state.global_step}/{state.max_steps}", logs), file=progress.out, flush=True)

        return Progress()


def dry_run_text(options: Any, config_source: str, serve: Sequence[str]) -> str:
    """What `--dry-run` prints: the run's options and TRL's `GRPOConfig` (non-default fields), as JSON."""
    import dataclasses

    import attrs

    from openreward_rl.backends.trl import grpo_config, lora_config

    grpo = grpo_config(options)
    defaults = {f.name: f.default for f in dataclasses.fields(grpo) if f.default is not dataclasses.MISSING}
    changed = {
        k: v
        for k, v in grpo.to_dict().items()
        if (k in defaults and defaults[k] != v or k in ("output_dir", "bf16", "use_cpu"))
        and k not in ("accelerator_config", "hub_token")
    }
    plan = {
        "config": config_source,
        "serve": list(serve),
        "options": attrs.asdict(options),
        "GRPOConfig": changed,
        "LoraConfig": {
            k: v
            for k, v in lora_config(options).to_dict().items()
            if k in ("r", "lora_alpha", "target_modules", "lora_dropout")
        }
        if options.lora
        else None,
    }
    return json.dumps(plan, indent=2, default=str)


def run(args: Any) -> int:
    """`train --framework trl`: validate everything that needs no model, then optionally evaluate, train (or
    resume), evaluate, save. An error is raised to the command's boundary (`cli.failures`): one line."""
    from openreward_rl.config import ConfigError, load_config
    from openreward_rl.engines.transformers import check_device
    from openreward_rl.env.local_server import check_servable, load_environment_class
    from openreward_rl.loop.rollout import check_extensions
    from openreward_rl.redaction import install_log_redaction

    install_log_redaction()
    _compat.install()  # the SDK fixes and process-wide patches, checked against the installed libraries (`openreward_rl._compat`)
    os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    _quiet_libraries()
    options = options_from_args(args)
    config = load_config(args.config)
    check_extensions(config)  # an unknown episode or context policy: refused before anything loads, --dry-run included
    if args.serve and (config.env_base_url or any(env.base_url for env in config.environments.values())):
        raise ConfigError("--serve sets env_base_url; remove env_base_url / base_url from the config or drop --serve")
    if args.dry_run:
        print(dry_run_text(options, str(config.source), args.serve))
        return 0
    check_device(options.device)
    from openreward_rl.cli.memory import return_freed_memory

    return_freed_memory()  # before the model loads
    classes = [load_environment_class(spec) for spec in args.serve]
    check_servable(
        classes
    )  # what the SDK's Server refuses (no tools, a concurrent terminal tool), before the model loads
    if options.report_to == "wandb":
        os.environ.setdefault("WANDB_PROJECT", args.wandb_project)
    interrupts = Interrupts()
    try:
        with interrupts.installed():
            return _train(args, options, config, classes, interrupts)
    except KeyboardInterrupt:
        kept = last_checkpoint_line(options.output_dir)
        print(f"openreward-rl train: interrupted{kept}", file=sys.stderr, flush=True)
        return 130
    finally:
        if options.report_to == "wandb":
            _finish_wandb_run()


def _finish_wandb_run() -> None:
    """Finish the WandB run TRL's callback started (the main process's), here rather than at interpreter exit:
    under `accelerate launch` a process's exit hooks may not run to the end, and the run then has no exit record."""
    import wandb

    if wandb.run is not None:
        wandb.finish()


def last_checkpoint_line(output_dir: str) -> str:
    """What an interrupted run says of its checkpoints: where the newest is and how to go on from it."""
    from openreward_rl.backends.trl import last_checkpoint

    newest = last_checkpoint(output_dir)
    return (
        f"; checkpoints kept in {output_dir} (newest {os.path.basename(newest)}): --resume continues from it"
        if newest
        else "; no checkpoint was saved yet"
    )


def _quiet_libraries() -> None:
    """No loading/saving progress bars or deprecation notices from transformers/TRL internals: the command prints its own progress."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"(transformers|trl|peft)(\.|$)")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # transformers is a core dependency; this only guards odd installs
        pass


def _sampling_settings(options: Any) -> dict[str, Any]:
    """How the episodes were sampled, as `eval` records it, the tokenizer included, so `show` renders the token view."""
    return {
        "engine": "transformers",
        "model": options.model,
        "tokenizer": options.model,
        "temperature": options.temperature,
        "top_p": options.top_p,
        "max_new_tokens": options.max_new_tokens,
    }


def _write(path: str | None, phase: str, episodes: Sequence[Any], options: Any) -> None:
    """Evaluation episodes as a trajectory dump (`openreward-rl show` reads it): `path` after training, `*.before.jsonl` before.
    Each line records the sampling settings (`_sampling_settings`)."""
    if not path:
        return
    from pathlib import Path

    from openreward_rl.observe.dumps import TrajectoryWriter

    target = Path(path) if phase == "after" else Path(path).with_suffix(".before.jsonl")
    target.unlink(missing_ok=True)
    with TrajectoryWriter(target) as writer:
        for episode in episodes:
            writer.write(episode, model=options.model, phase=phase, eval=_sampling_settings(options))


class _TrainingEpisodes:
    """A TrainerCallback writing each step's training episodes (the adapter's `last_trajectories`) to `writer`, each
    line with its step; a step that reuses the last rollout (TRL generates once per `steps_per_generation`) writes none."""

    def __init__(self, writer: Any, adapter: Any, options: Any) -> None:
        self.writer, self.adapter, self.options = writer, adapter, options
        self.written: list[Any] | None = None

    def callback(self) -> Any:
        from transformers import TrainerCallback

        episodes = self

        class TrainingEpisodes(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
                episodes.write(state.global_step)

        return TrainingEpisodes()

    def write(self, step: int) -> None:
        trajectories = self.adapter.last_trajectories
        if not trajectories or trajectories is self.written:
            return
        self.written = trajectories
        settings = _sampling_settings(self.options)
        for trajectory in trajectories:
            self.writer.write(trajectory, model=self.options.model, phase="train", step=step, eval=settings)


def _all_failed(episodes: Sequence[Any]) -> str | None:
    """For evaluation episodes of which some environment's all failed (infrastructure failures: training
    on it cannot work), "<environment>: all N episodes failed: <stop reasons>" for each; else None."""
    from openreward_rl.backends.trl import failures

    by_env: dict[str, list[Any]] = {}
    for episode in episodes:
        by_env.setdefault(episode.task.environment, []).append(episode)
    broken = [
        f"{env}: all {len(items)} episodes failed: {failures(items)}"
        for env, items in by_env.items()
        if not any(t.trainable for t in items)
    ]
    return "; ".join(broken) or None


def _evaluate(session: Any, tasks: Sequence[Any], n: int, out: Any) -> list[Any]:
    """`n` episodes of each task with `eval`'s progress bar (an evaluation takes minutes on a CPU); with several
    processes each samples its share, and the bar counts this process's."""
    from rich.console import Console

    from openreward_rl.cli.eval import episode_bar

    with episode_bar(Console(file=out), len(session.options.ranks.share(range(len(tasks) * n)))) as on_done:
        return session.evaluate(tasks, n, on_done=on_done)


def _train(args: Any, options: Any, config: Any, classes: Sequence[type], interrupts: Interrupts) -> int:
    """The run in this process; under `accelerate launch` every process runs it (each samples and trains its share of
    every step and evaluation), and only the main one prints and writes the evaluation files."""
    with contextlib.ExitStack() as stack:
        out, err = (sys.stdout, sys.stderr) if options.ranks.main else (stack.enter_context(open(os.devnull, "w")),) * 2
        return _train_process(args, options, config, classes, interrupts, out, err)


def _train_process(
    args: Any, options: Any, config: Any, classes: Sequence[type], interrupts: Interrupts, out: Any, err: Any
) -> int:
    from openreward_rl.backends.trl import TrlSession, eval_stats, last_checkpoint, quiet_trainer, release_optimizer

    main = options.ranks.main
    resume = last_checkpoint(options.output_dir) if args.resume else None
    if args.resume and resume is None:
        print(f"no checkpoint in {options.output_dir}; starting from step 0", file=out, flush=True)
    if options.weight_precision_warning:
        print(f"openreward-rl train: warning: {options.weight_precision_warning}", file=err, flush=True)
    started = time.monotonic()
    with (
        contextlib.ExitStack() as stack,
        TrlSession.open(
            config, options, serve=classes, announce=lambda line: print(line, file=out, flush=True)
        ) as session,
    ):
        share = options.prompts_per_step // options.ranks.count
        split = (
            f" over {options.ranks.count} processes ({share} task{'s' * (share != 1)} each)"
            if options.ranks.count > 1
            else ""
        )
        print(
            f"{len(session.train_tasks)} training tasks; {options.prompts_per_step} tasks x {options.n_samples} episodes per step{split}, {options.max_steps} steps",
            file=out,
            flush=True,
        )
        eval_tasks = session.tasks_of(args.eval_split, args.eval_max_tasks) if args.eval_split else []
        before = None
        if eval_tasks and resume is None and not args.no_eval_before:
            print(
                f"evaluating {args.eval_split}: {len(eval_tasks)} tasks x {args.eval_n} episodes", file=out, flush=True
            )
            episodes = _evaluate(session, eval_tasks, args.eval_n, out)
            _write(args.eval_output if main else None, "before", episodes, options)
            before = eval_stats(episodes)
            print_summary("before", before, out)
            broken = _all_failed(episodes)
            if broken:
                print(
                    f"openreward-rl train: the before-evaluation failed entirely ({broken}); nothing was trained: fix the environment and rerun",
                    file=err,
                    flush=True,
                )
                return 1
        callbacks = [_Progress(out, session.adapter).callback(), interrupts.callback()]
        if args.train_output and main:
            from pathlib import Path

            from openreward_rl.observe.dumps import TrajectoryWriter

            if not resume:
                Path(args.train_output).unlink(missing_ok=True)
            writer = stack.enter_context(TrajectoryWriter(args.train_output))
            callbacks.append(_TrainingEpisodes(writer, session.adapter, options).callback())
        trainer = session.trainer(callbacks=callbacks)
        quiet_trainer(trainer)
        if resume:
            print(f"resuming from {resume}", file=out, flush=True)
        trainer.train(resume_from_checkpoint=resume)
        if session.stopped and session.stopped_failed:
            kept = last_checkpoint(options.output_dir)
            print(
                f"openreward-rl train: {session.stopped}; {f'checkpoints kept, the last {kept}' if kept else 'no checkpoint was written'}",
                file=err,
                flush=True,
            )
            return 1
        if (
            session.stopped
        ):  # steps that trained nothing: what earlier steps trained is saved and evaluated as at the end
            print(f"openreward-rl train: {session.stopped}", file=err, flush=True)
        if not args.no_save_model:
            trainer.save_model(options.output_dir)  # every process calls it; the main one writes
            print(f"model saved to {options.output_dir}", file=out, flush=True)
        release_optimizer(trainer)  # the evaluation samples beside the weights alone
        if eval_tasks:
            print(f"evaluating {args.eval_split} after training", file=out, flush=True)
            episodes = _evaluate(session, eval_tasks, args.eval_n, out)
            _write(args.eval_output if main else None, "after", episodes, options)
            after = eval_stats(episodes)
            if before is not None:
                print_summary("before", before, out)
            print_summary("after", after, out)
    print(f"done in {time.monotonic() - started:.0f}s", file=out, flush=True)
    return 0

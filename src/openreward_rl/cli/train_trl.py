"""`openreward-rl train --framework trl`: GRPO with TRL in this process, on one machine, no Ray.

    openreward-rl train --framework trl --config examples/quickstart_config.yaml \\
        --serve examples/environments/paint.py:PaintColour --model offline:smollm2 --device cpu \\
        --max-steps 8 --eval-split test --output-dir runs/paint

The policy is the model being trained: each step samples `--rollout-batch-size` tasks x
`--n-samples` episodes from it (`openreward_rl.backends.trl`), scores them with the environments'
rewards and takes one GRPO step. Checkpoints go to `--output-dir/checkpoint-N` every
`--save-interval` steps and at the end (0: none); `--resume` continues from the newest one (the step count,
optimizer and scheduler included). `--eval-split` evaluates that split before and after training.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["TRL_DEFAULTS", "add_trl_arguments", "options_from_args", "run", "print_summary"]

# What `train --framework trl` uses where a shared flag is not given (Slime/Miles keep the cookbook's).
TRL_DEFAULTS = {"model": None, "lr": 1e-5, "n_samples": 4, "rollout_batch_size": 2, "max_response_len": 256, "max_context_len": None, "temperature": 1.0, "save_interval": 50}


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
    group.add_argument("--dtype", default=None, help="model weights: float32 (default, also on CUDA; add --bf16 for autocast), bfloat16, ...")
    group.add_argument("--bf16", action="store_true", help="train under bf16 autocast (GPU)")
    group.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in the backward pass (less memory, slower)")
    group.add_argument("--max-steps", type=int, default=20, help="optimizer steps (default 20)")
    group.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --output-dir")
    group.add_argument("--lora", action="store_true", help="train a LoRA adapter (peft) instead of all weights")
    group.add_argument("--lora-rank", type=int, default=16, help="LoRA rank (default 16)")
    group.add_argument("--beta", type=float, default=0.0, help="KL coefficient against the initial model (default 0: no reference model)")
    group.add_argument("--top-p", type=float, default=1.0, help="sampling top-p (default 1.0)")
    group.add_argument("--serve", action="append", default=[], metavar="FILE.py:Class", help="serve this environment class on 127.0.0.1 for the run (repeatable); sets env_base_url")
    group.add_argument("--max-tasks", type=int, default=None, help="cap on training tasks per split where an environment sets no num_samples")
    group.add_argument("--eval-split", default=None, help="evaluate this split before and after training (e.g. test)")
    group.add_argument("--eval-n", type=int, default=4, help="episodes per evaluation task (default 4)")
    group.add_argument("--eval-max-tasks", type=int, default=None, help="cap on evaluation tasks per environment")
    group.add_argument("--eval-output", default=None, metavar="FILE.jsonl", help="write the evaluation episodes: after training to FILE.jsonl, before to FILE.before.jsonl (for `openreward-rl show`)")
    group.add_argument("--no-save-model", action="store_true", help="do not write the final model to --output-dir")
    group.add_argument("--group-rm", action="store_true", help="score each group with the environment's score_group where it has one")
    group.add_argument("--family", default=None, help="model family, overriding the config's model_family (docs/families.md)")
    group.add_argument("--seed", type=int, default=0, help="training seed and task shuffle seed (default 0)")
    group.add_argument("--concurrency", type=int, default=32, help="episodes in flight at once (default 32)")
    group.add_argument("--sampler-memory", type=float, default=0.5, help="GPU: share of its memory for the sampler's KV cache (default 0.5)")


def _shared(args: Any, name: str) -> Any:
    value = getattr(args, name, None)
    return TRL_DEFAULTS[name] if value is None else value


def options_from_args(args: Any) -> Any:
    """`TrlOptions` from the parsed flags; ValueError names a bad one."""
    from openreward_rl.backends._options import from_attributes
    from openreward_rl.backends.trl_run import TrlOptions

    model = getattr(args, "model", None)
    if not model:
        raise ValueError("--framework trl needs --model (e.g. offline:smollm2, HuggingFaceTB/SmolLM2-135M-Instruct or a local path)")
    from openreward_rl.engines.transformers import check_model_name

    check_model_name(model)
    if args.eval_n < 1:
        raise ValueError(f"--eval-n must be at least 1, got {args.eval_n}")
    for spec in args.serve:
        if ":" not in spec:
            raise ValueError(f"--serve {spec!r} must look like path/to/file.py:ClassName")
    return from_attributes(
        TrlOptions,
        args,
        model=model,
        output_dir=getattr(args, "output_dir", None) or "trl_output",
        prompts_per_step=_shared(args, "rollout_batch_size"),
        n_samples=_shared(args, "n_samples"),
        lr=_shared(args, "lr"),
        temperature=_shared(args, "temperature"),
        max_new_tokens=_shared(args, "max_response_len"),
        max_context_len=_shared(args, "max_context_len"),
        save_interval=_shared(args, "save_interval"),
        report_to="wandb" if getattr(args, "wandb_project", None) else "none",
        run_name=getattr(args, "wandb_run", None),
    )


def print_summary(label: str, stats: Mapping[str, Any], out: Any = None) -> None:
    """One line per environment (`EvalStats.line`: reward mean ± std with unrewarded episodes as 0, success, n, ...)."""
    for item in stats.values():
        print(f"{label:<7} {item.line()}", file=out or sys.stdout, flush=True)


class _Progress:
    """A TrainerCallback printing one line per logged step: reward, per-environment reward and failures."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.started = time.monotonic()

    def callback(self) -> Any:
        from transformers import TrainerCallback

        progress = self

        class Progress(TrainerCallback):
            def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **_: Any) -> None:
                if not logs or "reward" not in logs:
                    return
                envs = sorted({key.split("/")[1] for key in logs if key.startswith("openreward/") and key.endswith("/reward_mean")})
                parts = [f"{env} {logs[f'openreward/{env}/reward_mean']:.3f}" for env in envs]
                failures = sum(int(logs.get(f"openreward/{env}/infra_failures", 0)) for env in envs)
                elapsed = time.monotonic() - progress.started
                print(
                    f"step {state.global_step}/{state.max_steps}  reward {logs['reward']:.3f} ± {logs.get('reward_std', 0.0):.3f}  "
                    f"[{', '.join(parts)}]  infra failures {failures}  loss {logs.get('loss', 0.0):.4f}  {elapsed:.0f}s",
                    file=progress.out, flush=True,
                )  # fmt: skip

        return Progress()


def dry_run_text(options: Any, config_source: str, serve: Sequence[str]) -> str:
    """What `--dry-run` prints: the run's options and TRL's `GRPOConfig` (non-default fields), as JSON."""
    import attrs

    from openreward_rl.backends.trl_run import grpo_config, lora_config

    import dataclasses

    grpo = grpo_config(options)
    defaults = {f.name: f.default for f in dataclasses.fields(grpo) if f.default is not dataclasses.MISSING}
    changed = {k: v for k, v in grpo.to_dict().items() if (k in defaults and defaults[k] != v or k in ("output_dir", "bf16", "use_cpu")) and k not in ("accelerator_config", "hub_token")}
    plan = {
        "config": config_source,
        "serve": list(serve),
        "options": attrs.asdict(options),
        "GRPOConfig": changed,
        "LoraConfig": {k: v for k, v in lora_config(options).to_dict().items() if k in ("r", "lora_alpha", "target_modules", "lora_dropout")} if options.lora else None,
    }
    return json.dumps(plan, indent=2, default=str)


def run(args: Any) -> int:
    """`train --framework trl`: validate everything that needs no model, then optionally evaluate, train (or
    resume), evaluate, save. An error is raised to the command's boundary (`cli.failures`): one line."""
    from openreward_rl.config import ConfigError, load_config
    from openreward_rl.engines.transformers import check_device
    from openreward_rl.env.local_server import check_servable, load_environment_class
    from openreward_rl.redaction import install_log_redaction

    install_log_redaction()
    os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    _quiet_libraries()
    options = options_from_args(args)
    config = load_config(args.config)
    if args.serve and (config.env_base_url or any(env.base_url for env in config.environments.values())):
        raise ConfigError("--serve sets env_base_url; remove env_base_url / base_url from the config or drop --serve")
    if args.dry_run:
        print(dry_run_text(options, str(config.source), args.serve))
        return 0
    check_device(options.device)
    classes = [load_environment_class(spec) for spec in args.serve]
    check_servable(classes)  # what the SDK's Server refuses (no tools, a concurrent terminal tool), before the model loads
    if options.report_to == "wandb":
        os.environ.setdefault("WANDB_PROJECT", args.wandb_project)
    try:
        return _train(args, options, config, classes)
    except KeyboardInterrupt:
        kept = last_checkpoint_line(options.output_dir)
        print(f"openreward-rl train: interrupted{kept}", file=sys.stderr, flush=True)
        return 130


def last_checkpoint_line(output_dir: str) -> str:
    """What an interrupted run says of its checkpoints: where the newest is and how to go on from it."""
    from openreward_rl.backends.trl_run import last_checkpoint

    newest = last_checkpoint(output_dir)
    return f"; checkpoints kept in {output_dir} (newest {os.path.basename(newest)}): --resume continues from it" if newest else "; no checkpoint was saved yet"


def _quiet_libraries() -> None:
    """No loading/saving progress bars or deprecation notices from transformers/TRL internals: the command prints its own progress."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"(transformers|trl|peft)(\.|$)")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # transformers is a core dependency; this only guards odd installs
        pass


def _write(path: str | None, phase: str, episodes: Sequence[Any], options: Any) -> None:
    """Evaluation episodes as a trajectory dump (`openreward-rl show` reads it): `path` after training, `*.before.jsonl` before.
    Each line records the sampling settings as `eval` does, the tokenizer included, so `show` renders the token view."""
    if not path:
        return
    from pathlib import Path

    from openreward_rl.observe.dumps import TrajectoryWriter

    settings = {"engine": "transformers", "model": options.model, "tokenizer": options.model, "temperature": options.temperature,
                "top_p": options.top_p, "max_new_tokens": options.max_new_tokens}  # fmt: skip
    target = Path(path) if phase == "after" else Path(path).with_suffix(".before.jsonl")
    target.unlink(missing_ok=True)
    with TrajectoryWriter(target) as writer:
        for episode in episodes:
            writer.write(episode, model=options.model, phase=phase, eval=settings)


def _evaluate(session: Any, tasks: Sequence[Any], n: int, out: Any) -> list[Any]:
    """`n` episodes of each task with `eval`'s progress bar (an evaluation takes minutes on a CPU)."""
    from rich.console import Console

    from openreward_rl.cli.eval import episode_bar

    with episode_bar(Console(file=out), len(tasks) * n) as on_done:
        return session.evaluate(tasks, n, on_done=on_done)


def _train(args: Any, options: Any, config: Any, classes: Sequence[type]) -> int:
    from openreward_rl.backends.trl_run import TrlSession, eval_stats, last_checkpoint, quiet_trainer

    out = sys.stdout
    resume = last_checkpoint(options.output_dir) if args.resume else None
    if args.resume and resume is None:
        print(f"no checkpoint in {options.output_dir}; starting from step 0", file=out, flush=True)
    started = time.monotonic()
    print(f"loading {options.model} on {options.resolved_device}", file=out, flush=True)
    with TrlSession.open(config, options, serve=classes) as session:
        print(f"{len(session.train_tasks)} training tasks; {options.prompts_per_step} tasks x {options.n_samples} episodes per step, {options.max_steps} steps", file=out, flush=True)
        eval_tasks = session.tasks_of(args.eval_split, args.eval_max_tasks) if args.eval_split else []
        before = None
        if eval_tasks and resume is None:
            print(f"evaluating {args.eval_split}: {len(eval_tasks)} tasks x {args.eval_n} episodes", file=out, flush=True)
            episodes = _evaluate(session, eval_tasks, args.eval_n, out)
            _write(args.eval_output, "before", episodes, options)
            before = eval_stats(episodes)
            print_summary("before", before, out)
        trainer = session.trainer(callbacks=[_Progress(out).callback()])
        quiet_trainer(trainer)
        if resume:
            print(f"resuming from {resume}", file=out, flush=True)
        trainer.train(resume_from_checkpoint=resume)
        if not args.no_save_model:
            trainer.save_model(options.output_dir)
            print(f"model saved to {options.output_dir}", file=out, flush=True)
        if eval_tasks:
            print(f"evaluating {args.eval_split} after training", file=out, flush=True)
            episodes = _evaluate(session, eval_tasks, args.eval_n, out)
            _write(args.eval_output, "after", episodes, options)
            after = eval_stats(episodes)
            if before is not None:
                print_summary("before", before, out)
            print_summary("after", after, out)
    print(f"done in {time.monotonic() - started:.0f}s", file=out, flush=True)
    return 0

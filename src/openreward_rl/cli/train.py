"""`openreward-rl train --framework slime|miles|trl`: the cookbook's run.sh with this library's hooks, or TRL in-process.

    openreward-rl train --framework slime --slime-path /opt/slime --task-data tasks.jsonl --dry-run
    openreward-rl train --framework miles --model Qwen/Qwen3-4B --n-samples 8 -- --gradient-checkpointing
    openreward-rl train --framework trl --model offline:smollm2 --device cpu --max-steps 8   # cli/train_trl.py

Everything after `--` is passed to the framework's train.py unchanged (Slime/Miles).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import openreward_rl._compat as _compat
from openreward_rl._options import from_attributes
from openreward_rl.cli.launcher import LaunchError, LaunchSpec, plan_launch, ray_is_running, run_plan, train_arguments
from openreward_rl.config import ConfigError, load_config
from openreward_rl.errors import first_line
from openreward_rl.preflight import check_environments, check_ready, remote_environments
from openreward_rl.redaction import install_log_redaction

__all__ = ["add_arguments", "run", "spec_from_args"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = LaunchSpec(framework="slime", framework_path="")
    parser.add_argument(
        "--framework",
        choices=("slime", "miles", "trl"),
        required=True,
        help="which trainer: slime/miles (Ray job) or trl (GRPO in this process)",
    )
    parser.add_argument(
        "--slime-path", default=os.environ.get("SLIME_PATH"), help="Slime checkout (default $SLIME_PATH)"
    )
    parser.add_argument(
        "--miles-path", default=os.environ.get("MILES_PATH"), help="Miles checkout (default $MILES_PATH)"
    )
    parser.add_argument(
        "--config",
        default=None,
        help="train_config.yaml (default $OPENREWARD_RL_CONFIG, $TRAIN_CONFIG, ./train_config.yaml)",
    )
    parser.add_argument("--task-data", default=defaults.task_data, help="JSONL from `openreward-rl prepare`")
    parser.add_argument(
        "--model",
        default=None,
        help=f"HF checkpoint (also the tokenizer; slime/miles default {defaults.model}, required for trl)",
    )
    parser.add_argument("--lr", type=float, default=None, help=f"learning rate (default {defaults.lr:g})")
    parser.add_argument(
        "--num-gpus",
        type=int,
        default=defaults.num_gpus,
        help="GPUs of the run: actor and rollout share them (colocated), unless --rollout-gpus splits them",
    )
    parser.add_argument("--tp", type=int, default=defaults.tp, help="GPUs per SGLang engine")
    parser.add_argument(
        "--rollout-batch-size",
        type=int,
        default=None,
        help=f"prompts per rollout (slime/miles default {defaults.rollout_batch_size})",
    )
    parser.add_argument(
        "--n-samples",
        type=int,
        default=None,
        help=f"rollouts per prompt, the GRPO group (slime/miles default {defaults.n_samples})",
    )
    parser.add_argument(
        "--global-batch-size",
        type=int,
        default=None,
        help="samples per optimizer step (default: rollout batch x n samples)",
    )
    parser.add_argument(
        "--max-response-len",
        type=int,
        default=None,
        help=f"tokens per model call (slime/miles default {defaults.max_response_len})",
    )
    parser.add_argument(
        "--max-context-len",
        type=int,
        default=None,
        help=f"tokens per episode, prompt + all turns (slime/miles default {defaults.max_context_len})",
    )
    parser.add_argument(
        "--max-tokens-per-gpu",
        type=int,
        default=defaults.max_tokens_per_gpu,
        help=f"training token cap per GPU with dynamic batching (default {defaults.max_tokens_per_gpu})",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help=f"rollout sampling temperature, > 0 (default {defaults.temperature:g})",
    )
    parser.add_argument(
        "--num-rollout",
        type=int,
        default=defaults.num_rollout,
        help=f"rollout/train iterations (default {defaults.num_rollout})",
    )
    parser.add_argument(
        "--train-backend", choices=("fsdp", "megatron"), default=None, help="default: megatron on Slime, fsdp on Miles"
    )
    parser.add_argument(
        "--megatron-path",
        default=os.environ.get("MEGATRON_PATH"),
        help="Megatron backend: Megatron-LM checkout, put on the job's PYTHONPATH (default $MEGATRON_PATH)",
    )
    parser.add_argument(
        "--ref-load",
        default=None,
        help="Megatron backend: the model's Megatron (torch_dist) checkpoint: the reference model, and the start when --load has none",
    )
    parser.add_argument(
        "--model-args-script",
        default=None,
        help="Megatron backend: file with the model's Megatron flags (Slime: a scripts/models/*.sh setting MODEL_ARGS; Miles: a scripts/models/*.py with model_args()); "
        "default: <framework>/scripts/models/<--model's name>.sh|.py",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="where the run writes (trl: checkpoints and the final model, default ./trl_output; slime/miles: default ./<framework>_output)",
    )
    parser.add_argument(
        "--save", default=None, help="slime/miles: checkpoint directory to save to (default <--output-dir>/checkpoints)"
    )
    parser.add_argument(
        "--save-interval",
        type=int,
        default=None,
        help=f"rollouts between checkpoints (default {defaults.save_interval})",
    )
    parser.add_argument(
        "--load", default=None, help="checkpoint directory to resume from (the trainer picks the latest)"
    )
    parser.add_argument(
        "--wandb-project",
        default=None,
        help=f"W&B project (slime/miles default {defaults.wandb_project}; trl logs to W&B only when given)",
    )
    parser.add_argument("--wandb-run", default=None, help="W&B group of this run")
    parser.add_argument(
        "--no-dynamic-filter", action="store_true", help="keep groups with aborted members or zero reward spread"
    )
    parser.add_argument(
        "--rollout-mode",
        choices=("sync", "partial", "fully-async"),
        default="sync",
        help="sync (default): every rollout step waits for its slowest episode; partial: --partial-rollout with over-sampling, "
        "unfinished episodes are suspended and resumed next step; fully-async: the framework's train_async.py with disjoint rollout GPUs",
    )
    parser.add_argument(
        "--over-sampling-batch-size",
        type=int,
        default=None,
        help="groups fetched per refill (default under partial: 2 x --rollout-batch-size)",
    )
    parser.add_argument(
        "--mask-offpolicy",
        action="store_true",
        help="partial: zero the loss mask of tokens sampled in earlier rollout steps (--mask-offpolicy-in-partial-rollout)",
    )
    parser.add_argument(
        "--rollout-gpus",
        type=int,
        default=None,
        help="GPUs for SGLang, the rest of --num-gpus train (actor and rollout on separate GPUs, no --colocate); "
        "default: colocated, except under fully-async: half",
    )
    parser.add_argument(
        "--dashboard-host",
        default=defaults.dashboard_host,
        help=f"interface the Ray dashboard (and its unauthenticated job API) listens on when this command starts Ray "
        f"(default {defaults.dashboard_host}: this machine only; 0.0.0.0 exposes it to the network)",
    )
    parser.add_argument(
        "--skip-check-model",
        action="store_true",
        help="do not prove the model family token-exact on --model's tokenizer, here before Ray starts nor in the hooks (config: check_model: false)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands without running anything")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="-- then arguments for train.py")
    from openreward_rl.cli.train_trl import add_trl_arguments

    add_trl_arguments(parser)


def _default(args: Any, name: str, defaults: LaunchSpec) -> Any:
    """A shared flag's value, or the cookbook's default for Slime/Miles (`--framework trl` has its own)."""
    value = getattr(args, name)
    return getattr(defaults, name) if value is None else value


def spec_from_args(args: Any) -> LaunchSpec:
    defaults = LaunchSpec(framework="slime", framework_path="")
    path = args.slime_path if args.framework == "slime" else args.miles_path
    if not path:
        variable = "SLIME_PATH" if args.framework == "slime" else "MILES_PATH"
        raise LaunchError(f"where is the {args.framework} checkout? pass --{args.framework}-path or set ${variable}")
    extra = list(args.extra or [])
    if extra and extra[0] == "--":
        extra = extra[1:]
    config = args.config or str(_config_file(args))
    shared = (
        "model",
        "lr",
        "rollout_batch_size",
        "n_samples",
        "max_response_len",
        "max_context_len",
        "temperature",
        "save_interval",
        "wandb_project",
    )
    return from_attributes(
        LaunchSpec,
        args,
        framework_path=path,
        config=config,
        **{name: _default(args, name, defaults) for name in shared},
        dynamic_filter=not args.no_dynamic_filter,
        advantage_estimator=_advantage_estimator(config),
        task_sampling=_task_sampling(config),
        skip_check_model=bool(getattr(args, "skip_check_model", False)),
        save=args.save or default_save(args.framework, args.output_dir),
        extra=tuple(extra),
    )


def default_save(framework: str, output_dir: str | None) -> str:
    """Where a Slime/Miles job saves checkpoints when --save is not given: `<output dir>/checkpoints`, absolute
    (the job runs elsewhere); `./<framework>_output` without --output-dir."""
    from pathlib import Path

    return str((Path(output_dir or f"{framework}_output") / "checkpoints").resolve())


def _advantage_estimator(config_file: str) -> str:
    """The config's advantage.estimator ("episode" where the file does not exist yet: the launch checks refuse it later)."""
    if not os.path.isfile(config_file):
        return "episode"
    return load_config(config_file).advantage.estimator


def _task_sampling(config_file: str) -> bool:
    return os.path.isfile(config_file) and load_config(config_file).task_sampling is not None


def _config_file(args: Any) -> str:
    from openreward_rl.config import config_path

    return str(config_path(args.config))


def _check_ready(spec: LaunchSpec, environ: dict[str, str]) -> None:
    """Things a real launch needs that a dry run does not."""
    if not os.path.isfile(os.path.join(spec.framework_path, spec.train_script)):
        raise LaunchError(
            f"{spec.framework_path} has no {spec.train_script}; point --{spec.framework}-path at a {spec.framework} checkout"
        )
    if (
        spec.megatron_path
        and spec.backend == "megatron"
        and not os.path.isdir(os.path.join(str(spec.megatron_path), "megatron"))
    ):
        raise LaunchError(
            f"--megatron-path {spec.megatron_path} has no megatron package; point it at a Megatron-LM checkout"
        )
    if not os.path.isfile(spec.task_data):
        raise LaunchError(
            f"task data {spec.task_data} does not exist; write it with `openreward-rl prepare --config {spec.config} --output {spec.task_data}`"
        )
    config = load_config(spec.config)
    _check_family(config, spec.model)
    _check_compaction(config, spec)
    check_ready(config, environ=environ)  # API key for remote environments, base URLs; registers secrets for redaction
    remote = remote_environments(config)
    offline = any(
        mode in " ".join(spec.extra)
        for mode in ("--wandb-mode offline", "--wandb-mode disabled", "--wandb-mode=offline", "--wandb-mode=disabled")
    )
    if remote and not offline and not environ.get("WANDB_API_KEY"):
        raise LaunchError(
            "WANDB_API_KEY is not set (the job logs to W&B with --use-wandb); export WANDB_API_KEY=..., or pass `-- --wandb-mode offline`"
        )
    _check_model(config, spec, required=True)


def _check_family(config: Any, model: str) -> None:
    """The hooks pick the model family from `model_family`, else from --model (the hf_checkpoint): a family
    that is refused fails here, before Ray starts, with its reason."""
    from openreward_rl.families import UnsupportedModelError
    from openreward_rl.loop.rollout import choose_family

    try:
        choose_family(config, model, None)
    except UnsupportedModelError as error:
        raise LaunchError(f"{error} (set model_family in {config.source} to override)") from None


def _check_model(config: Any, spec: LaunchSpec, *, required: bool) -> None:
    """The hooks prove the model family token-exact on the hf_checkpoint's tokenizer before the first
    episode (`episode_stack`, which runs `families.probe.check_model`): the same check runs here first,
    before Ray starts, so an inexact family fails the launch with the first differing token. Skipped by
    `check_model: false` or --skip-check-model (which the hooks then skip too). A tokenizer that cannot
    be loaded here fails a launch (`required`: the hooks load the same one); a dry run says so and goes on.
    A dry run reads local files only (a local checkpoint, the hub cache): it never waits on the hub."""
    from openreward_rl.assets import load_tokenizer
    from openreward_rl.errors import ModelFamilyError
    from openreward_rl.loop.rollout import episode_stack

    if not config.check_model or spec.skip_check_model:
        return
    try:
        tokenizer = load_tokenizer(spec.model) if required else load_tokenizer(spec.model, local_files_only=True)
    except Exception as error:  # noqa: BLE001  (a missing checkpoint, no network: the loaders raise many kinds)
        where = "" if required else " from local files (a dry run does not ask the hub)"
        problem = f"cannot load the tokenizer of --model {spec.model}{where} to check its model family ({type(error).__name__}: {first_line(error)})"
        if required:
            raise LaunchError(
                f"{problem}; the hooks load the same one. --skip-check-model (or check_model: false) skips the check"
            ) from None
        print(f"openreward-rl train: {problem}; the hooks will check it", file=sys.stderr)
        return
    try:
        episode_stack(config, tokenizer, spec.model)  # no family (generic, or none knows the model): nothing to prove
    except ModelFamilyError as error:
        raise LaunchError(str(error)) from None


def _check_compaction(config: Any, spec: LaunchSpec) -> None:
    """Every environment's context policy builds (ConfigError otherwise, before Ray starts); context
    policies fork episodes into several samples, which partial rollout, fully-async rollout, `--group-rm` and
    Slime's stock dynamic filters cannot hold (the trainer reads each group member as one Sample there): those run the environments left at
    the default policy without one, and refuse a named one (the hooks do the same)."""
    from openreward_rl.backends.filters import reads_members_as_samples
    from openreward_rl.loop.rollout import context_policies

    context_policies(config)
    config = config.without_default_compaction()
    rule = {"partial": "--rollout-mode partial", "fully-async": "--rollout-mode fully-async"}.get(spec.rollout_mode)
    if rule is None and any(arg == "--group-rm" for arg in spec.extra):
        rule = "--group-rm"
    dynamic_filter = _last_value(
        list(spec.extra), "--dynamic-sampling-filter-path"
    )  # the trainer's parser keeps the last
    if rule is None and reads_members_as_samples(dynamic_filter):
        rule = f"--dynamic-sampling-filter-path {dynamic_filter}"
    if rule is not None and config.compacts:
        names = ", ".join(name for name, env in config.environments.items() if env.compacts)
        raise LaunchError(
            f"{rule} cannot take the fan-out samples of a context policy ({names}); use --rollout-mode sync without --group-rm "
            "(and the default dynamic filter, which reads fan-out groups), or context_policy: none"
        )


def _last_value(argv: list[str], flag: str) -> str | None:
    """The value of the last `flag value` / `flag=value` in `argv`, or None."""
    value = None
    for position, arg in enumerate(argv):
        if arg == flag and position + 1 < len(argv):
            value = argv[position + 1]
        elif arg.startswith(flag + "="):
            value = arg.partition("=")[2]
    return value


async def _check_environments(config_file: str) -> None:
    """Every configured environment answers and offers the configured splits, before Ray starts."""
    from openreward import AsyncOpenReward

    client = AsyncOpenReward()
    try:
        await check_environments(client, load_config(config_file))
    finally:
        await client.environments.aclose()


def run(args: Any) -> int:
    if args.framework == "trl":
        from openreward_rl.cli import train_trl

        return train_trl.run(args)
    install_log_redaction()
    _compat.install()  # the SDK fixes and process-wide patches, checked against the installed libraries (`openreward_rl._compat`)
    environ = dict(os.environ)
    try:
        spec = spec_from_args(args)
        train_arguments(spec)  # refuses bad settings (and a Megatron run without what it needs) before anything else
        if args.dry_run:
            config = load_config(
                spec.config
            )  # a dry run still refuses a broken config, a refused model family or a bad mode
            _check_family(config, spec.model)
            _check_compaction(config, spec)
            _check_model(config, spec, required=False)
            plan = plan_launch(spec, environ, ray_running=False)
            print("# starts Ray only if `ray status` finds no running cluster")
            print(plan.shell(environ))
            return 0
        _check_ready(spec, environ)
        asyncio.run(_check_environments(spec.config))
        plan = plan_launch(spec, environ, ray_running=ray_is_running())
    except (LaunchError, ConfigError) as error:
        print(f"openreward-rl train: {error}", file=sys.stderr)
        return 2
    if plan.reuses_cluster:
        print(
            "openreward-rl train: reusing the running Ray cluster; the job gets its API keys from the environment that "
            "cluster's `ray start` ran in, not from this shell (`ray stop` and rerun to start one with this shell's)",
            file=sys.stderr,
        )
    print(plan.shell(environ), file=sys.stderr)
    return run_plan(plan, environ)

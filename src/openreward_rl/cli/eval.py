"""`openreward-rl eval`: run N episodes per task with a model and print a summary per environment.

    openreward-rl eval --config examples/quickstart_config.yaml --engine transformers --model offline:smollm2 \\
        --serve examples/environments/math_env.py:MathEnv --n 2 --max-tasks 4 --output results.jsonl

Every bad argument, config error or missing requirement is reported before any model is loaded or
any episode runs. Results are appended as episodes finish; rerunning the same command resumes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from openreward_rl.config import ConfigError, TrainConfig, load_config
from openreward_rl.preflight import check_ready
from openreward_rl.redaction import install_log_redaction

__all__ = ["add_arguments", "run", "EvalOptions", "prepare_config", "summary_table"]

ENGINES = ("transformers", "sglang", "openai")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="train_config.yaml (default $OPENREWARD_RL_CONFIG, $TRAIN_CONFIG, ./train_config.yaml)")
    parser.add_argument("--engine", required=True, choices=ENGINES, help="transformers (in-process), sglang (/generate server) or openai (chat completions)")
    parser.add_argument("--model", required=True, help="hub name, local path or offline:smollm2 (transformers); the served model name (sglang/openai)")
    parser.add_argument("--n", type=int, default=1, help="episodes per task (pass@k uses them; default 1)")
    parser.add_argument("--concurrency", type=int, default=8, help="episodes in flight at once (default 8)")
    parser.add_argument("--output", default=None, help="JSONL file, one trajectory per line; an existing file is resumed")
    parser.add_argument("--max-tasks", type=int, default=None, help="cap per split where an environment sets no num_samples")
    parser.add_argument("--split", default=None, help="evaluate this split of every environment instead of the configured ones")
    parser.add_argument("--seed", type=int, default=0, help="task shuffle seed (default 0)")
    parser.add_argument("--max-new-tokens", type=int, default=1024, help="per model call (default 1024)")
    parser.add_argument("--max-context-len", type=int, default=None, help="token budget of an episode (default: none)")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 is greedy (default 1.0)")
    parser.add_argument("--top-p", type=float, default=1.0, help="default 1.0")
    parser.add_argument("--serve", action="append", default=[], metavar="FILE.py:Class",
                        help="serve this environment class on 127.0.0.1 for the run (repeatable); sets env_base_url")
    parser.add_argument("--base-url", default=None, help="sglang: http://host:port; openai: .../v1 (default https://api.openai.com/v1)")
    parser.add_argument("--family", default=None, help="model family (docs/families.md), overriding the config's model_family and the one --model implies; 'generic' for the template-derived bridge")
    parser.add_argument("--skip-check-model", action="store_true", help="do not prove the model family token-exact on the tokenizer before the first episode (config: check_model: false)")
    parser.add_argument("--tokenizer", default=None, help="sglang/openai: tokenizer for the chat template (default: --model)")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="openai: environment variable holding the API key")
    parser.add_argument("--device", default=None, help="transformers: cpu or cuda (default: cuda when available)")
    parser.add_argument("--dtype", default=None, help="transformers: float32, bfloat16, ... (default float32 on CPU, bfloat16 on CUDA)")
    parser.add_argument("--retry-failures", action="store_true", help="on resume, rerun episodes recorded as infrastructure failures")
    parser.add_argument("--wandb-project", default=None, help="log the per-environment metrics to this WandB project (WANDB_MODE=offline works)")
    parser.add_argument("--wandb-run", default=None, help="WandB run name (default: WandB's)")


@attrs.frozen
class EvalOptions:
    """Validated command-line options."""

    engine: str
    model: str
    n: int
    concurrency: int
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int = 0
    output: Path | None = None
    max_tasks: int | None = None
    split: str | None = None
    max_context_len: int | None = None
    serve: tuple[str, ...] = ()
    base_url: str | None = None
    tokenizer: str | None = None
    family: str | None = None
    skip_check_model: bool = False
    api_key_env: str = "OPENAI_API_KEY"
    device: str | None = None
    dtype: str | None = None
    retry_failures: bool = False
    wandb_project: str | None = None
    wandb_run: str | None = None

    @classmethod
    def from_args(cls, args: Any) -> EvalOptions:
        """Check every option; a `ValueError` names the bad one."""
        if args.engine not in ENGINES:
            raise ValueError(f"--engine must be one of {', '.join(ENGINES)}, got {args.engine!r}")
        if not args.model or not args.model.strip():
            raise ValueError("--model is required (e.g. offline:smollm2 or HuggingFaceTB/SmolLM2-135M-Instruct)")
        for name in ("n", "concurrency", "max_new_tokens"):
            if getattr(args, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
        for name in ("max_tasks", "max_context_len"):
            value = getattr(args, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if not args.temperature >= 0:
            raise ValueError(f"--temperature must be >= 0, got {args.temperature}")
        if not 0 < args.top_p <= 1:
            raise ValueError(f"--top-p must be in (0, 1], got {args.top_p}")
        if args.engine == "sglang" and not args.base_url:
            raise ValueError("--engine sglang needs --base-url (the SGLang server or router, e.g. http://127.0.0.1:30000)")
        if args.engine != "transformers" and (args.device or args.dtype):
            raise ValueError("--device and --dtype apply to --engine transformers only")
        if getattr(args, "family", None):
            from openreward_rl.config import check_family_name

            try:
                check_family_name(args.family, "--family")
            except ConfigError as error:
                raise ValueError(str(error)) from None
        for spec in args.serve:
            if ":" not in spec:
                raise ValueError(f"--serve {spec!r} must look like path/to/file.py:ClassName")
        return cls(
            engine=args.engine,
            model=args.model.strip(),
            n=args.n,
            concurrency=args.concurrency,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            seed=args.seed,
            output=Path(args.output) if args.output else None,
            max_tasks=args.max_tasks,
            split=args.split,
            max_context_len=args.max_context_len,
            serve=tuple(args.serve),
            base_url=args.base_url,
            tokenizer=args.tokenizer,
            family=getattr(args, "family", None),
            skip_check_model=bool(getattr(args, "skip_check_model", False)),
            api_key_env=args.api_key_env,
            device=args.device,
            dtype=args.dtype,
            retry_failures=args.retry_failures,
            wandb_project=getattr(args, "wandb_project", None),
            wandb_run=getattr(args, "wandb_run", None),
        )

    @property
    def sampling_params(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p}


def prepare_config(
    config: TrainConfig,
    *,
    split: str | None = None,
    served: Mapping[str, str] | None = None,
    base_url: str | None = None,
    family: str | None = None,
    skip_check_model: bool = False,
) -> TrainConfig:
    """The config as this run uses it: `--split` replaces every environment's splits; with `--serve`,
    `env_base_url` points at the local server and an environment whose name matches a served class
    (by its variant, the lowercased class name) gets that variant; `--family` replaces `model_family`;
    `--skip-check-model` sets `check_model: false`.
    """
    environments = {}
    for name, env in config.environments.items():
        if split:
            env = attrs.evolve(env, splits=(split,))
        if served and env.variant is None:
            variant = served.get(name.split("/")[-1].lower())
            if variant is not None:
                env = attrs.evolve(env, variant=variant)
        environments[name] = env
    changes: dict[str, Any] = {"environments": environments}
    if base_url:
        changes["env_base_url"] = base_url
    if family:
        changes["model_family"] = family
    if skip_check_model:
        changes["check_model"] = False
    return attrs.evolve(config, **changes)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summary_table(summary: Mapping[str, Any], title: str = "evaluation") -> Any:
    """A rich Table with one row per environment."""
    from rich.table import Table

    table = Table(title=title)
    for column in ("environment", "episodes", "scored", "reward", "success", "pass@k", "stop reasons", "turns", "tokens", "infra failures"):
        table.add_column(column, overflow="fold")
    for env, item in summary.items():
        reward = "-" if item.reward_mean is None else f"{item.reward_mean:.3f} ± {item.reward_std:.3f}"
        pass_k = ", ".join(f"@{k} {v:.2f}" for k, v in item.pass_at_k.items()) or "-"
        stops = ", ".join(f"{reason} {fraction:.0%}" for reason, fraction in sorted(item.stop_reasons.items(), key=lambda kv: -kv[1]))
        failures = ", ".join(f"{reason} ×{count}: {detail[:80]}" for reason, (count, detail) in item.failures.items()) or "0"
        table.add_row(
            env,
            str(item.episodes),
            str(item.scored),
            reward,
            _fmt(item.success_rate, 2),
            pass_k,
            stops,
            _fmt(item.turns_mean, 1),
            _fmt(item.sampled_tokens_mean, 0),
            failures,
        )
    return table


def _build_engine(options: EvalOptions) -> tuple[Any, Any]:
    """(engine, tokenizer). Loads the model for the transformers engine."""
    from openreward_rl.assets import load_tokenizer

    if options.engine == "transformers":
        from openreward_rl.engines.transformers import SamplingConfig, TransformersEngine

        engine = TransformersEngine.from_pretrained(
            options.model,
            device=options.device,
            dtype=options.dtype,
            sampling=SamplingConfig(temperature=options.temperature, top_p=options.top_p),
            default_max_new_tokens=options.max_new_tokens,
        )
        return engine, engine.tokenizer
    tokenizer_name = options.tokenizer or options.model
    try:
        tokenizer = load_tokenizer(tokenizer_name)
    except Exception as error:
        raise ValueError(f"cannot load the tokenizer {tokenizer_name!r} ({type(error).__name__}: {error}); pass --tokenizer (a hub name, a local path or offline:qwen3)") from None
    if options.engine == "sglang":
        from openreward_rl.engines.sglang import SGLangEngine

        return SGLangEngine(options.base_url), tokenizer
    from openreward_rl.engines.openai_chat import OpenAIChatEngine

    return OpenAIChatEngine(options.base_url or "https://api.openai.com/v1", options.model, tokenizer, api_key_env=options.api_key_env), tokenizer


async def run_eval(options: EvalOptions, config: TrainConfig, *, engine: Any, tokenizer: Any, client: Any, console: Any) -> dict[str, Any]:
    """List tasks, run the missing (task, sample) pairs, write them, and return the per-environment summary."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from openreward_rl.cli.evaluation import EvalJob, ResultsFile, evaluate, eval_key, plan, read_results
    from openreward_rl.observe.metrics import summarize
    from openreward_rl.loop.rollout import Rollouts
    from openreward_rl.env.tasks import list_tasks
    from openreward_rl.observe.upload import TrajectoryUploader

    check = getattr(engine, "check_sampling_params", None)
    if check is not None:
        check({**options.sampling_params, "max_new_tokens": options.max_new_tokens})
    rollouts = Rollouts.from_config(
        config, engine=engine, tokenizer=tokenizer, client=client, model=options.model, max_context_len=options.max_context_len, max_new_tokens=options.max_new_tokens
    )  # the same constructor as the training hooks: one config renders one prompt
    tasks = await list_tasks(client, config, max_tasks=options.max_tasks, seed=options.seed)
    if not tasks:
        raise ValueError("the configured environments and splits have no tasks")
    wanted = {eval_key(task, sample) for task in tasks for sample in range(options.n)}
    done = read_results(options.output) if options.output else {}
    kept = {key: trajectory for key, trajectory in done.items() if key in wanted}
    jobs = plan(tasks, options.n, kept, retry_failures=options.retry_failures)
    if kept:
        console.print(f"resuming {options.output}: {len(kept)} of {len(wanted)} episodes already done, {len(jobs)} to run", markup=False)
    results_by_key = dict(kept)

    uploader = TrajectoryUploader.from_config(client, config)

    async def run_one(job: EvalJob) -> Any:
        trajectory = await rollouts.run(job.task, sampling_params=options.sampling_params)
        if trajectory.messages:  # returns at once; uploads run on the uploader's threads
            uploader.submit(trajectory, sampling_params=options.sampling_params)
        return trajectory

    metadata = {"eval": {"engine": options.engine, "model": options.model, "tokenizer": options.tokenizer or options.model, "temperature": options.temperature, "top_p": options.top_p}}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        progress = bar.add_task("episodes", total=len(jobs))

        def on_done(job: EvalJob, trajectory: Any) -> None:
            results_by_key[job.key] = trajectory
            reward = "-" if trajectory.reward is None else f"{trajectory.reward:g}"
            bar.update(progress, advance=1, description=f"{job.task.environment} reward {reward} ({trajectory.stop_reason.value})")

        try:
            with ResultsFile(options.output, metadata) if options.output else contextlib.nullcontext() as results:
                await evaluate(jobs, run_one, concurrency=options.concurrency, results=results, on_done=on_done)
        finally:
            await uploader.aclose()
    return summarize(results_by_key.values())


def log_to_wandb(options: EvalOptions, summary: Mapping[str, Any], config: TrainConfig) -> None:
    """The summary's flat metrics as one WandB row on the `eval/step` axis, under `openreward_eval/`."""
    from openreward_rl.observe.metrics import flat_metrics
    from openreward_rl.observe.wandb_logging import WandbLogger

    run_config = {"engine": options.engine, "model": options.model, "n": options.n, "temperature": options.temperature, "top_p": options.top_p, "config": config.source}
    logger = WandbLogger(project=options.wandb_project, name=options.wandb_run, config=run_config)
    try:
        logger.log(flat_metrics(summary, prefix="openreward_eval/"), step_key="eval/step", step=0)
    finally:
        logger.finish()


def run(args: Any) -> int:
    from rich.console import Console

    console = Console(stderr=True)
    out = Console() if Console().is_terminal else Console(width=150)

    def fail(message: str, code: int = 2) -> int:
        console.print(f"openreward-rl eval: {message}", markup=False)
        return code

    install_log_redaction()
    try:
        options = EvalOptions.from_args(args)
        config = load_config(args.config)
        if not options.serve:
            check_ready(config)  # an API key for remote environments; registers secrets for redaction
    except (ValueError, ConfigError) as error:
        return fail(str(error))
    if options.serve and (config.env_base_url or any(env.base_url for env in config.environments.values())):
        return fail("--serve sets env_base_url; remove env_base_url / base_url from the config or drop --serve")
    if options.engine == "openai" and not options.base_url and not os.environ.get(options.api_key_env):
        return fail(f"--engine openai against api.openai.com needs ${options.api_key_env} (or pass --base-url for a local server)")
    classes = []
    if options.serve:
        from openreward_rl.env.local_server import load_environment_class

        try:
            classes = [load_environment_class(spec) for spec in options.serve]
        except (ValueError, TypeError) as error:
            return fail(f"--serve: {error}")
    os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")  # an in-process env server logs every request at INFO
    try:
        with console.status(f"loading {options.model} ({options.engine})"):
            engine, tokenizer = _build_engine(options)
    except (ValueError, FileNotFoundError, OSError) as error:
        return fail(f"cannot load the model: {error}")
    try:
        return _run_with_engine(options, config, engine, tokenizer, classes, console, out)
    finally:
        asyncio.run(engine.aclose())


def _run_with_engine(options: EvalOptions, config: TrainConfig, engine: Any, tokenizer: Any, classes: Sequence[Any], console: Any, out: Any) -> int:
    from openreward import AsyncOpenReward

    from openreward_rl.env.local_server import loopback_environ, serve_environments, variant_name

    async def main(base_url: str | None, served: Mapping[str, str]) -> dict[str, Any]:
        prepared = prepare_config(config, split=options.split, served=served, base_url=base_url, family=options.family, skip_check_model=options.skip_check_model)
        check_ready(prepared)
        client = AsyncOpenReward()  # the key from OPENREWARD_API_KEY; local servers need none
        try:
            return await run_eval(options, prepared, engine=engine, tokenizer=tokenizer, client=client, console=console)
        finally:
            await client.environments.aclose()

    with contextlib.ExitStack() as stack:
        base_url, served = None, {}
        if classes:
            os.environ.update({k: v for k, v in loopback_environ().items() if k in ("NO_PROXY", "no_proxy", "OPENREWARD_DISABLE_UPDATE_CHECK")})
            server = stack.enter_context(serve_environments(list(classes)))
            base_url = server.base_url
            served = {variant_name(cls): variant_name(cls) for cls in classes}
            console.print(f"serving {', '.join(cls.name() for cls in classes)} on {base_url}", markup=False)
        try:
            summary = asyncio.run(main(base_url, served))
        except KeyboardInterrupt:
            console.print("interrupted; rerun the same command to resume" if options.output else "interrupted", markup=False)
            return 130
        except (ValueError, ConfigError) as error:
            console.print(f"openreward-rl eval: {error}", markup=False)
            return 2
    out.print(summary_table(summary, title=f"{options.model} ({options.engine}, n={options.n}, temperature={options.temperature:g})"))
    if options.wandb_project:
        log_to_wandb(options, summary, config)
    if options.output:
        out.print(f"trajectories: {options.output}  (view one with: openreward-rl show {options.output})", markup=False)
    return 0

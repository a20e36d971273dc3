"""`openreward-rl eval`: run N episodes per task with a model and print a summary per environment.

    openreward-rl eval --config examples/quickstart_config.yaml --engine transformers --model offline:smollm2 \\
        --serve examples/environments/math_env.py:MathEnv --n 2 --max-tasks 4 --output results.jsonl

Every bad argument, config error or missing requirement is reported before any model is loaded or
any episode runs. Results are appended as episodes finish; rerunning the same command resumes
(with the same settings; `--overwrite` starts afresh), running again the episodes that were
infrastructure failures (`--keep-failures` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

import openreward_rl._compat as _compat
from openreward_rl._options import from_attributes
from openreward_rl.config import ConfigError, TrainConfig, load_config, prepare_config
from openreward_rl.errors import boundary, first_line
from openreward_rl.preflight import check_environments, check_ready
from openreward_rl.redaction import install_log_redaction, register_known_secrets

__all__ = ["add_arguments", "run", "EvalOptions", "episode_bar", "summary_table"]

ENGINES = ("transformers", "sglang", "openai")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=None,
        help="train_config.yaml (default $OPENREWARD_RL_CONFIG, $TRAIN_CONFIG, ./train_config.yaml)",
    )
    parser.add_argument(
        "--engine",
        required=True,
        choices=ENGINES,
        help="transformers (in-process), sglang (/generate server) or openai (chat completions)",
    )
    parser.add_argument(
        "--model",
        required=True,
        help="hub name, local path or offline:smollm2 (transformers); the served model name (sglang/openai)",
    )
    default = {
        field.name: field.default for field in attrs.fields(EvalOptions) if field.default is not attrs.NOTHING
    }  # the one table
    parser.add_argument(
        "--n", type=int, default=default["n"], help=f"episodes per task (pass@k uses them; default {default['n']})"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=default["concurrency"],
        help=f"episodes in flight at once (default {default['concurrency']})",
    )
    parser.add_argument(
        "--output", default=None, help="JSONL file, one trajectory per line; an existing file is resumed"
    )
    parser.add_argument(
        "--max-tasks", type=int, default=None, help="cap per split where an environment sets no num_samples"
    )
    parser.add_argument(
        "--split", default=None, help="evaluate this split of every environment instead of the configured ones"
    )
    parser.add_argument(
        "--seed", type=int, default=default["seed"], help=f"task shuffle seed (default {default['seed']})"
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=default["max_new_tokens"],
        help=f"per model call (default {default['max_new_tokens']})",
    )
    parser.add_argument("--max-context-len", type=int, default=None, help="token budget of an episode (default: none)")
    parser.add_argument(
        "--temperature",
        type=float,
        default=default["temperature"],
        help=f"0 is greedy (default {default['temperature']:g})",
    )
    parser.add_argument("--top-p", type=float, default=default["top_p"], help=f"default {default['top_p']:g}")
    parser.add_argument(
        "--serve",
        action="append",
        default=[],
        metavar="FILE.py:Class",
        help="serve this environment class on 127.0.0.1 for the run (repeatable); sets env_base_url",
    )
    parser.add_argument(
        "--base-url", default=None, help="sglang: http://host:port; openai: .../v1 (default https://api.openai.com/v1)"
    )
    parser.add_argument(
        "--family",
        default=None,
        help="model family (docs/families.md), overriding the config's model_family and the one --model implies; 'generic' for the template-derived bridge",
    )
    parser.add_argument(
        "--skip-check-model",
        action="store_true",
        help="do not prove the model family token-exact on the tokenizer before the first episode (config: check_model: false)",
    )
    parser.add_argument(
        "--tokenizer", default=None, help="sglang/openai: tokenizer for the chat template (default: --model)"
    )
    parser.add_argument(
        "--api-key-env",
        default=default["api_key_env"],
        help=f"openai: environment variable holding the API key (default {default['api_key_env']})",
    )
    parser.add_argument("--device", default=None, help="transformers: cpu or cuda (default: cuda when available)")
    parser.add_argument(
        "--dtype", default=None, help="transformers: float32, bfloat16, ... (default float32 on CPU, bfloat16 on CUDA)"
    )
    parser.add_argument(
        "--keep-failures",
        action="store_true",
        help="on resume, keep episodes recorded as infrastructure failures (default: run them again)",
    )
    parser.add_argument(
        "--retry-failures", action="store_true", help=argparse.SUPPRESS
    )  # the default now; accepted for old scripts
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="--output holds results of other settings: move it aside (results.old-N.jsonl) and start a new file",
    )
    parser.add_argument(
        "--wandb-project",
        default=None,
        help="log the per-environment metrics to this WandB project (WANDB_MODE=offline works)",
    )
    parser.add_argument("--wandb-run", default=None, help="WandB run name (default: WandB's)")


@attrs.frozen
class EvalOptions:
    """Validated command-line options; the defaults are `openreward-rl eval`'s (its flags read them here)."""

    engine: str
    model: str
    n: int = 1
    concurrency: int = 8
    max_new_tokens: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
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
    keep_failures: bool = False
    overwrite: bool = False
    wandb_project: str | None = None
    wandb_run: str | None = None

    @classmethod
    def from_args(cls, args: Any) -> EvalOptions:
        """Check every option; a `ConfigError` names the bad one."""
        if args.engine not in ENGINES:
            raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}, got {args.engine!r}")
        if not args.model or not args.model.strip():
            raise ConfigError("--model is required (e.g. offline:smollm2 or HuggingFaceTB/SmolLM2-135M-Instruct)")
        for name in ("n", "concurrency", "max_new_tokens"):
            if getattr(args, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
        for name in ("max_tasks", "max_context_len"):
            value = getattr(args, name)
            if value is not None and value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if not args.temperature >= 0:
            raise ConfigError(f"--temperature must be >= 0, got {args.temperature}")
        if not 0 < args.top_p <= 1:
            raise ConfigError(f"--top-p must be in (0, 1], got {args.top_p}")
        if args.engine == "sglang" and not args.base_url:
            raise ConfigError(
                "--engine sglang needs --base-url (the SGLang server or router, e.g. http://127.0.0.1:30000)"
            )
        if args.engine != "transformers" and (args.device or args.dtype):
            raise ConfigError("--device and --dtype apply to --engine transformers only")
        if getattr(args, "keep_failures", False) and getattr(args, "retry_failures", False):
            raise ConfigError(
                "--keep-failures and --retry-failures contradict each other (rerunning failures is the default)"
            )
        if getattr(args, "family", None):
            from openreward_rl.config import check_family_name

            check_family_name(args.family, "--family")
        for spec in args.serve:
            if ":" not in spec:
                raise ConfigError(f"--serve {spec!r} must look like path/to/file.py:ClassName")
        _check_local_path(args)
        if args.engine == "transformers":
            from openreward_rl.engines.transformers import check_model_name

            check_model_name(args.model.strip())
        return from_attributes(
            cls,
            args,
            model=args.model.strip(),
            output=Path(args.output) if args.output else None,
            serve=tuple(args.serve),
            skip_check_model=bool(getattr(args, "skip_check_model", False)),
        )

    @property
    def sampling_params(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p}


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name


def looks_like_path(name: str) -> bool:
    """`name` can only mean a local path: absolute, ./ ../ ~, or a separator without the hub's owner/name shape.

    >>> [looks_like_path(n) for n in ("/no/such", "./m", "~/m", "a/b/c", "Qwen/Qwen3-8B", "offline:qwen3", "gpt-4o")]
    [True, True, True, True, False, False, False]
    """
    if name.startswith(("/", "./", "../", "~")) or name in (".", ".."):
        return True
    separators = {sep for sep in (os.sep, os.altsep) if sep is not None}
    return any(sep in name for sep in separators) and not _HUB_ID.fullmatch(name)


def _check_local_path(args: Any) -> None:
    """A model (transformers) or tokenizer source that is a path must exist: otherwise Hugging Face
    answers that it is not a valid repo id, which hides the real problem."""
    tokenizer = getattr(args, "tokenizer", None)
    option, name = (
        ("--tokenizer", tokenizer) if tokenizer and args.engine != "transformers" else ("--model", args.model.strip())
    )
    if looks_like_path(name) and not os.path.exists(os.path.expanduser(name)):
        used_for = (
            ""
            if args.engine == "transformers" or option == "--tokenizer"
            else " (the tokenizer is loaded from it; pass --tokenizer to load it from elsewhere)"
        )
        raise ConfigError(f"{option} {name!r}: no such file or directory{used_for}")


# Config keys that change what an episode is (prompt, parsing, tools, rewards, limits); a results file
# written under other values is not resumed. Task selection (splits, num_samples) is the eval keys'.
_EPISODE_KEYS = (
    "system_prompt_template",
    "thinking",
    "parser",
    "tool_execution",
    "on_no_tool_call",
    "nudge_message",
    "train_thinking",
    "max_tool_output_tokens",
    "chat_template_kwargs",
)
_ENVIRONMENT_EPISODE_KEYS = (
    "nonterminal_reward",
    "reward_reduction",
    "discount",
    "min_reward",
    "max_reward",
    "max_turns",
)


def eval_settings(options: EvalOptions, config: TrainConfig) -> dict[str, Any]:
    """The settings a results file records in every line (`eval`) and a resumed run must share."""
    episode = {key: getattr(config, key) for key in _EPISODE_KEYS}
    episode["environments"] = {
        name: {key: getattr(env, key) for key in _ENVIRONMENT_EPISODE_KEYS}
        for name, env in sorted(config.environments.items())
    }
    digest = hashlib.sha256(json.dumps(episode, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return {
        "engine": options.engine,
        "model": options.model,
        "tokenizer": options.tokenizer or options.model,
        "family": options.family or config.model_family,
        "temperature": options.temperature,
        "top_p": options.top_p,
        "max_new_tokens": options.max_new_tokens,
        "max_context_len": options.max_context_len,
        "config": digest,
    }


def open_results(options: EvalOptions, config: TrainConfig, console: Any) -> Any:
    """The `--output` file, locked and checked against this run's settings (`ResultsError` names the problem)."""
    from openreward_rl.cli.evaluation import ResultsFile

    def warn(message: str) -> None:
        console.print(f"openreward-rl eval: {message}", markup=False, soft_wrap=True)

    assert options.output is not None  # called only with --output
    results = ResultsFile(
        options.output, {"eval": eval_settings(options, config)}, warn=warn, overwrite=options.overwrite
    ).open()
    if results.moved_to is not None:
        console.print(f"moved the earlier results to {results.moved_to} (--overwrite)", markup=False, soft_wrap=True)
    return results


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summary_table(summary: Mapping[str, Any], title: str = "evaluation") -> Any:
    """A rich Table with one row per environment.

    "scored": episodes that were not infrastructure failures; "no reward": those of them that observed
    none, which "reward" counts 0.0, as the trainer does (`openreward_rl.observe.metrics`). "tool calls/ep"
    and "parse errors/ep": per scored episode (a model that never calls a tool shows 0.00 there).
    """
    from rich.table import Table

    table = Table(title=title)
    columns = (
        "environment",
        "episodes",
        "scored",
        "no reward",
        "reward",
        "success",
        "pass@k",
        "tool calls/ep",
        "parse errors/ep",
        "stop reasons",
        "turns",
        "tokens",
        "infra failures",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    for env, item in summary.items():
        reward = "-" if item.reward_mean is None else f"{item.reward_mean:.3f} ± {item.reward_std:.3f}"
        pass_k = ", ".join(f"@{k} {v:.2f}" for k, v in item.pass_at_k.items()) or "-"
        stops = ", ".join(
            f"{reason} {fraction:.0%}" for reason, fraction in sorted(item.stop_reasons.items(), key=lambda kv: -kv[1])
        )
        failures = (
            ", ".join(f"{reason} ×{count}: {detail[:80]}" for reason, (count, detail) in item.failures.items()) or "0"
        )
        table.add_row(
            env,
            str(item.episodes),
            str(item.scored),
            str(item.unrewarded),
            reward,
            _fmt(item.success_rate, 2),
            pass_k,
            _fmt(item.metric_means.get("tool_calls"), 2),
            _fmt(item.metric_means.get("parse_errors"), 2),
            stops,
            _fmt(item.turns_mean, 1),
            _fmt(item.sampled_tokens_mean, 0),
            failures,
        )
    return table


def _load_tokenizer(options: EvalOptions) -> Any:
    """The tokenizer episodes are rendered with: the model's (transformers), else --tokenizer or --model's."""
    from openreward_rl.assets import load_tokenizer

    if options.engine == "transformers":
        with boundary(ConfigError, f"cannot load the model {options.model!r}"):
            return load_tokenizer(options.model)
    tokenizer_name = options.tokenizer or options.model
    try:
        return load_tokenizer(tokenizer_name)
    except Exception as error:
        raise ConfigError(
            f"cannot load the tokenizer {tokenizer_name!r} ({type(error).__name__}: {first_line(error)}); pass --tokenizer (a hub name, a local path or offline:qwen3)"
        ) from error


def _build_engine(options: EvalOptions, tokenizer: Any) -> tuple[Any, Any]:
    """(engine, tokenizer), `tokenizer` from `_load_tokenizer`. Loads the model for the transformers engine."""
    if options.engine == "transformers":
        from openreward_rl.engines.transformers import SamplingConfig, TransformersEngine

        with boundary(ConfigError, f"cannot load the model {options.model!r}"):
            engine = TransformersEngine.from_pretrained(
                options.model,
                device=options.device,
                dtype=options.dtype,
                sampling=SamplingConfig(temperature=options.temperature, top_p=options.top_p),
                default_max_new_tokens=options.max_new_tokens,
                tokenizer=tokenizer,
            )
        return engine, engine.tokenizer
    if options.engine == "sglang":
        from openreward_rl.engines.sglang import SGLangEngine

        return SGLangEngine(options.base_url), tokenizer
    from openreward_rl.engines.openai_chat import OpenAIChatEngine

    return OpenAIChatEngine(
        options.base_url or "https://api.openai.com/v1", options.model, tokenizer, api_key_env=options.api_key_env
    ), tokenizer


async def run_eval(
    options: EvalOptions,
    config: TrainConfig,
    *,
    engine: Any,
    tokenizer: Any,
    client: Any,
    console: Any,
    results: Any = None,
    server_check: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """List tasks, run the missing (task, sample) pairs, write them, and return the per-environment summary.

    `results`: the `--output` file already opened (`open_results`), else it is opened here; either way
    it is closed (rewritten with one line per episode, unlocked) on return. `server_check` is awaited
    once the prompt renderer has accepted the model, before the first episode (`model_server_check`).
    """
    if results is None and options.output:
        results = open_results(options, config, console)
    with results if results is not None else contextlib.nullcontext():
        return await _run_eval(
            options,
            config,
            engine=engine,
            tokenizer=tokenizer,
            client=client,
            console=console,
            results=results,
            server_check=server_check,
        )


def model_server_check(options: EvalOptions) -> Callable[[], Awaitable[None]] | None:
    """For a model server (sglang, openai): one cheap request to it (`openreward_rl.cli.model_endpoint`)."""
    if options.engine == "transformers":
        return None
    from openreward_rl.cli.model_endpoint import check_model_endpoint

    base_url = options.base_url or "https://api.openai.com/v1"
    api_key = os.environ.get(options.api_key_env) if options.engine == "openai" else None
    return lambda: asyncio.to_thread(
        check_model_endpoint, options.engine, base_url, api_key=api_key, key_name=f"${options.api_key_env}"
    )


async def _run_eval(
    options: EvalOptions,
    config: TrainConfig,
    *,
    engine: Any,
    tokenizer: Any,
    client: Any,
    console: Any,
    results: Any,
    server_check: Any,
) -> dict[str, Any]:
    from openreward_rl.cli.evaluation import EvalJob, eval_key, evaluate, plan
    from openreward_rl.env.tasks import list_tasks
    from openreward_rl.loop.rollout import Rollouts
    from openreward_rl.observe.metrics import summarize
    from openreward_rl.observe.upload import TrajectoryUploader

    check = getattr(engine, "check_sampling_params", None)
    if check is not None:
        check({**options.sampling_params, "max_new_tokens": options.max_new_tokens})
    rollouts = Rollouts.from_config(
        config,
        engine=engine,
        tokenizer=tokenizer,
        client=client,
        model=options.model,
        max_context_len=options.max_context_len,
        max_new_tokens=options.max_new_tokens,
    )  # the same constructor as the training hooks: one config renders one prompt
    if server_check is not None:
        await server_check()
    tasks = await list_tasks(client, config, max_tasks=options.max_tasks, seed=options.seed)
    if not tasks:
        raise ConfigError("the configured environments and splits have no tasks")
    wanted = {eval_key(task, sample) for task in tasks for sample in range(options.n)}
    done = results.done if results is not None else {}
    kept = {key: trajectory for key, trajectory in done.items() if key in wanted}
    jobs = plan(tasks, options.n, kept, keep_failures=options.keep_failures)
    if kept:
        failed = sum(trajectory.stop_reason.is_infrastructure_failure for trajectory in kept.values())
        rerun = (
            f", {failed} of them infrastructure failures to run again" if failed and not options.keep_failures else ""
        )
        kept_failed = (
            f" ({failed} of them infrastructure failures, kept: --keep-failures)"
            if failed and options.keep_failures
            else ""
        )
        console.print(
            f"resuming {options.output}: {len(wanted) - len(jobs)} of {len(wanted)} episodes already done{kept_failed}, "
            f"{len(jobs)} to run{rerun}",
            markup=False,
            soft_wrap=True,
        )
    results_by_key = dict(kept)

    uploader = TrajectoryUploader.from_config(client, config)

    async def run_one(job: EvalJob) -> Any:
        trajectory = await rollouts.run(job.task, sampling_params=options.sampling_params)
        if trajectory.messages:  # returns at once; uploads run on the uploader's threads
            uploader.submit(trajectory, sampling_params=options.sampling_params)
        return trajectory

    with episode_bar(console, len(jobs)) as advance:

        def on_done(job: EvalJob, trajectory: Any) -> None:
            results_by_key[job.key] = trajectory
            advance(trajectory)

        try:
            await evaluate(jobs, run_one, concurrency=options.concurrency, results=results, on_done=on_done)
        finally:
            await uploader.aclose()
            await rollouts.aclose()
    return summarize(results_by_key.values())


@contextlib.contextmanager
def episode_bar(console: Any, total: int) -> Iterator[Callable[[Any], None]]:
    """A progress bar over `total` episodes on `console`; the callback it yields advances it by one
    finished trajectory and shows that one's environment, reward and stop reason (`eval`, and the
    evaluations of `train --framework trl`)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        progress = bar.add_task("episodes", total=total)

        def advance(trajectory: Any) -> None:
            reward = "-" if trajectory.reward is None else f"{trajectory.reward:g}"
            bar.update(
                progress,
                advance=1,
                description=f"{trajectory.task.environment} reward {reward} ({trajectory.stop_reason.value})",
            )

        yield advance


def log_to_wandb(options: EvalOptions, summary: Mapping[str, Any], config: TrainConfig) -> None:
    """The summary's flat metrics as one WandB row on the `eval/step` axis, under `openreward_eval/`."""
    from openreward_rl.observe.metrics import flat_metrics
    from openreward_rl.observe.wandb_logging import WandbLogger

    run_config = {
        "engine": options.engine,
        "model": options.model,
        "n": options.n,
        "temperature": options.temperature,
        "top_p": options.top_p,
        "config": config.source,
    }
    logger = WandbLogger(project=options.wandb_project, name=options.wandb_run, config=run_config)
    try:
        logger.log(flat_metrics(summary, prefix="openreward_eval/"), step_key="eval/step", step=0)
    finally:
        logger.finish()


def run(args: Any) -> int:
    """`eval`: every check that needs no model (options, config, keys, the served classes, each environment
    reachable with its splits) before the model loads; then the episodes. An error is raised to the
    command's boundary (`cli.failures`): one line."""
    from rich.console import Console

    from openreward_rl.engines.transformers import check_device
    from openreward_rl.env.local_server import check_servable, load_environment_class

    console = Console(stderr=True)
    out = Console() if Console().is_terminal else Console(width=150)
    install_log_redaction()
    _compat.install()  # the SDK fixes and process-wide patches, checked against the installed libraries (`openreward_rl._compat`)
    register_known_secrets(variables=[args.api_key_env])  # before anything can log; --serve defers check_ready
    options = EvalOptions.from_args(args)
    config = load_config(args.config)
    if not options.serve:
        check_ready(config)  # an API key for remote environments; registers secrets for redaction
    if options.serve and (config.env_base_url or any(env.base_url for env in config.environments.values())):
        raise ConfigError("--serve sets env_base_url; remove env_base_url / base_url from the config or drop --serve")
    if options.engine == "openai" and not options.base_url and not os.environ.get(options.api_key_env):
        raise ConfigError(
            f"--engine openai against api.openai.com needs ${options.api_key_env} (or pass --base-url for a local server)"
        )
    if options.engine == "transformers":
        check_device(options.device)
    classes = []
    if options.serve:
        with boundary(ConfigError, "--serve"):
            classes = [load_environment_class(spec) for spec in options.serve]
        check_servable(classes)
    os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")  # an in-process env server logs every request at INFO
    results = open_results(options, config, console) if options.output else None
    try:
        return _serve_and_run(options, config, classes, console, out, results)
    finally:
        if results is not None:
            results.close()


def _serve_and_run(
    options: EvalOptions, config: TrainConfig, classes: Sequence[Any], console: Any, out: Any, results: Any
) -> int:
    """Serve `classes`, check every environment, load the model, run the episodes, print the summary."""
    from openreward_rl.env.local_server import loopback_environ, serve_environments, variant_name
    from openreward_rl.loop.rollout import episode_stack

    with contextlib.ExitStack() as stack:
        base_url, served = None, {}
        if classes:
            os.environ.update(
                {
                    k: v
                    for k, v in loopback_environ().items()
                    if k in ("NO_PROXY", "no_proxy", "OPENREWARD_DISABLE_UPDATE_CHECK")
                }
            )
            server = stack.enter_context(serve_environments(list(classes)))
            base_url = server.base_url
            served = {variant_name(cls): variant_name(cls) for cls in classes}
            console.print(f"serving {', '.join(cls.name() for cls in classes)} on {base_url}", markup=False)
        prepared = prepare_config(
            config,
            split=options.split,
            served=served,
            base_url=base_url,
            family=options.family,
            skip_check_model=options.skip_check_model,
        )
        check_ready(prepared)
        # an unreachable server, an environment it does not serve, a split it lacks: one line, before the model loads
        asyncio.run(_check_environments(prepared, split_option="--split" if options.split else None))
        tokenizer = _load_tokenizer(options)
        episode_stack(prepared, tokenizer, options.model)  # the parser, the family, the tools the first prompt shows
        with console.status(f"loading {options.model} ({options.engine})"):
            engine, tokenizer = _build_engine(options, tokenizer)
        try:
            try:
                summary = asyncio.run(_episodes(options, prepared, engine, tokenizer, console, results))
            except KeyboardInterrupt:
                console.print(
                    "interrupted; rerun the same command to resume" if options.output else "interrupted", markup=False
                )
                return 130
        finally:
            asyncio.run(engine.aclose())  # a hard stop: generation in flight ends now, not at max_new_tokens
    out.print(
        summary_table(
            summary, title=f"{options.model} ({options.engine}, n={options.n}, temperature={options.temperature:g})"
        )
    )
    if options.wandb_project:
        log_to_wandb(options, summary, config)
    if options.output:
        out.print(f"trajectories: {options.output}  (view one with: openreward-rl show {options.output})", markup=False)
    return _infrastructure_verdict(summary, console, rerun=bool(options.output))


async def _check_environments(config: TrainConfig, *, split_option: str | None) -> None:
    from openreward import AsyncOpenReward

    client = AsyncOpenReward()  # the key from OPENREWARD_API_KEY; local servers need none
    try:
        await check_environments(client, config, split_option=split_option)
    finally:
        await client.environments.aclose()


async def _episodes(
    options: EvalOptions, config: TrainConfig, engine: Any, tokenizer: Any, console: Any, results: Any
) -> dict[str, Any]:
    from openreward import AsyncOpenReward

    client = AsyncOpenReward()
    try:
        return await run_eval(
            options,
            config,
            engine=engine,
            tokenizer=tokenizer,
            client=client,
            console=console,
            results=results,
            server_check=model_server_check(options),
        )
    finally:
        await client.environments.aclose()


def _infrastructure_verdict(summary: Mapping[str, Any], console: Any, *, rerun: bool) -> int:
    """1, with one line saying so, when most episodes were infrastructure failures: the figures then
    say little about the model. Else 0."""
    episodes = sum(item.episodes for item in summary.values())
    failed = sum(item.infrastructure_failures for item in summary.values())
    if failed * 2 <= episodes:
        return 0
    kinds: Counter[str] = Counter()
    for item in summary.values():
        for reason, (count, _) in item.failures.items():
            kinds[reason] += count
    detail = next((detail for item in summary.values() for _, detail in item.failures.values() if detail), "")
    again = "; fix the cause and rerun the same command: failed episodes run again" if rerun else ""
    console.print(
        f"openreward-rl eval: {failed} of {episodes} episodes were infrastructure failures "
        f"({', '.join(f'{reason} ×{count}' for reason, count in kinds.most_common())}; e.g. {detail[:200]}){again}",
        markup=False,
        soft_wrap=True,
    )
    return 1

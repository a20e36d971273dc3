"""Build (and run) the Ray commands that launch Slime or Miles training with this library's hooks.

What `openreward-rl train` runs, in order:

1. `ray start --head ... --dashboard-host=127.0.0.1` when `ray status` finds no running cluster (an
   existing one is reused);
2. `ray job submit --address=http://127.0.0.1:8265 --runtime-env-json=... -- python3 <framework>/train.py ...`.

API keys (`redaction.KNOWN_SECRET_VARIABLES`) are never in these commands (any user sees them in
`ps`) nor in the job's runtime env (Ray stores it in the job table, and the dashboard's job API
returns it to anyone who reaches the port). Ray starts every worker, the job's driver included, with
the environment of the raylet, which `ray start` passes on from the shell that ran it: the keys
reach the job that way. The dashboard listens on 127.0.0.1 unless `dashboard_host` says otherwise.

The job's arguments follow the cookbook's run.sh plus what it forgot: `--custom-rm-path`,
`--rollout-max-context-len` and `--metadata-key metadata`; on Slime also
`--custom-reward-post-process-path openreward_rl.backends.advantages.slime_episode_post_process` (GRPO groups
that stay right when episodes fork into several samples, see backends/advantages.py); arguments after `--` go to train.py last,
so they can override anything.

>>> spec = LaunchSpec(framework="miles", framework_path="/opt/miles", task_data="tasks.jsonl", config="train_config.yaml")
>>> args = train_arguments(spec)
>>> args[args.index("--custom-generate-function-path") + 1]
'openreward_rl.backends.miles.generate'
>>> args[args.index("--global-batch-size") + 1]
'512'
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import attrs

from openreward_rl.config import CHECK_MODEL_ENV
from openreward_rl.errors import TrainerError
from openreward_rl.redaction import KNOWN_SECRET_VARIABLES, MIN_SECRET_LENGTH

__all__ = [
    "LaunchError",
    "LaunchSpec",
    "LaunchPlan",
    "train_arguments",
    "megatron_arguments",
    "read_model_args",
    "runtime_env",
    "library_path",
    "plan_launch",
    "check_batch_sizes",
    "ray_is_running",
]

FRAMEWORKS = ("slime", "miles")
ROLLOUT_MODES = ("sync", "partial", "fully-async")
# The fully-async rollout function each framework's train_async.py runs (read at the commits in docs/training.md):
# Slime selects it by path; Miles by its own --fully-async flag (miles/utils/arguments.py).
SLIME_FULLY_ASYNC_ROLLOUT = "slime.rollout.fully_async_rollout.generate_rollout_fully_async"
DASHBOARD_PORT = 8265
DASHBOARD_HOST = "127.0.0.1"  # Ray's job API has no authentication: reachable from this machine only
# Settings (no secrets) passed to the job in its runtime env when set in the launching shell.
FORWARDED_ENV = ("OPENREWARD_RUN_NAME", "OPENREWARD_SESSION_URL", "OPENREWARD_API_URL", "HF_HOME")
# Reach the job only through the environment of `ray start` (see the module docstring).
SECRET_ENV = KNOWN_SECRET_VARIABLES


class LaunchError(TrainerError, ValueError):
    """The launch cannot go ahead; the message says what to change."""


@attrs.frozen
class LaunchSpec:
    """The cookbook's run.sh settings, plus the context budget and the framework checkout."""

    framework: str
    framework_path: str
    task_data: str = "tasks.jsonl"
    config: str = "train_config.yaml"
    model: str = "Qwen/Qwen3-30B-A3B"
    lr: float = 1e-5
    num_gpus: int = 4
    tp: int = 4
    rollout_batch_size: int = 32
    n_samples: int = 16
    global_batch_size: int | None = None  # default: rollout_batch_size * n_samples (one step per rollout)
    max_response_len: int = 4096
    max_context_len: int = 32768
    max_tokens_per_gpu: int = 8192
    temperature: float = 1.0
    num_rollout: int = 3000
    train_backend: str | None = None  # default: megatron on Slime (its FSDP backend is gone), fsdp on Miles
    save: str | None = None
    save_interval: int = 10
    load: str | None = None
    wandb_project: str = "slime-openreward"
    wandb_run: str | None = None
    dynamic_filter: bool = True
    rollout_mode: str = "sync"  # sync | partial (--partial-rollout + over-sampling) | fully-async (train_async.py)
    over_sampling_batch_size: int | None = None  # default under partial: 2 x rollout_batch_size
    mask_offpolicy: bool = False  # --mask-offpolicy-in-partial-rollout
    rollout_gpus: int | None = (
        None  # GPUs for SGLang, the rest train (not colocated); default: colocated, except fully-async: num_gpus // 2
    )
    dashboard_host: str = DASHBOARD_HOST  # `ray start --dashboard-host`; 0.0.0.0 exposes the job API to the network
    # Megatron backend (what the cookbook's run.sh asks for): Megatron-LM's checkout (put on PYTHONPATH), the
    # reference checkpoint (torch_dist, also where training starts without --load), and the model's Megatron
    # arguments: a framework scripts/models file, found from --model when not given.
    megatron_path: str | None = None
    ref_load: str | None = None
    model_args_script: str | None = None
    advantage_estimator: str = "episode"  # the config's advantage.estimator: turn / mix add the advantage hooks
    task_sampling: bool = False  # the config sets task_sampling: our data source skips saturated tasks
    skip_check_model: bool = (
        False  # --skip-check-model: the hooks skip the family check too (OPENREWARD_RL_CHECK_MODEL=0)
    )
    extra: tuple[str, ...] = ()

    @property
    def backend(self) -> str:
        return self.train_backend or ("megatron" if self.framework == "slime" else "fsdp")

    @property
    def batch_size(self) -> int:
        return self.global_batch_size or self.rollout_batch_size * self.n_samples

    @property
    def over_sampling(self) -> int | None:
        """Groups fetched per refill: given, else twice the batch under partial rollout, else the trainer's default."""
        if self.over_sampling_batch_size is not None:
            return self.over_sampling_batch_size
        return 2 * self.rollout_batch_size if self.rollout_mode == "partial" else None

    @property
    def fully_async(self) -> bool:
        return self.rollout_mode == "fully-async"

    @property
    def colocated(self) -> bool:
        """Training and rollout share the same GPUs (`--colocate`): every mode but fully-async, unless `rollout_gpus` splits them."""
        return self.rollout_gpus is None and not self.fully_async

    @property
    def split_gpus(self) -> tuple[int, int]:
        """(actor GPUs, rollout GPUs): both the same colocated GPUs, or disjoint (`rollout_gpus`, fully-async)."""
        if self.colocated:
            return self.num_gpus, self.num_gpus
        rollout = self.rollout_gpus if self.rollout_gpus is not None else self.num_gpus // 2
        return self.num_gpus - rollout, rollout

    @property
    def train_script(self) -> str:
        return "train_async.py" if self.fully_async else "train.py"


def check_batch_sizes(spec: LaunchSpec) -> None:
    """Slime/Miles need rollout_batch_size * n_samples_per_prompt = global_batch_size * num_steps_per_rollout.

    >>> check_batch_sizes(LaunchSpec("slime", "/s", rollout_batch_size=16, n_samples=8, global_batch_size=48))
    Traceback (most recent call last):
    ...
    openreward_rl.cli.launcher.LaunchError: --rollout-batch-size 16 x --n-samples 8 = 128 samples per rollout is not a multiple of --global-batch-size 48; choose a divisor of 128 (e.g. 128 or 64)
    """
    for name, value in (
        ("--rollout-batch-size", spec.rollout_batch_size),
        ("--n-samples", spec.n_samples),
        ("--num-gpus", spec.num_gpus),
        ("--tp", spec.tp),
    ):
        if value < 1:
            raise LaunchError(f"{name} must be at least 1, got {value}")
    if not spec.lr > 0:
        raise LaunchError(f"--lr must be > 0, got {spec.lr:g}")
    if spec.global_batch_size is not None and spec.global_batch_size < 1:
        raise LaunchError(f"--global-batch-size must be at least 1, got {spec.global_batch_size}")
    per_rollout = spec.rollout_batch_size * spec.n_samples
    if per_rollout % spec.batch_size:
        half = per_rollout // 2
        hint = f"{per_rollout} or {half}" if half else str(per_rollout)
        raise LaunchError(
            f"--rollout-batch-size {spec.rollout_batch_size} x --n-samples {spec.n_samples} = {per_rollout} samples per rollout "
            f"is not a multiple of --global-batch-size {spec.batch_size}; choose a divisor of {per_rollout} (e.g. {hint})"
        )
    if spec.num_gpus % spec.tp and spec.colocated:
        raise LaunchError(
            f"--num-gpus {spec.num_gpus} is not a multiple of --tp {spec.tp}: each SGLang engine takes --tp GPUs"
        )
    _check_rollout_mode(spec)
    if spec.max_context_len <= spec.max_response_len:
        raise LaunchError(
            f"--max-context-len {spec.max_context_len} must exceed --max-response-len {spec.max_response_len} (the episode budget holds the prompt and every turn)"
        )


def _check_rollout_mode(spec: LaunchSpec) -> None:
    if spec.rollout_mode not in ROLLOUT_MODES:
        raise LaunchError(f"--rollout-mode must be one of {', '.join(ROLLOUT_MODES)}, got {spec.rollout_mode!r}")
    if spec.over_sampling_batch_size is not None:
        if spec.fully_async:
            raise LaunchError(
                "--over-sampling-batch-size does not apply to --rollout-mode fully-async (its worker keeps its own pool in flight); drop it"
            )
        if spec.over_sampling_batch_size < spec.rollout_batch_size:
            raise LaunchError(
                f"--over-sampling-batch-size {spec.over_sampling_batch_size} is below --rollout-batch-size {spec.rollout_batch_size}; "
                "over-sampling fetches at least a batch of groups per refill"
            )
    if spec.mask_offpolicy and spec.rollout_mode != "partial":
        raise LaunchError("--mask-offpolicy-in-partial-rollout needs --rollout-mode partial")
    if not spec.colocated:
        actor, rollout = spec.split_gpus
        mode = "--rollout-mode fully-async" if spec.fully_async else "--rollout-gpus"
        if actor < 1 or rollout < 1:
            raise LaunchError(
                f"{mode} needs GPUs for both training and rollout: --num-gpus {spec.num_gpus} leaves {actor} to train and {rollout} to roll out"
            )
        if rollout % spec.tp:
            raise LaunchError(
                f"{rollout} GPUs for rollout is not a multiple of --tp {spec.tp}; set --rollout-gpus to a multiple of --tp"
            )


def _check_spec(spec: LaunchSpec) -> None:
    if spec.framework not in FRAMEWORKS:
        raise LaunchError(f"--framework must be slime or miles, got {spec.framework!r}")
    if spec.backend not in ("fsdp", "megatron"):
        raise LaunchError(f"--train-backend must be fsdp or megatron, got {spec.backend!r}")
    if spec.framework == "slime" and spec.backend == "fsdp":
        raise LaunchError(
            "Slime removed its FSDP backend (THUDM/slime #1664); use --train-backend megatron, or --framework miles for FSDP"
        )
    if spec.task_sampling and not spec.dynamic_filter:
        raise LaunchError(
            "the config's task_sampling learns from the dynamic filter's verdicts: drop --no-dynamic-filter, or task_sampling"
        )
    check_batch_sizes(spec)
    _check_megatron(spec)


def _check_megatron(spec: LaunchSpec) -> None:
    """The Megatron backend cannot start without Megatron-LM, a checkpoint and the model's architecture flags."""
    if spec.backend != "megatron":
        if spec.model_args_script:
            raise LaunchError(
                "--model-args-script applies to the Megatron backend only (FSDP reads the architecture from --model)"
            )
        return
    if not spec.megatron_path:
        raise LaunchError(
            "the Megatron backend needs Megatron-LM on PYTHONPATH: pass --megatron-path /path/to/Megatron-LM or set $MEGATRON_PATH"
        )
    if not spec.ref_load:
        raise LaunchError(
            f"the Megatron backend needs a Megatron checkpoint of {spec.model}: pass --ref-load DIR "
            f"(write it with {spec.framework}'s tools/convert_hf_to_torch_dist.py)"
        )


def train_arguments(spec: LaunchSpec) -> list[str]:
    """The arguments of `python3 <framework>/train.py`."""
    _check_spec(spec)
    hooks = f"openreward_rl.backends.{spec.framework}"
    actor_gpus, rollout_gpus = spec.split_gpus
    args = [
        "--actor-num-nodes",
        "1",
        "--actor-num-gpus-per-node",
        str(actor_gpus),
        "--rollout-num-gpus",
        str(rollout_gpus),
        *(("--colocate",) if spec.colocated else ()),
        "--rollout-num-gpus-per-engine",
        str(spec.tp),
        "--hf-checkpoint",
        spec.model,
        *megatron_arguments(spec),
        "--prompt-data",
        str(Path(spec.task_data).resolve()),
        "--input-key",
        "prompt",
        "--label-key",
        "label",
        "--metadata-key",
        "metadata",
        "--rollout-shuffle",
        "--custom-generate-function-path",
        f"{hooks}.generate",
        "--custom-rm-path",
        f"{hooks}.reward",
        "--custom-rollout-log-function-path",
        "openreward_rl.backends.rollout_log.log_rollout",
        "--custom-eval-rollout-log-function-path",
        "openreward_rl.backends.rollout_log.log_eval_rollout",
        "--num-rollout",
        str(spec.num_rollout),
        "--n-samples-per-prompt",
        str(spec.n_samples),
        "--rollout-batch-size",
        str(spec.rollout_batch_size),
        "--global-batch-size",
        str(spec.batch_size),
        "--rollout-max-response-len",
        str(spec.max_response_len),
        "--rollout-max-context-len",
        str(spec.max_context_len),
        "--rollout-temperature",
        str(spec.temperature),
        "--advantage-estimator",
        "grpo",
        "--lr",
        str(spec.lr),
        "--use-dynamic-batch-size",
        "--max-tokens-per-gpu",
        str(spec.max_tokens_per_gpu),
        "--use-wandb",
        "--wandb-project",
        spec.wandb_project,
    ]
    if spec.framework == "miles":
        args += ["--train-backend", spec.backend]
    args += rollout_mode_arguments(spec)
    args += advantage_arguments(spec) or episode_post_process_arguments(spec)
    if spec.task_sampling:
        args += ["--data-source-path", f"openreward_rl.backends.task_sampling.{spec.framework.capitalize()}DataSource"]
    if spec.dynamic_filter:
        args += ["--dynamic-sampling-filter-path", "openreward_rl.backends.filters.keep_informative_groups"]
    if spec.wandb_run:
        args += ["--wandb-group", spec.wandb_run]
    if spec.save:
        args += ["--save", spec.save, "--save-interval", str(spec.save_interval)]
    if spec.load:
        args += ["--load", spec.load]
    return args + list(spec.extra)


def megatron_arguments(spec: LaunchSpec) -> list[str]:
    """The model's Megatron architecture flags and its reference checkpoint; none on FSDP."""
    if spec.backend != "megatron":
        return ["--ref-load", spec.ref_load] if spec.ref_load else []
    script = model_args_script(spec)
    return [*read_model_args(script), "--ref-load", str(spec.ref_load)]


def model_args_script(spec: LaunchSpec) -> Path:
    """--model-args-script, else `<framework>/scripts/models/<model name>.sh` (Slime) or `.py` (Miles), any case."""
    if spec.model_args_script:
        script = Path(spec.model_args_script)
        if not script.is_file():
            raise LaunchError(f"--model-args-script {script} does not exist")
        return script
    models = Path(spec.framework_path) / "scripts" / "models"
    suffix = ".sh" if spec.framework == "slime" else ".py"
    wanted = f"{Path(spec.model.rstrip('/')).name}{suffix}".lower()
    found = sorted(p for p in models.glob(f"*{suffix}") if p.name.lower() == wanted) if models.is_dir() else []
    if not found:
        raise LaunchError(
            f"no Megatron model arguments for {spec.model}: {models} has no {wanted}; pass --model-args-script PATH"
        )
    return found[0]


def read_model_args(script: Path) -> list[str]:
    """MODEL_ARGS of a Slime-style bash file (sourced, as run.sh does) or `model_args()` of a Miles-style .py file."""
    if script.suffix == ".py":
        code = "import runpy,sys; print(runpy.run_path(sys.argv[1])['model_args']())"
        command = [sys.executable, "-c", code, str(script)]
    else:
        command = ["bash", "-c", 'source "$1"; printf "%s\\0" "${MODEL_ARGS[@]}"', "model-args", str(script)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LaunchError(f"cannot read the model arguments in {script}: {error}") from None
    if result.returncode:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise LaunchError(f"reading the model arguments in {script} failed: {last}")
    args = shlex.split(result.stdout) if script.suffix == ".py" else [a for a in result.stdout.split("\0") if a]
    if not args:
        raise LaunchError(f"{script} sets no model arguments (MODEL_ARGS for a .sh file, model_args() for a .py file)")
    return args


def episode_post_process_arguments(spec: LaunchSpec) -> list[str]:
    """Slime's GRPO groups made right under forks (`backends.advantages`, the `episode` estimator); Miles' own are right.
    The `turn`/`mix` estimators' post-process (`advantage_arguments`) groups by episode itself."""
    if spec.framework != "slime":
        return []
    return ["--custom-reward-post-process-path", "openreward_rl.backends.advantages.slime_episode_post_process"]


def advantage_arguments(spec: LaunchSpec) -> list[str]:
    """The trainer flags of the config's advantage estimator: none for `episode` (the trainer's GRPO).

    >>> advantage_arguments(LaunchSpec("slime", "/s", advantage_estimator="turn"))[::2]
    ['--custom-reward-post-process-path', '--custom-advantage-function-path']
    >>> advantage_arguments(LaunchSpec("miles", "/m", advantage_estimator="mix"))
    ['--custom-reward-post-process-path', 'openreward_rl.backends.advantages.miles_reward_post_process', '--use-opd', '--opd-type', 'sglang', '--opd-kl-coef', '1.0']
    """
    if spec.advantage_estimator == "episode":
        return []
    if spec.framework == "slime":
        return [
            "--custom-reward-post-process-path",
            "openreward_rl.backends.advantages.slime_reward_post_process",
            "--custom-advantage-function-path",
            "openreward_rl.backends.advantages.slime_advantages",
        ]
    return [
        "--custom-reward-post-process-path",
        "openreward_rl.backends.advantages.miles_reward_post_process",
        "--use-opd",
        "--opd-type",
        "sglang",
        "--opd-kl-coef",
        "1.0",
    ]


def rollout_mode_arguments(spec: LaunchSpec) -> list[str]:
    """The trainer flags of the rollout mode (the hooks themselves are the same in every mode).

    >>> rollout_mode_arguments(LaunchSpec("slime", "/s", rollout_mode="partial", rollout_batch_size=8))
    ['--partial-rollout', '--over-sampling-batch-size', '16']
    >>> rollout_mode_arguments(LaunchSpec("miles", "/m", rollout_mode="fully-async", num_gpus=8, tp=4))
    ['--fully-async']
    """
    if spec.rollout_mode == "partial":
        args = ["--partial-rollout", "--over-sampling-batch-size", str(spec.over_sampling)]
        return args + (["--mask-offpolicy-in-partial-rollout"] if spec.mask_offpolicy else [])
    if spec.fully_async:
        return (
            ["--rollout-function-path", SLIME_FULLY_ASYNC_ROLLOUT] if spec.framework == "slime" else ["--fully-async"]
        )
    return ["--over-sampling-batch-size", str(spec.over_sampling)] if spec.over_sampling is not None else []


def library_path(package_file: str | os.PathLike[str] | None = None) -> list[str]:
    """The PYTHONPATH entry a job needs to `import openreward_rl` as this process does: the folder holding
    the package (a checkout's `src`), or none where the package is installed in site-packages (the job's
    interpreter finds it there). Never the package folder itself, whose modules would become top-level
    names (`import retry` would load ours).

    >>> library_path("/venv/lib/python3.11/site-packages/openreward_rl/__init__.py")
    []
    >>> library_path("/home/me/openreward_rl/src/openreward_rl/__init__.py")
    ['/home/me/openreward_rl/src']
    """
    package = (
        Path(package_file).resolve().parent if package_file else Path(__file__).resolve().parents[1]
    )  # .../openreward_rl
    holder = package.parent
    return [] if holder.name in ("site-packages", "dist-packages") else [str(holder)]


def runtime_env(spec: LaunchSpec, environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Ray's runtime env: PYTHONPATH with the framework checkout and this library, the config, and the
    `FORWARDED_ENV` settings; never an API key (the job inherits those from the Ray head)."""
    inherited = [str(Path(p).resolve()) for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    megatron = [str(Path(spec.megatron_path).resolve())] if spec.backend == "megatron" and spec.megatron_path else []
    paths = [str(Path(spec.framework_path).resolve()), *megatron, *library_path(), *inherited]
    env_vars = {
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "TRAIN_CONFIG": str(Path(spec.config).resolve()),
        "OPENREWARD_RL_CONFIG": str(Path(spec.config).resolve()),
    }
    if spec.skip_check_model:
        env_vars[CHECK_MODEL_ENV] = "0"  # the hooks' config then has check_model: false
    if spec.framework == "miles" and spec.mask_offpolicy:
        # Miles refuses --mask-offpolicy-in-partial-rollout on its class-based rollout path (miles/utils/arguments.py)
        env_vars["MILES_USE_LEGACY_ROLLOUT_V1"] = "1"
    env_vars.update({key: environ[key] for key in FORWARDED_ENV if environ.get(key)})
    return {"env_vars": env_vars}


@attrs.frozen
class LaunchPlan:
    """The commands to run, in order. `start_ray` is None when a cluster is already up."""

    start_ray: tuple[str, ...] | None
    submit: tuple[str, ...]

    @property
    def reuses_cluster(self) -> bool:
        return self.start_ray is None

    def commands(self) -> list[tuple[str, ...]]:
        return [c for c in (self.start_ray, self.submit) if c is not None]

    def shell(self, environ: Mapping[str, str] | None = None) -> str:
        """The commands as shell-quoted lines; secret values from `environ` shown as `<NAME>`."""
        out = "\n".join(shlex.join(command) for command in self.commands())
        for key in SECRET_ENV:
            value = (environ or {}).get(key)
            if value:
                out = out.replace(value, f"<{key}>")
        return out


def ray_is_running() -> bool:
    """True when `ray status` reaches a running cluster."""
    try:
        result = subprocess.run(["ray", "status"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise LaunchError(
            "the `ray` command is not installed in this environment; install Slime/Miles' dependencies (pip install 'ray[default]')"
        ) from None
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


def plan_launch(spec: LaunchSpec, environ: Mapping[str, str], *, ray_running: bool) -> LaunchPlan:
    """The commands for `spec`; `ray_running` says whether to reuse a cluster.

    `LaunchError` when an API key's value from `environ` would be in a command (an argument after
    `--` such as `--wandb-key`): the job reads the keys from its environment.
    """
    train_py = Path(spec.framework_path).resolve() / spec.train_script
    start = None
    if not ray_running:
        start = (
            "ray",
            "start",
            "--head",
            "--node-ip-address",
            "127.0.0.1",
            "--num-gpus",
            str(spec.num_gpus),
            "--disable-usage-stats",
            f"--dashboard-host={spec.dashboard_host}",
            f"--dashboard-port={DASHBOARD_PORT}",
        )
    submit = (
        "ray",
        "job",
        "submit",
        f"--address=http://{_submit_host(spec.dashboard_host)}:{DASHBOARD_PORT}",
        f"--runtime-env-json={json.dumps(runtime_env(spec, environ), sort_keys=True)}",
        "--",
        "python3",
        str(train_py),
        *train_arguments(spec),
    )
    plan = LaunchPlan(start_ray=start, submit=submit)
    _refuse_secrets_in_commands(plan, environ)
    return plan


def _submit_host(dashboard_host: str) -> str:
    """Where this machine reaches the dashboard: loopback when it listens there or on every interface."""
    return "127.0.0.1" if dashboard_host in ("0.0.0.0", "::", "localhost", "") else dashboard_host


def _refuse_secrets_in_commands(plan: LaunchPlan, environ: Mapping[str, str]) -> None:
    for key in SECRET_ENV:
        value = environ.get(key) or ""
        if len(value) >= MIN_SECRET_LENGTH and any(
            value in argument for command in plan.commands() for argument in command
        ):
            raise LaunchError(
                f"the value of ${key} is in the launch command, where any user of this machine sees it (`ps`); "
                f"drop it from the arguments: the job reads {key} from the environment of the Ray head"
            )


def run_plan(plan: LaunchPlan, environ: Mapping[str, str] | None = None) -> int:
    """Run the commands in order with `environ` (default: this process's); the first failure's exit status is returned.

    `ray start` hands `environ`, API keys included, to the Ray head, whose workers run the job.
    """
    env = dict(os.environ if environ is None else environ)
    for command in plan.commands():
        result = subprocess.run(list(command), env=env)
        if result.returncode:
            return result.returncode
    return 0

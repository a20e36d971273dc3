"""`openreward-rl train`: dry runs for Slime and Miles, and the errors a launch must give first."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from openreward_rl.cli import main
from openreward_rl.cli.launcher import LaunchSpec, plan_launch


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    file = tmp_path / "train_config.yaml"
    file.write_text("environments:\n  GeneralReasoning/WhoDunIt:\n    splits: [train]\n")
    return file


def dry_run(capsys, *argv: str) -> list[list[str]]:
    assert main(["train", "--dry-run", *argv]) == 0  # flags after `--` belong to train.py
    lines = [line for line in capsys.readouterr().out.splitlines() if line and not line.startswith("#")]
    return [shlex.split(line) for line in lines]


def value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


@pytest.mark.parametrize("framework", ["slime", "miles"])
def test_dry_run_prints_ray_start_and_submit(framework: str, config_file: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("OPENREWARD_API_KEY", "sk-secret-123")
    start, submit = dry_run(
        capsys, "--framework", framework, f"--{framework}-path", str(tmp_path / framework), "--config", str(config_file),
        "--model", "Qwen/Qwen3-4B", "--n-samples", "8", "--rollout-batch-size", "16", "--", "--use-kl-loss", "--kl-loss-coef", "0.01",
    )  # fmt: skip
    assert start[:3] == ["ray", "start", "--head"] and value(start, "--num-gpus") == "4"
    assert submit[:4] == ["ray", "job", "submit", "--address=http://127.0.0.1:8265"]
    train = submit[submit.index("--") + 1 :]
    assert train[:2] == ["python3", str(tmp_path / framework / "train.py")]
    assert value(train, "--custom-generate-function-path") == f"openreward_rl.backends.{framework}.generate"
    assert value(train, "--custom-rm-path") == f"openreward_rl.backends.{framework}.reward"
    assert value(train, "--custom-rollout-log-function-path") == "openreward_rl.backends.rollout_log.log_rollout"
    assert value(train, "--custom-eval-rollout-log-function-path") == "openreward_rl.backends.rollout_log.log_eval_rollout"
    assert value(train, "--metadata-key") == "metadata" and value(train, "--rollout-max-context-len") == "32768"
    assert value(train, "--global-batch-size") == "128" and value(train, "--hf-checkpoint") == "Qwen/Qwen3-4B"
    assert train[-3:] == ["--use-kl-loss", "--kl-loss-coef", "0.01"]  # passthrough last
    assert ("--train-backend" in train) == (framework == "miles")
    runtime = json.loads(submit[4].split("=", 1)[1])["env_vars"]
    assert runtime["TRAIN_CONFIG"] == str(config_file) and runtime["OPENREWARD_API_KEY"] == "<OPENREWARD_API_KEY>"
    assert str(tmp_path / framework) in runtime["PYTHONPATH"].split(":")


def test_reused_ray_cluster_is_not_restarted(tmp_path: Path) -> None:
    plan = plan_launch(LaunchSpec("miles", str(tmp_path)), {}, ray_running=True)
    assert plan.start_ray is None and [c[:3] for c in plan.commands()] == [("ray", "job", "submit")]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rollout-batch-size", "16", "--n-samples", "8", "--global-batch-size", "48"], "not a multiple of --global-batch-size 48"),
        (["--num-gpus", "6", "--tp", "4"], "not a multiple of --tp"),
        (["--train-backend", "fsdp"], "Slime removed its FSDP backend"),
        (["--max-context-len", "1000"], "must exceed --max-response-len"),
    ],
)
def test_bad_launch_settings(argv: list[str], message: str, config_file: Path, capsys) -> None:
    assert main(["train", "--framework", "slime", "--slime-path", "/opt/slime", "--config", str(config_file), *argv, "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_missing_framework_path(config_file: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("MILES_PATH", raising=False)
    assert main(["train", "--framework", "miles", "--config", str(config_file), "--dry-run"]) == 2
    assert "--miles-path" in capsys.readouterr().err


def test_real_launch_checks_keys_and_files(config_file: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    checkout = tmp_path / "slime"
    checkout.mkdir()
    tasks = tmp_path / "tasks.jsonl"
    common = ["train", "--framework", "slime", "--slime-path", str(checkout), "--config", str(config_file), "--task-data", str(tasks)]
    monkeypatch.delenv("OPENREWARD_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert main(common) == 2 and "has no train.py" in capsys.readouterr().err
    (checkout / "train.py").write_text("")
    assert main(common) == 2 and "openreward-rl prepare" in capsys.readouterr().err
    tasks.write_text("")
    assert main(common) == 2 and "needs an API key: set OPENREWARD_API_KEY" in capsys.readouterr().err
    monkeypatch.setenv("OPENREWARD_API_KEY", "k")
    assert main(common) == 2 and "WANDB_API_KEY is not set" in capsys.readouterr().err


def test_dry_run_refuses_a_broken_config(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("environment: {}\n")
    assert main(["train", "--framework", "slime", "--slime-path", "/opt/slime", "--config", str(bad), "--dry-run"]) == 2
    assert "did you mean 'environments'" in capsys.readouterr().err


def test_real_launch_refuses_an_unreachable_environment_before_ray(config_file: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """The preflight asks each environment for its splits; the suite's OpenReward URL is a closed loopback port."""
    checkout = tmp_path / "slime"
    checkout.mkdir()
    (checkout / "train.py").write_text("")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("")
    monkeypatch.setenv("OPENREWARD_API_KEY", "k")
    monkeypatch.setenv("WANDB_API_KEY", "w")
    monkeypatch.setattr("openreward_rl.cli.train.ray_is_running", lambda: pytest.fail("Ray was consulted before the environments were checked"))
    common = ["train", "--framework", "slime", "--slime-path", str(checkout), "--config", str(config_file), "--task-data", str(tasks)]
    assert main(common) == 2
    assert "cannot be used" in capsys.readouterr().err


@pytest.mark.parametrize("framework", ["slime", "miles"])
def test_dry_run_partial_rollout_passes_partial_and_over_sampling(framework: str, config_file: Path, tmp_path: Path, capsys) -> None:
    _, submit = dry_run(
        capsys, "--framework", framework, f"--{framework}-path", str(tmp_path), "--config", str(config_file),
        "--rollout-mode", "partial", "--rollout-batch-size", "16", "--mask-offpolicy",
    )  # fmt: skip
    train = submit[submit.index("--") + 1 :]
    assert train[1].endswith("/train.py") and "--colocate" in train
    assert "--partial-rollout" in train and "--mask-offpolicy-in-partial-rollout" in train
    assert value(train, "--over-sampling-batch-size") == "32"  # twice the batch by default
    runtime = json.loads(submit[4].split("=", 1)[1])["env_vars"]
    # Miles refuses the mask flag on its class-based rollout path unless the legacy path is chosen
    assert runtime.get("MILES_USE_LEGACY_ROLLOUT_V1") == ("1" if framework == "miles" else None)


@pytest.mark.parametrize("framework", ["slime", "miles"])
def test_dry_run_fully_async_uses_train_async_and_disjoint_gpus(framework: str, config_file: Path, tmp_path: Path, capsys) -> None:
    _, submit = dry_run(
        capsys, "--framework", framework, f"--{framework}-path", str(tmp_path), "--config", str(config_file),
        "--rollout-mode", "fully-async", "--num-gpus", "8", "--tp", "2", "--rollout-gpus", "2",
    )  # fmt: skip
    train = submit[submit.index("--") + 1 :]
    assert train[1] == str(tmp_path / "train_async.py")
    assert "--colocate" not in train and "--partial-rollout" not in train
    assert value(train, "--actor-num-gpus-per-node") == "6" and value(train, "--rollout-num-gpus") == "2"
    if framework == "slime":
        assert value(train, "--rollout-function-path") == "slime.rollout.fully_async_rollout.generate_rollout_fully_async"
    else:
        assert "--fully-async" in train and "--rollout-function-path" not in train


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rollout_mode": "eager"}, "--rollout-mode must be one of"),
        ({"rollout_mode": "partial", "over_sampling_batch_size": 8}, "below --rollout-batch-size 32"),
        ({"rollout_mode": "fully-async", "num_gpus": 8, "over_sampling_batch_size": 64}, "does not apply to --rollout-mode fully-async"),
        ({"mask_offpolicy": True}, "needs --rollout-mode partial"),
        ({"rollout_gpus": 2}, "under --rollout-mode fully-async only"),
        ({"rollout_mode": "fully-async", "num_gpus": 8, "rollout_gpus": 8}, "leaves 0 to train"),
        ({"rollout_mode": "fully-async", "num_gpus": 8, "rollout_gpus": 3}, "not a multiple of --tp 4"),
    ],
)
def test_rollout_mode_errors_name_the_flag(changes: dict, message: str, tmp_path: Path) -> None:
    from openreward_rl.cli.launcher import LaunchError, train_arguments

    with pytest.raises(LaunchError, match=message):
        train_arguments(LaunchSpec("slime", str(tmp_path), **changes))


def test_sync_mode_passes_no_rollout_mode_flags(tmp_path: Path) -> None:
    from openreward_rl.cli.launcher import train_arguments

    args = train_arguments(LaunchSpec("slime", str(tmp_path)))
    assert not {"--partial-rollout", "--over-sampling-batch-size", "--fully-async", "--rollout-function-path"} & set(args)
    explicit = train_arguments(LaunchSpec("slime", str(tmp_path), over_sampling_batch_size=64))
    assert explicit[explicit.index("--over-sampling-batch-size") + 1] == "64" and "--partial-rollout" not in explicit


def test_train_refuses_a_refused_model_family_before_ray(config_file: Path, tmp_path: Path, capsys) -> None:
    """The hooks would pick the family from --model (their hf_checkpoint); a refused one fails the launch up
    front, naming the family and why; `model_family` in the config overrides it."""
    argv = ["train", "--framework", "slime", "--slime-path", "/opt/slime", "--config", str(config_file), "--dry-run"]
    assert main([*argv, "--model", "google/gemma-4-31B-it"]) == 2
    err = capsys.readouterr().err
    assert "the gemma-4 model family is not supported: no Gemma 4 tokenizer" in err and "set model_family in" in err
    overridden = tmp_path / "generic.yaml"
    overridden.write_text(config_file.read_text() + "model_family: generic\n")
    assert main([*argv[:-2], str(overridden), "--dry-run", "--model", "google/gemma-4-31B-it"]) == 0
    assert main([*argv, "--model", "Qwen/Qwen3-8B"]) == 0


def test_partial_rollout_with_a_compacting_context_policy_is_refused_before_ray(tmp_path: Path, capsys) -> None:
    compacting = tmp_path / "compacting.yaml"
    compacting.write_text("environments:\n  Corridor:\n    context_policy: summarize\n")
    argv = ["train", "--framework", "slime", "--slime-path", "/opt/slime", "--config", str(compacting), "--dry-run"]
    assert main([*argv, "--rollout-mode", "partial"]) == 2
    assert "cannot take the fan-out samples of a context policy (Corridor)" in capsys.readouterr().err
    assert main([*argv, "--rollout-mode", "sync"]) == 0
    compacting.write_text("environments:\n  Corridor:\n    context_policy: {name: summarize, threshold: 1.5}\n")
    assert main(argv) == 2
    assert "environments.Corridor.context_policy: context policy 'summarize': threshold must be in (0, 1]" in capsys.readouterr().err

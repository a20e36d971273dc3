"""`openreward-rl train --framework trl` under `accelerate launch` on two processes of this machine's CPU (gloo): each
process samples its own share of every step and evaluation, the gradients are averaged, and the one main process
prints, logs and writes. The tiny random Qwen3 (`tiny_model.py`) keeps it to seconds; `RankPaint` (served by each
process) notes which process asked for which task."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openreward_rl.backends.trl.ranks import Ranks

REPO = Path(__file__).resolve().parents[1]
RANK_PAINT = f"{REPO / 'tests' / 'rank_paint_env.py'}:RankPaint"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_model import save_tiny_qwen3

    return save_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"))


def test_two_processes_sample_their_own_groups_and_write_once(tmp_path: Path, tiny_model_dir: Path) -> None:
    """One step of 2 tasks x 2 episodes on 2 processes: each process runs one whole group, of a task the other does
    not run; the step's logged episode count is 4 (the global batch, not a process's 2); the progress, the model,
    the checkpoint, the WandB run and the evaluation files are written once, each evaluation's 3 episodes split 2 + 1."""
    from observe_fixtures import read_offline_run
    from openreward_rl.env.local_server import loopback_environ

    config = tmp_path / "c.yaml"
    config.write_text(
        "environments:\n  RankPaint:\n    splits: [train]\n    max_turns: 1\nparser: hermes\non_no_tool_call: end\nupload: false\n"
    )
    log, results, out_dir = tmp_path / "ranks.log", tmp_path / "results.jsonl", tmp_path / "out"
    env = loopback_environ()
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")]),
        RANK_PAINT_LOG=str(log),
        OMP_NUM_THREADS="1",
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_DIR=str(tmp_path),
    )
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "openreward_rl.cli",
        "train",
        "--framework",
        "trl",
        "--config",
        str(config),
        "--model",
        str(tiny_model_dir),
        "--serve",
        RANK_PAINT,
        "--device",
        "cpu",
        "--output-dir",
        str(out_dir),
        "--max-steps",
        "1",
        "--rollout-batch-size",
        "2",
        "--n-samples",
        "2",
        "--max-response-len",
        "4",
        "--save-interval",
        "1",
        "--eval-split",
        "test",
        "--eval-max-tasks",
        "3",
        "--eval-n",
        "1",
        "--eval-output",
        str(results),
        "--wandb-project",
        "processes",
    ]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout

    asked = collections.defaultdict(list)  # (rank, split) -> task ids, one per episode
    for line in log.read_text().splitlines():
        rank, task = line.split()
        asked[rank, task.split("-")[0]].append(task)
    train = {rank: asked[rank, "train"] for rank in ("0", "1")}
    assert all(len(tasks) == 2 and len(set(tasks)) == 1 for tasks in train.values()), train  # a whole group each
    assert train["0"][0] != train["1"][0], train  # different tasks: the step's prompts are split, not repeated
    # each evaluation (before and after) of 3 tasks x 1: the main process runs 2 of them, the other the third
    assert (len(asked["0", "test"]), len(asked["1", "test"])) == (4, 2), dict(asked)
    assert len(set(asked["0", "test"])) == 2 and not set(asked["0", "test"]) & set(asked["1", "test"]), dict(asked)

    state = json.loads((out_dir / "checkpoint-1" / "trainer_state.json").read_text())
    logged = [entry for entry in state["log_history"] if "openreward/RankPaint/episodes" in entry]
    assert [entry["openreward/RankPaint/episodes"] for entry in logged] == [4.0], state["log_history"]
    for line in ("step 1/1 ", "model saved to", "done in ", "over 2 processes (1 task each)"):
        assert out.count(line) == 1, out
    _, rows = read_offline_run(tmp_path)  # one WandB run (it raises on two)
    assert [
        row["train/openreward/RankPaint/episodes"] for row in rows if "train/openreward/RankPaint/episodes" in row
    ] == [4.0], rows
    for file in (results, results.with_suffix(".before.jsonl")):
        assert len(file.read_text().splitlines()) == 3
    assert (out_dir / "model.safetensors").exists()


def test_a_step_that_cannot_be_split_in_whole_groups_is_refused(capsys, monkeypatch, tmp_path: Path) -> None:
    """Under a launcher of 2 processes, `--rollout-batch-size 3` is one line naming the flag, before anything loads."""
    from openreward_rl.backends.trl import TrlOptions
    from openreward_rl.cli import main
    from openreward_rl.errors import ConfigError

    monkeypatch.setenv("WORLD_SIZE", "2")
    config = tmp_path / "c.yaml"
    config.write_text("environments:\n  PaintColour:\n    splits: [train]\n")
    assert (
        main(
            [
                "train",
                "--framework",
                "trl",
                "--config",
                str(config),
                "--model",
                "offline:smollm2",
                "--rollout-batch-size",
                "3",
            ]
        )
        == 2
    )
    assert (
        "--rollout-batch-size 3 cannot be split over 2 processes: each samples whole groups, so it must be a multiple of 2"
        in capsys.readouterr().err
    )

    with pytest.raises(ConfigError, match="prompts-per-step 3 cannot be split over 2 processes"):
        TrlOptions(model="m", prompts_per_step=3, ranks=Ranks(index=0, count=2)).check_split()
    options = TrlOptions(model="m", prompts_per_step=4, n_samples=4, ranks=Ranks(index=1, count=2, local=1))
    assert (options.episodes_per_step, options.episodes_per_process) == (16, 8)
    assert TrlOptions(model="m", device="cuda", ranks=Ranks(index=1, count=2, local=1)).resolved_device == "cuda:1"


@pytest.mark.slow
def test_sft_on_two_processes_plays_each_teacher_episode_once_and_saves_once(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """`sft` under the same launcher: the 3 teacher episodes are played once over both processes (the line counts 3),
    `SFTTrainer` trains, and the lines and the saved model come from the main process alone."""
    from openreward_rl.env.local_server import loopback_environ

    env = loopback_environ()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "openreward_rl.cli",
        "sft",
        "--config",
        "examples/train_tool_agent_config.yaml",
        "--serve",
        "examples/environments/paint_order.py:PaintOrder",
        "--model",
        str(tiny_model_dir),
        "--device",
        "cpu",
        "--teacher",
        "examples/paint_order_teacher.py:teacher",
        "--max-tasks",
        "3",
        "--epochs",
        "1",
        "--max-response-len",
        "8",
        "--output-dir",
        str(tmp_path / "warm"),
    ]
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.count("teacher PaintOrder: reward 1.200 ± 0.000  success 1.00  n 3 ") == 1, out
    for line in ("fine-tuning on 3 episode contexts of 3 episodes", "model saved to", "done in "):
        assert out.count(line) == 1, out
    assert (tmp_path / "warm" / "model.safetensors").exists()

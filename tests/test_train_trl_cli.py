"""`openreward-rl train --framework trl` as a user runs it, on a tiny random Qwen3 saved as a local
checkpoint (`tiny_model.py`): what the command prints and writes around training, not what it learns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openreward_rl.cli import main
from openreward_rl.cli.show import recorded_tokenizer

REPO = Path(__file__).resolve().parents[1]
PAINT = f"{REPO}/examples/environments/paint.py:PaintColour"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_model import save_tiny_qwen3

    return save_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"))


def test_evaluations_inside_train_show_progress_and_record_the_tokenizer_for_show(
    capsys, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Both evaluations print eval's progress bar (episodes done of all), and the files they write name the
    tokenizer, so `show` renders the token view instead of "the file records no tokenizer"."""
    config = tmp_path / "c.yaml"
    config.write_text(
        "environments:\n  PaintColour:\n    splits: [train]\n    max_turns: 1\nparser: hermes\non_no_tool_call: end\nupload: false\n"
    )
    results = tmp_path / "results.jsonl"
    code = main(
        [
            "train",
            "--framework",
            "trl",
            "--config",
            str(config),
            "--model",
            str(tiny_model_dir),
            "--serve",
            PAINT,
            "--device",
            "cpu",
            "--output-dir",
            str(tmp_path / "out"),
            "--max-steps",
            "1",
            "--rollout-batch-size",
            "1",
            "--n-samples",
            "2",
            "--max-response-len",
            "4",
            "--save-interval",
            "0",
            "--no-save-model",
            "--eval-split",
            "test",
            "--eval-max-tasks",
            "2",
            "--eval-n",
            "2",
            "--eval-output",
            str(results),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("4/4") == 2, out  # the bar of each evaluation, finished: 2 tasks x 2 episodes
    for file in (results, results.with_suffix(".before.jsonl")):
        records = [json.loads(line) for line in file.read_text().splitlines()]
        assert len(records) == 4 and recorded_tokenizer(records) == str(tiny_model_dir)
    assert main(["show", str(results), "--index", "0", "--no-color"]) == 0
    assert f"tokens decoded with {tiny_model_dir} (recorded in the file)" in " ".join(capsys.readouterr().out.split())


def test_no_eval_before_evaluates_after_training_only(capsys, tmp_path: Path, tiny_model_dir: Path) -> None:
    """`--no-eval-before` (the quickstart's second command, whose model its first command just evaluated):
    one evaluation, after training, and no `.before.jsonl`."""
    config = tmp_path / "c.yaml"
    config.write_text(
        "environments:\n  PaintColour:\n    splits: [train]\n    max_turns: 1\nparser: hermes\non_no_tool_call: end\nupload: false\n"
    )
    results = tmp_path / "results.jsonl"
    code = main(
        [
            "train",
            "--framework",
            "trl",
            "--config",
            str(config),
            "--model",
            str(tiny_model_dir),
            "--serve",
            PAINT,
            "--device",
            "cpu",
            "--output-dir",
            str(tmp_path / "out"),
            "--max-steps",
            "1",
            "--rollout-batch-size",
            "1",
            "--n-samples",
            "2",
            "--max-response-len",
            "4",
            "--save-interval",
            "0",
            "--no-save-model",
            "--no-eval-before",
            "--eval-split",
            "test",
            "--eval-max-tasks",
            "2",
            "--eval-n",
            "2",
            "--eval-output",
            str(results),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("4/4") == 1 and "before " not in out and "after " in out, out
    assert results.exists() and not results.with_suffix(".before.jsonl").exists()


def test_a_run_whose_environment_server_dies_stops_with_one_line(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The command as a user runs it (a child process), against an environment server in another child process
    that is hard-killed once training has begun: the run stops within the bound (every episode an
    infrastructure failure, then `--max-failed-steps`), exit status 1, with one line saying what failed and
    that it stopped; no ping failures and no line per failed episode."""
    import os
    import subprocess
    import sys
    import threading
    import time

    from openreward_rl.env.local_server import loopback_environ, serve_environments

    with serve_environments([f"{REPO}/examples/environments/paint_order.py:PaintOrder"], subprocess=True) as server:
        config = tmp_path / "c.yaml"
        config.write_text(
            f"environments:\n  PaintOrder:\n    splits: [train]\n    max_turns: 3\nattempts: 2\nupload: false\nenv_base_url: {server.base_url}\n"
        )
        env = loopback_environ()
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
        command = [
            sys.executable,
            "-m",
            "openreward_rl.cli",
            "train",
            "--framework",
            "trl",
            "--config",
            str(config),
            "--model",
            str(tiny_model_dir),
            "--device",
            "cpu",
            "--output-dir",
            str(tmp_path / "out"),
            "--max-steps",
            "6",
            "--rollout-batch-size",
            "2",
            "--n-samples",
            "2",
            "--max-response-len",
            "8",
            "--save-interval",
            "0",
            "--no-save-model",
            "--max-failed-steps",
            "2",
        ]
        run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True)  # type: ignore[arg-type]
        reader.start()
        try:
            deadline = time.monotonic() + 240
            while (
                not any("training tasks" in line for line in lines)
                and run.poll() is None
                and time.monotonic() < deadline
            ):
                time.sleep(0.1)
            assert run.poll() is None, "".join(lines)
            time.sleep(1.0)
            server.kill()
            killed = time.monotonic()
            code = run.wait(timeout=120)  # the bound: a dead server stops the run within 2 minutes
            stopped_after = time.monotonic() - killed
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        reader.join(5)
    out = "".join(lines)
    assert code == 1, out
    final = lines[-1]
    assert (
        final.startswith("openreward-rl train: stopped at step ")
        and "every episode failed" in final
        and "environment server unreachable" in final
    ), out
    assert "ping failed" not in out and "Traceback" not in out, out
    assert out.count("episode on PaintOrder failed") <= 3, out  # one line per distinct failure, not one per episode
    print(f"\nenvironment server killed: the run stopped {stopped_after:.1f}s later")


def test_a_served_environment_server_that_stopped_stops_training_at_the_steps_end(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """`--serve` runs the environment server in this process: a server that has stopped (its thread ended) is
    seen directly at the step's end, and training stops there, saying so, without waiting for
    `max_failed_steps` failed steps."""
    from openreward_rl.backends.trl import TrlOptions, TrlSession
    from openreward_rl.config import parse_config

    config = parse_config(
        {"environments": {"PaintColour": {"splits": ["train"], "max_turns": 1}}, "parser": "hermes", "upload": False}
    )
    options = TrlOptions(
        model=str(tiny_model_dir),
        device="cpu",
        output_dir=str(tmp_path / "out"),
        max_steps=4,
        prompts_per_step=1,
        n_samples=2,
        max_new_tokens=4,
        save_interval=0,
        max_failed_steps=3,
    )
    with TrlSession.open(config, options, serve=[PAINT]) as session:
        assert session.server is not None and session.server.running
        session.server.stop()
        session.trainer().train()
        assert (
            session.stopped
            == f"stopped at step 1: the environment server serving PaintColour ({session.server.base_url}) has stopped"
        )

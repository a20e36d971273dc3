"""`openreward-rl prepare` against the SDK's real environment server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openreward_rl.cli import main
from openreward_rl.env.tasks import task_from_metadata


@pytest.fixture
def config_file(tmp_path: Path, env_server) -> Path:
    file = tmp_path / "train_config.yaml"
    file.write_text(
        f"""
env_base_url: {env_server.base_url}
environments:
  MathEnv:
    variant: mathenv
    splits: [train, test]
  Faulty:
    variant: faulty
    num_samples: 2
"""
    )
    return file


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_prepare_writes_rows_deterministically(config_file: Path, tmp_path: Path) -> None:
    first, second, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    assert main(["prepare", "--config", str(config_file), "--output", str(first), "--max-tasks", "4"]) == 0
    assert main(["prepare", "--config", str(config_file), "--output", str(second), "--max-tasks", "4"]) == 0
    assert main(["prepare", "--config", str(config_file), "--output", str(other), "--max-tasks", "4", "--seed", "7"]) == 0
    rows = read_rows(first)
    assert first.read_text() == second.read_text()
    assert first.read_text() != other.read_text()
    # MathEnv: 4 of train + 4 of test (--max-tasks); Faulty: its num_samples (2) wins
    counts = {}
    for row in rows:
        assert set(row) == {"prompt", "label", "metadata"} and isinstance(row["metadata"], dict)
        counts[(row["metadata"]["environment"], row["metadata"]["split"])] = counts.get((row["metadata"]["environment"], row["metadata"]["split"]), 0) + 1
        task = task_from_metadata(row["metadata"])
        assert task.task_spec is not None and task.variant in ("mathenv", "faulty")
    assert counts == {("MathEnv", "train"): 4, ("MathEnv", "test"): 4, ("Faulty", "train"): 2}
    assert len({row["metadata"]["task_hash"] for row in rows}) == len(rows)


def test_prepare_reports_a_bad_config(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("environments:\n  MathEnv:\n    splits: []\n")
    assert main(["prepare", "--config", str(bad), "--output", str(tmp_path / "out.jsonl")]) == 2
    assert "splits" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


def test_prepare_reports_an_unreachable_server(tmp_path: Path, capsys) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("env_base_url: http://127.0.0.1:9\nenvironments:\n  MathEnv: {}\n")
    assert main(["prepare", "--config", str(config), "--output", str(tmp_path / "out.jsonl")]) == 1
    assert "listing tasks failed" in capsys.readouterr().err

"""`openreward-rl prepare` against the SDK's real environment server on 127.0.0.1."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from openreward_rl.cli import main
from openreward_rl.env.tasks import task_from_metadata
from openreward_rl.preflight import PREFLIGHT_RETRY


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
    assert (
        main(["prepare", "--config", str(config_file), "--output", str(other), "--max-tasks", "4", "--seed", "7"]) == 0
    )
    rows = read_rows(first)
    assert first.read_text() == second.read_text()
    assert first.read_text() != other.read_text()
    # MathEnv: 4 of train + 4 of test (--max-tasks); Faulty: its num_samples (2) wins
    counts = {}
    for row in rows:
        assert set(row) == {"prompt", "label", "metadata"} and isinstance(row["metadata"], dict)
        counts[(row["metadata"]["environment"], row["metadata"]["split"])] = (
            counts.get((row["metadata"]["environment"], row["metadata"]["split"]), 0) + 1
        )
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


def test_prepare_refuses_an_unreachable_server_in_one_line(tmp_path: Path, capsys) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("env_base_url: http://127.0.0.1:9\nenvironments:\n  MathEnv: {}\n")
    assert main(["prepare", "--config", str(config), "--output", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "cannot reach the environment server at http://127.0.0.1:9 (for 'MathEnv')" in err
    assert not (tmp_path / "out.jsonl").exists()


@pytest.fixture
def hanging_up() -> Iterator[tuple[str, list[int]]]:
    """A TCP port on 127.0.0.1 that accepts connections and closes them at once; counts them."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    accepted: list[int] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    done.set()
    thread.join()
    listener.close()


def test_a_server_that_hangs_up_gets_the_short_preflight_policy(
    hanging_up: tuple[str, list[int]], tmp_path: Path, capsys
) -> None:
    """Start-up does not spend the listing's back-off (4 attempts of the SDK's 3 tries) on a server that
    cannot be used: the pre-flight check connects `PREFLIGHT_RETRY.attempts` times, then stops."""
    url, accepted = hanging_up
    config = tmp_path / "c.yaml"
    config.write_text(f"env_base_url: {url}\nenvironments:\n  MathEnv: {{}}\n")
    assert main(["prepare", "--config", str(config), "--output", str(tmp_path / "out.jsonl")]) == 2
    assert f"cannot reach the environment server at {url}" in capsys.readouterr().err
    # aiohttp itself sends an idempotent GET once more when the server hangs up: 2 connections an attempt
    # (the listing's policy, 4 attempts of the SDK's 3 tries, would have made 12 and waited 1 + 2 + 4 s)
    assert PREFLIGHT_RETRY.attempts == 2 and len(accepted) == 2 * PREFLIGHT_RETRY.attempts


@pytest.mark.parametrize(
    ("environments", "message"),
    [
        (
            {"NoSuchEnv": {}},
            r"environment 'NoSuchEnv' is not served at http://127\.0\.0\.1:\d+; it serves: whodunit, mathenv, faulty, closestguess, gradedguess",
        ),
        (
            {"MathEnv": {}},
            r"environment 'MathEnv' has no variant, so its requests would go to the default environment 'whodunit' .*variant: mathenv",
        ),
        ({"MathEnv": {"variant": "mathenvv"}}, r"environment 'MathEnv' with variant 'mathenvv' is not served at"),
        (
            {"MathEnv": {"variant": "mathenv", "splits": ["nosplit"]}},
            r"environments\.MathEnv\.splits: 'nosplit' not offered by the environment; it has: train, test",
        ),
    ],
)
def test_prepare_refuses_an_environment_the_server_does_not_serve_as_configured(
    env_server, tmp_path: Path, capsys, environments: dict, message: str
) -> None:
    """A local server ignores the environment name: without these checks an unknown name (or a known one
    without its variant) silently lists the server's first environment's tasks."""
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"env_base_url": env_server.base_url, "environments": environments}))
    assert main(["prepare", "--config", str(config), "--output", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and re.search(message, err), err
    assert not (tmp_path / "out.jsonl").exists()

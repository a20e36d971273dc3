"""`openreward-rl prepare --difficulty`: the SDK's own client (`AsyncEnvironment.get_task_difficulty`)
against a platform API served over HTTP on 127.0.0.1 (an aiohttp app answering
`GET /v1/environments/{owner}/{name}/task-difficulty` with the JSON the SDK's client parses: a `tasks`
list of `task_index`, `avg_reward`, `min_reward`, `max_reward`, `num_rollouts`, `response_chars`,
`split`, `variant`), while the tasks are listed from the SDK's real environment server."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from openreward_rl.cli import main


def chars(p50: float) -> dict[str, float]:
    return {
        "mean": p50,
        "p1": p50 / 4,
        "p10": p50 / 2,
        "p25": p50 / 2,
        "p50": p50,
        "p75": p50 * 1.5,
        "p90": p50 * 2,
        "p99": p50 * 3,
    }


def row(index: int, low: float, high: float, rollouts: int, p50: float = 400.0, split: str = "train") -> dict[str, Any]:
    return {
        "task_index": index,
        "avg_reward": (low + high) / 2,
        "min_reward": low,
        "max_reward": high,
        "num_rollouts": rollouts,
        "response_chars": chars(p50),
        "split": split,
        "variant": "combinationlock",
    }


ROWS = [
    row(0, 1.0, 1.0, 8),  # always solved: dropped
    row(1, 0.0, 1.0, 8),  # mixed: kept, with its statistics
    row(2, 0.0, 0.0, 2),  # too few rollouts to judge: kept
    row(3, 0.0, 1.0, 8, p50=5000.0),  # too long: dropped with --max-response-chars 1000
    row(4, 0.0, 0.0, 6),  # never solved: dropped
    {**row(5, 1.0, 1.0, 8), "variant": "other"},  # another variant's task 5: says nothing about ours
]


class DifficultyAPI:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], str | None]] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, dict(request.query), request.headers.get("X-API-Key")))
        split = request.query.get("split")
        return web.json_response({"tasks": [r for r in ROWS if split in (None, r["split"])]})

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/v1/environments/{owner}/{name}/task-difficulty", self.handle)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def api(monkeypatch) -> Iterator[DifficultyAPI]:
    server = DifficultyAPI()
    server.thread.start()
    server.ready.wait(10)
    monkeypatch.setenv("OPENREWARD_API_URL", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("OPENREWARD_API_KEY", "sk-difficulty")
    yield server
    server.stop()


@pytest.fixture
def config_file(tmp_path: Path, env_server) -> Path:
    file = tmp_path / "train_config.yaml"
    file.write_text(
        f"environments:\n  Test/CombinationLock:\n    variant: combinationlock\n    base_url: {env_server.base_url}\n"
    )
    return file


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_difficulty_drops_tasks_without_spread_or_too_long_before_the_cap(
    api, config_file: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "tasks.jsonl"
    argv = [
        "prepare",
        "--config",
        str(config_file),
        "--output",
        str(out),
        "--max-tasks",
        "28",
        "--difficulty",
        "--difficulty-model",
        "Qwen/Qwen3-4B",
        "--difficulty-stage",
        "rl",
        "--difficulty-min-params",
        "1000",
        "--max-response-chars",
        "1000",
    ]
    assert main(argv) == 0
    rows = rows_of(out)
    indices = {r["metadata"]["index"] for r in rows}
    assert len(rows) == 28 and not indices & {0, 3, 4}  # 32 tasks, 3 dropped, then the cap of 28
    by_index = {r["metadata"]["index"]: r["metadata"] for r in rows}
    if 1 in by_index:
        assert by_index[1]["difficulty"]["num_rollouts"] == 8 and by_index[1]["difficulty"]["avg_reward"] == 0.5
    path, query, key = api.requests[0]
    assert path == "/v1/environments/Test/CombinationLock/task-difficulty" and key == "sk-difficulty"
    assert query == {
        "variant": "combinationlock",
        "split": "train",
        "model_name": "Qwen/Qwen3-4B",
        "training_stage": "rl",
        "min_model_params": "1000",
    }
    err = capsys.readouterr().err
    assert (
        "dropped 2 tasks of Test/CombinationLock:train: no_spread" in err
        and "dropped 1 tasks of Test/CombinationLock:train: too_long" in err
    )


def test_without_the_flag_nothing_is_asked_and_nothing_dropped(api, config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "tasks.jsonl"
    assert main(["prepare", "--config", str(config_file), "--output", str(out)]) == 0
    assert len(rows_of(out)) == 32 and not api.requests and all("difficulty" not in r["metadata"] for r in rows_of(out))


def test_kept_tasks_carry_their_statistics(api, config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "tasks.jsonl"
    assert (
        main(["prepare", "--config", str(config_file), "--output", str(out), "--difficulty", "--min-rollouts", "9"])
        == 0
    )
    rows = {r["metadata"]["index"]: r["metadata"] for r in rows_of(out)}
    assert len(rows) == 32  # nothing has 9 rollouts: nothing judged, nothing dropped
    assert main(["prepare", "--config", str(config_file), "--output", str(out), "--difficulty"]) == 0
    assert 5 in {r["metadata"]["index"] for r in rows_of(out)} and 0 not in {
        r["metadata"]["index"] for r in rows_of(out)
    }
    assert rows[1]["difficulty"] == {
        "avg_reward": 0.5,
        "min_reward": 0.0,
        "max_reward": 1.0,
        "num_rollouts": 8,
        "response_chars_p50": 400.0,
    }
    assert "difficulty" not in rows[5]
    assert (
        main(["prepare", "--config", str(config_file), "--output", str(out), "--difficulty", "--min-rollouts", "1"])
        == 2
    )

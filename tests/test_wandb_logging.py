"""WandbLogger against real wandb in offline mode; the run's own file is read back."""

from __future__ import annotations

import argparse
import json

import pytest
import wandb

from observe_fixtures import SECRET_VALUE, read_offline_run, real_trajectory
from openreward_rl.observe.metrics import EpisodeStats, aggregate
from openreward_rl.observe.wandb_logging import REDACTED, WandbLogger, redact_config


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    yield tmp_path
    if wandb.run is not None:
        wandb.run.finish()


def test_metrics_reach_an_offline_run_it_starts(offline):
    metrics = aggregate([EpisodeStats.from_trajectory(real_trajectory())], "openreward_eval")
    config = {
        "model": "qwen3",
        "secrets": {"openai_api_key": SECRET_VALUE},
        "wandb_key": "abc123",
        "note": SECRET_VALUE,
    }
    logger = WandbLogger(project="obs", name="eval-run", config=config, directory=offline)
    logger.log(metrics, step_key="eval/step", step=0)
    logger.log({"openreward_eval/addenv/reward_mean": 0.5}, step_key="eval/step", step=1)
    logger.finish()
    assert wandb.run is None

    run_config, rows = read_offline_run(offline)
    assert [r["eval/step"] for r in rows] == [0, 1]
    assert rows[0]["openreward_eval/addenv/reward_mean"] == 1.25
    assert rows[0]["openreward_eval/addenv/stop/completed"] == 1.0
    assert rows[0]["openreward_eval/addenv/turns_mean"] == 2.0
    assert rows[1]["openreward_eval/addenv/reward_mean"] == 0.5
    assert run_config["model"] == "qwen3"
    assert run_config["secrets"] == REDACTED and run_config["wandb_key"] == REDACTED and run_config["note"] == REDACTED
    raw = b"".join(path.read_bytes() for path in offline.rglob("*") if path.is_file())
    assert SECRET_VALUE.encode() not in raw and b"abc123" not in raw


def test_logs_into_the_active_run_and_leaves_it_open(offline):
    run = wandb.init(project="slime-like", dir=str(offline))
    logger = WandbLogger(project="ignored")
    logger.log({"openreward/addenv/reward_mean": 1.0, "openreward/addenv/episodes": 4}, step_key="rollout/step", step=7)
    logger.finish()
    assert wandb.run is run  # not ours to finish
    run.finish()
    _, rows = read_offline_run(offline)
    assert rows == [
        {**rows[0], "openreward/addenv/reward_mean": 1.0, "openreward/addenv/episodes": 4.0, "rollout/step": 7}
    ]


def test_without_a_run_and_without_permission_to_start_one_metrics_go_to_the_log(offline, caplog):
    logger = WandbLogger(start_run=False)
    with caplog.at_level("INFO"):
        logger.log({"openreward/addenv/reward_mean": 1.0, "openreward/addenv/bad": float("nan")})
    assert wandb.run is None
    assert "openreward/addenv/reward_mean" in caplog.text and "bad" not in caplog.text
    assert not list(offline.rglob("*.wandb"))


def test_step_key_needs_a_step(offline):
    with pytest.raises(ValueError, match="needs a step"):
        WandbLogger(start_run=False).log({"a/b": 1.0}, step_key="rollout/step")


def test_redaction_covers_namespaces_nesting_and_key_shaped_values():
    args = argparse.Namespace(
        lr=1e-6,
        max_tokens=512,
        rollout_max_response_len=4096,
        hf_token="hf_abcdef",
        wandb_key="0123",
        OPENREWARD_API_KEY="x",
        sglang={"router_api_key": "y", "port": 30000},
        extra=["ghp_123456", "plain"],
        empty_api_key=None,
    )
    redacted = redact_config(args)
    assert redacted == {
        "lr": 1e-6,
        "max_tokens": 512,
        "rollout_max_response_len": 4096,
        "hf_token": REDACTED,
        "wandb_key": REDACTED,
        "OPENREWARD_API_KEY": REDACTED,
        "sglang": {"router_api_key": REDACTED, "port": 30000},
        "extra": [REDACTED, "plain"],
        "empty_api_key": None,
    }
    json.dumps(redacted)  # loggable as is

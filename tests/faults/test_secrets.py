"""Secrets never leak into what the library writes: episodes with an environment-specific and a
global secret (resolved from the config, one through an environment variable) against the SDK's
real `Server` (in its own process) and the SGLang /generate test double; every log record (caplog,
at DEBUG, including the SDK's), everything printed (capsys), the trajectory dumps written by
`TrajectoryWriter` to tmp_path, every event uploaded by `TrajectoryUploader` through the real SDK
rollout API to tests/test_upload.py's local sink, the Slime sample metadata and every error are
scanned for the secret values.

Decision (docs/reliability.md): what the environment itself shows the model (`echo_key`) is the
model's context and stays token-exact in the trajectory; our own logs, errors, stop details,
metrics and metadata never add a secret.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from test_upload import UploadSink  # the local stand-in for OpenReward's rollout API
from fault_harness import EpisodeRun, assert_sample, call, slime_samples
from openreward import AsyncOpenReward

from openreward_rl import StopReason
from openreward_rl.config import parse_config
from openreward_rl.observe.dumps import TrajectoryWriter
from openreward_rl.env.local_server import LocalEnvServer, serve_environments
from openreward_rl.redaction import MASK, install_log_redaction
from openreward_rl.testing import ScriptedCompletion
from openreward_rl.observe.upload import TrajectoryUploader

pytestmark = pytest.mark.anyio
JUDGE_KEY = "sk-judge-7f3a9c1e5b2d"  # environment-specific, written in the config (openai_api_key)
GLOBAL_KEY = "tvly-global-4e8b2a6f0c9d"  # global, read from the environment variable TAVILY_API_KEY
SECRET_VALUES = (JUDGE_KEY, GLOBAL_KEY)


@pytest.fixture(scope="module")
def secret_server() -> Iterator[LocalEnvServer]:
    """In its own process, as in production: what the environment logs about itself is its business."""
    with serve_environments([f"{Path(__file__).parent / 'secret_env.py'}:SecretKeeper"], subprocess=True) as server:
        yield server


@pytest.fixture
async def run(secret_server: LocalEnvServer) -> AsyncIterator[EpisodeRun]:
    client = AsyncOpenReward(api_key="local")
    try:
        yield EpisodeRun(client, secret_server.base_url, None)
    finally:
        await client.environments.aclose()


def resolved_secrets() -> dict[str, str]:
    config = parse_config(
        {
            "environments": {"SecretKeeper": {"secrets": {"openai_api_key": JUDGE_KEY}}},
            "secrets": {"tavily_api_key": None},
        }
    )
    return config.resolve_secrets("SecretKeeper", {"TAVILY_API_KEY": GLOBAL_KEY})


def assert_no_secret(where: str, text: str) -> None:
    for value in SECRET_VALUES:
        assert value not in text, f"secret found in {where}"


async def test_no_secret_in_logs_errors_dumps_or_uploads(
    run: EpisodeRun, fault_report, caplog, capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_log_redaction()
    caplog.set_level(logging.DEBUG)
    secrets = resolved_secrets()
    assert secrets == {"openai_api_key": JUDGE_KEY, "tavily_api_key": GLOBAL_KEY}

    used, _ = await run.run([ScriptedCompletion(text=call("use_key"))], environment="SecretKeeper", secrets=secrets)
    failed, _ = await run.run([ScriptedCompletion(text=call("fail_auth"))] * 2, environment="SecretKeeper", secrets=secrets, attempts=2)
    echoed, _ = await run.run(
        [ScriptedCompletion(text=call("echo_key")), ScriptedCompletion(text=call("use_key"))], environment="SecretKeeper", secrets=secrets
    )
    for label, trajectory in (("secrets used", used), ("env raises with a secret", failed), ("env shows the model a secret", echoed)):
        fault_report.sample(label, trajectory)

    assert_sample(used, infrastructure=False)
    assert used.reward == 1.0 and "openai_api_key, tavily_api_key" in used.turns[0].tool_results[0].text
    assert_sample(failed, infrastructure=True)
    assert failed.stop_reason is StopReason.ENV_ERROR and f"upstream rejected api key {MASK}" in failed.stop_detail
    assert failed.metrics["attempts"] == 2.0
    assert_sample(echoed, infrastructure=False)
    assert JUDGE_KEY in echoed.turns[0].tool_results[0].text  # the environment's choice, kept token-exact

    # A caller logging the failure with its traceback (what a backend does) leaks nothing either.
    try:
        raise RuntimeError(f"episode failed: {failed.stop_detail} (key {JUDGE_KEY})")
    except RuntimeError:
        logging.getLogger("openreward_rl.test").exception("while running %s with %s", "SecretKeeper", GLOBAL_KEY)

    dumps = tmp_path / "trajectories.jsonl"
    with TrajectoryWriter(dumps) as writer:
        for trajectory in (used, failed):
            writer.write(trajectory)
    with UploadSink() as sink:
        monkeypatch.setenv("OPENREWARD_API_URL", sink.url)
        uploader = TrajectoryUploader(AsyncOpenReward(api_key="local"), "secrets-run")
        futures = [uploader.submit(t) for t in (used, failed)]
        await uploader.aclose()
        assert all(f is not None and f.result() for f in futures) and sink.events
        uploads = json.dumps(sink.events)
    metadata = json.dumps([sample.metadata for t in (used, failed, echoed) for sample in slime_samples(t)])
    assert "upstream rejected api key" in metadata  # the failure's detail is there, masked

    captured = capsys.readouterr()
    records = "\n".join(
        [caplog.text, *(r.getMessage() for r in caplog.records), *(r.exc_text or "" for r in caplog.records)]
    )
    assert "upstream rejected api key" in records  # the logs were captured, and what they said is masked
    assert MASK in records
    assert_no_secret("log records", records)
    assert_no_secret("stdout/stderr", captured.out + captured.err)
    assert_no_secret("trajectory dumps", dumps.read_text())
    assert_no_secret("uploads", uploads)
    assert_no_secret("sample metadata", metadata)

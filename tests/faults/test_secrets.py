"""Secrets never leak into what the library writes: episodes with an environment-specific and a
global secret (resolved from the config, one through an environment variable) against the SDK's
real `Server` (in its own process) and the SGLang /generate test double; every log record (caplog,
at DEBUG, including the SDK's), everything printed (capsys), the trajectory dumps written by
`TrajectoryWriter` to tmp_path, every event uploaded by `TrajectoryUploader` through the real SDK
rollout API to tests/test_upload.py's local sink, the Slime sample metadata and every error are
scanned for the secret values.

Decision (docs/reliability.md): what the environment itself shows the model (`echo_key`) is masked
before the model sees it (the model sees and samples ***, so the trajectory stays token-exact); our
own logs, errors, stop details, metrics and metadata never add a secret.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from fault_harness import EpisodeRun, assert_sample, slime_samples
from openreward import AsyncOpenReward

from hermes_calls import call
from openreward_rl import StopReason
from openreward_rl.config import parse_config
from openreward_rl.env.local_server import LocalEnvServer, serve_environments
from openreward_rl.observe.dumps import TrajectoryWriter
from openreward_rl.observe.upload import TrajectoryUploader
from openreward_rl.redaction import MASK, install_log_redaction
from openreward_rl.testing import ScriptedCompletion
from test_upload import UploadSink  # the local stand-in for OpenReward's rollout API

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
    failed, _ = await run.run(
        [ScriptedCompletion(text=call("fail_auth"))] * 2, environment="SecretKeeper", secrets=secrets, attempts=2
    )
    echoed, _ = await run.run(
        [ScriptedCompletion(text=call("echo_key")), ScriptedCompletion(text=call("use_key"))],
        environment="SecretKeeper",
        secrets=secrets,
    )
    for label, trajectory in (
        ("secrets used", used),
        ("env raises with a secret", failed),
        ("env shows the model a secret", echoed),
    ):
        fault_report.sample(label, trajectory)

    assert_sample(used, infrastructure=False)
    assert used.reward == 1.0 and "openai_api_key, tavily_api_key" in used.turns[0].tool_results[0].text
    assert_sample(failed, infrastructure=True)
    assert failed.stop_reason is StopReason.ENV_ERROR and f"upstream rejected api key {MASK}" in failed.stop_detail
    assert failed.metrics["attempts"] == 2.0
    assert_sample(echoed, infrastructure=False)
    assert echoed.turns[0].tool_results[0].text == f"your key is {MASK}"  # masked before the model saw it
    assert echoed.metrics["redacted_values"] == 1.0

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


# Every secret the library knows of, set in the environment of one `openreward-rl eval --serve` run
# (the config's global secret reads TAVILY_API_KEY; its environment-specific one is written in it).
KNOWN_SECRETS = {
    "OPENREWARD_API_KEY": "or-live-5c2e9a7b1d3f8e6a",
    "WANDB_API_KEY": "wandbSECRET" + "0123456789abcdef0123456789abcdef0",  # WandB's 40 characters
    "OPENAI_API_KEY": "sk-proj-openai-9d8c7b6a5f4e",
    "HF_TOKEN": "hf_tokenAbCdEfGhIjKlMnOpQr",
    "HUGGING_FACE_HUB_TOKEN": "hf_hubtokenZyXwVuTsRqPoNm",
    "TAVILY_API_KEY": GLOBAL_KEY,
}
SECRET_CONFIG = f"""\
environments:
  SecretKeeper:
    splits: [train]
    max_turns: 2
    secrets: {{openai_api_key: {JUDGE_KEY}}}
secrets: {{tavily_api_key: null}}
parser: hermes
attempts: 1
upload: true
"""


def written_text(root: Path) -> dict[str, str]:
    """Every file under `root`, as text (binary files decoded leniently: a secret is ASCII)."""
    return {
        str(path.relative_to(root)): path.read_bytes().decode("utf-8", "replace")
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


async def test_no_known_secret_in_any_file_the_commands_write(secret_server: LocalEnvServer, tmp_path: Path) -> None:
    """The commands as a user runs them (each its own process) with every known secret set:
    `eval --serve` against an environment whose tool fails quoting all of them; `show`, `show --index`
    and `show --html` of its results; `prepare` and `train --dry-run` against the same environment
    served apart. Every file they wrote (results, tasks, each command's stdout/stderr, the WandB offline
    run, the HTML report) and every uploaded event is scanned for every secret."""
    import asyncio
    import os
    import sys

    from openreward_rl.assets import load_tokenizer
    from openreward_rl.testing import SGLangTestServer

    secrets = [*KNOWN_SECRETS.values(), JUDGE_KEY]
    out = tmp_path / "out"
    (out / "wandb").mkdir(parents=True)
    config = tmp_path / "secret_config.yaml"
    config.write_text(SECRET_CONFIG)
    served = tmp_path / "served_config.yaml"
    served.write_text(f"{SECRET_CONFIG}env_base_url: {secret_server.base_url}\n")
    src = Path(__file__).resolve().parents[2] / "src"
    tokenizer = load_tokenizer("offline:qwen3")
    with UploadSink() as sink:
        environ = {
            **os.environ,
            **KNOWN_SECRETS,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])),
            "OPENREWARD_API_URL": sink.url,
            "WANDB_MODE": "offline",
            "WANDB_DIR": str(out / "wandb"),
        }

        async def cli(*argv: str, name: str) -> int:
            with (out / f"{name}.stdout").open("wb") as stdout, (out / f"{name}.stderr").open("wb") as stderr:
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "openreward_rl.cli",
                    *argv,
                    env=environ,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=tmp_path,
                )
                return await asyncio.wait_for(process.wait(), 300)

        async def evaluate() -> int:
            async with SGLangTestServer(tokenizer, script=[ScriptedCompletion(text=call("fail_all"))]) as model:
                return await cli(
                    "eval",
                    "--config",
                    str(config),
                    "--engine",
                    "sglang",
                    "--base-url",
                    model.url,
                    "--model",
                    "scripted",
                    "--tokenizer",
                    "offline:qwen3",
                    "--serve",
                    f"{Path(__file__).parent / 'secret_env.py'}:SecretKeeper",
                    "--output",
                    str(out / "results.jsonl"),
                    "--wandb-project",
                    "secrets",
                    name="eval",
                )

        # the commands that do not read each other's files run side by side: `show` reads what `eval` wrote,
        # `train --dry-run` what `prepare` wrote
        evaluated, prepared = await asyncio.gather(
            evaluate(), cli("prepare", "--config", str(served), "--output", str(out / "tasks.jsonl"), name="prepare")
        )
        assert evaluated == 1, (out / "eval.stderr").read_text()[
            -3000:
        ]  # its one episode is an infrastructure failure (by design)
        assert prepared == 0, (out / "prepare.stderr").read_text()[-3000:]
        results = str(out / "results.jsonl")
        codes = await asyncio.gather(
            cli("show", results, "--no-color", name="show"),
            cli("show", results, "--html", str(out / "report.html"), name="show-html"),
            cli("show", results, "--index", "0", "--no-color", name="show-episode"),
            cli(
                "train",
                "--framework",
                "miles",
                "--miles-path",
                str(tmp_path / "miles"),
                "--config",
                str(served),  # FSDP: no Megatron checkout needed
                "--task-data",
                str(out / "tasks.jsonl"),
                "--dry-run",
                name="train-dry-run",
            ),
        )
        commands = ("show", "show-html", "show-episode", "train-dry-run")
        assert codes == [0] * 4, {name: (out / f"{name}.stderr").read_text()[-2000:] for name in commands}
        uploads = json.dumps(sink.events)

    record = json.loads((out / "results.jsonl").read_text())
    assert record["stop_reason"] == "env_error" and "upstream rejected keys" in record["stop_detail"]
    assert MASK in record["stop_detail"]  # the error was written, masked
    files = written_text(out)
    assert any(name.startswith("wandb/") for name in files) and "report.html" in files and sink.events
    assert "secret-0" in files["tasks.jsonl"] and "ray job submit" in files["train-dry-run.stdout"]
    for name, text in {**files, "uploaded events": uploads}.items():
        for secret in secrets:
            assert secret not in text, f"a secret ({secret[:6]}...) was written to {name}"

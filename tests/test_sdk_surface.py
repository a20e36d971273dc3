"""The parts of the OpenReward SDK real environments use, end to end against the SDK's own `Server` on
127.0.0.1 (the environments of tests/sdk_surface_env.py), with a scripted model that emits real Qwen3
token ids (the SGLang `/generate` double for the command line):

- tasks served by index only (`list_tasks` raises: the server answers 400) reach eval, prepare and
  training's task list, and the online sampler's task key;
- a session toolset (`toolset: claude-code`) reaches the environment, and `ToolOutput.metadata`
  reaches the results file, `show` (text and HTML) and the upload;
- tool timeouts per environment and per tool, and the message of a call they cut;
- secrets: required ones checked at start-up, a configured but unset one an error, and a careless
  environment's secrets masked before the model sees them: no file a run writes holds them;
- a text-only model shown images: a per-episode warning and the `images_dropped` metric.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from openreward import AsyncOpenReward
from rich.console import Console

from hermes_calls import call
from openreward_rl.assets import load_tokenizer
from openreward_rl.cli import main
from openreward_rl.cli.eval import EvalOptions, run_eval
from openreward_rl.config import parse_config, prepare_config
from openreward_rl.engines import FinishReason, Generation, GenerationRequest
from openreward_rl.env.local_server import LocalEnvServer, serve_environments
from openreward_rl.env.shown_text import IMAGE_PLACEHOLDER
from openreward_rl.env.tasks import TaskRef, list_tasks, task_from_metadata
from openreward_rl.loop.rollout import Rollouts
from openreward_rl.redaction import MASK

pytestmark = pytest.mark.anyio

ENV_FILE = Path(__file__).resolve().parent / "sdk_surface_env.py"
SPECS = {name: f"{ENV_FILE}:{name}" for name in ("IndexedTasks", "Workbench", "Leaky", "Gallery")}
OPENAI_KEY = "sk-leaky-openai-5c1d9e7a3f"  # read from OPENAI_API_KEY (a global secret)
LEAK_TOKEN = "lt-leaky-token-8b2e4f6a0d"  # read from LEAK_TOKEN (Leaky's own secret, with its domains)


class ScriptedModel:
    """An engine whose reply is `reply(prompt text)`, as real Qwen3 ids ending the turn."""

    def __init__(self, reply: Callable[[str], str]) -> None:
        self.tokenizer = load_tokenizer("offline:qwen3")
        self.reply = reply
        self.prompts: list[str] = []

    async def generate(self, request: GenerationRequest) -> Generation:
        prompt = self.tokenizer.decode(list(request.input_ids))
        self.prompts.append(prompt)
        ids = self.tokenizer.encode(self.reply(prompt), add_special_tokens=False) + [
            self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ]
        return Generation(tuple(ids), tuple(-0.1 for _ in ids), FinishReason.STOP, matched_stop=ids[-1])

    async def aclose(self) -> None:
        pass


def last_tool_output(prompt: str) -> str | None:
    """The text of the last tool response in a Qwen3 prompt."""
    found = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.S)
    return found[-1] if found else None


@pytest.fixture(scope="module")
def surface_server() -> Iterator[LocalEnvServer]:
    with serve_environments(list(SPECS.values())) as server:
        yield server


def config_for(server: LocalEnvServer, environments: dict[str, Any], **top: Any) -> Any:
    environments = {name: {"splits": ["test"], **settings} for name, settings in environments.items()}
    raw = {"environments": environments, "parser": "hermes", "attempts": 1, "upload": False, **top}
    return prepare_config(
        parse_config(raw), base_url=server.base_url, served={name.lower(): name.lower() for name in SPECS}
    )


async def one_episode(config: Any, environment: str, model: ScriptedModel, split: str = "test", index: int = 0) -> Any:
    client = AsyncOpenReward(api_key="local")
    try:
        rollouts = Rollouts.from_config(
            config, engine=model, tokenizer=model.tokenizer, client=client, model="Qwen/Qwen3-8B", max_new_tokens=128
        )
        return await rollouts.run(TaskRef(environment, split, index=index))
    finally:
        await client.environments.aclose()


def eval_options(tmp_path: Path, **changes: Any) -> EvalOptions:
    values = dict(
        engine="sglang",
        model="Qwen/Qwen3-8B",
        n=1,
        concurrency=2,
        max_new_tokens=128,
        temperature=1.0,
        top_p=1.0,
        output=tmp_path / "results.jsonl",
        max_tasks=None,
    )
    return EvalOptions(**(values | changes))


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- tasks by index ------------------------------------------------------------------------------


def answer_sum(prompt: str) -> str:
    a, b = re.search(r"what is (\d+) \+ (\d+)\?", prompt).groups()  # type: ignore[union-attr]
    return call("answer", answer=str(int(a) + int(b)))


async def test_an_environment_that_serves_tasks_by_index_only_is_listed_for_training_and_evaluated(
    surface_server, tmp_path
) -> None:
    """`IndexedTasks.list_tasks` raises, so the SDK server answers 400 ("use the index-based API"): the
    tasks come from `num_tasks`, and each session asks the server for its task by index."""
    config = config_for(surface_server, {"IndexedTasks": {"splits": ["train", "test"]}})
    client = AsyncOpenReward(api_key="local")
    try:
        listed = await list_tasks(client, config, seed=3)  # what training (TRL) and eval list
    finally:
        await client.environments.aclose()
    assert sorted((t.split, t.index) for t in listed) == [(s, i) for s in ("test", "train") for i in range(3)]
    assert all(t.task_spec is None and t.variant == "indexedtasks" for t in listed)

    # eval: every task runs, by index, and is graded
    model = ScriptedModel(answer_sum)
    await run_eval(
        eval_options(tmp_path),
        config_for(surface_server, {"IndexedTasks": {"splits": ["test"]}}),
        engine=model,
        tokenizer=model.tokenizer,
        client=AsyncOpenReward(api_key="local"),
        console=Console(file=io.StringIO()),
    )
    results = rows_of(tmp_path / "results.jsonl")
    assert sorted(r["task"]["index"] for r in results) == [0, 1, 2]
    assert all(r["reward"] == 1.0 and r["stop_reason"] == "completed" for r in results)


def test_prepare_writes_the_rows_of_an_index_only_environment_for_the_trainers_and_the_online_sampler(
    surface_server, tmp_path
) -> None:
    from openreward_rl.backends.task_sampling import task_key_of

    config_file = tmp_path / "train_config.yaml"
    config_file.write_text(
        f"env_base_url: {surface_server.base_url}\nenvironments:\n  IndexedTasks:\n    variant: indexedtasks\n    splits: [train]\n"
    )
    assert main(["prepare", "--config", str(config_file), "--output", str(tmp_path / "rows.jsonl")]) == 0
    rows = rows_of(tmp_path / "rows.jsonl")
    assert sorted(task_from_metadata(r["metadata"]).index for r in rows) == [0, 1, 2]
    keys = {task_key_of(SimpleNamespace(metadata=r["metadata"])) for r in rows}
    assert keys == {("IndexedTasks", json.dumps(["train", i, "indexedtasks"])) for i in range(3)}


# --- toolsets and tool metadata ------------------------------------------------------------------


def workbench(prompt: str) -> str:
    """Read notes.txt with the toolset's bash, then submit what it printed."""
    seen = last_tool_output(prompt)
    if seen is None:
        return call("bash", command="cat notes.txt")
    return call("submit", answer=seen.split("\n")[0])  # bash's output, then "(exit 0)"


async def test_a_session_toolset_reaches_the_environment_and_tool_metadata_reaches_every_record(
    surface_server, tmp_path, capsys, monkeypatch
) -> None:
    """`toolset: claude-code` makes the server bind the SDK's Claude Code toolset to the session: its
    `bash` runs in the environment's sandbox. Its `ToolOutput.metadata` (output, exit code) and
    `submit`'s are kept in the results file, `show` (text and HTML) and the upload payload."""
    from test_upload import UploadSink

    model = ScriptedModel(workbench)
    without = await one_episode(config_for(surface_server, {"Workbench": {"max_turns": 1}}), "Workbench", model)
    (error,) = without.turns[0].parsed.errors  # no toolset: the session offers no bash
    assert error.message == "unknown tool 'bash'; available tools: run_tests, submit"

    config = config_for(surface_server, {"Workbench": {"toolset": "claude-code"}}, upload=True)
    monkeypatch.setenv("OPENREWARD_API_KEY", "local-upload-key")
    with UploadSink() as sink:
        monkeypatch.setenv("OPENREWARD_API_URL", sink.url)
        client = AsyncOpenReward(api_key="local-upload-key")
        try:
            await run_eval(
                eval_options(tmp_path),
                config,
                engine=model,
                tokenizer=model.tokenizer,
                client=client,
                console=Console(file=io.StringIO()),
            )
        finally:
            await client.environments.aclose()
        uploaded = json.dumps(sink.events)
    (row,) = rows_of(tmp_path / "results.jsonl")
    assert row["reward"] == 1.0
    bash, submit = (turn["tool_results"][0] for turn in row["turns"])
    assert bash["call"]["name"] == "bash" and bash["metadata"] == {"output": "marigold\n", "exit_code": 0}
    assert submit["metadata"] == {"expected": "marigold", "graded": "exact match"}
    messages = [e for e in sink.events if e.get("eventType") == "message"]
    assert [e["metadata"] for e in messages if e.get("metadata")] == [bash["metadata"], submit["metadata"]], uploaded

    assert main(["show", str(tmp_path / "results.jsonl"), "--index", "0", "--no-color"]) == 0
    shown = capsys.readouterr().out
    assert (
        "bash metadata (not shown to the model)" in shown
        and '"exit_code": 0' in shown
        and '"graded": "exact match"' in shown
    )
    assert main(["show", str(tmp_path / "results.jsonl"), "--html", str(tmp_path / "report.html")]) == 0
    report = (tmp_path / "report.html").read_text()
    assert 'class="entry metadata"' in report and "&quot;exit_code&quot;: 0" in report


# --- timeouts ------------------------------------------------------------------------------------


def slow_tests(prompt: str) -> str:
    return call("run_tests", seconds=1.0) if last_tool_output(prompt) is None else call("submit", answer="marigold")


@pytest.mark.parametrize(
    ("settings", "cut", "knob"),
    [
        ({"tool_timeouts": {"run_tests": 0.3}}, True, "raise environments.Workbench.tool_timeouts.run_tests (0.3s)"),
        (
            {"tool_timeout": 0.3},
            True,
            "environments.Workbench.tool_timeout (0.3s), or environments.Workbench.tool_timeouts.run_tests for this tool alone",
        ),
        ({"tool_timeout": 0.3, "tool_timeouts": {"run_tests": 30}}, False, None),
    ],
    ids=["per-tool limit", "per-environment limit", "per-tool over per-environment"],
)
async def test_tool_timeouts_per_environment_and_per_tool_name_the_knob_that_cut_a_call(
    surface_server, settings, cut, knob
) -> None:
    trajectory = await one_episode(
        config_for(surface_server, {"Workbench": settings}, tool_timeout=None), "Workbench", ScriptedModel(slow_tests)
    )
    if cut:
        assert trajectory.stop_reason.value == "env_error"
        assert (
            "tool 'run_tests' of Workbench timed out after 0.3s and was cut" in trajectory.stop_detail
            and knob in trajectory.stop_detail
        )
        assert trajectory.reward is None  # a fault, never a reward
    else:
        assert trajectory.reward == 1.0 and trajectory.turns[0].tool_results[0].metadata == {"passed": 3, "failed": 0}


# --- images and a text-only model ----------------------------------------------------------------


def gallery(prompt: str) -> str:
    return call("look") if last_tool_output(prompt) is None else call("describe", answer="a pixel")


async def test_a_text_only_model_shown_images_gets_a_warning_and_a_count_never_a_silent_substitution(
    surface_server, caplog, capsys, tmp_path
) -> None:
    caplog.set_level(logging.WARNING, logger="openreward_rl")
    model = ScriptedModel(gallery)
    trajectory = await one_episode(config_for(surface_server, {"Gallery": {}}), "Gallery", model)
    assert trajectory.reward == 1.0
    assert trajectory.metrics["images_dropped"] == 2.0  # one in the prompt, one from `look`
    assert IMAGE_PLACEHOLDER in model.prompts[0] and model.prompts[1].count(IMAGE_PLACEHOLDER) == 2
    warnings = [r.getMessage() for r in caplog.records if "reads text only" in r.getMessage()]
    assert (
        len(warnings) == 1
        and "environment 'Gallery': the prompt holds an image" in warnings[0]
        and "images_dropped" in warnings[0]
    )
    from openreward_rl.show.episode import summary_rows

    assert dict(summary_rows(trajectory))["images dropped"].startswith("2: this model reads text only")


# --- secrets -------------------------------------------------------------------------------------


class PlatformAPI:
    """OpenReward's platform API on 127.0.0.1, as far as the SDK's `list_required_secrets` and the rollout
    upload ask it: `GET /v1/environments/{owner}/{name}/required-secrets` answers `required`."""

    def __init__(self, required: dict[str, list[str]]) -> None:
        self.required = required
        self.asked: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    async def _secrets(self, request: web.Request) -> web.Response:
        name = f"{request.match_info['owner']}/{request.match_info['name']}"
        self.asked.append(name)
        if name not in self.required:
            return web.json_response({"detail": "not found"}, status=404)
        return web.json_response({"secrets": self.required[name]})

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/v1/environments/{owner}/{name}/required-secrets", self._secrets)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        self.ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def model_server() -> Iterator[Any]:
    """The SGLang /generate double for the command line; it replies like a model that repeats what it saw."""
    from test_eval_results import ModelServer

    class Leaker(ModelServer):
        def _reply(self, request: Any) -> Any:
            from openreward_rl.testing import ScriptedCompletion

            prompt = self.tokenizer.decode(request.input_ids)
            seen = last_tool_output(prompt)
            return ScriptedCompletion(
                text=call("login") if seen is None else f"The server said: {seen}\n" + call("report", text=seen)
            )

    server = Leaker()
    try:
        yield server
    finally:
        server.close()


LEAKY_CONFIG = """
secrets:
  openai_api_key: null
environments:
  acme/Leaky:
    splits: [test]
    secrets:
      leak_token: {value: null, domains: [leak.example]}
parser: hermes
attempts: 1
upload: true
"""


def eval_leaky(tmp_path: Path, model_server: Any, config_text: str, *extra: str) -> int:
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    return main(
        [
            "eval",
            "--config",
            str(config),
            "--engine",
            "sglang",
            "--base-url",
            model_server.server.url,
            "--model",
            "Qwen/Qwen3-8B",
            "--tokenizer",
            "offline:qwen3",
            "--max-new-tokens",
            "256",
            "--output",
            str(tmp_path / "results.jsonl"),
            "--serve",
            SPECS["Leaky"],
            *extra,
        ]
    )


@pytest.mark.parametrize(
    ("environ", "required", "config_text", "message"),
    [
        (
            {"OPENAI_API_KEY": OPENAI_KEY},
            {},
            LEAKY_CONFIG,
            "environments.acme/Leaky.secrets.leak_token is configured to be read from the environment, but LEAK_TOKEN or leak_token is not set",
        ),
        (
            {"OPENAI_API_KEY": OPENAI_KEY, "LEAK_TOKEN": LEAK_TOKEN},
            {"acme/Leaky": ["openai_api_key", "leak_token", "grader_key"]},
            LEAKY_CONFIG,
            "environment 'acme/Leaky' requires the secret 'grader_key' (OpenReward's required secrets: openai_api_key, leak_token, grader_key), "
            "which the config does not give it",
        ),
    ],
    ids=["configured but unset", "required by OpenReward, not configured"],
)
def test_missing_secrets_stop_the_run_at_start_up_naming_them(
    tmp_path, monkeypatch, capsys, model_server, environ, required, config_text, message
) -> None:
    for name in ("OPENAI_API_KEY", "LEAK_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    platform = PlatformAPI(required)
    try:
        monkeypatch.setenv("OPENREWARD_API_URL", platform.url)
        monkeypatch.setenv("OPENREWARD_API_KEY", "local-platform-key")
        calls = model_server.generate_calls
        assert eval_leaky(tmp_path, model_server, config_text) == 2
    finally:
        platform.stop()
    err = " ".join(capsys.readouterr().err.split())
    assert message in err
    assert model_server.generate_calls == calls  # before any episode
    assert not (tmp_path / "results.jsonl").exists() or not rows_of(tmp_path / "results.jsonl")
    if required:
        assert platform.asked == ["acme/Leaky"]


def test_no_secret_an_environment_prints_reaches_the_model_or_any_file_the_run_writes(
    tmp_path, monkeypatch, capsys, caplog, model_server
) -> None:
    """`Leaky` quotes both secrets in its prompt, in `login`'s error text and in its metadata; the model
    repeats what it saw. The model sees *** (so it samples ***: the records stay token-exact), a warning
    names the environment and the tool, and neither value is in the results, `show`'s output, the HTML
    report, the WandB offline run, the upload payload or the logs."""
    from observe_fixtures import read_offline_run
    from test_upload import UploadSink

    caplog.set_level(logging.WARNING)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("LEAK_TOKEN", LEAK_TOKEN)
    monkeypatch.setenv("OPENREWARD_API_KEY", "local-upload-key")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    (tmp_path / "wandb").mkdir()
    first_request = len(model_server.server.requests)
    with UploadSink() as sink:
        monkeypatch.setenv("OPENREWARD_API_URL", sink.url)
        assert eval_leaky(tmp_path, model_server, LEAKY_CONFIG, "--wandb-project", "leak-check") == 0
        uploaded = json.dumps(sink.events)
    run_output = capsys.readouterr()
    assert (
        main(["show", str(tmp_path / "results.jsonl"), "--index", "0", "--no-color", "--tokenizer", "offline:qwen3"])
        == 0
    )
    assert main(["show", str(tmp_path / "results.jsonl"), "--no-color"]) == 0
    assert (
        main(
            [
                "show",
                str(tmp_path / "results.jsonl"),
                "--html",
                str(tmp_path / "report.html"),
                "--tokenizer",
                "offline:qwen3",
            ]
        )
        == 0
    )
    assert (
        main(["show", str(tmp_path / "results.jsonl"), "--index", "0", "--html", str(tmp_path / "episode.html")]) == 0
    )
    show_output = capsys.readouterr()

    tokenizer = load_tokenizer("offline:qwen3")
    seen_by_model = [
        tokenizer.decode(r.input_ids) for r in model_server.server.requests[first_request:] if r.path == "/generate"
    ]
    written = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert {"results.jsonl", "report.html", "episode.html"} <= set(written) and any(
        name.endswith(".wandb") for name in written
    )
    texts = {
        **{name: data.decode("utf-8", "replace") for name, data in written.items()},
        "upload payload": uploaded,
        "eval output": run_output.out + run_output.err,
        "show output": show_output.out + show_output.err,
        "model input": "\n".join(seen_by_model),
        "logs": caplog.text,
    }
    for where, text in texts.items():
        for secret in (OPENAI_KEY, LEAK_TOKEN):
            assert secret not in text, f"{secret[:6]}... found in {where}"

    (row,) = rows_of(tmp_path / "results.jsonl")
    assert (
        row["reward"] == 1.0 and row["metrics"]["redacted_values"] == 4
    )  # the prompt's 1, login's text 2, its metadata 1
    login, report = (turn["tool_results"][0] for turn in row["turns"])
    assert login["text"] == f"Error: 401 Unauthorized: rejected keys {MASK} and {MASK}" and login["metadata"] == {
        "tried": [MASK, MASK]
    }
    assert report["call"]["arguments"] == {"text": login["text"]}  # the model repeated what it saw: the masked text
    assert len(seen_by_model) == 2 and f"session token {MASK}" in seen_by_model[0]
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert (
        "environment 'acme/Leaky': tool 'login' showed 2 known secret value(s)" in warnings
        and "environment 'acme/Leaky': the prompt showed" in warnings
    )
    run_config, _ = read_offline_run(tmp_path / "wandb")
    assert run_config  # the WandB run was written (and was scanned above)
    assert len(sink.events) > 3

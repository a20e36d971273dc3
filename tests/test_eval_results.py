"""`openreward-rl eval`'s results file and its model server, through the real command line: the
example environments served by the SDK's own Server (`--serve`), the model the SGLang `/generate`
double on 127.0.0.1 (`SGLangTestServer`, real Qwen3 token ids).

- one line per episode, also after failed episodes ran again; a corrupt line is skipped with a
  warning naming file:line, every good record kept (`eval` and `show`); one writer at a time;
- a file written with other settings is not resumed (`--overwrite` moves it aside);
- a model server that is down is one error before any episode; a run of mostly infrastructure
  failures exits 1, and its failures run again on the next run.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openreward_rl.assets import load_tokenizer
from openreward_rl.cli import main
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer

EXPLODE = '<tool_call>\n{"name": "explode", "arguments": {}}\n</tool_call>'


class ModelServer:
    """`SGLangTestServer` on its own event loop thread, so the synchronous CLI can call it."""

    def __init__(self) -> None:
        self.tokenizer = load_tokenizer("offline:qwen3")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = self._call(self._start())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    async def _start(self) -> SGLangTestServer:
        return await SGLangTestServer(self.tokenizer, self._reply).start()

    def _reply(self, request: Any) -> ScriptedCompletion:
        prompt = self.tokenizer.decode(request.input_ids)
        return ScriptedCompletion(text=EXPLODE if "Fault-injection" in prompt else "The answer is 7.")

    @property
    def generate_calls(self) -> int:
        return sum(r.path == "/generate" for r in self.server.requests)

    def close(self) -> None:
        self._call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    server = ModelServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def run_eval_cli(tmp_path, model, example_env_specs, capsys):
    """Runs `openreward-rl eval` on MathEnv (2 tasks x 2 samples) and/or Faulty; (exit code, stdout, stderr)."""
    config = tmp_path / "config.yaml"
    settings = {"MathEnv": "{splits: [test]}", "Faulty": "{splits: [train], max_turns: 2}"}

    def run(
        *extra: str, environments: tuple[str, ...] = ("MathEnv",), base_url: str | None = None
    ) -> tuple[int, str, str]:
        config.write_text(
            "environments:\n"
            + "".join(f"  {name}: {settings[name]}\n" for name in environments)
            + "parser: hermes\non_no_tool_call: end\nattempts: 1\nupload: false\n"
        )
        serve = [arg for name in environments for arg in ("--serve", example_env_specs[name])]
        argv = [
            "eval",
            "--config",
            str(config),
            "--engine",
            "sglang",
            "--base-url",
            base_url or model.server.url,
            "--model",
            "scripted",
            "--tokenizer",
            "offline:qwen3",
            "--max-tasks",
            "2",
            "--n",
            "2",
            "--max-new-tokens",
            "32",
            "--output",
            str(tmp_path / "results.jsonl"),
            *serve,
            *extra,
        ]
        code = main(argv)
        captured = capsys.readouterr()
        return code, captured.out, " ".join(captured.err.split())

    return run


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_failed_episodes_run_again_leave_one_line_per_episode(run_eval_cli, tmp_path, model) -> None:
    results = tmp_path / "results.jsonl"
    run_eval_cli(environments=("MathEnv", "Faulty"))
    assert len(lines(results)) == 8
    calls = model.generate_calls
    run_eval_cli("--retry-failures", environments=("MathEnv", "Faulty"))
    assert model.generate_calls == calls + 4  # Faulty's four failures ran again
    rows = lines(results)
    assert len(rows) == 8 and len({row["eval_key"] for row in rows}) == 8


def test_show_reads_the_latest_line_of_an_episode_rerun_before_the_rewrite(run_eval_cli, tmp_path, capsys) -> None:
    """A run killed after rerunning an episode, before its closing rewrite, leaves two lines of it."""
    results = tmp_path / "results.jsonl"
    assert run_eval_cli()[0] == 0
    rerun = lines(results)[0] | {"reward": 0.25}
    with results.open("a") as file:
        file.write(json.dumps(rerun) + "\n")
    assert main(["show", str(results), "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "4 episodes" in out and "0.25" in out
    assert run_eval_cli()[0] == 0  # nothing to run; the next eval rewrites the file
    rows = lines(results)
    assert len(rows) == 4 and rows[-1]["reward"] == 0.25


def test_a_corrupt_line_is_skipped_with_a_warning_and_every_good_record_kept(run_eval_cli, tmp_path, capsys) -> None:
    results = tmp_path / "results.jsonl"
    assert run_eval_cli()[0] == 0
    text = results.read_text().splitlines(keepends=True)
    good = [json.loads(line)["eval_key"] for line in text]
    text[1] = '{"eval_key": "MathEnv|test|-|x|0", "turns": [\n'  # a corrupt line in the middle
    results.write_text("".join(text))

    assert main(["show", str(results), "--no-color"]) == 0
    shown = capsys.readouterr()
    assert "results.jsonl:2: not JSON" in shown.err and "3 episodes" in shown.out

    code, _, err = run_eval_cli()
    assert code == 0 and "results.jsonl:2: skipped: not JSON" in err
    assert "3 of 4 episodes already done, 1 to run" in err
    assert sorted(row["eval_key"] for row in lines(results)) == sorted(good)  # the lost episode ran again
    assert (tmp_path / "results.jsonl.bad-lines").read_text() == text[1]


def test_a_second_writer_is_refused(run_eval_cli, tmp_path, model) -> None:
    results = tmp_path / "results.jsonl"
    assert run_eval_cli()[0] == 0
    before, calls = results.read_text(), model.generate_calls
    with results.open("a") as other_process:
        fcntl.flock(other_process.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running eval holds
        code, _, err = run_eval_cli("--n", "3")
    assert code == 2 and "is being written by another `openreward-rl eval` process" in err
    assert results.read_text() == before and model.generate_calls == calls


def test_a_file_of_other_settings_is_not_resumed(run_eval_cli, tmp_path) -> None:
    results = tmp_path / "results.jsonl"
    assert run_eval_cli()[0] == 0
    before = results.read_text()
    code, _, err = run_eval_cli("--temperature", "0.5", "--model", "other")
    assert (
        code == 2
        and "--model 'scripted' (this run: 'other'); --temperature 1.0 (this run: 0.5)" in err
        and "--overwrite" in err
    )
    assert results.read_text() == before

    code, out, err = run_eval_cli("--temperature", "0.5", "--model", "other", "--overwrite")
    assert code == 0 and "moved the earlier results to" in err and "already done" not in err
    assert (tmp_path / "results.old-1.jsonl").read_text() == before
    assert {(row["eval"]["model"], row["eval"]["temperature"]) for row in lines(results)} == {("other", 0.5)}
    assert len(lines(results)) == 4


def test_an_unreachable_model_server_is_one_error_before_any_episode(run_eval_cli, tmp_path) -> None:
    code, _, err = run_eval_cli(base_url="http://127.0.0.1:1")
    assert code == 2 and "cannot reach the model server at http://127.0.0.1:1" in err
    assert not (tmp_path / "results.jsonl").exists() or not lines(tmp_path / "results.jsonl")


def test_mostly_infrastructure_failures_exit_1_and_run_again_next_time(run_eval_cli, tmp_path, model) -> None:
    code, _, err = run_eval_cli(environments=("Faulty",))
    assert code == 1 and "4 of 4 episodes were infrastructure failures (env_error ×4" in err
    calls = model.generate_calls
    code, _, err = run_eval_cli(environments=("Faulty",))
    assert code == 1 and "0 of 4 episodes already done, 4 to run, 4 of them infrastructure failures to run again" in err
    assert model.generate_calls == calls + 4 and len(lines(tmp_path / "results.jsonl")) == 4
    code, _, err = run_eval_cli("--keep-failures", environments=("Faulty",))
    assert (
        model.generate_calls == calls + 4
        and "4 of 4 episodes already done (4 of them infrastructure failures, kept: --keep-failures), 0 to run" in err
    )


def test_the_lock_follows_the_file_through_its_rewrite(tmp_path) -> None:
    """Opening a file with two lines of one episode rewrites it (a new file renamed over the old):
    the lock must hold on the new file, or a second writer would get in."""
    from observe_fixtures import real_trajectory
    from openreward_rl.cli.evaluation import EvalJob, ResultsError, ResultsFile
    from openreward_rl.env.tasks import TaskRef

    path = tmp_path / "results.jsonl"
    job = EvalJob(TaskRef("addenv", "train", index=0), 0)
    with ResultsFile(path, {"eval": {"model": "m"}}) as first:
        first.write(job, real_trajectory())
    line = path.read_text()
    path.write_text(line + line)  # left by a run killed before its closing rewrite
    first = ResultsFile(path, {"eval": {"model": "m"}}).open()
    assert path.read_text() == line and list(first.done) == [job.key]
    with pytest.raises(ResultsError, match="is being written by another"):
        ResultsFile(path, {"eval": {"model": "m"}}).open()
    first.close()
    ResultsFile(path, {"eval": {"model": "m"}}).open().close()


@pytest.mark.anyio
async def test_the_model_check_tells_a_refused_key_and_an_unready_server_from_a_working_one(model) -> None:
    """An OpenAI-compatible server on 127.0.0.1: a refused key and a 5xx are errors naming the URL;
    a server without a model list (404) counts as reachable; SGLang's /health answers."""
    from aiohttp import web

    from local_http import serve_app
    from openreward_rl.cli.model_endpoint import check_model_endpoint

    status = {"code": 200}

    async def models(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer good-key-123":
            return web.json_response({"error": {"message": "bad key"}}, status=401)
        return web.json_response({"data": []}, status=status["code"])

    app = web.Application()
    app.router.add_get("/v1/models", models)
    check = lambda url, key: asyncio.to_thread(  # noqa: E731
        check_model_endpoint, "openai", url, api_key=key, key_name="$OPENAI_API_KEY"
    )
    async with serve_app(app) as base:
        await check(base + "/v1", "good-key-123")
        await check(base + "/elsewhere/v1", "good-key-123")  # 404: no model list, but a server
        with pytest.raises(
            ValueError,
            match=rf"the model server at {base}/v1 refuses \$OPENAI_API_KEY \(HTTP 401 on GET {base}/v1/models\)",
        ):
            await check(base + "/v1", "wrong-key-456")
        status["code"] = 503
        with pytest.raises(ValueError, match=r"is not ready \(HTTP 503"):
            await check(base + "/v1", "good-key-123")
    await asyncio.to_thread(check_model_endpoint, "sglang", model.server.url)

"""`openreward-rl eval` end to end against the example environments on the SDK's own server
(127.0.0.1), with a scripted engine that emits real Qwen3 token ids; resume; bad CLI input."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from openreward_rl.assets import load_tokenizer
from openreward_rl.cli import main
from openreward_rl.cli.eval import EvalOptions, run_eval, summary_table
from openreward_rl.config import parse_config, prepare_config
from openreward_rl.engines import FinishReason, Generation, GenerationRequest
from openreward_rl.env.local_server import load_environment_class

pytestmark = pytest.mark.anyio


class ScriptedEngine:
    """Answers MathEnv questions correctly (the right number from the task list) unless told to be wrong,
    and makes Faulty's `explode` tool blow up the environment (an infrastructure failure)."""

    def __init__(self, tokenizer, answers: dict[str, str], wrong: bool = False) -> None:
        self.tokenizer, self.answers, self.wrong, self.calls = tokenizer, answers, wrong, 0

    async def generate(self, request: GenerationRequest) -> Generation:
        self.calls += 1
        prompt = self.tokenizer.decode(list(request.input_ids))
        if "Fault-injection" in prompt:
            text = '<tool_call>\n{"name": "explode", "arguments": {}}\n</tool_call>'
        else:
            answer = next(a for q, a in self.answers.items() if q in prompt)
            text = f"The answer is {int(answer) + 1 if self.wrong else answer}."
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [
            self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ]
        return Generation(tuple(ids), tuple(-0.1 for _ in ids), FinishReason.STOP, matched_stop=ids[-1])

    async def aclose(self) -> None:
        pass


@pytest.fixture(scope="module")
def math_answers(example_env_specs) -> dict[str, str]:
    math_env = load_environment_class(example_env_specs["MathEnv"])
    return {task["question"]: task["answer"] for task in math_env.list_tasks("test")}


def options(tmp_path: Path, **changes) -> EvalOptions:
    values = dict(
        engine="sglang",
        model="scripted",
        n=2,
        concurrency=3,
        max_new_tokens=64,
        temperature=1.0,
        top_p=1.0,
        output=tmp_path / "results.jsonl",
        max_tasks=3,
    )
    values.update(changes)
    return EvalOptions(**values)


def config(env_server):
    raw = {
        "environments": {
            "MathEnv": {"splits": ["test"], "variant": "mathenv"},
            "Faulty": {"splits": ["train"], "variant": "faulty", "max_turns": 2},
        },
        "parser": "hermes",
        "attempts": 1,
    }
    return prepare_config(parse_config(raw), base_url=env_server.base_url)


async def test_eval_runs_writes_summarizes_and_resumes(env_server, openreward_client, math_answers, tmp_path) -> None:
    tokenizer = load_tokenizer("offline:qwen3")
    console = Console(file=io.StringIO(), width=200)
    engine = ScriptedEngine(tokenizer, math_answers)
    summary = await run_eval(
        options(tmp_path),
        config(env_server),
        engine=engine,
        tokenizer=tokenizer,
        client=openreward_client,
        console=console,
    )

    math, faulty = summary["MathEnv"], summary["Faulty"]
    assert (math.episodes, math.scored, math.reward_mean, math.success_rate, math.pass_at_k) == (
        6,
        6,
        1.0,
        1.0,
        {1: 1.0, 2: 1.0},
    )
    assert (faulty.episodes, faulty.scored, faulty.infrastructure_failures, faulty.reward_mean) == (6, 0, 6, None)
    assert set(faulty.failures) == {"env_error"}
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and len({row["eval_key"] for row in rows}) == 12
    assert {row["sample"] for row in rows} == {0, 1}
    assert all(row["eval"]["engine"] == "sglang" and row["task_ref"]["base_url"] == env_server.base_url for row in rows)
    assert all(row["reward"] is None for row in rows if row["task"]["environment"] == "Faulty")

    table = io.StringIO()
    Console(file=table, width=250).print(summary_table(summary))
    assert re.search(r"Faulty .* env_error ×6", table.getvalue())

    # Resume with n=3, keeping the recorded infrastructure failures, and a model that is now always
    # wrong: only the third sample of each task runs.
    wrong = ScriptedEngine(tokenizer, math_answers, wrong=True)
    summary = await run_eval(
        options(tmp_path, n=3, keep_failures=True),
        config(env_server),
        engine=wrong,
        tokenizer=tokenizer,
        client=openreward_client,
        console=console,
    )
    assert wrong.calls == 3 + 3  # one turn per new sample: MathEnv answers, Faulty's explode ends the episode
    math = summary["MathEnv"]
    assert math.episodes == 9 and math.success_rate == pytest.approx(6 / 9)
    assert math.pass_at_k[1] == pytest.approx(2 / 3) and math.pass_at_k[3] == 1.0
    assert "resuming" in console.file.getvalue()
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 18

    # By default recorded infrastructure failures are not done: they run again, and the file keeps one line per episode.
    wrong.calls = 0
    summary = await run_eval(
        options(tmp_path, n=3),
        config(env_server),
        engine=wrong,
        tokenizer=tokenizer,
        client=openreward_client,
        console=console,
    )
    assert wrong.calls == 9 and summary["Faulty"].episodes == 9 and summary["MathEnv"].episodes == 9
    assert (
        "9 of 18 episodes already done, 9 to run, 9 of them infrastructure failures to run again"
        in console.file.getvalue()
    )
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 18


async def test_a_half_written_last_line_is_dropped_and_rerun(
    env_server, openreward_client, math_answers, tmp_path
) -> None:
    tokenizer = load_tokenizer("offline:qwen3")
    engine = ScriptedEngine(tokenizer, math_answers)
    cfg = prepare_config(
        parse_config({"environments": {"MathEnv": {"splits": ["test"], "variant": "mathenv"}}, "parser": "hermes"}),
        base_url=env_server.base_url,
    )
    console = Console(file=io.StringIO())
    await run_eval(
        options(tmp_path, n=1, max_tasks=2),
        cfg,
        engine=engine,
        tokenizer=tokenizer,
        client=openreward_client,
        console=console,
    )
    output = tmp_path / "results.jsonl"
    lines = output.read_text().splitlines(keepends=True)
    output.write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # killed mid-write
    engine.calls = 0
    summary = await run_eval(
        options(tmp_path, n=1, max_tasks=2),
        cfg,
        engine=engine,
        tokenizer=tokenizer,
        client=openreward_client,
        console=console,
    )
    assert engine.calls == 1 and summary["MathEnv"].episodes == 2
    assert len({json.loads(line)["eval_key"] for line in output.read_text().splitlines()}) == 2


def cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(["eval", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--engine", "sglang", "--model", "m", "--config", "missing.yaml", "--base-url", "http://127.0.0.1:1"],
            "config file missing.yaml does not exist",
        ),
        (
            ["--engine", "sglang", "--model", "m", "--config", "examples/quickstart_config.yaml"],
            "--engine sglang needs --base-url",
        ),
        (
            ["--engine", "transformers", "--model", "m", "--config", "examples/quickstart_config.yaml", "--n", "0"],
            "--n must be at least 1",
        ),
        (
            ["--engine", "transformers", "--model", "m", "--config", "examples/quickstart_config.yaml", "--top-p", "0"],
            "--top-p must be in (0, 1]",
        ),
        (
            [
                "--engine",
                "transformers",
                "--model",
                "m",
                "--config",
                "examples/quickstart_config.yaml",
                "--serve",
                "nowhere.py:Env",
            ],
            "does not exist",
        ),
        (
            [
                "--engine",
                "transformers",
                "--model",
                "offline:nothing",
                "--config",
                "examples/quickstart_config.yaml",
                "--serve",
                "examples/environments/math_env.py:MathEnv",
            ],
            "unknown offline model 'offline:nothing'",
        ),
        (
            ["--engine", "transformers", "--model", "m", "--config", "examples/quickstart_config.yaml"],
            "needs an API key: set OPENREWARD_API_KEY",
        ),
        (
            [
                "--engine",
                "transformers",
                "--model",
                "/no/such/path",
                "--config",
                "examples/quickstart_config.yaml",
                "--serve",
                "examples/environments/closest_guess.py:GradedGuess",
            ],
            "--model '/no/such/path': no such file or directory",
        ),
        (
            [
                "--engine",
                "transformers",
                "--model",
                "~/no/such/model",
                "--config",
                "examples/quickstart_config.yaml",
                "--serve",
                "examples/environments/closest_guess.py:GradedGuess",
            ],
            "--model '~/no/such/model': no such file or directory",
        ),
        (
            [
                "--engine",
                "openai",
                "--model",
                "./no/such/model",
                "--base-url",
                "http://127.0.0.1:1/v1",
                "--config",
                "examples/quickstart_config.yaml",
                "--serve",
                "examples/environments/closest_guess.py:GradedGuess",
            ],
            "--model './no/such/model': no such file or directory (the tokenizer is loaded from it; pass --tokenizer",
        ),
        (
            [
                "--engine",
                "openai",
                "--model",
                "m",
                "--tokenizer",
                "no/such/tokenizer/dir",
                "--base-url",
                "http://127.0.0.1:1/v1",
                "--config",
                "examples/quickstart_config.yaml",
                "--serve",
                "examples/environments/closest_guess.py:GradedGuess",
            ],
            "--tokenizer 'no/such/tokenizer/dir': no such file or directory",
        ),
    ],
)
def test_bad_cli_input_is_reported_before_any_work(capsys, monkeypatch, argv, message) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    code, err = cli(capsys, *argv)
    assert code == 2 and message in " ".join(err.split())


@pytest.mark.parametrize(
    "config_text, argv, message",
    [
        (
            "env_base_url: http://127.0.0.1:9\nenvironments:\n  GradedGuess:\n    splits: [test]\n",
            [],
            r"cannot reach the environment server at http://127\.0\.0\.1:9 \(for 'GradedGuess'\)",
        ),
        (
            "environments:\n  GradedGuess:\n    splits: [test]\n",
            ["--serve", "examples/environments/closest_guess.py:GradedGuess", "--split", "nosplit"],
            r"--split 'nosplit': environment 'GradedGuess' has no such split; it has: train, test$",
        ),
        (
            "environments:\n  NoSuchEnv:\n    splits: [test]\n",
            ["--serve", "examples/environments/closest_guess.py:GradedGuess"],
            r"environment 'NoSuchEnv' is not served at http://127\.0\.0\.1:\d+; it serves: gradedguess ",
        ),
    ],
    ids=["unreachable", "unknown split", "name not served"],
)
def test_environments_that_cannot_be_evaluated_are_one_line_before_any_episode(
    capsys, monkeypatch, tmp_path, config_text, argv, message
) -> None:
    """An unreachable env_base_url, a --split the environment lacks and a configured name the served class
    does not have: one line and exit 2 (not a traceback, nor episodes of another environment)."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    config_file = tmp_path / "c.yaml"
    config_file.write_text(config_text)
    code, err = cli(
        capsys,
        "--config",
        str(config_file),
        "--engine",
        "openai",
        "--model",
        "Qwen/Qwen3-8B",
        "--tokenizer",
        "offline:qwen3",
        "--base-url",
        "http://127.0.0.1:1/v1",
        "--output",
        str(tmp_path / "results.jsonl"),
        *argv,
    )
    [line] = [line for line in err.splitlines() if "openreward-rl eval" in line or "Traceback" in line]
    assert code == 2 and re.search(message, line), err
    assert not (tmp_path / "results.jsonl").exists()


def test_unknown_engine_is_an_argparse_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--engine", "vllm", "--model", "m"])
    assert exit_info.value.code == 2 and "invalid choice: 'vllm'" in capsys.readouterr().err


def test_options_from_args_names_the_bad_option() -> None:
    args = SimpleNamespace(
        engine="openai",
        model="gpt",
        n=1,
        concurrency=1,
        max_new_tokens=8,
        max_tasks=None,
        max_context_len=None,
        temperature=1.0,
        top_p=1.0,
        base_url=None,
        device="cuda",
        dtype=None,
        serve=[],
        seed=0,
        output=None,
        split=None,
        tokenizer=None,
        api_key_env="K",
    )
    with pytest.raises(ValueError, match="--device and --dtype apply to --engine transformers only"):
        EvalOptions.from_args(args)


async def test_eval_metrics_reach_wandb_offline_and_trajectories_reach_the_upload_sink(
    env_server, math_answers, tmp_path, monkeypatch
) -> None:
    """`eval` logs its per-environment metrics to a real offline WandB run and uploads each trajectory
    (the OpenReward rollout API is a local sink on 127.0.0.1)."""
    from openreward import AsyncOpenReward

    from observe_fixtures import read_offline_run
    from openreward_rl.cli.eval import log_to_wandb
    from test_upload import UploadSink

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("OPENREWARD_API_KEY", "local-key")
    tokenizer = load_tokenizer("offline:qwen3")
    raw = {"environments": {"MathEnv": {"splits": ["test"], "variant": "mathenv"}}, "parser": "hermes", "upload": True}
    cfg = prepare_config(parse_config(raw), base_url=env_server.base_url)
    with UploadSink() as sink:
        monkeypatch.setenv("OPENREWARD_API_URL", sink.url)
        client = AsyncOpenReward(api_key="local-key")
        try:
            summary = await run_eval(
                options(tmp_path, n=1, max_tasks=2),
                cfg,
                engine=ScriptedEngine(tokenizer, math_answers),
                tokenizer=tokenizer,
                client=client,
                console=Console(file=io.StringIO()),
            )
        finally:
            await client.environments.aclose()
    assert len(sink.of_type("rollout")) == 2
    assert {m["type"] for m in sink.of_type("message")} >= {"user_message", "assistant_message"}

    log_to_wandb(options(tmp_path, wandb_project="eval-project", wandb_run="eval-run"), summary, cfg)
    run_config, rows = read_offline_run(tmp_path)
    (row,) = rows
    assert row["openreward_eval/MathEnv/reward_mean"] == 1.0 and row["eval/step"] == 0
    assert run_config["model"] == "scripted"


@pytest.mark.parametrize(
    "model, tokenizer_name",
    [
        ("Qwen/Qwen3-8B", "offline:qwen3"),
        ("meta-llama/Llama-3.1-8B-Instruct", "offline:llama3.1"),
        ("zai-org/GLM-4.5", "offline:glm-4.5"),
    ],
)
async def test_openai_engine_evaluates_families_whose_turns_end_on_stop_ids(
    env_server, openreward_client, math_answers, tmp_path, model, tokenizer_name
) -> None:
    """A family's end-of-turn stop ids are the chat endpoint's business (it renders the template and ends
    the turn itself): `eval --engine openai` completes its episodes instead of refusing the ids."""
    from openreward_rl.engines.openai_chat import OpenAIChatEngine
    from test_openai_engine import completion, serve_chat

    def answer(body: dict) -> tuple[int, dict]:
        prompt = " ".join(str(m.get("content")) for m in body["messages"] if m["role"] == "user")
        return 200, completion({"content": f"The answer is {next(a for q, a in math_answers.items() if q in prompt)}."})

    tokenizer = load_tokenizer(tokenizer_name)
    cfg = prepare_config(
        parse_config({"environments": {"MathEnv": {"splits": ["test"], "variant": "mathenv"}}}),
        base_url=env_server.base_url,
    )
    async with serve_chat() as chat:
        chat.answer = answer
        engine = OpenAIChatEngine(chat.url, model, tokenizer, api_key_env="UNSET_KEY_FOR_TEST")
        try:
            summary = await run_eval(
                options(tmp_path, engine="openai", model=model, n=1, max_tasks=2),
                cfg,
                engine=engine,
                tokenizer=tokenizer,
                client=openreward_client,
                console=Console(file=io.StringIO()),
            )
        finally:
            await engine.aclose()
    math = summary["MathEnv"]
    assert (math.episodes, math.scored, math.reward_mean, math.infrastructure_failures) == (2, 2, 1.0, 0)
    assert len(chat.requests) == 2 and not any("stop_token_ids" in body or "stop" in body for body in chat.requests)


def test_eval_without_flags_runs_with_the_eval_options_defaults() -> None:
    """`openreward-rl eval` restates no default: flags left out give `EvalOptions`' own (one table)."""
    from openreward_rl.cli import build_parser

    args = build_parser().parse_args(["eval", "--engine", "openai", "--model", "gpt"])
    assert EvalOptions.from_args(args) == EvalOptions(engine="openai", model="gpt")


def test_a_bad_flag_or_option_of_every_command_is_a_config_error() -> None:
    """Bad input raises `ConfigError` where it enters (errors.py's rule), whichever command reads it."""
    from openreward_rl.backends.trl.run import TrlOptions
    from openreward_rl.cli import build_parser
    from openreward_rl.cli.train_trl import options_from_args
    from openreward_rl.errors import ConfigError, ResultsError
    from openreward_rl.loop.context import context_policy
    from openreward_rl.loop.episode import EpisodeSettings

    with pytest.raises(ConfigError, match="--n must be at least 1"):
        EvalOptions.from_args(build_parser().parse_args(["eval", "--engine", "openai", "--model", "gpt", "--n", "0"]))
    with pytest.raises(ConfigError, match="--eval-n must be at least 1"):
        options_from_args(build_parser().parse_args(["train", "--framework", "trl", "--model", "m", "--eval-n", "0"]))
    with pytest.raises(ConfigError, match="n-samples must be at least 2"):
        TrlOptions(model="m", n_samples=1)
    with pytest.raises(ConfigError, match="--sampler continuous cannot sample under --bf16"):
        options_from_args(
            build_parser().parse_args(
                ["train", "--framework", "trl", "--model", "m", "--sampler", "continuous", "--bf16"]
            )
        )
    with pytest.raises(ConfigError, match="sampler must be one of waves, continuous, got 'vllm'"):
        TrlOptions(model="m", sampler="vllm")
    with pytest.raises(ConfigError, match="unknown context policy"):
        context_policy("no-such-policy")
    with pytest.raises(ConfigError, match="max_turns must be at least 1"):
        EpisodeSettings(max_turns=0)
    assert issubclass(ResultsError, ConfigError)

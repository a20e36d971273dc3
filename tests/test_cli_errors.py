"""Every `openreward-rl` error is one line naming the problem (the traceback only under --debug), and every
check that needs no model runs before the model loads: a model name the hub does not know, an environment
the SDK refuses to serve, `--device cuda` without CUDA, an unknown environment, a negative learning rate,
Ctrl-C during training. The "model" here is one no loader can find (`acme/foo-7b`, offline): a check that
ran after loading would report that instead."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from openreward_rl.cli import main

REPO = Path(__file__).resolve().parents[1]
PAINT = f"{REPO}/examples/environments/paint.py:PaintColour"
MISSING_MODEL = "acme/foo-7b"

REFUSED_ENVIRONMENTS = '''
from pydantic import BaseModel
from openreward.environments import Environment, Split, TextBlock, ToolOutput, terminal, tool


class Answer(BaseModel):
    answer: str


class NoTools(Environment):
    @classmethod
    def list_splits(cls):
        return [Split(name="train", type="train")]

    @classmethod
    def list_tasks(cls, split):
        return [{"id": "t0"}]

    def get_prompt(self):
        return [TextBlock(text="hi")]


class ConcurrentTerminal(NoTools):
    @terminal
    @tool(concurrent=True)
    def answer(self, args: Answer) -> ToolOutput:
        """Grade the answer."""
        return ToolOutput(blocks=[TextBlock(text="ok")], reward=1.0, finished=True)
'''


@pytest.fixture
def paint_config(tmp_path: Path) -> Path:
    config = tmp_path / "c.yaml"
    config.write_text(
        "environments:\n  PaintColour:\n    splits: [train]\n    max_turns: 1\nparser: hermes\non_no_tool_call: end\nupload: false\n"
    )
    return config


def train(tmp_path: Path, config: Path, *argv: str) -> list[str]:
    return [
        "train",
        "--framework",
        "trl",
        "--config",
        str(config),
        "--output-dir",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        *argv,
    ]


def one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    """Run the command; (exit status, its one error line). A traceback fails the test."""
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("openreward-rl ")]
    assert len(lines) == 1, err
    return code, lines[0]


def test_a_model_the_hub_does_not_know_is_one_line_and_leaves_no_output_folder(
    capsys, tmp_path: Path, paint_config: Path, monkeypatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, line = one_line(capsys, train(tmp_path, paint_config, "--model", MISSING_MODEL, "--serve", PAINT))
    assert code == 2 and line.startswith(f"openreward-rl train: cannot load the model '{MISSING_MODEL}': "), line
    assert not (tmp_path / "out").exists()


def test_debug_shows_the_traceback_then_the_line(capsys, tmp_path: Path, paint_config: Path) -> None:
    assert main(["--debug", *train(tmp_path, paint_config, "--model", MISSING_MODEL, "--serve", PAINT)]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "OSError" in err
    assert err.strip().splitlines()[-1].startswith(f"openreward-rl train: cannot load the model '{MISSING_MODEL}'")
    assert (
        main([*train(tmp_path, paint_config, "--model", MISSING_MODEL, "--serve", PAINT), "--debug"]) == 2
    )  # after the command too
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("cls", "reason"),
    [
        ("NoTools", "cannot serve NoTools: Environment 'notools' has no tools defined"),
        ("ConcurrentTerminal", "cannot serve ConcurrentTerminal: @terminal tool 'answer' is marked concurrent=True"),
    ],
)
@pytest.mark.parametrize("command", ["train", "eval"])
def test_an_environment_the_sdk_refuses_to_serve_is_one_line_before_the_model_loads(
    command: str, cls: str, reason: str, capsys, tmp_path: Path
) -> None:
    envs = tmp_path / "refused.py"
    envs.write_text(REFUSED_ENVIRONMENTS)
    config = tmp_path / "c.yaml"
    config.write_text(f"environments:\n  {cls}:\n    splits: [train]\n")
    serve = ["--model", MISSING_MODEL, "--serve", f"{envs}:{cls}"]
    argv = (
        train(tmp_path, config, *serve)
        if command == "train"
        else ["eval", "--config", str(config), "--engine", "transformers", "--device", "cpu", *serve]
    )
    code, line = one_line(capsys, argv)
    assert code == 2 and line.startswith(f"openreward-rl {command}: {reason}"), line


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="CUDA is available here")
@pytest.mark.parametrize("command", ["train", "eval"])
def test_device_cuda_without_cuda_is_one_line_before_the_model_loads(
    command: str, capsys, tmp_path: Path, paint_config: Path
) -> None:
    serve = ["--model", MISSING_MODEL, "--serve", PAINT, "--device", "cuda"]
    argv = (
        train(tmp_path, paint_config, *serve)
        if command == "train"
        else ["eval", "--config", str(paint_config), "--engine", "transformers", *serve]
    )
    code, line = one_line(capsys, argv)
    assert code == 2 and line.startswith(f"openreward-rl {command}: device 'cuda': "), line
    assert "no CUDA" in line and "--device cpu" in line


def test_an_unknown_environment_is_reported_before_the_model_loads(capsys, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("environments:\n  NoSuchEnv:\n    splits: [train]\n")
    code = main(train(tmp_path, config, "--model", MISSING_MODEL, "--serve", PAINT))
    captured = capsys.readouterr()
    assert code == 2 and "environment 'NoSuchEnv' is not served at http://127.0.0.1:" in captured.err, captured.err
    assert "loading" not in captured.out  # nothing announces a model that never loads
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["train", "sft", "eval"])
def test_episode_settings_the_tokenizer_refuses_are_one_line_before_the_model_is_announced_or_loaded(
    command: str, capsys, tmp_path: Path, monkeypatch
) -> None:
    """SmolLM2 as a model of no family (`model_family: generic`): its template drops the tools and nothing writes them,
    refused with the tokenizer alone, before "loading offline:smollm2" and the model."""

    def load_model(*_: object, **__: object) -> None:
        pytest.fail("the model loaded before the episode settings were checked")

    monkeypatch.setattr("openreward_rl.engines.transformers.load_model", load_model)
    config = tmp_path / "c.yaml"
    config.write_text(
        "environments:\n  PaintColour:\n    splits: [train]\n    max_turns: 1\nmodel_family: generic\nupload: false\n"
    )
    given = ["--config", str(config), "--model", "offline:smollm2", "--serve", PAINT, "--device", "cpu"]
    argv = {
        "train": ["train", "--framework", "trl", "--output-dir", str(tmp_path / "out"), *given],
        "sft": [
            "sft",
            "--teacher",
            f"{REPO}/examples/paint_order_teacher.py:teacher",
            "--output-dir",
            str(tmp_path / "out"),
            *given,
        ],
        "eval": ["eval", "--engine", "transformers", *given],
    }[command]
    code = main(argv)
    captured = capsys.readouterr()
    assert (
        code == 2
        and f"openreward-rl {command}: {config}: the first prompt would show the model none of the environment's tools"
        in captured.err
    )
    assert "the generic family declares no tool preamble" in captured.err
    assert "loading" not in captured.out + captured.err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["train", "sft"])
@pytest.mark.parametrize("inside", [False, True])
def test_an_output_dir_that_is_a_file_is_one_line_before_anything_loads(
    command: str, inside: bool, capsys, tmp_path: Path, paint_config: Path
) -> None:
    """It failed after the model had loaded (296 s), as FileExistsError with exit status 1."""
    existing = tmp_path / "results.jsonl"
    existing.write_text("{}\n")
    output_dir = existing / "run" if inside else existing
    given = [
        "--config",
        str(paint_config),
        "--model",
        MISSING_MODEL,
        "--serve",
        PAINT,
        "--device",
        "cpu",
        "--output-dir",
        str(output_dir),
    ]
    argv = (
        ["train", "--framework", "trl", *given]
        if command == "train"
        else ["sft", "--teacher", f"{REPO}/examples/paint_order_teacher.py:teacher", *given]
    )
    code, line = one_line(capsys, argv)
    problem = f"cannot be a folder: {existing} is a file" if inside else "is a file"
    assert (
        code == 2
        and line
        == f"openreward-rl {command}: --output-dir {output_dir} {problem}; name a folder (a new one, or the one of an earlier run)"
    )
    assert existing.read_text() == "{}\n"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rollout-batch-size", "0"], "--rollout-batch-size must be at least 1, got 0"),
        (["--max-response-len", "0"], "--max-response-len must be at least 1, got 0"),
    ],
)
def test_a_shared_flag_is_named_as_typed_not_by_its_option_field(
    flags: list[str], message: str, capsys, tmp_path: Path, paint_config: Path
) -> None:
    code, line = one_line(capsys, train(tmp_path, paint_config, "--model", MISSING_MODEL, "--serve", PAINT, *flags))
    assert code == 2 and line == f"openreward-rl train: {message}"


@pytest.mark.parametrize("lr", [["--lr", "-1e-5"], ["--lr=-1e-5"], ["--lr", "-0.00001"], ["--lr", "0"]])
def test_a_learning_rate_that_is_not_positive_parses_and_is_refused_before_anything(
    lr: list[str], capsys, tmp_path: Path, paint_config: Path
) -> None:
    code, line = one_line(capsys, train(tmp_path, paint_config, "--model", MISSING_MODEL, "--serve", PAINT, *lr))
    assert code == 2 and line.startswith("openreward-rl train: lr must be > 0"), line
    assert not (tmp_path / "out").exists()


def test_slime_refuses_a_negative_learning_rate_in_exponent_form(capsys, tmp_path: Path, paint_config: Path) -> None:
    argv = [
        "train",
        "--framework",
        "miles",
        "--miles-path",
        str(tmp_path),
        "--config",
        str(paint_config),
        "--lr",
        "-1e-5",
        "--dry-run",
    ]
    code, line = one_line(capsys, argv)
    assert code == 2 and line == "openreward-rl train: --lr must be > 0, got -1e-05"


def test_a_bad_config_key_exits_2_with_its_message_and_no_traceback(capsys, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("environments:\n  PaintColour:\n    splits: [train]\n    max_turn: 1\n")
    code, line = one_line(capsys, train(tmp_path, config, "--model", MISSING_MODEL, "--serve", PAINT))
    assert code == 2 and line.startswith(
        f"openreward-rl train: {config}: environments.PaintColour: unknown key 'max_turn'"
    ), line


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        (None, "Python file '{file}' does not exist"),
        ("raise RuntimeError('boom')\n", "cannot import module '{file}': RuntimeError: boom"),
    ],
    ids=["missing", "raises on import"],
)
def test_a_teacher_file_that_is_missing_or_does_not_import_is_one_line_with_exit_2(
    source: str | None, problem: str, capsys, tmp_path: Path, paint_config: Path
) -> None:
    teacher = tmp_path / "teacher.py"
    if source is not None:
        teacher.write_text(source)
    argv = [
        "sft",
        "--teacher",
        f"{teacher}:teacher",
        "--config",
        str(paint_config),
        "--model",
        MISSING_MODEL,
        "--serve",
        PAINT,
        "--output-dir",
        str(tmp_path / "out"),
    ]
    code, line = one_line(capsys, argv)
    assert code == 2 and line == f"openreward-rl sft: --teacher {teacher}:teacher: " + problem.format(file=teacher), (
        line
    )


@pytest.mark.parametrize(
    "error",
    [ValueError("3 log-probs for 4 output ids"), AssertionError("Torch not compiled with CUDA enabled")],
    ids=["internal ValueError", "AssertionError"],
)
def test_an_error_that_is_not_the_librarys_own_is_a_bug_shown_with_its_traceback(
    error: Exception, capsys, monkeypatch, tmp_path: Path, paint_config: Path
) -> None:
    """An internal invariant that failed (a plain ValueError) is not bad input: exit status 1, the traceback,
    and a line saying it is a bug to report; never the one line of a typo."""
    from openreward_rl.cli import train_trl

    def broken(*_: object) -> int:
        raise error

    monkeypatch.setattr(train_trl, "_train", broken)
    code = main(train(tmp_path, paint_config, "--model", "offline:smollm2", "--serve", PAINT))
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback (most recent call last)" in err and "in broken" in err, err
    lines = [line for line in err.splitlines() if line.startswith("openreward-rl ")]
    assert lines == [
        f"openreward-rl train: {type(error).__name__}: {error}",
        "openreward-rl train: this is a bug in openreward-rl, not in your input: please report it, with the traceback above",
    ]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_model import save_tiny_qwen3

    return save_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"))


def test_ctrl_c_during_training_is_one_line_and_keeps_the_checkpoints(
    capsys, tmp_path: Path, paint_config: Path, tiny_model_dir: Path
) -> None:
    """A real SIGINT once the first checkpoint is on disk: the run ends with one line saying so and where
    the checkpoints are, exit status 130, and the checkpoint stays for --resume."""
    out = tmp_path / "out"
    fired = threading.Event()

    def interrupt_after_first_checkpoint() -> None:
        deadline = time.monotonic() + 600
        while (
            not (out / "checkpoint-1" / "trainer_state.json").is_file() and time.monotonic() < deadline
        ):  # written last
            time.sleep(0.05)
        fired.set()
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_after_first_checkpoint, daemon=True)
    watcher.start()
    # at most 40 steps: an interrupt that went missing ends the run there (and fails below), not after 1,000 checkpoints
    argv = train(
        tmp_path,
        paint_config,
        "--model",
        str(tiny_model_dir),
        "--serve",
        PAINT,
        "--max-steps",
        "40",
        "--save-interval",
        "1",
        "--rollout-batch-size",
        "1",
        "--n-samples",
        "2",
        "--max-response-len",
        "4",
        "--no-save-model",
    )
    try:
        code, line = one_line(capsys, argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped the command as a KeyboardInterrupt")
    watcher.join()
    assert fired.is_set() and code == 130
    assert line.startswith(f"openreward-rl train: interrupted; checkpoints kept in {out} (newest checkpoint-"), line
    assert line.endswith("--resume continues from it")
    assert (out / "checkpoint-1" / "trainer_state.json").is_file()


@pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning"
)  # the dropped KeyboardInterrupt, reported
def test_a_ctrl_c_dropped_inside_a_finalizer_still_ends_training_at_the_next_step_end() -> None:
    """Python drops a KeyboardInterrupt raised while a finalizer runs; the handler remembers it for the step's end."""
    from openreward_rl.cli.interrupts import Interrupts

    before = signal.getsignal(signal.SIGINT)
    interrupts = Interrupts()
    with interrupts.installed():
        assert signal.getsignal(signal.SIGINT) == interrupts.handle

        class Collected:
            def __del__(self) -> None:
                os.kill(
                    os.getpid(), signal.SIGINT
                )  # delivered while this finalizer runs: its KeyboardInterrupt is dropped
                time.sleep(0.2)

        Collected()
        step_end = interrupts.callback()
        with pytest.raises(KeyboardInterrupt):
            step_end.on_step_end(None, None, None)
    assert signal.getsignal(signal.SIGINT) == before

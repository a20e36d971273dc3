"""`openreward-rl train --framework trl` end to end: the real command with the real SmolLM2-135M on the CPU,
the real TRL trainer and the real SDK Server on 127.0.0.1 (`--serve`).

- a step in which every episode fails is one line and trains nothing; after `--max-failed-steps` such
  steps in a row the run stops with one line and status 1, keeping its checkpoints;
- after `--max-untrained-steps` steps in a row that train nothing (no reward spread) the run stops saying why
  and what to try, and saves the model;
- a before-evaluation in which every episode fails stops the run before training;
- a parser and a reward reduction of the user's own module train from the config alone;
- from Python, `TrlSession.open(..., episode=...)` trains with a custom Episode (examples/trl_custom_episode.py).

The model is loaded once for the module: the command's `load_model` is answered with that load (the
same model the command would load); everything else is the command's own.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from openreward_rl.cli import main

REPO = Path(__file__).resolve().parents[1]
BROKEN = f"{REPO / 'tests' / 'broken_paint_env.py'}:BrokenPaint"
PAINT = f"{REPO / 'examples' / 'environments' / 'paint.py'}:PaintColour"
ORDER = f"{REPO / 'examples' / 'environments' / 'paint_order.py'}:PaintOrder"
CHEAP = ["--model", "offline:smollm2", "--device", "cpu", "--n-samples", "2", "--rollout-batch-size", "1"]


def test_a_step_in_which_every_episode_failed_prints_one_line_instead_of_crashing() -> None:
    """TRL logs reward None for a step with no scored episode; the progress line says n/a (it raised TypeError)."""
    import io

    from openreward_rl.cli.train_trl import _Progress

    out = io.StringIO()
    logs = {
        "loss": 0.0,
        "reward": None,
        "reward_std": None,
        "openreward/Org/E/episodes": 4.0,
        "openreward/Org/E/infra_failures": 4.0,
    }
    _Progress(out).callback().on_log(None, SimpleNamespace(global_step=3, max_steps=20), None, logs=logs)
    assert re.fullmatch(r"step 3/20  reward n/a ± n/a  \[\]  infra failures 4  loss 0\.0000  \d+s\n", out.getvalue())
    adapter = SimpleNamespace(last_failure="all 4 episodes failed: env_error 4")
    out = io.StringIO()
    _Progress(out, adapter).callback().on_log(None, SimpleNamespace(global_step=3, max_steps=20), None, logs=logs)
    assert re.fullmatch(r"step 3/20  all 4 episodes failed: env_error 4; nothing trained  \d+s\n", out.getvalue())


def test_the_progress_line_names_environments_whose_names_hold_a_slash() -> None:
    """An OpenReward name is Org/Env: the line read `openreward/Org/reward_mean` and raised KeyError."""
    import io

    from openreward_rl.cli.train_trl import _Progress

    out = io.StringIO()
    logs = {
        "loss": 0.5,
        "reward": 0.25,
        "reward_std": 0.1,
        "openreward/GeneralReasoning/WhoDunIt/reward_mean": 0.25,
        "openreward/GeneralReasoning/WhoDunIt/infra_failures": 1.0,
    }
    _Progress(out).callback().on_log(None, SimpleNamespace(global_step=1, max_steps=2), None, logs=logs)
    assert re.fullmatch(
        r"step 1/2  reward 0\.250 ± 0\.100  \[GeneralReasoning/WhoDunIt 0\.250\]  infra failures 1  loss 0\.5000  \d+s\n",
        out.getvalue(),
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        # (the list starts with whatever parsers the suite's earlier tests registered in this process)
        ("parser: at_kall", "parser: unknown tool parser 'at_kall'; registered parsers: "),
        (
            "episode: re_rendering",
            "episode: unknown episode 're_rendering'; choose one of: tool; or name your own as package.module:attribute or path/to/file.py:attribute",
        ),
        ("episode: math:pi", "episode: episode 'math:pi' is 3.141592653589793, not an EpisodeBuilder"),
        (
            "environments: {PaintColour: {context_policy: squash}}",
            "context_policy: unknown context policy 'squash'; choose one of: clear_then_summarize, clear_tool_outputs, none, summarize; or name",
        ),
        (
            "system_prompt_template: 'Tools: {tools}. Call as {\"name\": ...}'",
            "system_prompt_template: only {tools} may be a placeholder",
        ),
    ],
)
def test_a_dry_run_refuses_an_unknown_extension_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, message: str
) -> None:
    config = tmp_path / "c.yaml"
    lines = [setting] if setting.startswith("environments") else ["environments: {PaintColour: {}}", setting]
    config.write_text("\n".join(lines) + "\n")
    assert (
        main(["train", "--framework", "trl", "--config", str(config), "--model", "offline:smollm2", "--dry-run"]) == 2
    )
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("openreward-rl train: ") and message in line


@pytest.fixture(scope="module")
def smollm2() -> tuple[Any, Any]:
    from openreward_rl.engines.transformers import load_model

    return load_model("offline:smollm2", device="cpu")


@pytest.fixture
def loads(smollm2: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The models the command asked to load, each answered by the module's one load of SmolLM2."""
    asked: list[str] = []

    def load_model(model: str, **_: Any) -> tuple[Any, Any]:
        asked.append(model)
        assert model == "offline:smollm2"
        return smollm2

    monkeypatch.setattr("openreward_rl.engines.transformers.load_model", load_model)
    return asked


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train_config.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def broken_paint(tmp_path: Path) -> list[str]:
    """`openreward-rl train --framework trl` on BrokenPaint, whose every episode fails (the run's flags follow)."""
    config = _config(
        tmp_path,
        """
        environments:
          BrokenPaint: {splits: [train], max_turns: 1}
        parser: hermes
        attempts: 1
        upload: false
    """,
    )
    return ["train", "--framework", "trl", "--config", str(config), "--serve", BROKEN, *CHEAP]


@pytest.mark.slow
def test_a_run_whose_steps_all_fail_stops_after_max_failed_steps_with_one_line_and_keeps_its_checkpoints(
    tmp_path: Path,
    broken_paint: list[str],
    loads: list[str],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    output = tmp_path / "run"
    code = main(
        [
            *broken_paint,
            "--max-steps",
            "6",
            "--max-failed-steps",
            "2",
            "--save-interval",
            "2",
            "--output-dir",
            str(output),
        ]
    )
    captured = capsys.readouterr()
    # TRL's dump of a row no reward function scored (the whole row, prompt included) is not shown beside our step line
    assert not [r for r in caplog.records if "All reward functions returned None" in r.getMessage()]
    assert code == 1 and loads == ["offline:smollm2"], captured.err
    steps = [line for line in captured.out.splitlines() if line.startswith("step ")]
    assert [re.sub(r"  \d+s$", "", line) for line in steps] == [
        "step 1/6  all 2 episodes failed: env_error 2; nothing trained",
        "step 2/6  all 2 episodes failed: env_error 2; nothing trained",
    ]
    *before, error = captured.err.strip().splitlines()
    # the environment's own failure: one line (its traceback went to the server's log file), not one per episode
    assert (
        len(before) == 1
        and before[0].startswith("environment server (in this process): ")
        and "injected environment fault" in before[0]
    ), captured.err
    assert "Traceback" not in captured.out + captured.err
    assert error.startswith(
        "openreward-rl train: stopped at step 2: 2 steps in a row in which every episode failed (last: all 2 episodes failed: env_error 2; 2 of them: "
    ) and error.endswith(f"); checkpoints kept, the last {output / 'checkpoint-2'}"), (
        error
    )  # what failed, in the environment's words
    assert [p.name for p in output.glob("checkpoint-*")] == ["checkpoint-2"]
    assert "model saved" not in captured.out


@pytest.mark.slow
def test_a_run_whose_steps_all_train_nothing_stops_after_max_untrained_steps_saying_why_and_saves_the_model(
    tmp_path: Path, loads: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """One token per turn: every PaintOrder episode is truncated, rewarded 0, so no group has spread and no step trains."""
    output = tmp_path / "run"
    code = main(
        [
            "train",
            "--framework",
            "trl",
            "--config",
            str(REPO / "examples" / "train_tool_agent_config.yaml"),
            "--serve",
            ORDER,
            *CHEAP,
            "--max-response-len",
            "1",
            "--max-steps",
            "6",
            "--max-untrained-steps",
            "2",
            "--save-interval",
            "0",
            "--output-dir",
            str(output),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0 and loads == ["offline:smollm2"], captured.err
    steps = [line for line in captured.out.splitlines() if line.startswith("step ")]
    assert [line.split("  ")[0] for line in steps] == ["step 1/6", "step 2/6"]
    assert all("zero-spread 1.00  untrained 1.00  loss 0.0000" in line for line in steps)
    [error] = [line for line in captured.err.splitlines() if line.startswith("openreward-rl train:")]
    assert error.startswith(
        "openreward-rl train: stopped at step 2: 2 steps in a row trained nothing: every group's rewards were equal "
        "(last step: 1 of 1 groups without spread, mean reward 0.000, 0.00 tool calls/ep), so GRPO had no advantage to follow; "
        "a model that never calls a tool or never succeeds needs a warm start first (openreward-rl sft, docs/training.md)"
    )
    assert f"model saved to {output}" in captured.out


@pytest.mark.slow
def test_a_before_evaluation_in_which_every_episode_failed_stops_the_run_before_training(
    tmp_path: Path, broken_paint: list[str], loads: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "run"
    code = main(
        [
            *broken_paint,
            "--max-steps",
            "2",
            "--eval-split",
            "test",
            "--eval-n",
            "2",
            "--eval-max-tasks",
            "2",
            "--output-dir",
            str(output),
        ]
    )
    captured = capsys.readouterr()
    assert code == 1
    *before, error = captured.err.strip().splitlines()
    assert len(before) == 1 and before[0].startswith("environment server (in this process): "), (
        captured.err
    )  # the environment's failure, once
    assert error == (
        "openreward-rl train: the before-evaluation failed entirely (BrokenPaint: all 4 episodes failed: env_error 4); nothing was trained: fix the environment and rerun"
    )
    assert not [line for line in captured.out.splitlines() if line.startswith("step ")] and not output.exists()


USER_MODULE = '''
"""A user's own parts: a parser that calls `paint` with the reply's last word, and a reward reduction."""

import re

from openreward_rl.parsers import ParsedTurn, ToolCall
from openreward_rl.parsers.common import new_call_id
from openreward_rl.reducers import register_reducer


class LastWordParser:
    name = "last_word"

    def parse(self, text, *, tools=None, generation_prompt="", finish_reason=None):
        words = re.findall(r"[A-Za-z]+", text)
        if not words:
            return ParsedTurn(content=text)
        return ParsedTurn(content="", tool_calls=(ToolCall("paint", {"answer": words[-1]}, new_call_id()),))


@register_reducer("best_plus_ten")
class BestPlusTen:
    name = "best_plus_ten"

    def reduce(self, rewards):
        return 10.0 + max(rewards) if rewards else None
'''


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`my_parts` in a folder on sys.path; its registration is undone after the test."""
    from openreward_rl.reducers import base

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "my_parts.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    sys.modules.pop("my_parts", None)
    base._REGISTRY.pop("best_plus_ten", None)


@pytest.mark.slow
def test_a_parser_and_a_reducer_of_the_users_own_module_train_from_the_config_alone(
    tmp_path: Path, user_module: Path, loads: list[str], smollm2: tuple[Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from openreward_rl.observe.dumps import read_trajectories

    config = _config(
        tmp_path,
        """
        plugins: [my_parts]                 # registers the reduction best_plus_ten
        parser: my_parts:LastWordParser
        environments:
          PaintColour: {splits: [train], max_turns: 1, reward_reduction: best_plus_ten}
        system_prompt_template: "You are a painter. Reply with the colour only, one word."
        attempts: 1
        upload: false
    """,
    )
    eval_output = tmp_path / "eval.jsonl"
    code = main(
        [
            "train",
            "--framework",
            "trl",
            "--config",
            str(config),
            "--serve",
            PAINT,
            *CHEAP,
            "--max-steps",
            "1",
            "--save-interval",
            "0",
            "--max-response-len",
            "24",
            "--no-save-model",
            "--eval-split",
            "test",
            "--eval-n",
            "4",
            "--eval-max-tasks",
            "2",
            "--eval-output",
            str(eval_output),
            "--output-dir",
            str(tmp_path / "run"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert len([line for line in captured.out.splitlines() if line.startswith("step 1/1  reward ")]) == 1
    _, tokenizer = smollm2
    episodes = read_trajectories(eval_output.with_suffix(".before.jsonl")) + read_trajectories(eval_output)
    assert len(episodes) == 16
    for episode in episodes:  # the same runner as the training step's: the config's parser and reduction
        [turn] = episode.turns
        words = re.findall(
            r"[A-Za-z]+", tokenizer.decode(list(turn.sampled_ids), skip_special_tokens=True)
        )  # as parsed: no stop token
        [call] = turn.parsed.tool_calls  # the reply's last word, as LastWordParser calls it
        assert call.name == "paint" and call.arguments == {"answer": words[-1]}
        if episode.reward is not None:  # not truncated: the call ran and best_plus_ten reduced its reward
            assert episode.step_rewards and episode.reward == 10.0 + max(episode.step_rewards)
    # a reply that ends (about a third of SmolLM2's, 24 tokens at most) is graded; one of 16 is all but certain
    assert any(e.reward is not None for e in episodes)


@pytest.mark.slow
def test_trl_trains_from_python_with_the_custom_episode_of_the_example(
    tmp_path: Path, smollm2: tuple[Any, Any]
) -> None:
    """examples/trl_custom_episode.py: `TrlSession.open(..., episode=AnswerEpisode.build)` trains with that loop."""
    import importlib.util

    sys.path.insert(0, str(REPO / "examples" / "environments"))
    from paint import grade

    spec = importlib.util.spec_from_file_location(
        "trl_custom_episode_example", REPO / "examples" / "trl_custom_episode.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    model, tokenizer = smollm2
    result = example.train(str(tmp_path / "run"), model=model, tokenizer=tokenizer, steps=1)
    assert result["steps"] == 1 and len(result["last_step"]) == 4
    for episode in result[
        "last_step"
    ]:  # AnswerEpisode's: the reply itself graded as its `answer`, or cut at the token limit
        if episode["stop_reason"] == "completed":
            assert episode["answered"] == ["answer"] and episode["reward"] == grade(episode["colour"], episode["reply"])
        else:
            assert episode["stop_reason"] == "truncated" and episode["answered"] == [] and episode["reward"] is None

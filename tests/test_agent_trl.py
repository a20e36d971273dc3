"""`openreward-rl train --framework trl` trains an agent program of its own (examples/own_agent: the `openai`
client's tool loop, run as a command per episode) on PaintOrder with the real SmolLM2-135M on the CPU, from the
config alone (`episode: examples/own_agent/episode.py:build`); its before/after evaluation episodes and its training
episodes (`--train-output`) are recorded token-exact: each model call's sampled ids sit in their segment verbatim and
trained, everything else is context, and each request is the chat template's rendering of what the program sent
(scripts/check_agent_episodes.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openreward_rl.cli import main

REPO = Path(__file__).resolve().parents[1]
ORDER = f"{REPO / 'examples' / 'environments' / 'paint_order.py'}:PaintOrder"
CONFIG, MODEL = "examples/own_agent/train_config.yaml", "offline:smollm2"


@pytest.mark.slow
def test_the_example_agent_program_trains_through_trl_on_the_cpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from openreward_rl.env.local_server import import_file
    from openreward_rl.observe.dumps import read_records, read_trajectories

    monkeypatch.chdir(REPO)  # the config names the builder by its path in the repository
    monkeypatch.setenv("NO_PROXY", ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"])))
    eval_output, train_output = tmp_path / "eval.jsonl", tmp_path / "train.jsonl"
    code = main(
        [
            "train",
            "--framework",
            "trl",
            "--config",
            CONFIG,
            "--serve",
            ORDER,
            "--model",
            MODEL,
            "--device",
            "cpu",
            "--sampler",
            "continuous",
            "--n-samples",
            "2",
            "--rollout-batch-size",
            "1",
            "--max-steps",
            "1",
            "--max-response-len",
            "24",
            "--save-interval",
            "0",
            "--no-save-model",
            "--eval-split",
            "test",
            "--eval-n",
            "2",
            "--eval-max-tasks",
            "1",
            "--eval-output",
            str(eval_output),
            "--train-output",
            str(train_output),
            "--output-dir",
            str(tmp_path / "run"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert [line for line in captured.out.splitlines() if line.startswith("step 1/1  ")], captured.out
    trained = read_records(train_output)
    assert [record["step"] for record in trained] == [1, 1] and {r["phase"] for r in trained} == {"train"}
    episodes = (
        read_trajectories(eval_output.with_suffix(".before.jsonl"))
        + read_trajectories(eval_output)
        + read_trajectories(train_output)
    )
    assert len(episodes) == 6
    for episode in episodes:
        assert not episode.stop_reason.is_infrastructure_failure, episode.stop_detail
        assert episode.token_exact and episode.prefix_breaks == 0 and episode.turns
        assert episode.messages[0]["content"].startswith("You are a painter.")  # the program's own system prompt
        segment = episode.segments[-1]
        position = 0
        for (
            turn
        ) in episode.turns:  # one segment (the program never rewrites its history): each turn where it was sampled
            start = turn.prompt_length - len(segment.prompt_ids)
            assert start >= position and segment.response_ids[start : start + len(turn.sampled_ids)] == list(
                turn.sampled_ids
            )
            assert segment.loss_mask[position:start] == [0] * (start - position)
            assert segment.loss_mask[start : start + len(turn.sampled_ids)] == [1] * len(turn.sampled_ids)
            position = start + len(turn.sampled_ids)
        assert position == len(segment.response_ids)
    checker = import_file(REPO / "scripts" / "check_agent_episodes.py")
    assert (
        checker.main([str(eval_output), str(train_output), "--config", CONFIG, "--model", MODEL, "--serve", ORDER]) == 0
    )

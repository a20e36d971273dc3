"""`openreward-rl sft --from-results`: episodes recorded by another model, re-written in the student's format.

Real parts: PaintOrder on the SDK's `Server` (127.0.0.1); `openreward-rl eval` itself records the episodes,
once through `--engine sglang` with the real Qwen3 tokenizer (another vocabulary: a bigger model's ids) against
the SGLang test double (`openreward_rl.testing`), once through `--engine openai` against a local
OpenAI-compatible double (a hosted model's episodes, not token-exact); SmolLM2's tokenizer and chat template
for the student (the chatml family, Hermes calls in its tool preamble's format); TRL's `SFTTrainer`.

The "model" behind both doubles (`benchmarks/record_paint_order.py`) plays PaintOrder as a good model would
(read the order, answer its colour), except that it answers "white" on orders divisible by 3: those episodes
score 0.2 and are not kept.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openreward_rl.assets import load_tokenizer
from openreward_rl.cli.sft import recorded_episodes, replays
from openreward_rl.config import load_config, prepare_config
from openreward_rl.engines.teacher import turn_text
from openreward_rl.env.local_server import import_file, serve_environments
from openreward_rl.loop.rollout import Rollouts
from openreward_rl.observe.dumps import read_trajectories

REPO = Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "examples" / "train_tool_agent_config.yaml")
SERVE = str(REPO / "examples" / "environments" / "paint_order.py") + ":PaintOrder"
RECORDER = import_file(REPO / "benchmarks" / "record_paint_order.py")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`openreward-rl eval` on 6 PaintOrder train tasks, once each: Qwen3 over SGLang, and a hosted model over the OpenAI chat API."""
    folder = tmp_path_factory.mktemp("recorded")
    files = {"qwen": folder / "qwen.jsonl", "hosted": folder / "hosted.jsonl"}
    assert RECORDER.record("sglang", files["qwen"], max_tasks=6) == 0
    assert RECORDER.record("openai", files["hosted"], max_tasks=6) == 0
    return files


def test_the_recordings_are_another_models_episodes(recorded: dict[str, Path]) -> None:
    """What the warm start starts from: Qwen3's ids (not SmolLM2's), and a hosted model's re-tokenized, untrainable episodes."""
    qwen, hosted = read_trajectories(recorded["qwen"]), read_trajectories(recorded["hosted"])
    assert len(qwen) == len(hosted) == 6
    assert all(t.token_exact for t in qwen) and not any(t.token_exact for t in hosted)
    assert max(i for t in qwen for i in t.tokens) >= len(load_tokenizer("offline:smollm2"))  # Qwen3's vocabulary
    for episodes in (qwen, hosted):
        rewards = sorted(round(t.reward, 3) for t in episodes)
        assert set(rewards) <= {0.2, 1.2} and 1.2 in rewards  # "white" on some orders: 0.2 for the read alone


@pytest.mark.anyio
async def test_another_models_episodes_are_replayed_token_exact_in_the_students_format(
    recorded: dict[str, Path], openreward_client
) -> None:
    smollm2 = load_tokenizer("offline:smollm2")
    config = load_config(CONFIG)
    for name, path in recorded.items():
        kept = recorded_episodes([str(path)], config, min_reward=1.0)
        assert kept and all(t.reward == pytest.approx(1.2) for t in kept), name
        with serve_environments([SERVE]) as server:
            served = prepare_config(
                config, served={"PaintOrder": server.variant_for("PaintOrder")}, base_url=server.base_url
            )
            rollouts = Rollouts.from_config(
                served, engine=None, tokenizer=smollm2, client=openreward_client, model="offline:smollm2"
            )
            replayed = [
                await rollouts.run(task, engine=engine.for_task(task))
                for engine, task in replays(rollouts.renderer, served, kept)
            ]
        for before, after in zip(kept, replayed, strict=True):
            assert (
                after.trainable
                and after.reward == pytest.approx(before.reward)
                and after.task.task_spec == before.task.task_spec
            )
            call, answer = after.turns
            assert (
                smollm2.decode(call.sampled_ids)
                == f'<tool_call>\n{{"name": "read_order", "arguments": {{"order": {before.task.task_spec["order"]}}}}}\n</tool_call><|im_end|>'
            )
            assert smollm2.decode(answer.sampled_ids) == f"{before.task.task_spec['colour']}<|im_end|>"
            # each turn exactly as SmolLM2's template writes that message, after the first prompt it renders itself
            messages = after.messages
            [segment] = after.segments
            assert segment.prompt_ids == rollouts.renderer.render_prompt(messages[:2], [])
            assert list(call.sampled_ids) == rollouts.renderer.encode(
                turn_text(rollouts.renderer, messages[:2], engine_turn(after, 0), [])
            )


def engine_turn(trajectory: Any, index: int) -> Any:
    from openreward_rl.engines.teacher import Replay

    return Replay.of((turn.parsed for turn in trajectory.turns), reasoning=False).turns[index]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"not": "an episode"}'], "results.jsonl record 0: not a trajectory (missing key 'turns')"),
        ([], "no episodes in it"),
    ],
)
def test_an_unusable_file_is_refused_in_one_line_before_anything_loads(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(f"{line}\n" for line in lines))
    done = sft(["--from-results", str(path)], tmp_path)
    assert done.returncode == 2 and "loading" not in done.stdout
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("openreward-rl sft: ") and message in line


def test_episodes_of_another_environment_or_none_rewarded_enough_are_refused_before_anything_loads(
    tmp_path: Path, recorded: dict[str, Path]
) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text(recorded["qwen"].read_text().replace('"environment": "PaintOrder"', '"environment": "PaintRoom"'))
    done = sft(["--from-results", str(other)], tmp_path)
    assert done.returncode == 2 and "loading" not in done.stdout
    assert done.stderr.strip().splitlines() == [
        f"openreward-rl sft: --from-results {other} record 0: an episode of 'PaintRoom', which {CONFIG} does not configure (configured: PaintOrder)"
    ]
    done = sft(["--from-results", str(recorded["hosted"]), "--min-reward", "1.5"], tmp_path)
    assert done.returncode == 2 and "loading" not in done.stdout
    assert done.stderr.strip().splitlines() == [
        "openreward-rl sft: --from-results: no recorded episode is rewarded >= 1.5 (--min-reward): nothing to learn from"
    ]


def sft(flags: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "openreward_rl.cli",
        "sft",
        "--config",
        CONFIG,
        "--serve",
        SERVE,
        "--model",
        "offline:smollm2",
        "--device",
        "cpu",
    ]
    return subprocess.run(
        [*command, *flags, "--output-dir", str(tmp_path / "warm")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)  # loads and fine-tunes SmolLM2 on the CPU
def test_sft_warm_starts_smollm2_from_another_tokenizers_and_a_hosted_models_episodes(
    tmp_path: Path, recorded: dict[str, Path]
) -> None:
    done = sft(
        [
            "--from-results",
            str(recorded["qwen"]),
            "--from-results",
            str(recorded["hosted"]),
            "--epochs",
            "1",
            "--eval-max-tasks",
            "2",
            "--eval-n",
            "1",
            "--max-response-len",  # the evaluations' replies only (replayed turns are whole): short on the CPU
            "16",
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    kept = {name: sum(t.reward >= 1.0 for t in read_trajectories(path)) for name, path in recorded.items()}
    assert (
        f"{recorded['qwen']}: {kept['qwen']} of 6 episodes rewarded >= 1, to replay in the student's format"
        in done.stdout
    )
    assert (
        f"{recorded['hosted']}: {kept['hosted']} of 6 episodes rewarded >= 1, to replay in the student's format"
        in done.stdout
    )
    total = kept["qwen"] + kept["hosted"]
    assert re.search(
        rf"^replay  PaintOrder: reward 1\.200 ± 0\.000  success 1\.00  n {total}  tool calls/ep 1\.00  parse errors/ep 0\.00",
        done.stdout,
        re.M,
    )
    assert f"fine-tuning on {total} episode contexts of {total} episodes" in done.stdout
    assert re.search(r"^the student (calls tools|still calls no tool)", done.stdout, re.M)

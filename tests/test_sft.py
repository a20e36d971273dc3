"""The warm start: a scripted teacher's episodes in the student's own format, and `openreward-rl sft` on them.

Real parts: PaintOrder on the SDK's `Server` (127.0.0.1), SmolLM2's tokenizer and chat template (the chatml
family, Hermes calls in its tool preamble's format), TRL's `SFTTrainer` on the packaged SmolLM2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from openreward_rl import TaskRef
from openreward_rl.assets import load_tokenizer
from openreward_rl.backends.trl.sft import sft_rows
from openreward_rl.config import parse_config
from openreward_rl.engines.teacher import TeacherEngine, TeacherTask, TeacherTurn, prompt_text, turn_text
from openreward_rl.env.local_server import import_file, serve_environments
from openreward_rl.loop.rollout import Rollouts

REPO = Path(__file__).resolve().parents[1]
SERVE = str(REPO / "examples" / "environments" / "paint_order.py") + ":PaintOrder"
TEACHER = import_file(REPO / "examples" / "paint_order_teacher.py").teacher


@pytest.mark.anyio
async def test_teacher_episodes_are_token_exact_in_the_students_format_and_solve_the_task(openreward_client) -> None:
    tokenizer = load_tokenizer("offline:smollm2")
    with serve_environments([SERVE]) as server:
        config = parse_config(
            {"environments": {"PaintOrder": {"max_turns": 3}}, "on_no_tool_call": "end", "upload": False}
        )
        renderer = Rollouts.from_config(
            config, engine=None, tokenizer=tokenizer, client=openreward_client, model="offline:smollm2"
        ).renderer
        task = listed_task(server, 5)
        engine = TeacherEngine(renderer, TEACHER).for_task(task)  # the teacher reads the answer from the task spec
        rollouts = Rollouts.from_config(
            config, engine=engine, tokenizer=tokenizer, client=openreward_client, model="offline:smollm2"
        )
        trajectory = await rollouts.run(task)
    assert (
        trajectory.reward == pytest.approx(1.2)
        and trajectory.metrics["tool_calls"] == 1
        and not trajectory.metrics["parse_errors"]
    )
    first, answer = trajectory.turns
    assert tokenizer.decode(first.sampled_ids).startswith('<tool_call>\n{"name": "read_order"')
    assert tokenizer.decode(answer.sampled_ids) == f"{ordered_colour(task)}<|im_end|>"
    # each turn is exactly what the student's template writes for that message, token for token
    messages = trajectory.messages
    played = TeacherTask(task, "Order")
    assert list(first.sampled_ids) == renderer.encode(
        turn_text(renderer, messages[:2], TEACHER(messages[:2], [], played), [])
    )
    [segment] = trajectory.segments
    assert segment.context()[: len(segment.prompt_ids)] == renderer.render_prompt(
        messages[:2], []
    )  # the preamble-bearing first prompt
    rows = sft_rows([trajectory], min_reward=1.0)
    trained = [i for row in rows for i, m in zip(row["input_ids"], row["assistant_masks"], strict=True) if m]
    assert trained == [*first.sampled_ids, *answer.sampled_ids]  # the loss covers what the policy wrote, nothing else


def listed_task(server, index: int) -> TaskRef:
    """Train task `index` of the served PaintOrder with the task spec its listing gives (`{"id", "order", "colour"}`)."""
    spec = import_file(REPO / "examples" / "environments" / "paint_order.py").PaintOrder.task("train", index)
    return TaskRef(
        "PaintOrder",
        "train",
        index=index,
        task_spec=spec,
        base_url=server.base_url,
        variant=server.variant_for("PaintOrder"),
    )


def prompt_reading_teacher(messages, tools):
    """A `function(messages, tools)` teacher, as they were before teachers got the task: it finds the order in the prompt."""
    read = [m for m in messages if m["role"] == "tool" and re.search(r"paint the wall (\w+)", str(m.get("content")))]
    if read:
        return TeacherTurn(content=re.search(r"paint the wall (\w+)", str(read[-1]["content"])).group(1))
    order = int(re.search(r"Order (\d+)", prompt_text(messages)).group(1))
    return TeacherTurn(calls=(("read_order", {"order": order}),))


@pytest.mark.anyio
async def test_a_teacher_is_given_the_episodes_task_and_one_of_messages_and_tools_still_plays(
    openreward_client,
) -> None:
    tokenizer = load_tokenizer("offline:smollm2")
    seen = []

    def recording(messages, tools, task):
        seen.append(task)
        return TEACHER(messages, tools, task)

    with serve_environments([SERVE]) as server:
        config = parse_config(
            {"environments": {"PaintOrder": {"max_turns": 3}}, "on_no_tool_call": "end", "upload": False}
        )
        renderer = Rollouts.from_config(
            config, engine=None, tokenizer=tokenizer, client=openreward_client, model="offline:smollm2"
        ).renderer
        rollouts = Rollouts.from_config(
            config, engine=None, tokenizer=tokenizer, client=openreward_client, model="offline:smollm2"
        )
        task = listed_task(server, 7)
        recorded = await rollouts.run(task, engine=TeacherEngine(renderer, recording).for_task(task))
        old_style = await rollouts.run(task, engine=TeacherEngine(renderer, prompt_reading_teacher))
        unbound = await rollouts.run(task, engine=TeacherEngine(renderer, TEACHER))
    assert recorded.reward == pytest.approx(1.2) and old_style.reward == pytest.approx(1.2)
    assert [t.spec for t in seen] == [task.task_spec] * 2 and seen[0].ref == task
    assert (
        seen[0].prompt
        == f"Order {task.task_spec['order']} says which colour to paint the wall. Read the order, then paint the wall."
    )
    assert recorded.turns[0].sampled_ids == old_style.turns[0].sampled_ids  # the same play, token for token
    assert unbound.stop_reason.value == "aborted" and "give its engine the task it plays" in unbound.stop_detail


@pytest.mark.anyio
async def test_the_teacher_plays_through_an_agent_program_in_the_prompt_the_program_writes(openreward_client) -> None:
    """`sft --config examples/own_agent/train_config.yaml`: with an agent program as the config's `episode:`, the
    teacher's turns are answers to the program's own requests (its system prompt, the tool preamble after it), so
    the warm start teaches the model the very context it will be trained in. The teacher reads the messages the
    context ids render (an assistant message the `openai` client sent without content reads as empty text)."""
    tokenizer = load_tokenizer("offline:smollm2")
    agent_program = import_file(REPO / "examples" / "own_agent" / "openai_tool_loop.py")
    requests = []

    def recording(messages, tools, task):
        requests.append(messages)
        return TEACHER(messages, tools, task)

    with serve_environments([SERVE]) as server:
        config = parse_config(
            {
                "environments": {"PaintOrder": {}},
                "episode": f"{REPO / 'examples' / 'own_agent' / 'episode.py'}:build_in_process",
                "tool_call_example": True,
                "upload": False,
            }
        )
        rollouts = Rollouts.from_config(
            config, engine=None, tokenizer=tokenizer, client=openreward_client, model="offline:smollm2"
        )
        task = listed_task(server, 4)
        try:
            trajectory = await rollouts.run(task, engine=TeacherEngine(rollouts.renderer, recording).for_task(task))
        finally:
            await rollouts.aclose()
    assert trajectory.reward == pytest.approx(1.2) and trajectory.metrics["tool_calls"] == 2, trajectory.stop_detail
    system, user = requests[0]
    assert system["content"].startswith(agent_program.SYSTEM_PROMPT + "\n\n") and "<tool_call>" in system["content"]
    assert requests[1][2]["role"] == "assistant" and requests[1][2]["content"] == ""
    [segment] = trajectory.segments
    first, answer = trajectory.turns
    assert segment.prompt_ids == rollouts.renderer.render_prompt(requests[0], [])  # what the model will be shown
    assert list(first.sampled_ids) == rollouts.renderer.encode(
        turn_text(rollouts.renderer, requests[0], TEACHER(requests[0], [], TeacherTask(task, user["content"])), [])
    )
    assert tokenizer.decode(answer.sampled_ids) == f"{ordered_colour(task)}<|im_end|>"
    rows = sft_rows([trajectory], min_reward=1.0)
    trained = [i for row in rows for i, m in zip(row["input_ids"], row["assistant_masks"], strict=True) if m]
    assert trained == [*first.sampled_ids, *answer.sampled_ids]


def ordered_colour(task: TaskRef) -> str:
    """The colour the task's order names (PaintOrder's own task spec)."""
    return import_file(REPO / "examples" / "environments" / "paint_order.py").PaintOrder.task(task.split, task.index)[
        "colour"
    ]


def test_sft_without_episodes_to_learn_from_is_one_line() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "openreward_rl.cli",
            "sft",
            "--config",
            "examples/train_tool_agent_config.yaml",
            "--model",
            "offline:smollm2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "openreward-rl sft: give the episodes to learn from: --teacher FILE.py:function and/or --from-results FILE.jsonl"
    ]


@pytest.mark.slow
@pytest.mark.timeout(900)  # loads and fine-tunes SmolLM2 on the CPU
def test_sft_fine_tunes_on_the_teacher_and_saves_a_model_that_loads_and_samples(tmp_path: Path) -> None:
    out = tmp_path / "warm"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "openreward_rl.cli",
            "sft",
            "--config",
            "examples/train_tool_agent_config.yaml",
            "--serve",
            SERVE,
            "--model",
            "offline:smollm2",
            "--device",
            "cpu",
            "--teacher",
            "examples/paint_order_teacher.py:teacher",
            "--max-tasks",
            "2",
            "--epochs",
            "1",
            "--max-response-len",  # the evaluation's replies only (the teacher's turns are whole): short on the CPU
            "16",
            "--output-dir",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fine-tuning on 2 episode contexts of 2 episodes" in done.stdout and f"model saved to {out}" in done.stdout
    # the student plays training tasks after (no --eval-split) and sft says whether it calls tools, in one line
    assert re.search(
        r"^after \(train tasks\) PaintOrder: reward \d\.\d{3} .* tool calls/ep \d\.\d\d  parse errors/ep \d\.\d\d",
        done.stdout,
        re.M,
    )
    assert re.search(
        r"^the student (calls tools: \d\.\d\d tool calls/ep|still calls no tool \(0\.00 tool calls/ep).* on 4 train episodes",
        done.stdout,
        re.M,
    )
    assert json.loads((out / "config.json").read_text())["use_cache"] is True  # the Trainer's training switch is undone
    from openreward_rl.engines.transformers import load_model
    from openreward_rl.families import family_for

    model, tokenizer = load_model(str(out), device="cpu")
    assert family_for(tokenizer).name == "chatml"  # found by its chat template: runs with the tool preamble
    assert model.config.use_cache


@pytest.mark.timeout(900)  # loads SmolLM2 on the CPU before the teacher plays
def test_sft_whose_teacher_fails_every_episode_says_why_in_one_line(tmp_path: Path) -> None:
    teacher = tmp_path / "broken_teacher.py"
    teacher.write_text("def teacher(messages, tools, task):\n    raise RuntimeError('no answer here')\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "openreward_rl.cli",
            "sft",
            "--config",
            "examples/train_tool_agent_config.yaml",
            "--serve",
            SERVE,
            "--model",
            "offline:smollm2",
            "--device",
            "cpu",
            "--teacher",
            f"{teacher}:teacher",
            "--max-tasks",
            "2",
            "--output-dir",
            str(tmp_path / "out"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert (
        "teacher PaintOrder: no episode of 2 was scored  infra failures 2" in done.stdout and "nan" not in done.stdout
    )
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("openreward-rl sft: every one of the 2 teacher episodes failed (aborted 2; the first: ")
    )

"""JSONL trajectory dumps: round trip, flush per line, clear errors, and no secrets on disk."""

from __future__ import annotations

import json
import re

import attrs
import pytest

from observe_fixtures import SECRET_VALUE, real_trajectory
from openreward_rl.observe.dumps import DumpError, TrajectoryWriter, read_records, read_trajectories
from openreward_rl.task import TaskRef


def test_round_trip_keeps_every_field_and_extra_keys(tmp_path):
    trajectory = real_trajectory()
    path = tmp_path / "nested" / "dump.jsonl"
    with TrajectoryWriter(path) as writer:
        writer.write(trajectory, model="qwen3")
        writer.write(trajectory.to_dict(), model="qwen3", sample=1)
    assert writer.written == 2
    back = read_trajectories(path)
    assert [t.to_dict() for t in back] == [trajectory.to_dict(), trajectory.to_dict()]
    assert back[0].loss_mask == trajectory.loss_mask and back[0].tokens == trajectory.tokens
    assert [r.get("sample") for r in read_records(path)] == [None, 1]


def test_each_line_is_on_disk_as_soon_as_it_is_written(tmp_path):
    path = tmp_path / "dump.jsonl"
    writer = TrajectoryWriter(path)
    writer.write(real_trajectory())
    assert len(read_records(path)) == 1  # readable while the writer is still open
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(real_trajectory())
    with TrajectoryWriter(path) as again:  # appends
        again.write(real_trajectory())
    assert len(read_records(path)) == 2


def test_extra_keys_may_not_overwrite_trajectory_fields(tmp_path):
    with TrajectoryWriter(tmp_path / "d.jsonl") as writer, pytest.raises(ValueError, match=r"\['reward'\]"):
        writer.write(real_trajectory(), reward=3.0)


def test_bad_lines_name_their_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(real_trajectory().to_dict()) + "\n\n[1, 2]\n")
    with pytest.raises(DumpError, match=r"d.jsonl:3: expected a JSON object, got list"):
        read_records(path)
    path.write_text('{"reward": 1}\n')
    with pytest.raises(DumpError, match=r"record 0: not a trajectory \(missing key 'turns'\)"):
        read_trajectories(path)


def test_the_task_is_typed_in_memory_and_keeps_its_shape_on_disk(tmp_path):
    """A dump line's `task` is the dict dumps have always held (what names the task, never where it ran); it
    reads back as the trajectory's `TaskRef`. Lines written before `variant` was recorded read too."""
    by_index = {"environment": "addenv", "split": "train", "index": 1, "variant": None, "task_spec": None}
    by_spec = {"environment": "addenv", "split": "train", "index": None, "variant": "v2", "task_spec": {"q": "2+3"}}
    before_variant = {"environment": "addenv", "split": "test", "index": 4}
    lines = [{**real_trajectory().to_dict(), "task": task} for task in (by_index, by_spec, before_variant)]
    path = tmp_path / "old.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    tasks = [t.task for t in read_trajectories(path)]
    assert tasks == [
        TaskRef("addenv", "train", index=1),
        TaskRef("addenv", "train", task_spec={"q": "2+3"}, variant="v2"),
        TaskRef("addenv", "test", index=4),
    ]
    assert [t.to_dict()["task"] for t in read_trajectories(path)] == [
        by_index,
        by_spec,
        {**before_variant, "variant": None, "task_spec": None},
    ]


def test_a_trajectory_records_its_task_without_where_it_ran():
    served = TaskRef("addenv", "train", index=1, base_url="http://127.0.0.1:9", server_name="s", namespace="n")
    trajectory = attrs.evolve(real_trajectory(), task=served)
    assert trajectory.task == TaskRef("addenv", "train", index=1)
    assert (
        attrs.evolve(trajectory, task=trajectory.to_dict()["task"]).task == trajectory.task
    )  # a describe() dict, as custom episodes passed
    with pytest.raises(ValueError, match="must name a task"):
        attrs.evolve(trajectory, task={"environment": "addenv", "split": "train"})


def test_a_line_whose_task_names_no_task_is_refused_by_its_record_number(tmp_path):
    path = tmp_path / "d.jsonl"
    good = real_trajectory().to_dict()
    path.write_text(
        json.dumps(good) + "\n" + json.dumps({**good, "task": {"environment": "addenv", "split": "train"}}) + "\n"
    )
    with pytest.raises(DumpError, match=r"d.jsonl record 1: not a trajectory \(a trajectory's task must name a task"):
        read_trajectories(path)
    path.write_text(json.dumps({**good, "task": "addenv"}) + "\n")
    with pytest.raises(DumpError, match=r"record 0: not a trajectory \(a trajectory's task is a TaskRef, got str\)"):
        read_trajectories(path)


def test_a_dump_of_a_real_episode_holds_no_secret(tmp_path):
    """The episode ran with a secret its environment needed (submit pays only when the secret
    arrived), yet neither the dump nor any string in it carries the secret."""
    trajectory = real_trajectory()
    assert trajectory.step_rewards[-1] == 1.0  # the environment did receive the secret
    path = tmp_path / "d.jsonl"
    with TrajectoryWriter(path) as writer:
        writer.write(trajectory)
    text = path.read_text()
    assert SECRET_VALUE not in text
    assert not re.search(r"sk-[A-Za-z0-9-]{8,}", text)
    assert "OPENAI_API_KEY" not in text and "secrets" not in text


def test_resume_drops_only_an_unfinished_last_line(tmp_path):
    """A writer killed mid-line leaves a tail that is not JSON: a resuming reader cuts it off the
    file (so the next append starts a fresh line); a whole last record without its newline stays."""
    path = tmp_path / "d.jsonl"
    assert read_records(path, resume=True) == []  # nothing written yet
    with pytest.raises(DumpError, match="no such file"):
        read_records(path)
    whole = json.dumps(real_trajectory().to_dict())
    path.write_text(whole + "\n" + whole[: len(whole) // 2])
    with pytest.raises(DumpError, match=r"d.jsonl:2: not JSON"):
        read_records(path)  # a plain reader says where the file is broken
    assert len(read_records(path, resume=True)) == 1
    assert path.read_text() == whole + "\n"
    with TrajectoryWriter(path) as writer:
        writer.write(real_trajectory())
    assert len(read_records(path)) == 2
    path.write_text(whole)  # complete, only the newline is missing
    assert len(read_records(path, resume=True)) == 1 and path.read_text() == whole


def test_eval_results_are_dumps(tmp_path):
    """`openreward-rl eval` writes the dump format: show's reader and eval's resume read the same lines."""
    from openreward_rl.cli.evaluation import EvalJob, ResultsFile, read_results
    from openreward_rl.env.tasks import TaskRef

    trajectory = real_trajectory()
    job = EvalJob(TaskRef("addenv", "train", index=0), 1)
    with ResultsFile(tmp_path / "results.jsonl", {"eval": {"model": "m"}}) as results:
        results.write(job, trajectory)
    [record] = read_records(tmp_path / "results.jsonl")
    assert (record["eval_key"], record["sample"], record["eval"], record["task_ref"]["index"]) == (
        job.key,
        1,
        {"model": "m"},
        0,
    )
    assert read_trajectories(tmp_path / "results.jsonl")[0].to_dict() == trajectory.to_dict()
    assert read_results(tmp_path / "results.jsonl")[job.key].to_dict() == trajectory.to_dict()
    (tmp_path / "other.jsonl").write_text(json.dumps(trajectory.to_dict()) + "\n")  # a dump, but not eval's
    with pytest.raises(
        ValueError, match="other.jsonl:1: no eval_key: not an evaluation results file; use another --output"
    ):
        read_results(tmp_path / "other.jsonl")

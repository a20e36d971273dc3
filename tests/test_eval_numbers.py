"""The eval table and the HTML report give the reward the trainer optimises: a scored episode
without a reward counts 0.0 (as the Slime/Miles reward hooks hand it on) and is counted apart;
infrastructure failures stay out. One figure, the same in the table, the metrics, the report's
header and its groups."""

from __future__ import annotations

import io
import re

from rich.console import Console

from openreward_rl.cli.eval import summary_table
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.observe.metrics import summarize
from openreward_rl.show import render_report
from openreward_rl.task import TaskRef


def episode(index: int, reward: float | None, stop: StopReason = StopReason.COMPLETED, sample: int = 0) -> Trajectory:
    return Trajectory(TaskRef("E", "test", index=index), [], [], [], [], reward, stop)


# one task, four samples: 1.0, 0.0, truncated without a reward, an infrastructure failure
EPISODES = [
    episode(0, 1.0),
    episode(0, 0.0),
    episode(0, None, StopReason.TRUNCATED),
    episode(0, None, StopReason.ABORTED),
]


def test_the_table_counts_unrewarded_episodes_as_zero_and_apart() -> None:
    text = io.StringIO()
    Console(file=text, width=250).print(summary_table(summarize(EPISODES)))
    header = next(line for line in text.getvalue().splitlines() if "environment" in line)
    row = next(line for line in text.getvalue().splitlines() if line.lstrip("│┃ ").startswith("E "))
    cells = dict(
        zip([c.strip() for c in header.split("┃")[1:-1]], [c.strip() for c in row.split("│")[1:-1]], strict=True)
    )
    assert cells["episodes"] == "4" and cells["scored"] == "3" and cells["no reward"] == "1"
    assert cells["reward"].startswith("0.333")  # (1 + 0 + 0) / 3; the aborted episode stays out
    assert cells["infra failures"].startswith("aborted ×1")


def test_the_report_header_and_its_group_give_one_mean() -> None:
    page = render_report([t.to_dict() for t in EPISODES], EPISODES, source="results.jsonl")
    header_row = re.search(r"<tr><td>E</td>(.*?)</tr>", page).group(1)
    cells = re.findall(r"<td>(.*?)</td>", header_row)
    assert "0.333" in cells[3] and cells[2] == "1"  # reward mean; the "no reward" count
    assert "mean reward 0.333" in page


def table_cells(table) -> dict[str, str]:
    text = io.StringIO()
    Console(file=text, width=250).print(table)
    header = next(line for line in text.getvalue().splitlines() if "environment" in line)
    row = next(line for line in text.getvalue().splitlines() if line.lstrip("│┃ ").startswith("E "))
    return dict(
        zip([c.strip() for c in header.split("┃")[1:-1]], [c.strip() for c in row.split("│")[1:-1]], strict=True)
    )


def test_train_and_eval_report_the_same_pass_at_k_and_success_on_one_results_file(tmp_path) -> None:
    """`train --framework trl`'s before/after line (`eval_stats`) and `openreward-rl eval`'s table read the
    same results file alike, tasks with fewer scored samples (an infrastructure failure) included."""
    from openreward_rl.backends.trl.run import eval_stats
    from openreward_rl.cli.evaluation import EvalJob, ResultsFile, read_results
    from openreward_rl.env.tasks import TaskRef

    outcomes = {  # task index: its samples
        0: [
            (1.0, StopReason.COMPLETED),
            (0.0, StopReason.COMPLETED),
            (None, StopReason.TRUNCATED),
            (0.0, StopReason.COMPLETED),
        ],
        1: [
            (0.0, StopReason.COMPLETED),
            (0.5, StopReason.COMPLETED),
            (None, StopReason.ABORTED),
            (0.0, StopReason.MAX_TURNS),
        ],
        2: [
            (0.0, StopReason.COMPLETED),
            (None, StopReason.ENV_ERROR),
            (None, StopReason.ENV_ERROR),
            (0.0, StopReason.COMPLETED),
        ],
    }
    path = tmp_path / "results.jsonl"
    with ResultsFile(path) as results:
        for index, samples in outcomes.items():
            for sample, (reward, stop) in enumerate(samples):
                results.write(EvalJob(TaskRef("E", "test", index=index), sample), episode(index, reward, stop))
    trajectories = list(read_results(path).values())

    cells = table_cells(summary_table(summarize(trajectories)))  # what `openreward-rl eval` prints
    [train] = eval_stats(trajectories).values()  # what `train --framework trl` prints before and after
    line = train.line()

    def pass_at_ks(text: str) -> dict[str, str]:
        return dict(re.findall(r"@(\d+) (\d\.\d\d)", text))

    assert pass_at_ks(cells["pass@k"]) == pass_at_ks(line) and set(pass_at_ks(line)) == {"1", "2", "4"}
    assert re.search(r"success (\S+)", line).group(1) == cells["success"] == "0.22"  # 2 of 9 scored


def test_every_reader_takes_the_trained_reward_from_the_trajectory() -> None:
    """The eval summary, the Slime/Miles record, `show`'s index and TRL's reward all read `Trajectory.trained_reward`."""
    from openreward_rl.backends._sample.record import EpisodeRecord
    from openreward_rl.observe.metrics import EpisodeStats
    from openreward_rl.show.index import episode_rows

    trajectories = [
        episode(0, 0.5),
        episode(1, None, StopReason.TRUNCATED),
        episode(2, -1.0, StopReason.MAX_TURNS),
        episode(3, 0.5, StopReason.ENV_ERROR),
    ]
    assert [t.trained_reward for t in trajectories] == [0.5, 0.0, -1.0, None]
    assert [EpisodeStats.from_trajectory(t).trained_reward for t in trajectories] == [0.5, 0.0, -1.0, None]
    assert [row.trained_reward for row in episode_rows([t.to_dict() for t in trajectories], trajectories)] == [
        0.5,
        0.0,
        -1.0,
        None,
    ]
    assert [EpisodeRecord.of_trajectory(t, {}).trained_reward for t in trajectories] == [
        0.5,
        0.0,
        -1.0,
        0.0,
    ]  # a failure's sample is masked


def test_train_eval_line_gives_tool_calls_and_parse_errors_per_episode() -> None:
    """`train --framework trl`'s before/after line carries the episodes' mean tool calls and parse errors
    (the `tool_calls_mean` and `parse_errors_mean` of `openreward-rl eval`'s metrics)."""
    import attrs

    from openreward_rl.backends.trl.run import eval_stats
    from openreward_rl.observe.metrics import flat_metrics

    counts = [(3.0, 0.0), (1.0, 2.0), (2.0, 1.0)]  # (tool calls, parse errors) per episode
    trajectories = [
        attrs.evolve(episode(i, 1.0), metrics={"tool_calls": calls, "parse_errors": errors})
        for i, (calls, errors) in enumerate(counts)
    ]
    [stats] = eval_stats(trajectories).values()
    assert (stats.tool_calls, stats.parse_errors) == (2.0, 1.0)
    assert "tool calls/ep 2.00  parse errors/ep 1.00" in stats.line()
    metrics = flat_metrics(summarize(trajectories))
    assert (metrics["E/tool_calls_mean"], metrics["E/parse_errors_mean"]) == (2.0, 1.0)
    cells = table_cells(summary_table(summarize(trajectories)))  # `openreward-rl eval`'s table: the same figures
    assert (cells["tool calls/ep"], cells["parse errors/ep"]) == ("2.00", "1.00")


def test_a_line_with_no_scored_episode_says_so_without_nan() -> None:
    """Every episode an infrastructure failure (e.g. a teacher that failed each one): no "nan ± nan"."""
    from openreward_rl.backends.trl.run import eval_stats

    [stats] = eval_stats([episode(0, None, StopReason.ABORTED), episode(1, None, StopReason.ENV_ERROR)]).values()
    assert stats.line() == "E: no episode of 2 was scored  infra failures 2"
    cells = table_cells(summary_table(summarize([episode(0, None, StopReason.ABORTED)])))
    assert (cells["reward"], cells["tool calls/ep"], cells["parse errors/ep"]) == ("-", "-", "-")

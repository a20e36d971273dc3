"""The eval table and the HTML report give the reward the trainer optimises: a scored episode
without a reward counts 0.0 (as the Slime/Miles reward hooks hand it on) and is counted apart;
infrastructure failures stay out. One figure, the same in the table, the metrics, the report's
header and its groups."""

from __future__ import annotations

import io
import re

from rich.console import Console

from openreward_rl.cli.eval import summary_table
from openreward_rl.observe.metrics import summarize
from openreward_rl.show import render_report
from openreward_rl.loop.trajectory import StopReason, Trajectory


def episode(index: int, reward: float | None, stop: StopReason = StopReason.COMPLETED, sample: int = 0) -> Trajectory:
    return Trajectory({"environment": "E", "split": "test", "index": index, "variant": None}, [], [], [], [], reward, stop)


# one task, four samples: 1.0, 0.0, truncated without a reward, an infrastructure failure
EPISODES = [episode(0, 1.0), episode(0, 0.0), episode(0, None, StopReason.TRUNCATED), episode(0, None, StopReason.ABORTED)]


def test_the_table_counts_unrewarded_episodes_as_zero_and_apart() -> None:
    text = io.StringIO()
    Console(file=text, width=250).print(summary_table(summarize(EPISODES)))
    header = next(line for line in text.getvalue().splitlines() if "environment" in line)
    row = next(line for line in text.getvalue().splitlines() if line.lstrip("│┃ ").startswith("E "))
    cells = dict(zip([c.strip() for c in header.split("┃")[1:-1]], [c.strip() for c in row.split("│")[1:-1]], strict=True))
    assert cells["episodes"] == "4" and cells["scored"] == "3" and cells["no reward"] == "1"
    assert cells["reward"].startswith("0.333")  # (1 + 0 + 0) / 3; the aborted episode stays out
    assert cells["infra failures"].startswith("aborted ×1")


def test_the_report_header_and_its_group_give_one_mean() -> None:
    page = render_report([t.to_dict() for t in EPISODES], EPISODES, source="results.jsonl")
    header_row = re.search(r"<tr><td>E</td>(.*?)</tr>", page).group(1)
    cells = re.findall(r"<td>(.*?)</td>", header_row)
    assert "0.333" in cells[3] and cells[2] == "1"  # reward mean; the "no reward" count
    assert "mean reward 0.333" in page

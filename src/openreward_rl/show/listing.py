"""The terminal summary of a results file: every episode, as the report's index lists them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openreward_rl.show.index import EpisodeRow
from openreward_rl.show.style import terminal_reward_style

__all__ = ["render_listing"]


def render_listing(rows: Sequence[EpisodeRow], console: Any, *, title: str = "episodes") -> None:
    """One table row per episode: record number (what `--index` takes), task, sample, reward, GRPO
    advantage, stop reason, turns, tokens and errors."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left")
    for header in (
        "#",
        "environment",
        "task",
        "sample",
        "reward",
        "advantage",
        "stop",
        "turns",
        "sampled",
        "context",
        "parse err",
        "tool err",
    ):
        numeric = header in (
            "#",
            "sample",
            "reward",
            "advantage",
            "turns",
            "sampled",
            "context",
            "parse err",
            "tool err",
        )
        table.add_column(header, justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        if row.infrastructure_failure:
            reward = Text(f"infra: {row.stop_reason}", style=terminal_reward_style(None, infrastructure=True))
        else:
            reward = Text(
                "none" if row.reward is None else f"{row.reward:.3g}", style=terminal_reward_style(row.reward)
            )
        advantage = "-" if row.advantage is None else f"{row.advantage:+.2f}"
        task = f"{row.split} {row.task}" + (f" ({row.variant})" if row.variant else "")
        table.add_row(
            str(row.number),
            row.environment,
            task,
            str(row.sample),
            reward,
            advantage,
            row.stop_reason,
            str(row.turns),
            str(row.sampled_tokens),
            str(row.context_tokens),
            str(row.parse_errors),
            str(row.tool_errors),
        )
    console.print(table)

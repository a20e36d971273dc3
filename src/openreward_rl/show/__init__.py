"""Look at rollouts: a results file as a terminal listing or an HTML report, one episode in detail.

- `openreward_rl.show.index`: records as `EpisodeRow`s, grouped by task, with GRPO advantages.
- `openreward_rl.show.report`: the self-contained HTML report (index, groups, every episode).
- `openreward_rl.show.episode`: one trajectory in the terminal or as HTML.
- `openreward_rl.show.tokens`: the token view (loss-mask spans, rollout log-probs).
- `openreward_rl.show.listing`: the terminal listing of every episode.
- `openreward_rl.show.style`: the one colour scheme they share.

Used by `openreward-rl show FILE [--index I] [--html OUT]`.
"""

from openreward_rl.show.episode import conversation, episode_html, render_html, render_terminal, summary_rows
from openreward_rl.show.index import EpisodeRow, Group, advantages, episode_rows, groups
from openreward_rl.show.listing import render_listing
from openreward_rl.show.report import render_report
from openreward_rl.show.tokens import Span, mask_spans

__all__ = [
    "EpisodeRow",
    "Group",
    "Span",
    "advantages",
    "conversation",
    "episode_html",
    "episode_rows",
    "groups",
    "mask_spans",
    "render_html",
    "render_listing",
    "render_report",
    "render_terminal",
    "summary_rows",
]

"""The rollout report: one self-contained HTML file (inline CSS and script, nothing fetched).

Three views, switched by the address's #fragment (without the script, all of them show, one after
the other):
- `#index`: every episode in a table, sortable by any column and filterable (text, environment,
  stop reason) in the page itself;
- `#groups`: the samples of each task side by side with rewards and GRPO advantages
  (`openreward_rl.show.index`);
- `#episode-N`: one episode (`openreward_rl.show.episode`), N being its record number in the file.

>>> from openreward_rl.loop.trajectory import StopReason, Trajectory
>>> from openreward_rl.task import TaskRef
>>> def episode(reward, stop=StopReason.COMPLETED):
...     return Trajectory(TaskRef("E", "test", index=0), [], [], [], [], reward, stop)
>>> trajectories = [episode(1.0), episode(0.0), episode(None, StopReason.ENV_ERROR)]
>>> page = render_report([t.to_dict() for t in trajectories], trajectories, source="results.jsonl")
>>> page.count("<tr data-number="), page.count('class="member"'), 'data-advantage="0.707106"' in page
(3, 3, True)
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.loop.trajectory import Trajectory
from openreward_rl.observe.metrics import summarize
from openreward_rl.show.episode import episode_html
from openreward_rl.show.index import EpisodeRow, Group, episode_rows, groups
from openreward_rl.show.style import CSS, LEGEND, advantage_badge, badge

__all__ = ["render_report", "run_metadata", "final_answer"]

COLUMNS = (  # (key, header, numeric)
    ("number", "#", True),
    ("environment", "environment", False),
    ("task", "task", False),
    ("sample", "sample", True),
    ("reward", "reward", True),
    ("advantage", "advantage", True),
    ("stop", "stop reason", False),
    ("turns", "turns", True),
    ("sampled", "sampled tokens", True),
    ("context", "context tokens", True),
    ("parse_errors", "parse errors", True),
    ("tool_errors", "tool errors", True),
)

_SCRIPT = """
(function () {
  const table = document.getElementById("episodes");
  const rows = Array.from(table.tBodies[0].rows);
  const text = document.getElementById("filter-text"), env = document.getElementById("filter-env"), stop = document.getElementById("filter-stop");
  const shown = document.getElementById("shown");
  function filter() {
    const needle = text.value.trim().toLowerCase();
    let count = 0;
    for (const row of rows) {
      const ok = (!needle || row.textContent.toLowerCase().includes(needle)) && (!env.value || row.dataset.environment === env.value) && (!stop.value || row.dataset.stop === stop.value);
      row.hidden = !ok;
      count += ok;
    }
    shown.textContent = count + " of " + rows.length + " episodes shown";
  }
  [text, env, stop].forEach(el => el.addEventListener("input", filter));
  for (const th of table.tHead.rows[0].cells) {
    th.addEventListener("click", () => {
      const index = th.cellIndex, numeric = th.dataset.numeric === "1";
      const dir = th.dataset.dir === "asc" ? "desc" : "asc";
      for (const other of table.tHead.rows[0].cells) delete other.dataset.dir;
      th.dataset.dir = dir;
      const value = row => row.cells[index].dataset.value;
      rows.sort((a, b) => {
        const x = value(a), y = value(b);
        if (x === "" || y === "") return (x === "") - (y === "");  // no value: always last
        const order = numeric ? Number(x) - Number(y) : x.localeCompare(y);
        return dir === "asc" ? order : -order;
      });
      rows.forEach(row => table.tBodies[0].appendChild(row));
    });
  }
  function route() {
    const target = location.hash.slice(1);
    const episode = target.startsWith("episode-") && document.getElementById(target);
    for (const view of document.querySelectorAll("section.view")) {
      view.hidden = episode ? view !== episode : view.classList.contains("episode");
    }
    if (!episode && target) { const el = document.getElementById(target); if (el) el.scrollIntoView(); }
    if (episode) window.scrollTo(0, 0);
  }
  window.addEventListener("hashchange", route);
  filter();
  route();
})();
"""


def run_metadata(records: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """What the records say about the run that wrote them (`eval` writes model, engine, tokenizer, sampling)."""
    found: dict[str, str] = {}
    for record in records:
        run = record.get("eval")
        if isinstance(run, Mapping):
            for key, value in run.items():
                found.setdefault(str(key), str(value))
    return found


def final_answer(trajectory: Trajectory, limit: int = 400) -> str:
    """The last thing the model said: its last assistant message's text, else its tool calls."""
    for message in reversed(trajectory.messages):
        if message.get("role") != "assistant":
            continue
        text = message.get("content") or ""
        if not isinstance(text, str):
            text = str(text)
        if not text.strip() and message.get("tool_calls"):
            names = [call.get("function", call).get("name", "?") for call in message["tool_calls"]]
            text = "calls " + ", ".join(names)
        return text if len(text) <= limit else text[:limit] + "…"
    return ""


def _value(row: EpisodeRow, key: str) -> tuple[str, str]:
    """(sort value, cell HTML) of one column."""
    esc = html.escape
    if key == "number":
        return str(row.number), f'<a href="#episode-{row.number}">{row.number}</a>'
    if key == "environment":
        return row.environment, esc(row.environment)
    if key == "task":
        label = f"{row.split} {row.task}" + (f" ({row.variant})" if row.variant else "")
        return label, esc(label) + _task_text(row)
    if key == "sample":
        return str(row.sample), str(row.sample)
    if key == "reward":
        infrastructure = row.stop_reason if row.infrastructure_failure else None
        return ("" if row.reward is None or infrastructure else f"{row.reward}"), badge(
            row.reward, infrastructure=infrastructure
        )
    if key == "advantage":
        return ("" if row.advantage is None else f"{row.advantage}"), advantage_badge(row.advantage)
    if key == "stop":
        detail = f' title="{esc(row.stop_detail)}"' if row.stop_detail else ""
        return row.stop_reason, f"<span{detail}>{esc(row.stop_reason)}</span>"
    number = {
        "turns": row.turns,
        "sampled": row.sampled_tokens,
        "context": row.context_tokens,
        "parse_errors": row.parse_errors,
        "tool_errors": row.tool_errors,
    }[key]
    return str(number), str(number)


def _task_text(row: EpisodeRow) -> str:
    """The task's question and expected answer, as the index and the group view show them."""
    esc = html.escape
    question = f'<div class="question">{esc(row.question)}</div>' if row.question else ""
    expected = f'<div class="expected">expected {esc(row.expected)}</div>' if row.expected is not None else ""
    return question + expected


def _index(rows: Sequence[EpisodeRow]) -> str:
    esc = html.escape
    environments = sorted({row.environment for row in rows})
    stops = sorted({row.stop_reason for row in rows})
    options = lambda values: "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)  # noqa: E731
    parts = [
        '<section id="index" class="view"><h2>Episodes</h2><div class="filters">'
        '<input id="filter-text" type="search" placeholder="filter: any text in a row" size="30">'
        f'<select id="filter-env"><option value="">every environment</option>{options(environments)}</select>'
        f'<select id="filter-stop"><option value="">every stop reason</option>{options(stops)}</select>'
        f'<span id="shown">{len(rows)} episodes</span></div>'
        '<table class="episodes" id="episodes"><thead><tr>'
    ]
    parts.extend(
        f'<th data-key="{key}" data-numeric="{int(numeric)}">{esc(header)}</th>' for key, header, numeric in COLUMNS
    )
    parts.append("</tr></thead><tbody>")
    for row in rows:
        cells = []
        for key, _, numeric in COLUMNS:
            value, shown = _value(row, key)
            cells.append(f'<td data-value="{esc(value)}"{" class=num" if numeric else ""}>{shown}</td>')
        parts.append(
            f'<tr data-number="{row.number}" data-environment="{esc(row.environment)}" data-stop="{esc(row.stop_reason)}"'
            f"{' class=infra' if row.infrastructure_failure else ''}>{''.join(cells)}</tr>"
        )
    parts.append("</tbody></table></section>")
    return "".join(parts)


def _groups(all_groups: Sequence[Group], trajectories: Sequence[Trajectory]) -> str:
    esc = html.escape
    parts = [
        '<section id="groups" class="view"><h2>Groups</h2><p>The samples of each task side by side. Advantage is '
        "GRPO's group-normalized reward, (r − mean) / (std + 1e-6) with the sample std of the group, as Slime computes "
        "it under <code>--grpo-std-normalization</code>. A scored episode without a reward counts as 0 (as the trainer "
        "hooks set it); an infrastructure failure takes no part. Equal rewards (std 0) give every member 0.</p>"
    ]
    for number, group in enumerate(all_groups):
        stats = f"{len(group.members)} samples"
        if group.mean is not None:
            stats += f" · mean reward {group.mean:.3f}"
        if group.std is not None:
            stats += f" · std {group.std:.3f}"
        note = f' · <span class="group-note">{esc(group.note)}</span>' if group.note else ""
        parts.append(
            f'<div class="group" id="group-{number}" data-group="{esc(group.key)}"><h3>{esc(group.title)}</h3>{_task_text(group.members[0])}'
            f'<div class="stats">{esc(stats)}{note}</div><div class="members">'
        )
        for member in group.members:
            infrastructure = member.stop_reason if member.infrastructure_failure else None
            advantage = "" if member.advantage is None else f' data-advantage="{member.advantage:g}"'
            parts.append(
                f'<div class="member" data-episode="{member.number}"{advantage}>'
                f'<div class="head"><a href="#episode-{member.number}">sample {member.sample}</a>'
                f"<span>reward {badge(member.reward, infrastructure=infrastructure)}</span><span>advantage {advantage_badge(member.advantage)}</span></div>"
                f'<div class="stats">{esc(member.stop_reason)} · {_plural(member.turns, "turn")} · {_plural(member.sampled_tokens, "sampled token")}</div>'
                f'<div class="answer">{esc(final_answer(trajectories[member.number]))}</div></div>'
            )
        parts.append("</div></div>")
    parts.append("</section>")
    return "".join(parts)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _environments(trajectories: Sequence[Trajectory]) -> str:
    esc = html.escape
    parts = [
        '<table class="episodes"><thead><tr><th>environment</th><th>episodes</th><th>scored</th>'
        '<th title="scored episodes that observed no reward: counted 0, as the trainer does">no reward</th><th>reward mean ± std</th>'
        "<th>success (reward &gt; 0)</th><th>infrastructure failures</th></tr></thead><tbody>"
    ]
    for name, item in summarize(trajectories).items():
        reward = "–" if item.reward_mean is None else f"{item.reward_mean:.3f} ± {item.reward_std:.3f}"
        success = "–" if item.success_rate is None else f"{item.success_rate:.2f}"
        parts.append(
            f"<tr><td>{esc(name)}</td><td>{item.episodes}</td><td>{item.scored}</td><td>{item.unrewarded}</td><td>{reward}</td>"
            f"<td>{success}</td><td>{item.infrastructure_failures}</td></tr>"
        )
    parts.append("</tbody></table>")
    return "".join(parts)


def render_report(
    records: Sequence[Mapping[str, Any]],
    trajectories: Sequence[Trajectory],
    tokenizer: Any = None,
    *,
    source: str = "",
    tokenizer_note: str = "",
) -> str:
    """The whole report for `records` (`trajectories[i]` is `records[i]` read back)."""
    esc = html.escape
    rows = episode_rows(records, trajectories)
    all_groups = groups(rows)
    group_of = {member.number: number for number, group in enumerate(all_groups) for member in group.members}
    run = run_metadata(records)
    facts = [f"{len(rows)} episodes", f"{len(all_groups)} groups"]
    facts.extend(f"{key} {run[key]}" for key in ("model", "engine", "temperature") if key in run)
    title = f"Rollouts · {source}" if source else "Rollouts"
    parts = [
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title><style>{CSS}</style></head><body>',
        f'<h1>{esc(title)}</h1><p class="meta">{esc(" · ".join(facts))}</p>',
        f'<p class="meta">{esc(tokenizer_note)}</p>' if tokenizer_note else "",
        _environments(trajectories),
        LEGEND,
        '<nav><a href="#index">Episodes</a><a href="#groups">Groups</a></nav>',
        _index(rows),
        _groups(all_groups, trajectories),
    ]
    for row, trajectory in zip(rows, trajectories, strict=True):
        parts.append(
            f'<section class="view episode" id="episode-{row.number}"><h2>Episode {row.number}: {esc(row.environment)} · '
            f"{esc(row.split)} · task {esc(row.task)} · sample {row.sample}</h2>"
            f'<p><a href="#index">← all episodes</a> · <a href="#group-{group_of[row.number]}">its group</a> · advantage '
            f"{advantage_badge(row.advantage)}</p>{episode_html(trajectory, tokenizer, heading='h3')}</section>"
        )
    parts.append(f"<script>{_SCRIPT}</script></body></html>\n")
    return "".join(parts)

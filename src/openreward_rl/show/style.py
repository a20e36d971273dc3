"""One colour scheme for every view, so a colour means the same thing everywhere.

- Reward: red (0 or less) through amber to green (1 or more); 0 is never green.
- Advantage: red below 0, grey at 0, green above (as far as ±2).
- Infrastructure failure: a purple badge, never a reward colour (it says nothing about the model).
- No reward observed: a white badge with a dashed border.
- Sampled-token confidence: an orange background, stronger the lower the rollout probability.
- Loss mask: trained tokens (mask 1) underlined in blue; context tokens (mask 0) on grey.

>>> reward_colour(0.0) != reward_colour(1.0), reward_colour(-3.0) == reward_colour(0.0)
(True, True)
>>> badge(None, infrastructure="env_error")
'<span class="badge infra" title="infrastructure failure: not a reward">env_error</span>'
"""

from __future__ import annotations

import html
import math

__all__ = [
    "terminal_reward_style",
    "reward_colour",
    "advantage_colour",
    "confidence_colour",
    "badge",
    "advantage_badge",
    "CSS",
    "LEGEND",
]


def terminal_reward_style(reward: float | None, infrastructure: bool = False) -> str:
    """The same scheme for rich: purple infrastructure failures, dim without a reward, red/yellow/green by value."""
    if infrastructure:
        return "bold white on purple"
    if reward is None:
        return "dim"
    return "red" if reward <= 0 else "green" if reward >= 1 else "yellow"


def reward_colour(reward: float) -> str:
    """hsl from red (hue 0) at reward <= 0 to green (hue 125) at reward >= 1."""
    share = min(1.0, max(0.0, reward))
    return f"hsl({round(125 * share)}, 65%, {round(86 - 6 * share)}%)"


def advantage_colour(advantage: float) -> str:
    strength = min(1.0, abs(advantage) / 2)
    if strength == 0:
        return "hsl(0, 0%, 90%)"
    hue = 125 if advantage > 0 else 0
    return f"hsl({hue}, {round(25 + 45 * strength)}%, {round(92 - 14 * strength)}%)"


def confidence_colour(logprob: float) -> str:
    """Transparent for a sure token (p = 1), strong orange for an unlikely one."""
    doubt = 1.0 - math.exp(min(0.0, logprob))
    return f"rgba(255, 140, 0, {doubt * 0.75:.2f})"


def badge(reward: float | None, *, infrastructure: str | None = None) -> str:
    """A reward badge: coloured by value, purple for an infrastructure failure, dashed when there is no reward."""
    if infrastructure:
        return f'<span class="badge infra" title="infrastructure failure: not a reward">{html.escape(infrastructure)}</span>'
    if reward is None:
        return '<span class="badge none" title="no reward observed">no reward</span>'
    return f'<span class="badge reward" data-reward="{reward:g}" style="background: {reward_colour(reward)}">{reward:.3g}</span>'


def advantage_badge(advantage: float | None) -> str:
    if advantage is None:
        return '<span class="badge none" title="takes no part in the group">–</span>'
    return f'<span class="badge adv" data-advantage="{advantage:g}" style="background: {advantage_colour(advantage)}">{advantage:+.2f}</span>'


LEGEND = (
    '<p class="legend">reward '
    + "".join(badge(value) for value in (0.0, 0.25, 0.5, 0.75, 1.0))
    + " · advantage "
    + "".join(advantage_badge(value) for value in (-1.5, 0.0, 1.5))
    + " · "
    + badge(None)
    + " · "
    + badge(None, infrastructure="infrastructure failure")
    + ' · tokens <span class="key span-prompt">prompt</span> <span class="key span-trained">sampled, trained (mask 1)</span> '
    '<span class="key span-context">context, not trained (mask 0)</span> · rollout probability '
    + "".join(
        f'<span class="tok" style="background: {confidence_colour(math.log(p))}">p={p:g}</span>'
        for p in (0.99, 0.5, 0.1, 0.01)
    )
    + "</p>"
)

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; max-width: 72rem; margin: 1.5rem auto; padding: 0 1rem; color: #1d1d1f; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 1.6rem; }
nav a { margin-right: 1rem; }
table.summary td { padding: 0.1rem 0.8rem 0.1rem 0; vertical-align: top; }
table.summary td:first-child { font-weight: 600; }
table.episodes { border-collapse: collapse; width: 100%; font-size: 13px; }
table.episodes th, table.episodes td { padding: 0.2rem 0.5rem; border-bottom: 1px solid #e5e5e5; text-align: left; white-space: nowrap; }
table.episodes th { cursor: pointer; user-select: none; background: #f6f6f6; position: sticky; top: 0; }
table.episodes th[data-dir="asc"]::after { content: " ▲"; } table.episodes th[data-dir="desc"]::after { content: " ▼"; }
table.episodes td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.episodes td .question, table.episodes td .expected { white-space: normal; min-width: 14rem; max-width: 26rem; font-size: 12px; }
.question { color: #333; } .expected { color: #2e7d32; font-size: 12px; }
table.episodes tr.infra td { color: #5b3b7a; }
.filters { margin: 0.6rem 0; display: flex; gap: 0.6rem; flex-wrap: wrap; align-items: center; }
.filters input, .filters select { font: inherit; padding: 0.15rem 0.3rem; }
.badge { display: inline-block; border-radius: 3px; padding: 0 0.35rem; margin: 0 0.15rem; font-size: 12px; font-weight: 600; color: #1d1d1f; font-variant-numeric: tabular-nums; }
.badge.infra { background: #6a3d9a; color: #fff; }
.badge.none { background: #fff; border: 1px dashed #888; color: #555; font-weight: normal; }
.group { border: 1px solid #ddd; border-radius: 4px; margin: 0.8rem 0; padding: 0.5rem 0.8rem; }
.group h3 { font-size: 0.95rem; margin: 0 0 0.3rem; }
.group .stats { color: #555; font-size: 12.5px; }
.members { display: grid; grid-template-columns: repeat(auto-fill, minmax(15rem, 1fr)); gap: 0.5rem; margin-top: 0.4rem; }
.member .head { display: flex; flex-wrap: wrap; gap: 0.15rem 0.6rem; align-items: center; }
.member .head > * { white-space: nowrap; }
.member { border: 1px solid #e3e3e3; border-radius: 3px; padding: 0.3rem 0.5rem; font-size: 12.5px; }
.member .answer { white-space: pre-wrap; word-break: break-word; max-height: 6.5em; overflow: hidden; color: #333; margin-top: 0.2rem; font: 12px/1.35 ui-monospace, monospace; }
.note { color: #777; font-weight: normal; margin-left: 0.4rem; }
.entry { border-left: 4px solid #ccc; margin: 0.8rem 0; padding: 0.3rem 0.8rem; }
.entry h3 { font-size: 0.85rem; margin: 0 0 0.3rem; font-weight: 600; }
.entry pre, .tokens { white-space: pre-wrap; word-break: break-word; margin: 0; font: 12.5px/1.5 ui-monospace, monospace; }
.system { border-color: #aaa; color: #555; } .user { border-color: #1e88e5; } .reasoning { border-color: #8e24aa; color: #5e3370; font-style: italic; }
.assistant { border-color: #222; } .tool_call { border-color: #f9a825; } .tool_result { border-color: #00897b; }
.metadata { border-color: #80cbc4; border-left-style: dashed; } .error { border-color: #e53935; }
.summary { border-color: #2e7d32; background: #f1f8e9; } .boundary { border-color: #6d4c41; border-left-width: 0; border-top: 3px double #6d4c41; background: #efebe9; }
.tokens { border: 1px solid #ddd; padding: 0.6rem; }
.span-prompt { color: #888; } .span-trained { border-bottom: 2px solid #1565c0; } .span-context { background: #eceff1; color: #455a64; }
.tok { border-radius: 2px; }
.legend { font-size: 12.5px; color: #444; } .legend span { margin-right: 0.25rem; }
section.view:target, section.view { scroll-margin-top: 1rem; }
"""

"""One trajectory for a person: in the terminal (rich) or as HTML (a page, or a section of the report).

Shows the task, how it ended, the reward, each turn (reasoning, text, tool calls), the tool results
with their rewards and the environment's metadata (`ToolOutput.metadata`, which the model does not see),
what the environment showed that the model could not see as is (images, masked secrets), and the token view (`openreward_rl.show.tokens`). Where a context policy
compacted the context, each boundary is marked where the new context starts (its kind and the tokens
before and after), summary turns are shown as such, and the token view shows every context.

>>> from openreward_rl.loop.trajectory import StopReason, Trajectory
>>> from openreward_rl.task import TaskRef
>>> failed = Trajectory(task=TaskRef("e", "train", index=0), segments=[], turns=[],
...     messages=[], step_rewards=[], reward=None, stop_reason=StopReason.ENV_ERROR, stop_detail="session died")
>>> dict(summary_rows(failed))["stop"]
'env_error (session died)'
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from typing import Any

import attrs

from openreward_rl.credit.returns import reward_to_go, turn_rewards
from openreward_rl.families.token_text import decode_ids
from openreward_rl.families.vision import describe_content
from openreward_rl.loop.trajectory import Compaction, ToolResult, Trajectory
from openreward_rl.observe.conversation import conversation_steps
from openreward_rl.show.style import CSS, LEGEND, badge, terminal_reward_style
from openreward_rl.show.tokens import mask_spans, token_view_html

__all__ = ["Entry", "turn_returns", "conversation", "summary_rows", "render_terminal", "episode_html", "render_html"]


@attrs.frozen
class Entry:
    """One thing said in the conversation, ready to draw."""

    role: str  # system | user | reasoning | assistant | summary | tool_call | tool_result | metadata | boundary | error
    text: str
    title: str = ""
    reward: float | None = None
    note: str = ""


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    return json.dumps(arguments, ensure_ascii=False, indent=2)


def turn_returns(trajectory: Trajectory) -> list[tuple[float, float]] | None:
    """(reward, return) per turn: the turn's tool-call rewards summed and its reward-to-go (undiscounted,
    the environment's rewards as recorded: the config's nonterminal reward is not in a dump). None for an
    infrastructure failure, which has no returns."""
    if trajectory.stop_reason.is_infrastructure_failure:
        return None
    rewards = turn_rewards(trajectory)
    return list(zip(rewards, reward_to_go(rewards)))


def _boundary(compaction: Compaction, contexts: int) -> Entry:
    return Entry(
        "boundary",
        "",
        title=f"context {compaction.segment + 1} of {contexts} starts here ({compaction.kind})",
        note=f"{compaction.tokens_before} → {compaction.tokens_after} tokens, {compaction.tokens_saved} saved; the model sees only what the policy kept",
    )


def _metadata(result: ToolResult | None) -> Iterator[Entry]:
    """The environment's metadata of a tool result, where it gave any."""
    if result is not None and result.metadata:
        yield Entry(
            "metadata",
            json.dumps(result.metadata, ensure_ascii=False, indent=2, default=str),
            title=f"{result.call.name} metadata (not shown to the model)",
        )


def conversation(trajectory: Trajectory) -> Iterator[Entry]:
    """The messages in order, assistant turns split into reasoning/text/calls, with rewards, returns and
    errors; context boundaries marked where the next context's messages start."""
    returns = turn_returns(trajectory)
    boundaries = {c.message_index: c for c in trajectory.compactions}
    contexts = len(trajectory.segments)
    for step in conversation_steps(trajectory):
        message, result = step.message, step.result
        if step.position is not None and step.position in boundaries:
            yield _boundary(boundaries.pop(step.position), contexts)
        if message is None:  # a result with no tool message: a @terminal environment's answer
            assert result is not None
            yield Entry(
                "tool_result",
                result.text,
                title=f"{result.call.name} (terminal)",
                reward=result.reward,
                note="finished the episode" if result.finished else "",
            )
            yield from _metadata(result)
            continue
        role = message.get("role", "user")
        content = message.get("content") or ""
        if isinstance(content, list):  # a VLM's text and images
            content = describe_content(content)
        elif not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        if role == "assistant":
            turn = step.turn
            title = f"turn {step.turn_number + 1}" if step.turn_number is not None else "assistant (prompt)"
            if turn is not None and turn.summary and step.turn_number is not None:
                title = f"summary turn (turn {step.turn_number + 1}, trained)"
            if turn is not None:
                title += f" · {len(turn.sampled_ids)} tokens sampled · finish {turn.finish_reason.value}"
                if step.turn_number is not None:
                    title += (
                        " · no return (infrastructure failure)"
                        if returns is None
                        else " · turn reward {:g} · return {:g}".format(*returns[step.turn_number])
                    )
                for error in turn.parsed.errors:
                    yield Entry("error", error.message, title=f"parse error: {error.kind.value}", note=error.raw)
            if message.get("reasoning_content"):
                yield Entry("reasoning", str(message["reasoning_content"]), title=title)
                title = ""
            if content or not message.get("tool_calls"):
                yield Entry("summary" if turn is not None and turn.summary else "assistant", content, title=title)
            for call in message.get("tool_calls") or []:
                function = call.get("function", call)
                yield Entry(
                    "tool_call",
                    _arguments(function.get("arguments", {})),
                    title=f"{function.get('name', '?')} (call {call.get('id', '')})",
                )
        elif role == "tool":
            notes = []
            if result is not None and result.error:
                notes.append(f"rejected: {result.error}")
            if result is not None and result.finished:
                notes.append("finished the episode")
            if result is not None and result.truncated:
                notes.append("output truncated")
            yield Entry(
                "tool_result",
                content,
                title=f"{message.get('name', 'tool')} (call {message.get('tool_call_id', '')})",
                reward=result.reward if result else None,
                note=", ".join(notes),
            )
            yield from _metadata(result)
        else:
            yield Entry(
                "system" if role == "system" else "user", content, title="" if role in ("system", "user") else role
            )
    for compaction in boundaries.values():  # a boundary after the last message
        yield _boundary(compaction, contexts)


def summary_rows(trajectory: Trajectory) -> list[tuple[str, str]]:
    task = trajectory.task
    where = f"{task.environment} · {task.split} · " + (f"index {task.index}" if task.index is not None else "task spec")
    if task.variant:
        where += f" · variant {task.variant}"
    stop = trajectory.stop_reason.value + (f" ({trajectory.stop_detail})" if trajectory.stop_detail else "")
    reward = "none observed" if trajectory.reward is None else f"{trajectory.reward:g}"
    trained = sum(trajectory.loss_mask)
    rows = [
        ("task", where),
        ("stop", stop),
        (
            "reward",
            reward
            + (
                f"  (step rewards {', '.join(f'{r:g}' for r in trajectory.step_rewards)})"
                if trajectory.step_rewards
                else ""
            ),
        ),
        ("turns", f"{len(trajectory.turns)}" + ("  · environment finished" if trajectory.finished else "")),
        ("tokens", f"{len(trajectory.prompt_ids)} prompt + {len(trajectory.response_ids)} response, {trained} trained"),
    ]
    if not trajectory.trainable:
        rows.append(
            (
                "trainable",
                "no: " + ("ids re-tokenized from text" if not trajectory.token_exact else "infrastructure failure"),
            )
        )
    if trajectory.compactions:
        kinds = ", ".join(sorted({c.kind for c in trajectory.compactions}))
        saved = sum(c.tokens_saved for c in trajectory.compactions)
        rows.append(
            (
                "contexts",
                f"{len(trajectory.segments)} ({len(trajectory.compactions)} compactions: {kinds}; {saved} tokens saved); each is a trained sample",
            )
        )
    shown = int(trajectory.metrics.get("images_shown", 0))
    if shown:
        rows.append(
            (
                "images shown",
                f"{shown}: the model saw them (a vision-language family; each one's placeholder expanded as its processor does)",
            )
        )
    images = int(trajectory.metrics.get("images_dropped", 0))
    if images:
        rows.append(
            ("images dropped", f"{images}: this model reads text only; it saw a placeholder in each one's place")
        )
    masked = int(trajectory.metrics.get("redacted_values", 0))
    if masked:
        rows.append(
            ("secrets masked", f"{masked}: the environment showed a known secret value; the model saw *** instead")
        )
    if trajectory.prefix_breaks:
        rows.append(("prefix breaks", f"{trajectory.prefix_breaks} ({len(trajectory.segments)} segments)"))
    return rows


def _shown_segments(trajectory: Trajectory) -> list[tuple[str, Any]]:
    """(heading, segment) of each context shown in the token view: all of them, or the one there is."""
    segments = trajectory.segments
    if len(segments) == 1:
        return [("", segments[0])]
    return [(f"context {i + 1} of {len(segments)}", s) for i, s in enumerate(segments)]


_ROLE_STYLE = {
    "system": "dim",
    "user": "cyan",
    "reasoning": "italic magenta",
    "assistant": "bold",
    "tool_call": "yellow",
    "tool_result": "dark_cyan",
    "metadata": "grey50",
    "error": "bold red",
    "summary": "bold green",
    "boundary": "bold reverse",
}
_SPAN_STYLE = {"prompt": "dim", "trained": "underline blue", "context": "grey50"}


def render_terminal(trajectory: Trajectory, console: Any, tokenizer: Any = None) -> None:
    """Print to a `rich.console.Console` (colour follows the console's settings)."""
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    table = Table.grid(padding=(0, 2))
    for name, value in summary_rows(trajectory):
        table.add_row(Text(name, style="bold"), Text(value))
    console.print(Panel(table, title="trajectory", expand=False))
    for entry in conversation(trajectory):
        style = _ROLE_STYLE.get(entry.role, "")
        header = f"[{style}]{escape(entry.role)}[/]"
        if entry.title:
            header += f" {escape(entry.title)}"
        if entry.reward is not None:
            header += f"  [{terminal_reward_style(entry.reward)}]reward {entry.reward:g}[/]"
        if entry.note:
            header += f"  [dim]{escape(entry.note)}[/]"
        console.print(header)
        if entry.text:
            console.print(Text(entry.text, style=style if entry.role in ("reasoning", "system") else ""))
        console.print()
    if not trajectory.segments:
        console.print("[dim]no tokens: the episode failed before its first prompt[/]")
        return
    console.print(Text("tokens (loss mask)", style="bold underline"))
    for heading, segment in _shown_segments(trajectory):
        if heading:
            console.print(Text(heading, style="bold"))
        if tokenizer is None:
            for span in mask_spans(segment):
                console.print(
                    Text(
                        f"{span.kind:8} {span.start:>6}–{span.end:<6} {span.length} tokens",
                        style=_SPAN_STYLE[span.kind],
                    )
                )
            continue
        text = Text()
        ids = segment.context()
        for span in mask_spans(segment):
            text.append(decode_ids(tokenizer, ids[span.start : span.end]), style=_SPAN_STYLE[span.kind])
        console.print(text)
    if tokenizer is None:
        console.print(Text("(pass --tokenizer to see the text of each span)", style="dim"))
        return
    legend = Text("legend: ", style="bold") + Text("prompt ", style="dim")
    console.print(
        legend
        + Text("trained (sampled)", style=_SPAN_STYLE["trained"])
        + Text(" context (not trained)", style=_SPAN_STYLE["context"])
    )


def episode_html(trajectory: Trajectory, tokenizer: Any = None, *, heading: str = "h2") -> str:
    """The summary, the conversation and the token view as an HTML fragment; all text escaped."""
    esc = html.escape
    infrastructure = trajectory.stop_reason.value if trajectory.stop_reason.is_infrastructure_failure else None
    parts = ['<table class="summary">']
    for name, value in summary_rows(trajectory):
        shown = (
            f"{badge(trajectory.reward, infrastructure=infrastructure)} {esc(value)}"
            if name == "reward"
            else esc(value)
        )
        parts.append(f"<tr><td>{esc(name)}</td><td>{shown}</td></tr>")
    parts.append("</table>")
    parts.append(f"<{heading}>Conversation</{heading}>")
    for entry in conversation(trajectory):
        header = esc(entry.role) + (f" · {esc(entry.title)}" if entry.title else "")
        if entry.reward is not None:
            header += f" reward {badge(entry.reward)}"
        if entry.note:
            header += f'<span class="note">{esc(entry.note)}</span>'
        parts.append(f'<div class="entry {esc(entry.role)}"><h3>{header}</h3><pre>{esc(entry.text)}</pre></div>')
    parts.append(f"<{heading}>Tokens (loss mask, rollout log-probs)</{heading}>")
    if not trajectory.segments:
        parts.append("<p>No tokens: the episode failed before its first prompt.</p>")
        return "".join(parts)
    for heading_text, segment in _shown_segments(trajectory):
        if heading_text:
            parts.append(f"<h3>{esc(heading_text)}</h3>")
        parts.append(token_view_html(segment, tokenizer))
    if tokenizer is None:
        parts.append(
            "<p>No tokenizer: spans are listed as counts. Pass <code>--tokenizer</code> to see their text.</p>"
        )
    return "".join(parts)


def render_html(trajectory: Trajectory, tokenizer: Any = None, title: str | None = None) -> str:
    """A self-contained page for one trajectory (inline CSS, no scripts)."""
    esc = html.escape
    task = trajectory.task
    page_title = esc(str(title or f"{task.environment} {task.split} {task.index}"))
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{page_title}</title><style>{CSS}</style></head><body>'
        f"<h1>{page_title}</h1>{LEGEND}{episode_html(trajectory, tokenizer)}</body></html>\n"
    )

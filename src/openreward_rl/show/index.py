"""The episodes of a results file as rows, grouped by task, with GRPO group-normalized advantages.

A group is every sample of one task (environment, split, variant, task). Its advantages are what
Slime computes for GRPO with `--grpo-std-normalization`: `(r - mean) / (std + 1e-6)` with the
sample standard deviation (n - 1) of the group's rewards. As the Slime/Miles adapters do, a scored
episode without a reward counts as 0, and an infrastructure failure (aborted, env_error, timeout)
takes no part: it gets no advantage and stays out of mean and std (the adapters abort it, and
`keep_informative_groups` drops its whole group). A group whose rewards are all equal (std 0) gives
every member advantage 0: it carries no learning signal. So does a group with one scored member.

>>> advantages([1.0, 0.0, 0.0, None])
[1.154699, -0.577349, -0.577349, None]
>>> advantages([0.5, 0.5]), advantages([0.7])
([0.0, 0.0], [0.0])
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.credit.estimators import episode_advantages
from openreward_rl.loop.trajectory import Trajectory
from openreward_rl.task import TaskRef, task_hash

__all__ = ["EpisodeRow", "Group", "advantages", "episode_rows", "groups", "task_question", "expected_answer"]

# Task spec keys that hold the expected answer, in order of preference.
ANSWER_KEYS = ("answer", "expected_answer", "expected", "ground_truth", "solution", "target", "label")


def advantages(rewards: Sequence[float | None]) -> list[float | None]:
    """GRPO advantages of one group; None marks a member that takes no part (an infrastructure failure)."""
    return [None if a is None else round(a, 6) for a in episode_advantages(rewards)]


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return " ".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return ""


def task_question(trajectory: Trajectory, limit: int = 160) -> str:
    """The task as the model saw it: the first user message, on one line, shortened to `limit`;
    without one (the episode failed before its prompt), the task spec's "question" or "prompt".

    >>> t = Trajectory(TaskRef("E", "test", index=0), [], [], [{"role": "user", "content": "What is\\n2 + 3?"}], [], None, "completed")
    >>> task_question(t)
    'What is 2 + 3?'
    """
    for message in trajectory.messages:
        if message.get("role") == "user":
            text = _text(message.get("content"))
            if text.strip():
                return _shorten(text, limit)
    spec = trajectory.task.task_spec or {}
    for key in ("question", "prompt"):
        if isinstance(spec.get(key), str):
            return _shorten(spec[key], limit)
    return ""


def expected_answer(task: TaskRef, limit: int = 80) -> str | None:
    """The expected answer the task spec states (`answer`, `expected`, ... see ANSWER_KEYS), if any.

    >>> expected_answer(TaskRef("E", "test", task_spec={"question": "2 + 3?", "answer": 5})), expected_answer(TaskRef("E", "test", index=3))
    ('5', None)
    """
    spec = task.task_spec
    if spec is None:
        return None
    for key in ANSWER_KEYS:
        value = spec.get(key)
        if value is not None and value != "":
            return _shorten(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False), limit)
    return None


def _task_label(task: TaskRef) -> str:
    return str(task.index) if task.index is not None else f"spec {task_hash(task.task_spec)[:8]}"


@attrs.frozen
class EpisodeRow:
    """One record of a results file, as the index lists it.

    `number` is its 0-based position in the file (what `show --index` takes); `sample` the sample
    index `eval` recorded, else its position within its group. `trained_reward` is what a trainer
    would see (`Trajectory.trained_reward`: None for an infrastructure failure, 0.0 for a scored episode
    without a reward).
    """

    number: int
    environment: str
    split: str
    variant: str | None
    task: str
    group: str
    sample: int
    reward: float | None
    stop_reason: str
    stop_detail: str
    infrastructure_failure: bool
    turns: int
    sampled_tokens: int
    context_tokens: int
    parse_errors: int
    tool_errors: int
    trainable: bool
    trained_reward: float | None = None
    advantage: float | None = None
    question: str = ""  # `task_question`
    expected: str | None = None  # `expected_answer`


def _group_key(task: TaskRef) -> str:
    """The GRPO group of an episode: its environment and task (`TaskRef.label`)."""
    return json.dumps([task.environment, task.label])


def _count(metrics: Mapping[str, float], name: str) -> int:
    if name in metrics:
        return int(metrics[name])
    return int(sum(v for k, v in metrics.items() if k.startswith(name + "/")))


def episode_rows(records: Sequence[Mapping[str, Any]], trajectories: Sequence[Trajectory]) -> list[EpisodeRow]:
    """One row per record (`trajectories[i]` is `records[i]` read back), advantages filled in per group."""
    rows: list[EpisodeRow] = []
    seen_in_group: dict[str, int] = {}
    for number, (record, trajectory) in enumerate(zip(records, trajectories, strict=True)):
        task = trajectory.task
        group = _group_key(task)
        position = seen_in_group.get(group, 0)
        seen_in_group[group] = position + 1
        sample = record.get("sample")
        rows.append(
            EpisodeRow(
                number=number,
                environment=task.environment,
                split=task.split,
                variant=task.variant,
                task=_task_label(task),
                group=group,
                sample=sample if isinstance(sample, int) else position,
                reward=trajectory.reward,
                stop_reason=trajectory.stop_reason.value,
                stop_detail=trajectory.stop_detail,
                infrastructure_failure=trajectory.stop_reason.is_infrastructure_failure,
                turns=len(trajectory.turns),
                sampled_tokens=sum(len(turn.sampled_ids) for turn in trajectory.turns),
                context_tokens=len(trajectory.tokens),
                parse_errors=_count(trajectory.metrics, "parse_errors")
                or sum(len(t.parsed.errors) for t in trajectory.turns),
                tool_errors=_count(trajectory.metrics, "tool_errors")
                or sum(1 for t in trajectory.turns for r in t.tool_results if r.error),
                trainable=trajectory.trainable,
                trained_reward=trajectory.trained_reward,
                question=task_question(trajectory),
                expected=expected_answer(task),
            )
        )
    by_group: dict[str, list[int]] = {}
    for position, row in enumerate(rows):
        by_group.setdefault(row.group, []).append(position)
    for members in by_group.values():
        for position, advantage in zip(members, advantages([rows[p].trained_reward for p in members])):
            rows[position] = attrs.evolve(rows[position], advantage=advantage)
    return rows


@attrs.frozen
class Group:
    """The samples of one task, in sample order."""

    key: str
    members: tuple[EpisodeRow, ...]

    @property
    def title(self) -> str:
        first = self.members[0]
        variant = f" · {first.variant}" if first.variant else ""
        return f"{first.environment} · {first.split}{variant} · task {first.task}"

    @property
    def rewards(self) -> list[float]:
        return [r for r in (m.trained_reward for m in self.members) if r is not None]

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.rewards) if self.rewards else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.rewards) if len(self.rewards) >= 2 else None

    @property
    def note(self) -> str:
        """Why the group gives no learning signal, or ""."""
        failed = sum(m.infrastructure_failure for m in self.members)
        if failed:
            return f"{failed} infrastructure failure{'s' * (failed > 1)}: left out (keep_informative_groups would drop this group)"
        if len(self.rewards) < 2:
            return "one scored sample: no group to compare with"
        if self.std == 0:
            return "all rewards equal (std 0): every advantage is 0"
        return ""


def groups(rows: Sequence[EpisodeRow]) -> list[Group]:
    """Rows grouped by task, groups in first-seen order, members by sample."""
    grouped: dict[str, list[EpisodeRow]] = {}
    for row in rows:
        grouped.setdefault(row.group, []).append(row)
    return [Group(key, tuple(sorted(members, key=lambda m: (m.sample, m.number)))) for key, members in grouped.items()]

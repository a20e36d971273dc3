"""`EpisodeRecord`: what the hooks store in a trainer `Sample.metadata`, as one typed record.

The generate hook writes it (`backends/_sample/fill.py`); the reward hook (`_sample/reward.py`), the
rollout log (`rollout_log.py`) and tests read it back with `from_metadata` / `of_sample`. Nothing
else parses these keys. The metadata stays a JSON-serialisable dict (Slime and Miles keep it in
their data buffer) and keeps every key the row already had (`openreward-rl prepare`'s task keys).

Keys, one per field:

| key | meaning |
|---|---|
| environment, split, index, variant | the task within its environment |
| stop_reason, stop_detail | how the episode ended (`StopReason` value) |
| episode_reward | the episode's reward (`Trajectory.reward`: the reward policy's reduction); None when none was observed |
| reward_observed | a reward was observed and the run was no infrastructure failure |
| step_rewards, finished, metrics, prefix_breaks | what the episode reported |
| segment, segments | position among the samples of one rollout split at prefix breaks |
| evaluation | written by an eval rollout |
| placeholder | a masked one-token stand-in for a run with no response tokens |
| dropped_segments | earlier segments dropped because the `Sample` class has no `rollout_id` (written when > 0) |
| transcript | text-only messages, kept under `--group-rm` for `score_group` |
| group_scored, pointwise_reward, group_score, group_score_metadata, group_score_error | group scoring (see `_sample/reward.py`) |
| resume | state of a suspended, resumable episode (partial rollout); None when there is none |
| turn_rewards, turn_returns | per turn: the reward (its tool calls' rewards summed) and the return (reward-to-go, discount `returns_gamma`); absent for an infrastructure failure, which has no returns |
| turn_spans, turn_ends | per turn: `[segment, start, end]`, its tokens in that segment's response (sampled tokens, then the environment's reply), and where its sampled tokens end (its reward sits on token `turn_ends[t] - 1`) |

`resume` is the one place for a resumable episode's keys: a JSON-serialisable mapping owned by the
partial-rollout code; this record only carries it across the data buffer.

>>> record = EpisodeRecord(environment="Org/Env", stop_reason=StopReason.TIMEOUT, stop_detail="slow", split="train", index=3)
>>> metadata = record.to_metadata({"task_spec": {"id": 3}})
>>> metadata["stop_reason"], metadata["task_spec"]
('timeout', {'id': 3})
>>> back = EpisodeRecord.from_metadata(metadata)
>>> back == record, back.infrastructure_failure, back.trained_reward
(True, True, 0.0)
"""  # noqa: E501  (a table row and its doctest output are one line each)

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import attrs

from openreward_rl.credit.returns import TurnCredit
from openreward_rl.env.tasks import TaskRef
from openreward_rl.loop.trajectory import StopReason, Trajectory, trained_reward

__all__ = ["EpisodeRecord", "NOT_OUR_SAMPLE", "metadata_dict"]

NOT_OUR_SAMPLE = (
    "this sample was not produced by openreward_rl's generate hook (no metadata['stop_reason']); "
    "set --custom-generate-function-path to openreward_rl.backends.slime.generate (or .miles.generate)"
)

# Keys written only when they hold something (older samples lack them; readers get the default).
_OPTIONAL = (
    "dropped_segments",
    "transcript",
    "group_scored",
    "pointwise_reward",
    "group_score",
    "group_score_metadata",
    "group_score_error",
    "resume",
    "turn_rewards",
    "turn_returns",
    "turn_spans",
    "turn_ends",
    "returns_gamma",
)


def metadata_dict(metadata: Any) -> dict[str, Any]:
    """A sample's metadata as a dict: None is empty, a JSON string (rows the cookbook wrote) is parsed.

    TypeError for anything else, naming what it was.
    """
    if metadata is None:
        return {}
    if isinstance(metadata, str):
        metadata = json.loads(metadata) if metadata.strip() else {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"sample.metadata must be a dict, got {type(metadata).__name__}")
    return dict(metadata)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _numbers(value: Any) -> list[float] | None:
    if not isinstance(value, (list, tuple)):
        return None
    return [float(v) for v in value]


def _credit_fields(credit: TurnCredit) -> dict[str, Any]:
    return {
        "turn_rewards": list(credit.rewards),
        "turn_returns": list(credit.returns),
        "turn_spans": [list(span) for span in credit.spans],
        "turn_ends": list(credit.sampled_ends),
        "returns_gamma": credit.gamma,
    }


def _metrics(value: Any) -> dict[str, float]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): float(v) for k, v in value.items() if _number(v) is not None}


@attrs.frozen
class EpisodeRecord:
    """One episode's outcome as stored on each of its samples."""

    environment: str
    stop_reason: StopReason
    stop_detail: str = ""
    split: str | None = None
    index: int | None = None
    variant: str | None = None
    task_label: str | None = None
    episode_reward: float | None = None
    reward_observed: bool = False
    step_rewards: list[float] = attrs.Factory(list)
    finished: bool = False
    metrics: dict[str, float] = attrs.Factory(dict)
    prefix_breaks: int = 0
    segment: int = 0
    segments: int = 1
    evaluation: bool = False
    placeholder: bool = False
    dropped_segments: int = 0
    transcript: list[dict[str, str]] | None = None
    group_scored: bool | None = None
    pointwise_reward: float | None = None
    group_score: float | None = None
    group_score_metadata: Any = None
    group_score_error: str | None = None
    resume: Mapping[str, Any] | None = None
    turn_rewards: list[float] | None = None
    turn_returns: list[float] | None = None
    turn_spans: list[list[int]] | None = None
    turn_ends: list[int] | None = None
    returns_gamma: float | None = None

    @classmethod
    def of_trajectory(
        cls,
        trajectory: Trajectory,
        row: Mapping[str, Any],
        *,
        segment: int = 0,
        segments: int = 1,
        evaluation: bool = False,
        credit: TurnCredit | None = None,
    ) -> EpisodeRecord:
        """The record of `trajectory`, with the variant of the row's metadata where it has that key.
        `credit` (None for a failure) gives the per-turn rewards, returns and token spans."""
        task = trajectory.task
        if "variant" in row:  # the row's own (prepare's) value is kept
            task = attrs.evolve(task, variant=row["variant"])
        return cls(
            environment=task.environment,
            split=task.split,
            index=task.index,
            variant=task.variant,
            task_label=task.label,
            stop_reason=trajectory.stop_reason,
            stop_detail=trajectory.stop_detail,
            episode_reward=trajectory.reward,
            reward_observed=trajectory.reward is not None and not trajectory.stop_reason.is_infrastructure_failure,
            step_rewards=list(trajectory.step_rewards),
            finished=trajectory.finished,
            metrics=dict(trajectory.metrics),
            prefix_breaks=trajectory.prefix_breaks,
            segment=segment,
            segments=segments,
            evaluation=evaluation,
            **({} if credit is None else _credit_fields(credit)),
        )

    @property
    def credit(self) -> TurnCredit | None:
        """The episode's per-turn credit as stored; None when it has none (a failure, or a sample written before it existed)."""
        if self.turn_returns is None or self.turn_spans is None or self.turn_ends is None or self.turn_rewards is None:
            return None
        spans = tuple((int(s), int(a), int(b)) for s, a, b in self.turn_spans)
        return TurnCredit(
            tuple(self.turn_rewards), tuple(self.turn_returns), spans, tuple(self.turn_ends), self.returns_gamma or 1.0
        )

    @classmethod
    def from_metadata(cls, metadata: Any) -> EpisodeRecord:
        """The record in a sample's metadata (a dict, or a JSON string). ValueError when the hooks wrote none."""
        try:
            metadata = metadata_dict(metadata)
        except TypeError:
            raise ValueError(NOT_OUR_SAMPLE) from None
        if "stop_reason" not in metadata or "environment" not in metadata:
            raise ValueError(NOT_OUR_SAMPLE)
        get = metadata.get
        episode_reward = _number(get("episode_reward"))
        return cls(
            environment=str(metadata["environment"]),
            stop_reason=StopReason(metadata["stop_reason"]),
            stop_detail=str(get("stop_detail") or ""),
            split=get("split"),
            index=get("index"),
            variant=get("variant"),
            task_label=get("task_label"),
            episode_reward=episode_reward,
            reward_observed=bool(get("reward_observed", episode_reward is not None)),
            step_rewards=[float(r) for r in get("step_rewards") or () if _number(r) is not None],
            finished=bool(get("finished", False)),
            metrics=_metrics(get("metrics")),
            prefix_breaks=int(_number(get("prefix_breaks")) or 0),
            segment=int(_number(get("segment")) or 0),
            segments=int(_number(get("segments")) or 1),
            evaluation=bool(get("evaluation", False)),
            placeholder=bool(get("placeholder", False)),
            dropped_segments=int(_number(get("dropped_segments")) or 0),
            transcript=get("transcript"),
            group_scored=get("group_scored"),
            pointwise_reward=_number(get("pointwise_reward")),
            group_score=_number(get("group_score")),
            group_score_metadata=get("group_score_metadata"),
            group_score_error=get("group_score_error"),
            resume=get("resume"),
            turn_rewards=_numbers(get("turn_rewards")),
            turn_returns=_numbers(get("turn_returns")),
            turn_spans=get("turn_spans"),
            turn_ends=get("turn_ends"),
            returns_gamma=_number(get("returns_gamma")),
        )

    @classmethod
    def of_sample(cls, sample: Any) -> EpisodeRecord | None:
        """The record of a trainer `Sample` the hooks filled; None for a sample that is not ours.

        Samples written before `episode_reward` existed fall back to `sample.reward`.
        """
        metadata = getattr(sample, "metadata", None)
        try:
            record = cls.from_metadata(metadata)
        except ValueError:
            return None
        if isinstance(metadata, Mapping) and "episode_reward" not in metadata:
            reward = _number(getattr(sample, "reward", None))
            observed = bool(metadata.get("reward_observed", reward is not None))
            record = attrs.evolve(record, episode_reward=reward, reward_observed=observed)
        return record

    def to_metadata(self, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """`base` (the row's metadata) with this record's keys written over it; JSON-serialisable."""
        metadata = dict(base or {})
        for field in attrs.fields(EpisodeRecord):
            value = getattr(self, field.name)
            if field.name in _OPTIONAL and value == field.default:
                metadata.pop(field.name, None)  # e.g. a stale group score of an earlier pass
                continue
            metadata[field.name] = value.value if isinstance(value, StopReason) else value
        return metadata

    @property
    def infrastructure_failure(self) -> bool:
        return self.stop_reason.is_infrastructure_failure

    @property
    def reward(self) -> float | None:
        """The episode's reward as the logs count it: None when none was observed or the run failed."""
        if self.infrastructure_failure or not self.reward_observed:
            return None
        return self.episode_reward

    @property
    def trained_reward(self) -> float:
        """What the reward hook hands the trainer: `loop.trajectory.trained_reward` of the episode, with 0.0 for
        a failure or a placeholder (Slime and Miles take a number from every sample; those samples are masked)."""
        reward = None if self.placeholder else trained_reward(self.episode_reward, failed=self.infrastructure_failure)
        return 0.0 if reward is None else reward

    @property
    def task_key(self) -> str | None:
        """The task's identity within its environment (`TaskRef.label`: pass@k groups by it); None when
        the record names no task (metadata written before `task_label` falls back to the index)."""
        if self.task_label is not None:
            return self.task_label
        if self.index is None:
            return None
        return TaskRef(self.environment, str(self.split), index=self.index, variant=self.variant).label

    @property
    def counted(self) -> bool:
        """Whether the rollout log counts this sample: only the first segment of an episode is."""
        return self.segment == 0

"""Rewards for the trainer's RM hook: the episode's own reward, or the environment's group score.

Slime and Miles call `--custom-rm-path` with one `Sample`, or with a list: the whole prompt group
under `--group-rm`, or the fan-out siblings of one rollout. Without `--group-rm` the answer is the
reward the episode already computed (the generate hook stored it in `metadata["episode_reward"]`).
Under `--group-rm`, an environment that implements `score_group` judges the group's rollouts
together (`env.group_score.score_group`, which TRL's adapter calls too); its scores replace the
pointwise rewards, clamped to the environment's `min_reward`/`max_reward`. Infrastructure failures
keep 0.0 and are never scored.

What each live member's `metadata` records under `--group-rm`: `group_scored` (True when the
group score replaced the reward, False when the environment has no `score_group`);
when scored, `pointwise_reward`, `group_score` (the environment's value before clamping) and
`group_score_metadata` (its `GroupScore.metadata`); when scoring failed, `group_score_error`
(the pointwise rewards stand, and the failure is logged).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from openreward_rl.backends._sample.groups import flatten, rollout_key
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.config import TrainConfig
from openreward_rl.env.group_score import score_group
from openreward_rl.env.tasks import TaskRef, task_from_metadata

__all__ = ["trained_reward", "flatten", "group_rewards", "rollout_key"]


def trained_reward(sample: Any) -> float:
    """The reward this sample trains with (`EpisodeRecord.trained_reward`): the episode's reward the generate
    hook stored, 0.0 where none was observed or the run failed.

    >>> from types import SimpleNamespace
    >>> trained_reward(SimpleNamespace(metadata={"environment": "e", "stop_reason": "completed", "episode_reward": 0.5}))
    0.5
    >>> trained_reward(SimpleNamespace(metadata={"environment": "e", "stop_reason": "env_error", "episode_reward": None}))
    0.0
    """
    return EpisodeRecord.from_metadata(sample.metadata).trained_reward


def _reshape(template: Sequence[Any], values: list[float]) -> list[Any]:
    position = iter(values)

    def build(items: Sequence[Any]) -> list[Any]:
        return [build(item) if isinstance(item, list) else next(position) for item in items]

    return build(template)


async def group_rewards(
    samples: Sequence[Any], *, group_rm: bool, client: Any = None, config: TrainConfig | None = None
) -> list[Any]:
    """One reward per sample, in the input's (possibly nested) shape."""
    leaves = flatten(samples)
    records = [EpisodeRecord.from_metadata(s.metadata) for s in leaves]
    rewards = [r.trained_reward for r in records]
    if group_rm and client is not None and config is not None:
        await _score_groups(leaves, records, rewards, client, config)
    return _reshape(samples, rewards)


async def _score_groups(
    leaves: list[Any], records: list[EpisodeRecord], rewards: list[float], client: Any, config: TrainConfig
) -> None:
    by_task: dict[tuple[Any, ...], tuple[TaskRef, dict[Any, list[int]]]] = {}
    for position, (sample, record) in enumerate(zip(leaves, records)):
        if record.infrastructure_failure or record.placeholder or record.transcript is None:
            continue
        task = task_from_metadata(sample.metadata)
        _, rollouts = by_task.setdefault(task.key, (task, {}))
        rollouts.setdefault(rollout_key(sample, position), []).append(position)

    def note(position: int, **outcome: Any) -> None:
        leaves[position].metadata = attrs.evolve(records[position], **outcome).to_metadata(leaves[position].metadata)

    for task, rollouts in by_task.values():
        if len(rollouts) < 2:
            continue
        members = list(rollouts.values())
        scoring = await score_group(client, config, task, [records[m[0]].transcript or [] for m in members])
        for member, positions in enumerate(members):
            for position in positions:
                if scoring.members is not None:
                    scored = scoring.members[member]
                    note(
                        position,
                        pointwise_reward=rewards[position],
                        group_score=scored.score,
                        group_score_metadata=scored.metadata,
                        group_scored=True,
                    )
                    rewards[position] = scored.reward
                elif scoring.error is not None:
                    note(position, group_score_error=scoring.error)
                else:
                    note(position, group_scored=False)

"""Rewards for the trainer's RM hook: the episode's own reward, or the environment's group score.

Slime and Miles call `--custom-rm-path` with one `Sample`, or with a list: the whole prompt group
under `--group-rm`, or the fan-out siblings of one rollout. Without `--group-rm` the answer is the
reward the episode already computed (the generate hook stored it in `metadata["episode_reward"]`).
Under `--group-rm`, an environment that implements `score_group` judges the group's rollouts
together (one SDK session per task, opened on the config's `base_url` and `variant` exactly as the
episodes were); its scores replace the pointwise rewards, clamped to the environment's
`min_reward`/`max_reward`. Infrastructure failures keep 0.0 and are never scored.

What each live member's `metadata` records under `--group-rm`: `group_scored` (True when the
group score replaced the reward, False when the environment has no `score_group`);
when scored, `pointwise_reward`, `group_score` (the environment's value before clamping) and
`group_score_metadata` (its `GroupScore.metadata`); when scoring failed, `group_score_error`
(the pointwise rewards stand, and the failure is logged).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import attrs

from openreward_rl.backends.episode_record import EpisodeRecord
from openreward_rl.config import TrainConfig
from openreward_rl.env.environment import EnvironmentFault, open_session
from openreward_rl.env.tasks import TaskRef
from openreward_rl.loop.rollout import resolve_task
from openreward_rl.env.tasks import task_from_metadata

__all__ = ["trained_reward", "flatten", "group_rewards", "rollout_key"]

logger = logging.getLogger(__name__)


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


def flatten(samples: Sequence[Any]) -> list[Any]:
    """Leaf samples of a group that may nest fan-out lists."""
    out: list[Any] = []
    for item in samples:
        out.extend(flatten(item) if isinstance(item, list) else [item])
    return out


def _reshape(template: Sequence[Any], values: list[float]) -> list[Any]:
    position = iter(values)

    def build(items: Sequence[Any]) -> list[Any]:
        return [build(item) if isinstance(item, list) else next(position) for item in items]

    return build(template)


def rollout_key(sample: Any) -> Any:
    """One key per rollout: fan-out siblings share their `rollout_id`; a sample without one is its own rollout."""
    rollout_id = getattr(sample, "rollout_id", None)
    return ("rollout", rollout_id) if rollout_id is not None else ("sample", id(sample))


async def group_rewards(samples: Sequence[Any], *, group_rm: bool, client: Any = None, config: TrainConfig | None = None) -> list[Any]:
    """One reward per sample, in the input's (possibly nested) shape."""
    leaves = flatten(samples)
    records = [EpisodeRecord.from_metadata(s.metadata) for s in leaves]
    rewards = [r.trained_reward for r in records]
    if group_rm and client is not None and config is not None:
        await _score_groups(leaves, records, rewards, client, config)
    return _reshape(samples, rewards)


async def _score_groups(leaves: list[Any], records: list[EpisodeRecord], rewards: list[float], client: Any, config: TrainConfig) -> None:
    by_task: dict[tuple[Any, ...], tuple[TaskRef, dict[Any, list[int]]]] = {}
    for position, (sample, record) in enumerate(zip(leaves, records)):
        if record.infrastructure_failure or record.placeholder or record.transcript is None:
            continue
        task = task_from_metadata(sample.metadata)
        _, rollouts = by_task.setdefault(task.key, (task, {}))
        rollouts.setdefault(rollout_key(sample), []).append(position)

    def note(position: int, **outcome: Any) -> None:
        leaves[position].metadata = attrs.evolve(records[position], **outcome).to_metadata(leaves[position].metadata)

    for task, rollouts in by_task.values():
        if len(rollouts) < 2:
            continue
        members = list(rollouts.values())
        try:
            scores = await _score(client, config, task, [records[m[0]].transcript or [] for m in members])
        except Exception as error:  # unsupported, judge failure, environment down: pointwise rewards stand
            logger.warning("group scoring for %s failed, keeping pointwise rewards: %s: %s", task.environment, type(error).__name__, error)
            for positions in members:
                for position in positions:
                    note(position, group_score_error=f"{type(error).__name__}: {error}")
            continue
        if scores is None:
            logger.info("%s has no score_group; keeping pointwise rewards under --group-rm", task.environment)
            for positions in members:
                for position in positions:
                    note(position, group_scored=False)
            continue
        policy = config.environment(task.environment).reward_policy()
        for positions, score in zip(members, scores):
            value = policy.clamp(float(score.reward))
            for position in positions:
                note(position, pointwise_reward=rewards[position], group_score=float(score.reward), group_score_metadata=score.metadata, group_scored=True)
                rewards[position] = value


async def _score(client: Any, config: TrainConfig, task: TaskRef, transcripts: list[list[dict[str, str]]]) -> list[Any] | None:
    """`GroupScore`s from the environment's `score_group`, index-aligned, or None when it does not implement it."""
    from openreward.api.environments.types import GroupCandidate, Message, TextBlock

    task = resolve_task(config, task)  # the episodes' own server and variant
    candidates = [
        GroupCandidate(messages=[Message(role=_sdk_role(m["role"]), blocks=[TextBlock(text=m["content"])]) for m in messages])
        for messages in transcripts
    ]
    async with open_session(client, task, secrets=config.session_secrets(task.environment), open_timeout=600.0) as session:
        if not await session.sdk_session.supports_score_group():
            return None
        try:  # a hung judge must not stall the reward hook: the tool-call time limit bounds it too
            scores = await asyncio.wait_for(session.sdk_session.score_group(candidates), config.tool_timeout)
        except asyncio.TimeoutError:
            raise EnvironmentFault(f"score_group of {task.environment} took longer than {config.tool_timeout:g}s (tool_timeout)", kind="Timeout") from None
    if len(scores) != len(candidates):
        raise EnvironmentFault(f"score_group returned {len(scores)} scores for {len(candidates)} candidates", kind="ScoreGroupShape")
    return list(scores)


def _sdk_role(role: str) -> str:
    """Message roles the SDK accepts (Anthropic placement: tool results travel in user turns)."""
    return role if role in ("system", "user", "assistant") else "user"

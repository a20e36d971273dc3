"""An environment's `score_group`: it judges the episodes of one task together, from their transcripts.

Nothing here knows a trainer. The Slime/Miles reward hook (`backends._sample.reward`, under `--group-rm`)
and the TRL adapter (`group_rm=True`) both hand `score_group` one task and the text transcripts of its
live episodes (`transcript`: infrastructure failures are never scored), and get back one
`MemberScore` per transcript, in order: the environment's value clamped to its `min_reward` /
`max_reward` (what is trained) next to the value as given and its metadata.

The session is opened on the config's `base_url` and `variant` for the task (`resolve_task`), exactly
as the episodes were, with the environment's secrets; a judge that hangs is bounded by the environment's
tool-call limit (`TrainConfig.tool_timeouts`: its `tool_timeout`, else the run's; None: no limit). An environment that does not implement `score_group` gives `GroupScoring()` (the
pointwise rewards stand); one that fails gives `GroupScoring(error=...)`, logged, never a reward.

>>> transcript([{"role": "assistant", "content": "42", "tool_calls": []}, {"role": "tool", "content": None}])
[{'role': 'assistant', 'content': '42'}, {'role': 'tool', 'content': ''}]
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from openreward_rl.config import TrainConfig
from openreward_rl.env.environment import EnvironmentFault, open_session
from openreward_rl.env.tasks import TaskRef, resolve_task

__all__ = ["GroupScoring", "MemberScore", "score_group", "transcript"]

logger = logging.getLogger(__name__)


def transcript(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Text-only role/content pairs of an episode's messages: what `score_group` judges."""
    return [{"role": str(m.get("role", "")), "content": str(m.get("content") or "")} for m in messages]


@attrs.frozen
class MemberScore:
    """One episode's group score: `reward` (clamped to the environment's reward bounds) is what is trained."""

    reward: float
    score: float
    metadata: Any = None


@attrs.frozen
class GroupScoring:
    """What `score_group` made of one group: `members` (one per transcript, in order) when the environment
    scored it; `error` when scoring failed; neither when the environment has no `score_group`."""

    members: tuple[MemberScore, ...] | None = None
    error: str | None = None


async def score_group(
    client: Any, config: TrainConfig, task: TaskRef, transcripts: Sequence[Sequence[Mapping[str, str]]]
) -> GroupScoring:
    """The environment's judgement of `transcripts` (the episodes of `task`); see the module docstring."""
    try:
        scores = await _sdk_scores(client, config, task, transcripts)
    except Exception as error:  # unsupported, judge failure, environment down: the pointwise rewards stand
        logger.warning(
            "group scoring for %s failed, keeping pointwise rewards: %s: %s",
            task.environment,
            type(error).__name__,
            error,
        )
        return GroupScoring(error=f"{type(error).__name__}: {error}")
    if scores is None:
        logger.info("%s has no score_group; keeping pointwise rewards", task.environment)
        return GroupScoring()
    policy = config.environment(task.environment).reward_policy()
    return GroupScoring(
        members=tuple(MemberScore(policy.clamp(float(s.reward)), float(s.reward), s.metadata) for s in scores)
    )


async def _sdk_scores(
    client: Any, config: TrainConfig, task: TaskRef, transcripts: Sequence[Sequence[Mapping[str, str]]]
) -> list[Any] | None:
    """The SDK's `GroupScore`s, index-aligned, or None when the environment does not implement `score_group`."""
    from openreward.api.environments.types import GroupCandidate, Message, TextBlock

    task = resolve_task(config, task)  # the episodes' own server and variant
    candidates = [
        GroupCandidate(
            messages=[Message(role=_sdk_role(m["role"]), blocks=[TextBlock(text=m["content"])]) for m in messages]
        )
        for messages in transcripts
    ]
    async with open_session(
        client, task, secrets=config.session_secrets(task.environment), open_timeout=600.0
    ) as session:
        if not await session.sdk_session.supports_score_group():
            return None
        limits = config.tool_timeouts(task.environment)
        try:  # a hung judge must not stall the trainer: the environment's tool-call time limit bounds it too
            scores = await asyncio.wait_for(session.sdk_session.score_group(candidates), limits.default)
        except TimeoutError:
            raise EnvironmentFault(
                f"score_group of {task.environment} took longer than its limit, {limits.knob(None)}", kind="Timeout"
            ) from None
    if len(scores) != len(candidates):
        raise EnvironmentFault(
            f"score_group returned {len(scores)} scores for {len(candidates)} candidates", kind="ScoreGroupShape"
        )
    return list(scores)


_SDK_ROLES: dict[str, Literal["system", "user", "assistant"]] = {
    "system": "system",
    "user": "user",
    "assistant": "assistant",
}


def _sdk_role(role: str) -> Literal["system", "user", "assistant"]:
    """Message roles the SDK accepts (Anthropic placement: tool results travel in user turns)."""
    return _SDK_ROLES.get(role, "user")

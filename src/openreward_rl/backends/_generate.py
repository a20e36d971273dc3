"""One trainer `generate` call: the row's task, one episode, the trainer's `Sample`(s) filled from it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openreward_rl.backends._samples import sample_fields, samples_from_trajectory
from openreward_rl.backends._state import state_for
from openreward_rl.config import ConfigError
from openreward_rl.tasks import task_from_metadata
from openreward_rl.trajectory import Trajectory

__all__ = ["generate_samples", "transcript"]


def transcript(trajectory: Trajectory) -> list[dict[str, str]]:
    """Text-only role/content pairs of an episode, kept for group scoring (`score_group`)."""
    return [{"role": str(m.get("role", "")), "content": str(m.get("content") or "")} for m in trajectory.messages]


def check_args(args: Any, sample: Any) -> None:
    """Trainer settings these hooks cannot honour, refused with the flag to change."""
    if getattr(args, "partial_rollout", False):
        raise ConfigError("--partial-rollout is not supported by openreward_rl's generate hook (a multi-turn episode cannot resume); remove the flag")
    top_p = getattr(args, "rollout_top_p", None)
    if "rollout_top_p_token_ids" in sample_fields(sample) and top_p not in (None, 1.0):
        raise ConfigError(f"--rollout-top-p {top_p} needs top-p replay data that openreward_rl's generate hook does not record; use --rollout-top-p 1.0")


async def generate_samples(
    args: Any,
    sample: Any,
    sampling_params: Mapping[str, Any],
    *,
    evaluation: bool,
    routing_key: str | None,
    preset_reward: bool,
) -> list[Any]:
    """Run the episode `sample.metadata` names and fill `sample` (plus fan-out siblings)."""
    check_args(args, sample)
    state = state_for(args)
    task = task_from_metadata(sample.metadata)
    trajectory = await state.rollouts_for(evaluation).run(task, sampling_params=sampling_params, routing_key=routing_key)
    if trajectory.messages:  # returns at once; the upload runs on the uploader's own threads
        state.uploader.submit(trajectory, environment=task.environment, split=task.split, task_spec=task.task_spec, sampling_params=sampling_params)
    samples = samples_from_trajectory(
        sample,
        trajectory,
        tokenizer=state.tokenizer,
        weight_versions=[t.weight_version for t in trajectory.turns if t.weight_version is not None],
        preset_reward=preset_reward,
        evaluation=evaluation,
        transcript=transcript(trajectory) if getattr(args, "group_rm", False) else None,
    )
    return samples

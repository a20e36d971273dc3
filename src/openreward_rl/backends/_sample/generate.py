"""One trainer `generate` call: the row's task, one episode, the trainer's `Sample`(s) filled from it.

The plain path (`generate_samples`, every call outside `--partial-rollout` training): the task from
`sample.metadata`, one episode through the process's `Rollouts`, one fill (`fill.fill_episode`). Under
`--partial-rollout` in training the call goes to `partial.generate_partial` instead, its own path.

In training, a model call cut by an abort the trainer did not order (a weight update's
`/pause_generation` under fully-async rollout) is continued in place from its tokens, at most
`max_turn_continuations` times (`ContinuingEngine`); `weight_versions` then has one entry per
engine call and `metadata["weight_version_spans"]` says how many tokens each call sampled.
Episodes sent to worker processes (`rollout_workers`) cannot read the trainer's flag and are not continued.

Under `concurrency: auto` every call first waits for the process's admission controller to let its
episode start (`BackendState.admitted`, `engines/admission.py`); a running episode is never stopped by it,
and one whose step was aborted while it waited returns ABORTED without starting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openreward_rl.backends._sample.fill import fill_episode
from openreward_rl.backends._sample.partial import generate_partial
from openreward_rl.backends._sample.state import BackendState, one_sample_rule, state_for
from openreward_rl.config import ConfigError
from openreward_rl.env.tasks import task_from_metadata
from openreward_rl.loop.resumable import AbortSignal, ContinuingEngine
from openreward_rl.loop.rollout import episode_builder
from openreward_rl.loop.workers import WorkerRollouts

__all__ = ["generate_samples"]


def check_args(args: Any, sample: Any, state: BackendState) -> None:
    """Trainer settings these hooks cannot honour, refused with the flag to change."""
    top_p = getattr(args, "rollout_top_p", None)
    if hasattr(sample, "rollout_top_p_token_ids") and top_p not in (None, 1.0):
        raise ConfigError(
            f"--rollout-top-p {top_p} needs top-p replay data that openreward_rl's generate hook does not record; use --rollout-top-p 1.0"
        )
    if getattr(args, "partial_rollout", False) and state.config.episode is not None:
        cannot_suspend = getattr(
            episode_builder(state.config.episode), "cannot_suspend", None
        )  # imported once per process
        if cannot_suspend:
            raise ConfigError(
                f"--partial-rollout cannot suspend {cannot_suspend} (episode: {state.config.episode}); train without --partial-rollout"
            )
    rule = one_sample_rule(args)
    if rule is not None and state.config.compacts:
        compacting = ", ".join(name for name, env in state.config.environments.items() if env.compacts)
        raise ConfigError(
            f"{rule} cannot take the fan-out samples a context policy makes ({compacting}): the trainer reads each "
            "group member as one Sample there; use plain synchronous rollout (openreward_rl.backends.filters.keep_informative_groups "
            "as its dynamic filter reads fan-out groups), or context_policy: none"
        )


async def generate_samples(
    args: Any,
    sample: Any,
    sampling_params: Mapping[str, Any],
    *,
    evaluation: bool,
    routing_key: str | None,
    preset_reward: bool,
    abort_signal: AbortSignal | None = None,
) -> Any:
    """Run the episode `sample.metadata` names and return what a legacy generate returns: `sample` filled,
    or the list of a fan-out (`fill.trainer_output`).

    `abort_signal` reads the trainer's "aborting this rollout step" flag, where the hook can see it.
    """
    state = state_for(args)
    check_args(args, sample, state)
    async with state.admitted():
        if state.admission is not None and abort_signal is not None and abort_signal():
            # the step was aborted while this episode waited for its slot: as the trainer does with a sample that
            # waited past the abort on its own semaphore, it is returned ABORTED without starting
            sample.status = type(sample).Status.ABORTED
            return sample
        return await _generate(
            args,
            state,
            sample,
            sampling_params,
            evaluation=evaluation,
            routing_key=routing_key,
            preset_reward=preset_reward,
            abort_signal=abort_signal,
        )


async def _generate(
    args: Any,
    state: BackendState,
    sample: Any,
    sampling_params: Mapping[str, Any],
    *,
    evaluation: bool,
    routing_key: str | None,
    preset_reward: bool,
    abort_signal: AbortSignal | None,
) -> Any:
    if getattr(args, "partial_rollout", False) and not evaluation:
        return await generate_partial(
            args,
            state,
            sample,
            sampling_params,
            routing_key=routing_key,
            preset_reward=preset_reward,
            abort_signal=abort_signal,
        )
    task = task_from_metadata(sample.metadata)
    rollouts = state.rollouts_for(evaluation)
    continuations = state.config.max_turn_continuations
    continuing = None
    if not evaluation and abort_signal is not None and continuations > 0 and not isinstance(rollouts, WorkerRollouts):
        continuing = ContinuingEngine(rollouts.engine, abort_signal, continuations)
    trajectory = await rollouts.run(task, sampling_params=sampling_params, routing_key=routing_key, engine=continuing)
    # without a continuation each turn is one call, and the turns carry the weight versions
    recorded = continuing if continuing is not None and continuing.continuations else None
    return fill_episode(
        args,
        state,
        sample,
        task,
        trajectory,
        sampling_params,
        preset_reward=preset_reward,
        evaluation=evaluation,
        engine=recorded,
    )

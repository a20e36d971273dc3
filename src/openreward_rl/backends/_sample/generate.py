"""One trainer `generate` call: the row's task, one episode, the trainer's `Sample`(s) filled from it.

Under `--partial-rollout` (training only) the episode runs as a `LiveEpisode` (see `resumable.py`):
when the trainer aborts the rollout step while the episode is in flight, the episode is suspended
with its environment session open, the sample goes back ABORTED with every token produced so far
and `metadata["resume"]`, and the next call on that sample resumes the episode where it stopped.

In training, a model call cut by an abort the trainer did not order (a weight update's
`/pause_generation` under fully-async rollout) is continued in place from its tokens, at most
`max_turn_continuations` times (`ContinuingEngine`); `weight_versions` then has one entry per
engine call and `metadata["weight_version_spans"]` says how many tokens each call sampled.
Episodes sent to worker processes (`rollout_workers`) cannot read the trainer's flag and are not continued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import attrs

from openreward_rl.backends._sample.fill import sample_fields, samples_from_trajectory
from openreward_rl.backends._sample.state import BackendState, state_for
from openreward_rl.backends._sample.suspended import RESUME_KEY, ResumeRecord, store_for
from openreward_rl.config import ConfigError
from openreward_rl.credit.returns import TurnCredit
from openreward_rl.env.group_score import transcript
from openreward_rl.env.tasks import TaskRef, task_from_metadata
from openreward_rl.loop.episode import failed_trajectory
from openreward_rl.loop.resumable import AbortSignal, ContinuingEngine, Finished, LiveEpisode, Outcome, ParkingEngine, mask_before
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.loop.workers import WorkerRollouts

__all__ = ["generate_samples", "trainer_output", "turn_credit"]

logger = logging.getLogger(__name__)


def check_args(args: Any, sample: Any) -> None:
    """Trainer settings these hooks cannot honour, refused with the flag to change."""
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
    abort_signal: AbortSignal | None = None,
) -> list[Any]:
    """Run the episode `sample.metadata` names (or resume it) and fill `sample` (plus fan-out siblings).

    `abort_signal` reads the trainer's "aborting this rollout step" flag, where the hook can see it.
    """
    check_args(args, sample)
    state = state_for(args)
    if getattr(args, "partial_rollout", False) and not evaluation and state.config.compacts:
        compacting = ", ".join(name for name, env in state.config.environments.items() if env.compacts)
        raise ConfigError(
            f"--partial-rollout cannot take the fan-out samples a context policy makes ({compacting}): Slime's and Miles' "
            "abort() read each group member as one Sample; use --rollout-mode sync or fully-async, or context_policy: none"
        )
    record = ResumeRecord.from_metadata(sample.metadata) if isinstance(sample.metadata, Mapping) else None
    if record is not None:
        sample.metadata = {k: v for k, v in sample.metadata.items() if k != RESUME_KEY}
    task = task_from_metadata(sample.metadata)
    rollouts = state.rollouts_for(evaluation)
    continuations = state.config.max_turn_continuations
    if not getattr(args, "partial_rollout", False) or evaluation:
        continuing = None
        if not evaluation and abort_signal is not None and continuations > 0 and not isinstance(rollouts, WorkerRollouts):
            continuing = ContinuingEngine(rollouts.engine, abort_signal, continuations)
        trajectory = await rollouts.run(task, sampling_params=sampling_params, routing_key=routing_key, engine=continuing)
        # without a continuation each turn is one call, and the turns carry the weight versions
        recorded = continuing if continuing is not None and continuing.continuations else None
        return _fill(args, state, sample, task, trajectory, sampling_params, preset_reward=preset_reward, evaluation=evaluation, engine=recorded)

    store = store_for(state.config.suspended_episode_ttl, state.config.max_suspended_episodes)
    await store.sweep()
    if record is None:
        engine = ParkingEngine(rollouts.engine, abort_signal, continuations)
        live = LiveEpisode.start(engine, rollouts.run(task, sampling_params=sampling_params, routing_key=routing_key, engine=engine))
        outcome = await live.next_outcome()
    else:
        taken = store.take(record)
        if isinstance(taken, str):
            lost = failed_trajectory(task, StopReason.ABORTED, f"partial rollout: {taken}")
            return _fill(args, state, sample, task, lost, sampling_params, preset_reward=preset_reward, evaluation=evaluation)
        live = taken
        outcome = await _resume(live, abort_signal)
        if outcome is None:
            lost = failed_trajectory(task, StopReason.ABORTED, "partial rollout: nothing to resume: the event loop that ran the suspended episode has stopped")
            return _fill(args, state, sample, task, lost, sampling_params, preset_reward=preset_reward, evaluation=evaluation)

    engine = live.engine
    if not isinstance(outcome, Finished):
        resume = attrs.evolve(record or ResumeRecord.new(), suspensions=engine.suspensions)
        await store.park(resume.key, live)
        snapshot = outcome.trajectory
        if len(snapshot.segments) > 1:  # one sample per suspended episode: Slime's abort() cannot take a fan-out list
            snapshot.segments = snapshot.segments[-1:]
        (filled,) = samples_from_trajectory(sample, snapshot, tokenizer=state.tokenizer, weight_versions=_versions(engine), preset_reward=preset_reward)
        filled.metadata[RESUME_KEY] = resume.to_metadata()
        filled.metadata["weight_version_spans"] = list(engine.spans)
        return [filled]

    trajectory = outcome.trajectory
    if engine.suspensions:
        if getattr(args, "mask_offpolicy_in_partial_rollout", False) and engine.offpolicy_boundary is not None:
            mask_before(trajectory, engine.offpolicy_boundary)
        metrics = trajectory.metrics
        metrics["suspensions"] = float(engine.suspensions)
        metrics["suspended_seconds"] = engine.parked_seconds
        for key in ("episode_seconds", "model_seconds"):  # all parking happens inside model calls
            if key in metrics:
                metrics[key] = max(0.0, metrics[key] - engine.parked_seconds)
    return _fill(args, state, sample, task, trajectory, sampling_params, preset_reward=preset_reward, evaluation=evaluation, engine=engine)


def trainer_output(args: Any, samples: list[Any], *, evaluation: bool) -> Any:
    """What a legacy generate returns: one `Sample`, or the list of a fan-out. In training, where the config
    lets episodes fork (a context policy), always a list, so that every rollout of a batch has the same
    nesting: Slime and Miles flatten a batch by looking at its first element only
    (`while isinstance(data[0], list)`), and a batch mixing `Sample` and `list[Sample]` members breaks there.
    In evaluation, one sample per episode (its first context, which carries the episode's record): the
    trainers' eval loops extend their reward lists with every sample of a list, so a compacted episode
    would count once per context in the eval reward mean."""
    if evaluation:
        return samples[0]
    if len(samples) > 1:
        return samples
    if not evaluation and state_for(args).config.compacts:
        (only,) = samples
        if "rollout_id" in sample_fields(only) and only.rollout_id is None:
            only.rollout_id = only.index  # a list names its rollout, as a fan-out's siblings do
        return samples
    return samples[0]


async def _resume(live: LiveEpisode, abort_signal: AbortSignal | None) -> Outcome | None:
    """Resume on the loop the episode runs on (this one, or another thread's); None when that loop is gone."""
    if live.loop is asyncio.get_running_loop():
        return await live.resume(abort_signal)
    if live.loop.is_closed() or not live.loop.is_running():
        return None
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(live.resume(abort_signal), live.loop))


def _versions(engine: ContinuingEngine) -> list[str]:
    """One weight version per engine call, as the trainer appends them (Slime: from each call's meta_info)."""
    return [span["weight_version"] for span in engine.spans if span["weight_version"] is not None]


def _fill(
    args: Any,
    state: BackendState,
    sample: Any,
    task: TaskRef,
    trajectory: Trajectory,
    sampling_params: Mapping[str, Any],
    *,
    preset_reward: bool,
    evaluation: bool,
    engine: ContinuingEngine | None = None,
) -> list[Any]:
    """The samples of a finished episode, its trajectory handed to the uploader. Where `engine` recorded its
    model calls: one weight version per call, the calls' spans in metadata, and how many cut calls it continued."""
    if engine is not None and engine.continuations:
        trajectory.metrics["continuations"] = float(engine.continuations)
    if trajectory.messages:  # returns at once; the upload runs on the uploader's own threads
        state.uploader.submit(trajectory, sampling_params=sampling_params)
    if engine is not None:
        weight_versions = _versions(engine)
    else:
        weight_versions = [t.weight_version for t in trajectory.turns if t.weight_version is not None]
    samples = samples_from_trajectory(
        sample,
        trajectory,
        tokenizer=state.tokenizer,
        weight_versions=weight_versions,
        preset_reward=preset_reward,
        evaluation=evaluation,
        transcript=transcript(trajectory.messages) if getattr(args, "group_rm", False) else None,
        credit=turn_credit(state, task, trajectory),
    )
    if engine is not None:
        for filled in samples:
            filled.metadata["weight_version_spans"] = list(engine.spans)
    return samples


def turn_credit(state: BackendState, task: TaskRef, trajectory: Trajectory) -> TurnCredit | None:
    """The episode's per-turn rewards, returns (the config's `advantage.gamma`) and token spans; None for a failure."""
    nonterminal = state.config.nonterminal_reward(task.environment)
    try:
        return TurnCredit.of_trajectory(trajectory, gamma=state.config.advantage.gamma, nonterminal_reward=nonterminal)
    except ValueError as error:  # the advantage hooks refuse a trained sample without credit, naming it
        logger.error("episode on %s: no per-turn credit: %s", task.environment, error)
        return None

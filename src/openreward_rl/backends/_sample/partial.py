"""The partial-rollout path (`--partial-rollout`, training only): an episode suspended and resumed across steps.

The episode runs as a `LiveEpisode` (see `loop/resumable.py`): when the trainer aborts the rollout step
while the episode is in flight, the episode is suspended with its environment session open, the sample
goes back ABORTED with every token produced so far and `metadata["resume"]`, and the next call on that
sample resumes the episode where it stopped (`suspended.py` keeps the parked episodes). A resume that
finds nothing to resume (expired, pushed out, another process) fills an ABORTED placeholder that says why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import attrs

from openreward_rl.backends._sample.fill import fill_episode, fill_suspended
from openreward_rl.backends._sample.state import BackendState
from openreward_rl.backends._sample.suspended import RESUME_KEY, ResumeRecord, store_for
from openreward_rl.env.tasks import task_from_metadata
from openreward_rl.loop.episode import failed_trajectory
from openreward_rl.loop.resumable import AbortSignal, Finished, LiveEpisode, Outcome, ParkingEngine, mask_before
from openreward_rl.loop.trajectory import StopReason

__all__ = ["generate_partial"]


async def generate_partial(
    args: Any,
    state: BackendState,
    sample: Any,
    sampling_params: Mapping[str, Any],
    *,
    routing_key: str | None,
    preset_reward: bool,
    abort_signal: AbortSignal | None,
) -> Any:
    """Start the episode `sample.metadata` names, or resume the one its `metadata["resume"]` parked; return
    `sample` filled: ABORTED with `metadata["resume"]` while the episode is suspended, else the finished episode."""
    record = ResumeRecord.from_metadata(sample.metadata) if isinstance(sample.metadata, Mapping) else None
    if record is not None:
        sample.metadata = {k: v for k, v in sample.metadata.items() if k != RESUME_KEY}
    task = task_from_metadata(sample.metadata)
    rollouts = state.rollouts_for(False)
    fill: dict[str, Any] = {"preset_reward": preset_reward, "evaluation": False}
    store = store_for(state.config.suspended_episode_ttl, state.config.max_suspended_episodes)
    await store.sweep()
    outcome: Outcome | None
    if record is None:
        engine = ParkingEngine(rollouts.engine, abort_signal, state.config.max_turn_continuations)
        live = LiveEpisode.start(
            engine, rollouts.run(task, sampling_params=sampling_params, routing_key=routing_key, engine=engine)
        )
        outcome = await live.next_outcome()
    else:
        taken = store.take(record)
        if isinstance(taken, str):
            lost = failed_trajectory(task, StopReason.ABORTED, f"partial rollout: {taken}")
            return fill_episode(args, state, sample, task, lost, sampling_params, **fill)
        live = taken
        outcome = await _resume(live, abort_signal)
        if outcome is None:
            lost = failed_trajectory(
                task,
                StopReason.ABORTED,
                "partial rollout: nothing to resume: the event loop that ran the suspended episode has stopped",
            )
            return fill_episode(args, state, sample, task, lost, sampling_params, **fill)

    engine = live.engine
    if not isinstance(outcome, Finished):
        resume = attrs.evolve(record or ResumeRecord.new(), suspensions=engine.suspensions)
        await store.park(resume.key, live)
        return fill_suspended(
            state, sample, outcome.trajectory, engine, {RESUME_KEY: resume.to_metadata()}, preset_reward=preset_reward
        )

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
    return fill_episode(args, state, sample, task, trajectory, sampling_params, engine=engine, **fill)


async def _resume(live: LiveEpisode, abort_signal: AbortSignal | None) -> Outcome | None:
    """Resume on the loop the episode runs on (this one, or another thread's); None when that loop is gone."""
    if live.loop is asyncio.get_running_loop():
        return await live.resume(abort_signal)
    if live.loop.is_closed() or not live.loop.is_running():
        return None
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(live.resume(abort_signal), live.loop))

"""A `Trajectory` written into the trainer's `Sample` (Slime's or Miles'), by the rules of both.

Rules kept here (see docs/training.md and the hooks contract):
- `tokens` is a list of prompt + response ids with at least one prompt token; `response_length`,
  `loss_mask` and `rollout_log_probs` all have `response_length` entries (log-prob 0.0 where masked);
- `reward` is never None (an episode that observed no reward gets 0.0 and `reward_observed: False`);
- `metadata` stays a dict and keeps what `openreward-rl prepare` put there;
- never an empty sample: a run that produced no response tokens becomes a one-token masked
  placeholder with `remove_sample=True`;
- infrastructure failures are ABORTED with the loss masked and `remove_sample=True`: their 0.0 is a
  placeholder value, never a trained reward (drop such groups with the dynamic filter);
- optional fields (`rollout_id`, `remove_sample`, `weight_versions`, `non_generation_time`) are set
  only where the running trainer's `Sample` has them.

Stop reason -> `Sample.Status`:

| stop reason | status | why |
|---|---|---|
| completed, no_tool_call | COMPLETED | the episode ended on its own terms |
| max_turns, truncated, context_overflow | TRUNCATED | a limit ended it; Slime counts it in its `truncated` metric, still trains it |
| aborted, env_error, timeout | ABORTED | infrastructure: Slime skips the RM; never trained |
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from openreward_rl.backends._sample.record import EpisodeRecord, metadata_dict
from openreward_rl.credit.returns import TurnCredit
from openreward_rl.env.group_score import transcript
from openreward_rl.families.token_text import decode_ids
from openreward_rl.families.vision import sample_inputs
from openreward_rl.loop.trajectory import StopReason, TokenSegment, Trajectory

if TYPE_CHECKING:
    from openreward_rl.backends._sample.state import BackendState
    from openreward_rl.env.tasks import TaskRef
    from openreward_rl.loop.resumable import ContinuingEngine

__all__ = [
    "STATUS_FOR_STOP",
    "sample_fields",
    "status_for",
    "episode_metadata",
    "samples_from_trajectory",
    "placeholder_ids",
    "fill_placeholder",
    "fill_episode",
    "fill_suspended",
    "trainer_output",
    "turn_credit",
]

logger = logging.getLogger(__name__)

STATUS_FOR_STOP: Mapping[StopReason, str] = {
    StopReason.COMPLETED: "COMPLETED",
    StopReason.NO_TOOL_CALL: "COMPLETED",
    StopReason.MAX_TURNS: "TRUNCATED",
    StopReason.TRUNCATED: "TRUNCATED",
    StopReason.CONTEXT_OVERFLOW: "TRUNCATED",
    StopReason.ABORTED: "ABORTED",
    StopReason.ENV_ERROR: "ABORTED",
    StopReason.TIMEOUT: "ABORTED",
}


def sample_fields(sample: Any) -> frozenset[str]:
    """Field names of the trainer's `Sample` class (dataclass fields, else instance attributes)."""
    cls = type(sample)
    if dataclasses.is_dataclass(cls):
        return frozenset(f.name for f in dataclasses.fields(cls))
    return frozenset(vars(sample))


def status_for(sample: Any, stop_reason: StopReason) -> Any:
    """The `Sample.Status` member for a stop reason, from the sample's own enum."""
    return getattr(type(sample).Status, STATUS_FOR_STOP[stop_reason])


def non_generation_seconds(metrics: Mapping[str, float]) -> float:
    """The episode's time outside model calls (tools, environment, the loop's own work)."""
    return max(0.0, metrics.get("episode_seconds", 0.0) - metrics.get("model_seconds", 0.0))


def episode_metadata(
    base: Any,
    trajectory: Trajectory,
    *,
    segment: int = 0,
    segments: int = 1,
    evaluation: bool = False,
    credit: TurnCredit | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The sample's metadata: the row's keys plus the episode's `EpisodeRecord` (`extra` sets more of its fields)."""
    row = metadata_dict(base)
    record = EpisodeRecord.of_trajectory(
        trajectory, row, segment=segment, segments=segments, evaluation=evaluation, credit=credit
    )
    return attrs.evolve(record, **extra).to_metadata(row)


def placeholder_ids(tokenizer: Any) -> tuple[int, int]:
    """(prompt id, response id) of the masked one-token placeholder."""
    token = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if token is None:
        token = 0
    return int(token), int(token)


def fill_placeholder(sample: Any, tokenizer: Any, metadata: dict[str, Any], *, reward: float | None) -> None:
    """Make `sample` the masked one-token ABORTED placeholder with `remove_sample=True` (never an empty sample)."""
    prompt_id, response_id = placeholder_ids(tokenizer)
    fields = sample_fields(sample)
    _fill(
        sample,
        fields,
        prompt_ids=[prompt_id],
        response_ids=[response_id],
        loss_mask=[0],
        logprobs=[0.0],
        text="",
        reward=reward,
        status=type(sample).Status.ABORTED,
        metadata=metadata,
        remove=True,
        weight_versions=(),
        non_generation_time=0.0,
    )


def _trainable_segments(trajectory: Trajectory) -> list[TokenSegment]:
    return [s for s in trajectory.segments if s.response_ids]


def _credit_per_sample(
    credit: TurnCredit | None, trajectory: Trajectory, kept: list[TokenSegment]
) -> TurnCredit | None:
    """`credit` with each span's segment renumbered to the position of its sample (-1: a segment no sample holds)."""
    if credit is None:
        return None
    position = {id(segment): index for index, segment in enumerate(kept)}
    numbers = [position.get(id(segment), -1) for segment in trajectory.segments]
    return attrs.evolve(credit, spans=tuple((numbers[s], a, b) for s, a, b in credit.spans))


def _fill(
    sample: Any,
    fields: frozenset[str],
    *,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    loss_mask: Sequence[int],
    logprobs: Sequence[float],
    text: str,
    reward: float | None,
    status: Any,
    metadata: dict[str, Any],
    remove: bool,
    weight_versions: Sequence[str],
    non_generation_time: float,
) -> None:
    if not prompt_ids:
        raise ValueError("a sample needs at least one prompt token")
    if not (len(response_ids) == len(loss_mask) == len(logprobs)) or not response_ids:
        raise ValueError(
            f"response ids ({len(response_ids)}), loss mask ({len(loss_mask)}) and log-probs ({len(logprobs)}) must be equally long and non-empty"
        )
    sample.tokens = [*map(int, prompt_ids), *map(int, response_ids)]
    sample.response_length = len(response_ids)
    sample.loss_mask = [0] * len(response_ids) if remove else list(map(int, loss_mask))
    sample.rollout_log_probs = [0.0] * len(response_ids) if remove else list(map(float, logprobs))
    sample.response = text
    sample.reward = reward
    sample.status = status
    sample.metadata = metadata
    if "remove_sample" in fields:
        sample.remove_sample = remove
    if "weight_versions" in fields:
        sample.weight_versions = list(weight_versions)  # the whole episode is ours; stale entries go
    if "non_generation_time" in fields:
        sample.non_generation_time = float(non_generation_time)


def samples_from_trajectory(
    sample: Any,
    trajectory: Trajectory,
    *,
    tokenizer: Any,
    weight_versions: Sequence[str] = (),
    preset_reward: bool = True,
    evaluation: bool = False,
    transcript: list[dict[str, str]] | None = None,
    credit: TurnCredit | None = None,
) -> list[Any]:
    """Fill `sample` (and, after prefix breaks, siblings copied from it) from `trajectory`.

    Returns one sample per trainable segment, `sample` first; siblings share `rollout_id`
    (`sample.rollout_id`, else `sample.index`). Where the `Sample` class has no `rollout_id`
    field (Slime before 2026-05-25) only the last segment is returned and the rest are counted in
    `metadata["dropped_segments"]`. `preset_reward=False` leaves `reward` None for a group RM that
    refuses preset rewards (Miles under `--group-rm`). `transcript` is stored for group scoring;
    `credit` (the episode's per-turn rewards, returns and spans) in every sample's metadata.
    """
    fields = sample_fields(sample)
    stop = trajectory.stop_reason
    infrastructure = stop.is_infrastructure_failure or not trajectory.token_exact
    status = status_for(sample, stop) if trajectory.token_exact else type(sample).Status.ABORTED
    trained = None if infrastructure else trajectory.trained_reward
    reward = (
        (0.0 if trained is None else trained) if preset_reward else None
    )  # a failure's 0.0 only fills the field: it is masked
    metrics = trajectory.metrics
    non_generation_time = non_generation_seconds(metrics)
    common = {"status": status, "weight_versions": weight_versions, "non_generation_time": non_generation_time}

    segments = _trainable_segments(trajectory)
    if not segments:
        metadata = episode_metadata(
            sample.metadata, trajectory, evaluation=evaluation, placeholder=True, transcript=transcript
        )
        prompt_id, response_id = placeholder_ids(tokenizer)
        _fill(
            sample,
            fields,
            prompt_ids=[prompt_id],
            response_ids=[response_id],
            loss_mask=[0],
            logprobs=[0.0],
            text="",
            reward=None if not preset_reward else 0.0,
            metadata=metadata,
            remove=True,
            **common,
        )
        return [sample]

    dropped = 0
    if len(segments) > 1 and "rollout_id" not in fields:
        dropped, segments = len(segments) - 1, segments[-1:]
        logger.warning(
            "this Sample class has no rollout_id field, so a trajectory with %d prefix breaks keeps only its last segment",
            dropped,
        )
    credit = _credit_per_sample(None if infrastructure else credit, trajectory, segments)
    rollout_id = getattr(sample, "rollout_id", None)
    if rollout_id is None:
        rollout_id = sample.index
    originals = sample.metadata
    pristine = copy.copy(sample)
    out = []
    for position, segment in enumerate(segments):
        target = sample if position == 0 else copy.copy(pristine)
        metadata = episode_metadata(
            originals,
            trajectory,
            segment=position,
            segments=len(segments),
            evaluation=evaluation,
            dropped_segments=dropped,
            transcript=transcript,
            credit=credit,
        )
        _fill(
            target,
            fields,
            prompt_ids=segment.prompt_ids,
            response_ids=segment.response_ids,
            loss_mask=segment.loss_mask,
            logprobs=segment.rollout_logprobs,
            text=decode_ids(tokenizer, segment.response_ids),
            reward=reward,
            metadata=metadata,
            remove=infrastructure,
            **common,
        )
        if segment.images and segment.vision:  # a VLM's images: the trainer's vision inputs (families.vision)
            target.multimodal_inputs, target.multimodal_train_inputs = sample_inputs(segment.images, segment.vision)
        if len(segments) > 1:
            target.rollout_id = rollout_id
        out.append(target)
    return out


def fill_episode(
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
) -> Any:
    """A finished episode written into `sample` (and its fan-out siblings), its trajectory handed to the
    uploader; returns what a legacy generate returns (`trainer_output`). Where `engine` recorded its model
    calls: one weight version per call, the calls' spans in metadata, and how many cut calls it continued."""
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
    return trainer_output(samples, evaluation=evaluation, forks=state.config.compacts)


def fill_suspended(
    state: BackendState,
    sample: Any,
    snapshot: Trajectory,
    engine: ContinuingEngine,
    extra: Mapping[str, Any],
    *,
    preset_reward: bool,
) -> Any:
    """`sample` filled from a suspended episode's tokens so far (ABORTED), `extra` added to its metadata.
    One sample per suspended episode: Slime's abort() cannot take a fan-out list, so only the last context is kept."""
    if len(snapshot.segments) > 1:
        snapshot.segments = snapshot.segments[-1:]
    (filled,) = samples_from_trajectory(
        sample, snapshot, tokenizer=state.tokenizer, weight_versions=_versions(engine), preset_reward=preset_reward
    )
    filled.metadata.update(extra)
    filled.metadata["weight_version_spans"] = list(engine.spans)
    return filled


def trainer_output(samples: list[Any], *, evaluation: bool, forks: bool) -> Any:
    """What a legacy generate returns: one `Sample`, or the list of a fan-out. In training, where the config
    lets episodes fork (`forks`: a context policy), always a list, so that every rollout of a batch has the same
    nesting: Slime and Miles flatten a batch by looking at its first element only
    (`while isinstance(data[0], list)`), and a batch mixing `Sample` and `list[Sample]` members breaks there.
    In evaluation, one sample per episode (its first context, which carries the episode's record): the
    trainers' eval loops extend their reward lists with every sample of a list, so a compacted episode
    would count once per context in the eval reward mean."""
    if evaluation:
        return samples[0]
    if len(samples) > 1:
        return samples
    if forks:
        (only,) = samples
        if "rollout_id" in sample_fields(only) and only.rollout_id is None:
            only.rollout_id = only.index  # a list names its rollout, as a fan-out's siblings do
        return samples
    return samples[0]


def _versions(engine: ContinuingEngine) -> list[str]:
    """One weight version per engine call, as the trainer appends them (Slime: from each call's meta_info)."""
    return [span["weight_version"] for span in engine.spans if span["weight_version"] is not None]


def turn_credit(state: BackendState, task: TaskRef, trajectory: Trajectory) -> TurnCredit | None:
    """The episode's per-turn rewards, returns (the config's `advantage.gamma`) and token spans; None for a failure."""
    nonterminal = state.config.nonterminal_reward(task.environment)
    try:
        return TurnCredit.of_trajectory(trajectory, gamma=state.config.advantage.gamma, nonterminal_reward=nonterminal)
    except ValueError as error:  # the advantage hooks refuse a trained sample without credit, naming it
        logger.error("episode on %s: no per-turn credit: %s", task.environment, error)
        return None

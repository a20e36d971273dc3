"""Test double of what Slime and Miles do with a rollout step's samples before training: flatten the
groups, check fan-out `rollout_id`s, and turn rewards into GRPO advantages. Neither trainer can run here
(torch+CUDA, Megatron, Ray); this is written from their source, not copied:

- Slime, THUDM/slime 624b824: `RolloutManager._get_rollout_data` (slime/ray/rollout.py) validates the nested
  output with `validate_rollout_id_annotated` (slime/observability/rollout_data_utils.py: a `list[Sample]`
  at depth >= 2 with more than one member needs one shared, non-None `rollout_id`) and flattens with
  `while isinstance(data[0], list): chain`; `_post_process_rewards` calls `--custom-reward-post-process-path`
  when set, else, for grpo/gspo/cispo/reinforce_plus_plus_baseline under `rewards_normalization`, reshapes
  the flat rewards to `(-1, n_samples_per_prompt)` when there are exactly
  `n_samples_per_prompt * rollout_batch_size` of them and to one row of all of them otherwise, subtracts
  the row mean and, for grpo/gspo/cispo under `grpo_std_normalization`, divides by the row's unbiased
  standard deviation + 1e-6.
- Miles, radixark/miles 31f1ca9: the same flatten (miles/ray/rollout/rollout_data_conversion.py) and, in
  `_post_process_rewards` / `_normalize_rewards_by_rollout` (miles/ray/rollout/train_data_conversion.py),
  for grpo/gspo/reinforce_plus_plus_baseline: groups by `group_index`, one reward per rollout
  (`rollout_id`, else `index`; siblings with different rewards are a ValueError), the mean of the rollouts'
  rewards subtracted and, for grpo/gspo under `grpo_std_normalization` with more than one rollout and a
  positive spread, divided by the unbiased standard deviation + 1e-6; broadcast to the siblings.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from doubles.slime_double import Sample


def validate_rollout_id_annotated(node: Any, depth: int = 0) -> None:
    if isinstance(node, Sample) or not isinstance(node, list):
        assert isinstance(node, Sample) or hasattr(node, "tokens"), (
            f"unexpected rollout output node {type(node).__name__}"
        )
        return
    if node and not isinstance(node[0], list):
        if depth >= 2 and len(node) > 1:
            ids = [s.rollout_id for s in node]
            assert None not in ids, (
                f"a compact rollout of {len(node)} samples needs rollout_id on every sibling, got {ids}"
            )
            assert len(set(ids)) == 1, f"siblings of one rollout must share rollout_id, got {ids}"
        return
    for item in node:
        validate_rollout_id_annotated(item, depth + 1)


def flatten_step(groups: list[Any]) -> list[Any]:
    """Both trainers: look at the first element only, chain while it is a list."""
    validate_rollout_id_annotated(groups)
    data = groups
    while isinstance(data[0], list):
        data = list(itertools.chain.from_iterable(data))
    return data


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _std(values: list[float]) -> float:
    """torch.Tensor.std(): unbiased; NaN for one value."""
    if len(values) < 2:
        return math.nan
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def slime_post_process_rewards(args: Any, samples: list[Any], custom: Any = None) -> tuple[list[float], list[float]]:
    if custom is not None:
        return custom(args, samples)
    raw = [s.get_reward_value(args) for s in samples]
    if (
        args.advantage_estimator not in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
        or not args.rewards_normalization
    ):
        return raw, raw
    if len(raw) == args.n_samples_per_prompt * args.rollout_batch_size:
        rows = [raw[i : i + args.n_samples_per_prompt] for i in range(0, len(raw), args.n_samples_per_prompt)]
    else:
        rows = [raw]  # uneven groups: one row of everything
    out: list[float] = []
    for row in rows:
        mean = _mean(row)
        centred = [r - mean for r in row]
        if args.advantage_estimator in ("grpo", "gspo", "cispo") and args.grpo_std_normalization:
            std = _std(centred)
            centred = [c / (std + 1e-6) for c in centred]
        out += centred
    return raw, out


def miles_post_process_rewards(args: Any, samples: list[Any], custom: Any = None) -> tuple[list[float], list[float]]:
    if custom is not None:
        return custom(args, samples)
    raw = [s.get_reward_value(args) for s in samples]
    if (
        args.advantage_estimator not in ("grpo", "gspo", "reinforce_plus_plus_baseline")
        or not args.rewards_normalization
    ):
        return raw, raw
    if all(s.group_index is not None for s in samples):
        groups: dict[int, list[int]] = {}
        for i, s in enumerate(samples):
            groups.setdefault(int(s.group_index), []).append(i)
        segments = list(groups.values())
    elif len(samples) == args.n_samples_per_prompt * args.rollout_batch_size:
        n = args.n_samples_per_prompt
        segments = [list(range(i, i + n)) for i in range(0, len(samples), n)]
    else:
        segments = [list(range(len(samples)))]
    out = [0.0] * len(samples)
    for segment in segments:
        rollouts: dict[Any, list[int]] = {}
        for i in segment:
            s = samples[i]
            key = s.rollout_id if s.rollout_id is not None else s.index if s.index is not None else ("row", i)
            rollouts.setdefault(key, []).append(i)
        shared = []
        for key, members in rollouts.items():
            values = [raw[i] for i in members]
            if any(v != values[0] for v in values[1:]):
                raise ValueError(f"all samples in rollout {key!r} must share one reward")
            shared.append(values[0])
        mean = _mean(shared)
        normalized = [r - mean for r in shared]
        if args.advantage_estimator in ("grpo", "gspo") and args.grpo_std_normalization and len(shared) > 1:
            std = _std(shared)
            if std > 0:
                normalized = [n / (std + 1e-6) for n in normalized]
        for members, value in zip(rollouts.values(), normalized):
            for i in members:
                out[i] = value
    return raw, out

"""Advantages in Slime and Miles: GRPO's group normalisation kept right when episodes fork (the
`episode` estimator on Slime), and the config's per-token `advantage.estimator` (`turn` or `mix`) applied
to whole groups of episodes where the trainer sees them, then carried to the training step. Every hook
groups a batch one way (`_sample.groups.prompt_groups`: a prompt's episodes, each named by its rollout key).

The `episode` estimator on Slime. With a context policy (or a prefix break) one episode becomes one sample
per context, all sharing the episode's `rollout_id` and reward, so a prompt's group holds a different
number of samples per episode. A sample's advantage must then be its *episode's* group-normalised reward:
the group is the prompt's episodes, each counted once however many samples it forked into. What the
trainers do without help (read at the commits docs/training.md pins):

- Slime (THUDM/slime 624b824, `RolloutManager._post_process_rewards` in slime/ray/rollout.py) reshapes
  the flat reward list to `(-1, n_samples_per_prompt)` only when it holds exactly
  `n_samples_per_prompt * rollout_batch_size` rewards; any fork breaks that count and the whole
  batch becomes ONE group: every prompt is centred on the batch mean, and an episode that forked
  into k samples weighs k times in the mean and the standard deviation. Wrong under forks.
- Miles (radixark/miles 31f1ca9, `_normalize_rewards_by_rollout` in
  miles/ray/rollout/train_data_conversion.py) groups by `group_index` and normalises one reward per
  rollout, then broadcasts it to the siblings. Right under forks.

`slime_episode_post_process` is the fix for Slime, through its own hook
(`--custom-reward-post-process-path openreward_rl.backends.advantages.slime_episode_post_process`, which
`openreward-rl train --framework slime` passes). It computes what Miles computes, with one more rule of
this library: an episode the machinery failed (`remove_sample`: aborted, environment error, timeout;
its 0.0 is a placeholder, never a reward) takes no part in its group's mean and spread and gets
advantage 0.0. A group left with a single scored episode gets advantage 0.0 (no baseline; Slime's
own formula would give NaN there). The standard deviation is the unbiased one (`torch.std`'s default),
divided as `(r - mean) / (std + 1e-6)` under `--grpo-std-normalization` for grpo, gspo and cispo, and
skipped when the spread is 0, as Miles does.

>>> from types import SimpleNamespace as S
>>> args = S(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=False, reward_key=None)
>>> def sample(group, rollout, reward): return S(group_index=group, rollout_id=rollout, index=rollout, reward=reward, remove_sample=False)
>>> batch = [sample(0, 0, 1.0), sample(0, 0, 1.0), sample(0, 0, 1.0), sample(0, 1, 0.0)]   # episode 0 forked into 3 samples
>>> slime_episode_post_process(args, batch)[1]
[0.5, 0.5, 0.5, -0.5]

The per-token estimators (`turn`, `mix`).

Slime (`openreward-rl train` passes these when the config asks for `turn` or `mix`):

```
--custom-reward-post-process-path openreward_rl.backends.advantages.slime_reward_post_process
--custom-advantage-function-path  openreward_rl.backends.advantages.slime_advantages
```

The rollout manager calls `slime_reward_post_process(args, samples)` with the whole flattened batch, where
every group is complete: it computes each sample's advantages per turn and returns them, as
`[start, end, value]` runs over the sample's response, in place of the normalised rewards. Slime ships
`rewards` to each data-parallel rank untouched (it is not among the fields it turns into tensors), and
on the training rank `slime_advantages(args, rollout_data)` expands the runs into one tensor per sample
(the part this context-parallel rank holds), sets `advantages` and `returns` (the same tensor, as Slime's
GRPO does), and puts each sample's scalar reward back in `rewards` for Slime's rollout metrics.

Miles has no advantage hook; its `compute_advantages_and_returns` adds a precomputed per-token term,
`advantages -= opd_kl_coef * opd_reverse_kl`, on every backend (on-policy distillation's channel). So:

```
--custom-reward-post-process-path openreward_rl.backends.advantages.miles_reward_post_process
--use-opd --opd-type sglang --opd-kl-coef 1.0
```

`miles_reward_post_process` returns 0.0 as every sample's reward to normalise (GRPO's part is then zero)
and sets `sample.opd_reverse_kl` to `-advantage / opd_kl_coef` per token, so the advantage Miles trains
is ours. It cannot be combined with real on-policy distillation. Any context-parallel size works: Miles
(31f1ca9, `process_rollout_data` in training_utils/data.py) slices `opd_reverse_kl` per rank with the
`slice_log_prob_with_cp` it applies to the log-probs, so each rank adds its own slice of our advantages.

Faults are not rewards: a sample without returns (an infrastructure failure or a placeholder) is left out
of its group's statistics and gets advantage 0.0 on tokens whose loss mask is 0 (the hooks mask every
token of such a sample, and the trainers zero `remove_sample` masks); a sample without returns and a
non-zero loss mask, or a sample these hooks did not write, is a `TrainerError`, never a silent 0.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import attrs

from openreward_rl.backends._sample.groups import flatten, prompt_groups
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.config import AdvantageSettings, load_config
from openreward_rl.credit.estimators import episode_advantages, group_advantages
from openreward_rl.credit.signal import StepSignal, group_signal
from openreward_rl.errors import TrainerError

__all__ = [
    "NORMALIZED_ESTIMATORS",
    "STD_ESTIMATORS",
    "SampleCredit",
    "sample_credits",
    "step_signal",
    "slime_episode_post_process",
    "slime_reward_post_process",
    "slime_advantages",
    "miles_reward_post_process",
    "expand_runs",
    "settings_for",
]

POST_PROCESS = "openreward_rl.backends.advantages.slime_reward_post_process"
NORMALIZED_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")  # Slime's list at 624b824
STD_ESTIMATORS = ("grpo", "gspo", "cispo")
_NOT_OURS = "was not produced by openreward_rl's generate hook; the turn and mix estimators need its per-turn returns"


@attrs.frozen
class SampleCredit:
    """One sample's advantages as runs over its response: `(start, end, value)`; `reward` is its trained reward."""

    runs: tuple[tuple[int, int, float], ...]
    length: int
    reward: float

    def to_wire(self) -> dict[str, Any]:
        return {"openreward_credit": [list(r) for r in self.runs], "length": self.length, "reward": self.reward}

    def tokens(self) -> list[float]:
        return expand_runs(self.runs, self.length)


def expand_runs(runs: Sequence[Sequence[float]], length: int) -> list[float]:
    """Per-token values from `(start, end, value)` runs; tokens in no run get 0.0.

    >>> expand_runs([(0, 2, 0.5), (3, 4, -1.0)], 5)
    [0.5, 0.5, 0.0, -1.0, 0.0]
    """
    out = [0.0] * length
    for start, end, value in runs:
        start, end = int(start), int(end)
        if not 0 <= start <= end <= length:
            raise TrainerError(f"advantage run ({start}, {end}) leaves the response of {length} tokens")
        out[start:end] = [float(value)] * (end - start)
    return out


@functools.cache
def _settings_from(path: str | None) -> AdvantageSettings:
    return load_config(path).advantage


def settings_for(args: Any) -> AdvantageSettings:
    """The run's advantage settings, from the config the hooks read (`$OPENREWARD_RL_CONFIG` / `$TRAIN_CONFIG`)."""
    del args
    return _settings_from(os.environ.get("OPENREWARD_RL_CONFIG") or os.environ.get("TRAIN_CONFIG"))


def _masked(sample: Any) -> bool:
    return bool(getattr(sample, "remove_sample", False)) or not any(sample.loss_mask or ())


@attrs.frozen
class _Episode:
    """One episode of a group as the hooks see it: its samples' positions, record and trained reward (None: not trained)."""

    positions: tuple[int, ...]
    record: EpisodeRecord
    reward: float | None

    @property
    def returns(self) -> list[float] | None:
        credit = self.record.credit
        return None if credit is None else list(credit.returns)


def _episode_groups(args: Any, samples: Sequence[Any]) -> list[list[_Episode]]:
    """The batch's prompt groups (`backends._sample.groups.prompt_groups`), each as its episodes (fan-out siblings: one episode)."""
    out = []
    for episodes in prompt_groups(args, samples):
        members = []
        for positions in episodes.values():
            first = samples[positions[0]]
            record = EpisodeRecord.of_sample(first)
            if record is None:
                raise TrainerError(f"sample {first.index} {_NOT_OURS}")
            if record.credit is None and not all(_masked(samples[p]) for p in positions):
                raise TrainerError(
                    f"sample {first.index} ({record.stop_reason.value}) has trained tokens but no per-turn returns"
                )
            reward = None if record.credit is None else float(first.get_reward_value(args))
            members.append(_Episode(tuple(positions), record, reward))
        out.append(members)
    return out


def _per_turn(group: Sequence[_Episode], settings: AdvantageSettings) -> list[list[float] | None]:
    returns = [e.returns for e in group]
    rewards = [e.reward for e in group]
    return group_advantages(settings.estimator, returns, rewards, weight=settings.mix_weight, clip=settings.clip)


def sample_credits(args: Any, samples: Sequence[Any], settings: AdvantageSettings) -> list[SampleCredit]:
    """Each sample's advantages under `settings`, computed per prompt group (fan-out siblings: one episode)."""
    credits: list[SampleCredit | None] = [None] * len(samples)
    for group in _episode_groups(args, samples):
        for episode, advantages in zip(group, _per_turn(group, settings)):
            credit = episode.record.credit
            for position in episode.positions:
                sample = samples[position]
                reward = 0.0 if advantages is None else float(sample.get_reward_value(args))
                if credit is None or advantages is None:
                    credits[position] = SampleCredit((), sample.response_length, reward)
                    continue
                segment = EpisodeRecord.of_sample(sample).segment  # type: ignore[union-attr]
                runs = tuple(
                    (start, end, value)
                    for (s, start, end), value in zip(credit.spans, advantages)
                    if s == segment and end > start
                )
                credits[position] = SampleCredit(runs, sample.response_length, reward)
    return [c for c in credits if c is not None]


def step_signal(args: Any, samples: Sequence[Any], settings: AdvantageSettings) -> StepSignal:
    """The batch's groups without reward spread and episodes that train nothing under `settings`
    (`credit.signal`; for `episode`, GRPO's advantages over the episodes' rewards, as the trainers compute them)."""
    signal = StepSignal()
    for group in _episode_groups(args, flatten(list(samples))):
        rewards = [e.reward for e in group]
        per_turn = (
            _per_turn(group, settings)
            if settings.per_token
            else [None if a is None else [a] for a in episode_advantages(rewards)]
        )
        signal += group_signal(rewards, per_turn)
    return signal


def slime_reward_post_process(args: Any, samples: list[Any]) -> tuple[list[float], list[dict[str, Any]]]:
    """Slime's `--custom-reward-post-process-path`: (raw rewards, each sample's advantage runs)."""
    settings = settings_for(args)
    if not settings.per_token:
        raise TrainerError(
            "the config's advantage.estimator is 'episode': drop --custom-reward-post-process-path and --custom-advantage-function-path"
        )
    credits = sample_credits(args, samples, settings)
    return [float(s.get_reward_value(args)) for s in samples], [c.to_wire() for c in credits]


def _local_slice(values: Any, target: Any, total_length: int, response_length: int) -> Any:
    """The part of a response-long tensor that this context-parallel rank holds (`target`'s length)."""
    if values.numel() == target.numel():
        return values
    import torch
    from slime.backends.megatron_utils.cp_utils import (
        get_logits_and_tokens_offset_with_cp,
    )  # only under context parallelism

    prompt_length = total_length - response_length
    _, _, _, tokens = get_logits_and_tokens_offset_with_cp(total_length, response_length)
    parts = [values[max(0, a - prompt_length) : max(0, b - prompt_length)] for a, b in tokens]
    local = torch.cat(parts)
    if local.numel() != target.numel():
        raise TrainerError(
            f"advantages of {local.numel()} tokens for a context-parallel slice of {target.numel()}; with --allgather-cp use context-parallel size 1"
        )
    return local


def slime_advantages(args: Any, rollout_data: dict[str, Any]) -> None:
    """Slime's `--custom-advantage-function-path`: sets `advantages` and `returns` in place from the runs
    `slime_reward_post_process` put in `rewards`, then restores `rewards` to one float per sample."""
    import torch

    wire = rollout_data["rewards"]
    kl = rollout_data["kl"]
    advantages = []
    for index, entry in enumerate(wire):
        if not isinstance(entry, dict) or "openreward_credit" not in entry:
            raise TrainerError(
                f"rollout_data['rewards'][{index}] holds no advantages; set --custom-reward-post-process-path {POST_PROCESS}"
            )
        full = torch.tensor(
            expand_runs(entry["openreward_credit"], int(entry["length"])), dtype=torch.float32, device=kl[index].device
        )
        advantages.append(
            _local_slice(
                full, kl[index], int(rollout_data["total_lengths"][index]), int(rollout_data["response_lengths"][index])
            )
        )
    rollout_data["advantages"] = advantages
    rollout_data["returns"] = advantages
    rollout_data["rewards"] = [float(entry["reward"]) for entry in wire]


def miles_reward_post_process(args: Any, samples: list[Any]) -> tuple[list[float], list[float]]:
    """Miles' `--custom-reward-post-process-path`: (raw rewards, 0.0 each) with each sample's advantages in
    `sample.opd_reverse_kl` as `-advantage / opd_kl_coef` (Miles subtracts `opd_kl_coef * opd_reverse_kl`)."""
    settings = settings_for(args)
    if not settings.per_token:
        raise TrainerError(
            "the config's advantage.estimator is 'episode': drop --custom-reward-post-process-path and --use-opd"
        )
    if (
        not getattr(args, "use_opd", False)
        or getattr(args, "opd_type", None) != "sglang"
        or getattr(args, "opd_log_prob_top_k", 0)
    ):
        raise TrainerError(
            "Miles adds per-token advantages through its precomputed OPD term: pass --use-opd --opd-type sglang --opd-kl-coef 1.0 (and no --opd-log-prob-top-k)"
        )
    coef = float(getattr(args, "opd_kl_coef", 1.0))
    if coef <= 0:
        raise TrainerError(f"--opd-kl-coef must be positive to carry advantages, got {coef}")
    for sample in samples:
        if (
            getattr(sample, "teacher_log_probs", None) is not None
            or getattr(sample, "opd_reverse_kl", None) is not None
        ):
            raise TrainerError(
                f"sample {sample.index} already carries on-policy distillation data; the turn and mix estimators use that channel on Miles"
            )
    credits = sample_credits(args, samples, settings)
    for sample, credit in zip(samples, credits):
        sample.opd_reverse_kl = [-value / coef for value in credit.tokens()]
    return [float(s.get_reward_value(args)) for s in samples], [0.0] * len(samples)


def _reward_value(sample: Any, args: Any) -> float:
    getter = getattr(sample, "get_reward_value", None)
    if getter is not None:
        return float(getter(args))
    key = getattr(args, "reward_key", None)
    return float(sample.reward[key] if key else sample.reward)


def slime_episode_post_process(args: Any, samples: list[Any]) -> tuple[list[float], list[float]]:
    """Slime's `--custom-reward-post-process-path` for the `episode` estimator: `(raw_rewards, rewards)`, one
    each per sample of the flat batch, in its order, GRPO-normalised per episode (see the module docstring)."""
    samples = flatten(samples)
    raw = [_reward_value(s, args) for s in samples]
    estimator = getattr(args, "advantage_estimator", "grpo")
    if estimator not in NORMALIZED_ESTIMATORS or not getattr(args, "rewards_normalization", True):
        return raw, list(raw)
    std_normalization = estimator in STD_ESTIMATORS and bool(getattr(args, "grpo_std_normalization", True))
    out = [0.0] * len(samples)
    for rollouts in prompt_groups(args, samples):
        scored: list[tuple[list[int], float]] = []
        for key, positions in rollouts.items():
            values = {raw[p] for p in positions}
            if len(values) > 1:
                raise ValueError(
                    f"the samples of rollout {key[1]!r} carry different rewards {sorted(values)}; one episode has one reward"
                )
            if any(getattr(samples[p], "remove_sample", False) for p in positions):
                continue  # a failed episode: no reward, no part in the baseline, advantage 0.0
            scored.append((positions, raw[positions[0]]))
        for (positions, _), advantage in zip(
            scored, episode_advantages([r for _, r in scored], std_normalization=std_normalization)
        ):
            for p in positions:
                out[p] = advantage or 0.0  # never None: every reward here is a number
    return raw, out

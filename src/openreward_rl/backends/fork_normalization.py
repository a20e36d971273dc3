"""GRPO group normalisation that stays right when episodes fork into several samples.

With a context policy (or a prefix break) one episode becomes one sample per context, all sharing the
episode's `rollout_id` and reward, so a prompt's group holds a different number of samples per episode.
A sample's advantage must then be its *episode's* group-normalised reward: the group is the prompt's
episodes (`group_index`), each episode counted once (`rollout_id`, else `index`), however many
samples it forked into (`backends._groups`: the one grouping every hook uses).

What the trainers do without help (read at the commits docs/training.md pins):

- Slime (THUDM/slime 624b824, `RolloutManager._post_process_rewards` in slime/ray/rollout.py) reshapes
  the flat reward list to `(-1, n_samples_per_prompt)` only when it holds exactly
  `n_samples_per_prompt * rollout_batch_size` rewards; any fork breaks that count and the whole
  batch becomes ONE group: every prompt is centred on the batch mean, and an episode that forked
  into k samples weighs k times in the mean and the standard deviation. Wrong under forks.
- Miles (radixark/miles 31f1ca9, `_normalize_rewards_by_rollout` in
  miles/ray/rollout/train_data_conversion.py) groups by `group_index` and normalises one reward per
  rollout, then broadcasts it to the siblings. Right under forks.

`post_process_rewards` is the fix for Slime, through its own hook
(`--custom-reward-post-process-path openreward_rl.backends.fork_normalization.post_process_rewards`, which
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
>>> post_process_rewards(args, batch)[1]
[0.5, 0.5, 0.5, -0.5]
"""

from __future__ import annotations

from typing import Any

from openreward_rl.backends._groups import flatten, prompt_groups
from openreward_rl.credit.estimators import episode_advantages

__all__ = ["NORMALIZED_ESTIMATORS", "STD_ESTIMATORS", "post_process_rewards"]

NORMALIZED_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")  # Slime's list at 624b824
STD_ESTIMATORS = ("grpo", "gspo", "cispo")


def _reward_value(sample: Any, args: Any) -> float:
    getter = getattr(sample, "get_reward_value", None)
    if getter is not None:
        return float(getter(args))
    key = getattr(args, "reward_key", None)
    return float(sample.reward[key] if key else sample.reward)


def post_process_rewards(args: Any, samples: list[Any]) -> tuple[list[float], list[float]]:
    """Slime's `--custom-reward-post-process-path` contract: `(raw_rewards, rewards)`, one each per sample of
    the flat batch, in its order. See the module docstring for the rule."""
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
                raise ValueError(f"the samples of rollout {key[1]!r} carry different rewards {sorted(values)}; one episode has one reward")
            if any(getattr(samples[p], "remove_sample", False) for p in positions):
                continue  # a failed episode: no reward, no part in the baseline, advantage 0.0
            scored.append((positions, raw[positions[0]]))
        for (positions, _), advantage in zip(scored, episode_advantages([r for _, r in scored], std_normalization=std_normalization)):
            for p in positions:
                out[p] = advantage
    return raw, out

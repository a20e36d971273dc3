"""Test double of Slime's path from finished samples to advantages, written from THUDM/slime 624b824
(read for this double, not copied): `RolloutManager._post_process_rewards` / `_convert_samples_to_train_data`
and `_split_train_data_by_dp` (slime/ray/rollout.py), `tensorize_rollout_data_for_training`
(slime/observability/rollout_data_utils.py), `process_rollout_data` (slime/utils/data.py),
`compute_advantages_and_returns` (slime/backends/megatron_utils/loss.py; custom-function branch and GRPO)
and the value reduction of `log_rollout_data` (slime/observability/train_metric_utils.py).

What it keeps, because the hooks rely on it: the custom post-process returns `(raw_rewards, rewards)` for
the flattened batch and `rewards` goes to `train_data["rewards"]` as is; the DP split forwards only a
fixed list of per-sample keys (`rewards` among them, `metadata` not); `rewards` is not made a tensor;
`total_lengths` is localised on the rank; `kl` is zeros shaped like the log-probs when `kl_coef` is 0; a
custom advantage function is called as `fn(args, rollout_data)` and must leave `advantages` and
`returns` there; the metrics then sum every non-tensor list value (so `rewards` must be floats again).
Context parallelism is not modelled (size 1).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

_SPLIT_KEYS = (
    "tokens",
    "multimodal_train_inputs",
    "response_lengths",
    "rewards",
    "truncated",
    "loss_masks",
    "round_number",
    "sample_indices",
    "rollout_ids",
    "rollout_mask_sums",
    "rollout_log_probs",
    "rollout_top_p_token_ids",
    "rollout_top_p_token_offsets",
    "rollout_routed_experts",
    "source_names",
    "prompt",
    "teacher_log_probs",
)
_TENSOR_DTYPES = {
    "tokens": torch.long,
    "loss_masks": torch.int,
    "rollout_log_probs": torch.float32,
    "teacher_log_probs": torch.float32,
}
_LOG_IGNORED = {
    "tokens",
    "loss_masks",
    "sample_indices",
    "rollout_ids",
    "rollout_mask_sums",
    "global_batch_sizes",
    "partition",
    "source_names",
    "local_raw_reward",
}


def load_function(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def post_process_rewards(args: Any, samples: list[Any]) -> tuple[list[Any], list[Any]]:
    if args.custom_reward_post_process_path is not None:
        return load_function(args.custom_reward_post_process_path)(args, samples)
    raw = [s.get_reward_value(args) for s in samples]
    rewards = torch.tensor(raw, dtype=torch.float)
    if rewards.shape[-1] == args.n_samples_per_prompt * args.rollout_batch_size:
        rewards = rewards.reshape(-1, args.n_samples_per_prompt)
    else:
        rewards = rewards.view(-1, rewards.shape[-1])
    rewards = rewards - rewards.mean(dim=-1, keepdim=True)
    if args.grpo_std_normalization:
        rewards = rewards / (rewards.std(dim=-1, keepdim=True) + 1e-6)
    return raw, rewards.flatten().tolist()


def common_train_data(
    samples: list[Any], raw: list[Any], rewards: list[Any], *, check_mask_lengths: bool
) -> dict[str, Any]:
    """The per-sample keys Slime's and Miles' conversions both build (Miles forked Slime's): a `remove_sample`
    sample's loss mask zeroed; Slime (`check_mask_lengths`) first asserts each mask is as long as the response."""
    assert len(raw) == len(samples) and len(rewards) == len(samples)
    masks = []
    for s in samples:
        if check_mask_lengths:
            assert len(s.loss_mask) == s.response_length
        if s.remove_sample:
            s.loss_mask = [0] * s.response_length
        masks.append(s.loss_mask)
    return {
        "tokens": [s.tokens for s in samples],
        "response_lengths": [s.response_length for s in samples],
        "rewards": rewards,
        "raw_reward": raw,
        "rollout_ids": [s.rollout_id if s.rollout_id is not None else s.index for s in samples],
        "loss_masks": masks,
        "rollout_log_probs": [s.rollout_log_probs for s in samples],
    }


def convert_samples_to_train_data(args: Any, samples: list[Any]) -> dict[str, Any]:
    raw, rewards = post_process_rewards(args, samples)
    data = common_train_data(samples, raw, rewards, check_mask_lengths=True)
    data["truncated"] = [1 if s.status.name == "TRUNCATED" else 0 for s in samples]
    data["sample_indices"] = [s.index for s in samples]
    if samples[0].train_metadata is not None:
        data["metadata"] = [s.train_metadata for s in samples]  # built, but the split does not forward it
    return data


def split_by_dp(data: dict[str, Any], dp_size: int) -> list[dict[str, Any]]:
    data["total_lengths"] = [len(t) for t in data["tokens"]]
    shards = []
    for rank in range(dp_size):
        partition = list(range(rank, len(data["tokens"]), dp_size))
        shard: dict[str, Any] = {"partition": partition}
        for key in _SPLIT_KEYS:
            if key in data:
                shard[key] = [data[key][j] for j in partition]
        for key in ("raw_reward", "total_lengths"):
            shard[key] = data[key]
        for key, dtype in _TENSOR_DTYPES.items():
            if key in shard:
                shard[key] = [torch.as_tensor(v, dtype=dtype) for v in shard[key]]
        # the real rollout_data travels through Ray's object store: a pickled copy
        shards.append(shard)
    return shards


def process_rollout_data(shard: dict[str, Any]) -> dict[str, Any]:
    shard["total_lengths"] = [shard["total_lengths"][i] for i in shard["partition"]]
    shard["local_raw_reward"] = [shard["raw_reward"][i] for i in shard["partition"]]
    return shard


def compute_advantages_and_returns(args: Any, rollout_data: dict[str, Any]) -> None:
    log_probs = rollout_data["rollout_log_probs"]  # --use-rollout-logprobs; kl_coef 0
    kl = [torch.zeros_like(x, dtype=torch.float32) for x in log_probs]
    rollout_data["kl"] = kl
    if args.custom_advantage_function_path is not None:
        load_function(args.custom_advantage_function_path)(args, rollout_data)
        advantages, returns = rollout_data["advantages"], rollout_data["returns"]
    else:
        rewards = torch.tensor(rollout_data["rewards"], dtype=torch.float32)
        returns = [torch.ones_like(kl[i]) * rewards[i] for i in range(len(rewards))]
        advantages = list(returns)
    rollout_data["advantages"] = advantages
    rollout_data["returns"] = returns


def log_rollout_values(rollout_data: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in rollout_data.items():
        if key in _LOG_IGNORED or not isinstance(value, (list, tuple)):
            continue
        out[key] = float(torch.cat(value).sum()) if isinstance(value[0], torch.Tensor) else float(sum(value))
    return out


def train_step(args: Any, samples: list[Any], dp_size: int = 2) -> list[dict[str, Any]]:
    """Rollout side then every DP rank's advantage step; each rank's rollout_data, after metrics."""
    shards = split_by_dp(convert_samples_to_train_data(args, samples), dp_size)
    out = []
    for shard in shards:
        rollout_data = process_rollout_data(shard)
        compute_advantages_and_returns(args, rollout_data)
        log_rollout_values(rollout_data)
        out.append(rollout_data)
    return out

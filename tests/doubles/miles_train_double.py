"""Test double of Miles' path from finished samples to advantages, written from radixark/miles 31f1ca9
(read for this double, not copied): `convert_samples_to_train_data`, `_post_process_rewards` and
`_package_shards` (miles/ray/rollout/train_data_conversion.py, with its `ROLLOUT_DATA_VALUE_SPEC`:
`rewards` one float32 per sample, `opd_reverse_kl` a float32 list per sample), and
`compute_advantages_and_returns` (miles/backends/training_utils/loss.py) with GRPO's returns and
`apply_opd_kl_to_advantages`' precomputed branch (loss_hub/opd.py): `advantages[i] - opd_kl_coef *
opd_reverse_kl[i]`, shapes checked. Context parallelism (`train_step(..., cp_size=2)`): each rank holds
the zigzag slice of every response (`get_logits_and_tokens_offset_with_cp` and `slice_log_prob_with_cp`,
training_utils/cp_utils.py, thd layout), and `process_rollout_data` (training_utils/data.py) slices
`rollout_log_probs` and `opd_reverse_kl` alike, so the log-probs (and so GRPO's advantages) and the OPD
term are the same rank-local slice.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from doubles.slime_train_double import common_train_data, load_function

_SHARD_KEYS = (
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
    "rollout_routed_experts",
    "rollout_indexer_topk",
    "prompt",
    "teacher_log_probs",
    "opd_reverse_kl",
    "seq_witness_ids",
    "weight_versions",
    "adapter_slots",
)


def convert_samples_to_train_data(args: Any, samples: list[Any]) -> dict[str, Any]:
    raw, rewards = load_function(args.custom_reward_post_process_path)(args, samples)
    data = common_train_data(samples, raw, rewards, check_mask_lengths=False)
    if samples[0].opd_reverse_kl is not None:
        data["opd_reverse_kl"] = [s.opd_reverse_kl for s in samples]
    return data


def package_shard(data: dict[str, Any]) -> dict[str, Any]:
    shard = {key: list(data[key]) for key in _SHARD_KEYS if key in data}
    shard["rewards"] = np.asarray(shard["rewards"], dtype=np.float32)  # the value spec's ndarray codec
    for key in ("tokens", "loss_masks", "rollout_log_probs", "opd_reverse_kl"):
        if key in shard:
            shard[key] = [
                torch.as_tensor(
                    np.asarray(v, dtype=np.float32 if key in ("rollout_log_probs", "opd_reverse_kl") else np.int32)
                )
                for v in shard[key]
            ]
    return shard


def compute_advantages_and_returns(args: Any, rollout_data: dict[str, Any]) -> None:
    log_probs = rollout_data["rollout_log_probs"]
    kl = [torch.zeros_like(x, dtype=torch.float32) for x in log_probs]
    rewards = torch.tensor(rollout_data["rewards"], dtype=torch.float32)
    returns = [torch.ones_like(kl[i]) * rewards[i] for i in range(len(rewards))]
    advantages = list(returns)
    if args.use_opd:
        precomputed = rollout_data.get("opd_reverse_kl")
        assert precomputed is not None, "the double models the precomputed branch only"
        for i, adv in enumerate(advantages):
            if adv.shape != precomputed[i].shape:
                raise ValueError(f"OPD shape mismatch at sample {i}")
            advantages[i] = adv - args.opd_kl_coef * precomputed[i]
    rollout_data["advantages"] = advantages
    rollout_data["returns"] = returns


def logits_offsets(
    total_length: int, response_length: int, cp_rank: int, cp_size: int
) -> tuple[tuple[int, int], tuple[int, int]]:
    """The two logit ranges (from the prompt's start) a context-parallel rank holds (thd layout)."""
    prompt_length = total_length - response_length
    chunk = (total_length + 2 * cp_size - 1) // (2 * cp_size)
    chunks = (
        (cp_rank * chunk, (cp_rank + 1) * chunk),
        ((2 * cp_size - cp_rank - 1) * chunk, (2 * cp_size - cp_rank) * chunk),
    )
    out = []
    for start, end in chunks:
        logits = (max(start, prompt_length - 1), min(end, total_length - 1))
        out.append(logits if logits[0] < logits[1] else (0, 0))
    return out[0], out[1]


def slice_with_cp(values: Any, total_length: int, response_length: int, cp_rank: int, cp_size: int) -> Any:
    """A rank's part of a response-long tensor, as Miles slices log-probs and the OPD term."""
    assert len(values) == response_length
    if cp_size == 1:
        return values
    prompt_length = total_length - response_length
    (a0, b0), (a1, b1) = logits_offsets(total_length, response_length, cp_rank, cp_size)
    return torch.cat(
        [
            values[a0 - (prompt_length - 1) : b0 - (prompt_length - 1)],
            values[a1 - (prompt_length - 1) : b1 - (prompt_length - 1)],
        ]
    )


def train_step(args: Any, samples: list[Any], *, cp_rank: int = 0, cp_size: int = 1) -> dict[str, Any]:
    rollout_data = package_shard(convert_samples_to_train_data(args, samples))
    totals = [len(s.tokens) for s in samples]
    for key in ("rollout_log_probs", "opd_reverse_kl"):
        if key in rollout_data:
            rollout_data[key] = [
                slice_with_cp(v, t, r, cp_rank, cp_size)
                for v, t, r in zip(rollout_data[key], totals, rollout_data["response_lengths"])
            ]
    compute_advantages_and_returns(args, rollout_data)
    return rollout_data

"""Test double of Miles' `Sample` and of Miles' checks on what a legacy (v1) custom generate returns.
Miles cannot run here (torch+CUDA, Ray, SGLang), so this follows the contract in docs/reference
`slime-miles-hooks.md` §9 (radixark/miles 31f1ca9, 2026-08-21): Slime's fields minus
`session_id`, `append_response_tokens`, top-p replay fields and `custom_rm_path`; plus
`routing_key`, `reward_spec`, `validate()`, `reset_for_retry()` and `oldest_weight_version`
(miles/utils/types.py); the legacy-vs-new generate form detection; the
`--group-rm` assertion against preset rewards; identical rewards for siblings of one rollout.
Written from that contract, not copied from Miles.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from doubles import slime_double


# miles/rollout/base_types.py: what a new-form generate function takes and returns.
@dataclass
class GenerateFnInput:
    state: Any
    sample: Any
    sampling_params: dict[str, Any]
    evaluation: bool = False

    @property
    def args(self) -> Any:
        return self.state.args


@dataclass
class GenerateFnOutput:
    samples: Any


@dataclass
class Sample(slime_double.CommonFields):
    """Miles' rollout sample (31f1ca9): Slime's common fields and these; no `session_id`, no top-p replay."""

    opd_reverse_kl: list[float] | None = None  # miles 31f1ca9: precomputed per-token OPD term
    routing_key: str | None = None
    reward_spec: Any = None

    Status = slime_double.status_enum(__name__)
    status: Status = Status.PENDING

    def reset_for_retry(self) -> None:
        """Miles: generated outputs back to defaults, identity/prompt/metadata/routing_key kept, status ABORTED."""
        self.tokens, self.response, self.response_length, self.reward = [], "", 0, None
        self.loss_mask, self.weight_versions, self.rollout_log_probs = None, [], None
        self.rollout_routed_experts, self.remove_sample, self.train_metadata = None, False, None
        self.non_generation_time = 0.0
        self.status = Sample.Status.ABORTED

    @property
    def oldest_weight_version(self) -> int | None:
        """Miles: the smallest numeric weight version over the trajectory's generation calls."""
        numeric = [int(v) for v in self.weight_versions if str(v).isdigit()]
        return min(numeric) if numeric else None

    def validate(self) -> None:
        assert self.response_length == len(self.loss_mask or [])
        if self.rollout_log_probs is not None:
            assert len(self.rollout_log_probs) == self.response_length


def generate_form(fn: Any) -> str:
    """Miles' compatibility layer: >= 3 parameters, first not named `input` -> legacy; else new form."""
    parameters = list(inspect.signature(fn).parameters)
    if len(parameters) >= 3 and parameters[0] != "input":
        return "legacy"
    if parameters and parameters[0] == "input":
        return "new"
    raise AssertionError(f"Miles cannot call {fn!r}")


def call_generate(
    fn: Any, args: Any, sample: Sample, sampling_params: dict[str, Any], *, evaluation: bool = False
) -> Any:
    """A legacy generate is called by the `generate_and_rm` Miles inherits from Slime: Slime's rule."""
    assert generate_form(fn) == "legacy"
    return slime_double.call_generate(fn, args, sample, sampling_params, evaluation=evaluation)


def group_rm_precheck(samples: list[Sample]) -> None:
    """Miles under --group-rm: a preset reward is an AssertionError."""
    for sample in samples:
        assert sample.reward is None, "Miles' group RM refuses samples whose generate preset a reward"


def check_sibling_rewards(samples: list[Sample]) -> None:
    """Miles' normalization: siblings sharing rollout_id (else index) must have identical rewards."""
    by_rollout: dict[Any, set[Any]] = {}
    for sample in samples:
        by_rollout.setdefault(sample.rollout_id if sample.rollout_id is not None else sample.index, set()).add(
            sample.reward
        )
    for key, rewards in by_rollout.items():
        if len(rewards) > 1:
            raise ValueError(f"rollout {key} has different rewards across siblings: {rewards}")


def check_trainable(sample: Sample, args: Any = None) -> None:
    assert isinstance(sample.index, int)
    assert type(sample.tokens) is list and all(type(t) is int for t in sample.tokens)
    assert sample.response_length >= 1 and len(sample.tokens) > sample.response_length
    assert type(sample.loss_mask) is list and type(sample.rollout_log_probs) is list
    sample.validate()
    assert sample.reward is not None and isinstance(sample.get_reward_value(args), float)
    assert isinstance(sample.metadata, dict)
    assert sample.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED, Sample.Status.ABORTED)
    assert not hasattr(sample, "session_id"), "Miles' Sample has no session_id; setting one does nothing"
    if sample.status is Sample.Status.ABORTED:
        assert sample.remove_sample and not any(sample.loss_mask)


# miles/rollout/filter_hub/base_types.py (31f1ca9): Miles' own class (no keep_when_insufficient) and reader.
@dataclass
class DynamicFilterOutput:
    keep: bool
    reason: str | None = None


def call_dynamic_filter(fn: Any, *args: Any, **kwargs: Any) -> DynamicFilterOutput:
    """Miles: no filter keeps; any answer that is not Miles' own `DynamicFilterOutput` becomes `keep=<answer>`."""
    return slime_double.read_dynamic_filter(DynamicFilterOutput, fn, args, kwargs)


# miles/ray/rollout/train_data_conversion.py (31f1ca9), the parts a removed sample meets: the loss mask
# length assert, `remove_sample` zeroing the mask, and `_post_process_rewards` building a float tensor
# from every sample's reward (GRPO normalization per rollout), where a None is torch's TypeError.
def convert_samples_to_train_data(args: Any, samples: list[Sample]) -> dict[str, Any]:
    raw_rewards = [sample.get_reward_value(args) for sample in samples]
    for reward in raw_rewards:
        if not isinstance(reward, (int, float)):
            raise TypeError(f"must be real number, not {type(reward).__name__}")  # torch.tensor(..., dtype=torch.float)
    check_sibling_rewards(samples)
    loss_masks = []
    for sample in samples:
        if sample.loss_mask is None:
            sample.loss_mask = [1] * sample.response_length
        assert len(sample.loss_mask) == sample.response_length, (
            f"loss mask length {len(sample.loss_mask)} != response length {sample.response_length}"
        )
        if sample.remove_sample:
            sample.loss_mask = [0] * sample.response_length
        loss_masks.append(sample.loss_mask)
    return {"tokens": [s.tokens for s in samples], "rewards": raw_rewards, "loss_masks": loss_masks}

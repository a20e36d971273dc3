"""Test double of Slime's `Sample` / `Sample.Status` and of the checks Slime applies to what a
custom generate returns. Slime itself cannot run here (it needs torch+CUDA, Megatron, Ray and a
pinned source checkout), so this reproduces the contract in docs/reference `slime-miles-hooks.md`
(THUDM/slime 624b824, 2026-08-21): field names and types of `slime/utils/types.py`, the
`evaluation` calling rule of `generate_and_rm`, the fan-out `rollout_id` validation, and the
invariants of `_convert_samples_to_train_data` / `_post_process_rewards`. Written from that
contract, not copied from Slime.
"""

from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from openreward_rl.env.tasks import TaskRef, task_row


def status_enum(module: str) -> type[enum.Enum]:
    """A new `Sample.Status` enum with Slime's members (Miles keeps them): each double's `Sample` has its
    own class, as each framework's has, so code that takes `type(sample).Status` is told the two apart.
    `module` is where the class lives, for pickling."""
    members = [(name, name.lower()) for name in ("PENDING", "COMPLETED", "TRUNCATED", "ABORTED", "FAILED")]
    return enum.Enum("Status", members, module=module, qualname="Sample.Status")


class RewardValue:
    """`Sample.get_reward_value`, the same in Slime and Miles: the reward, or its `args.reward_key` entry."""

    reward: Any

    def get_reward_value(self, args: Any) -> Any:
        key = getattr(args, "reward_key", None)
        return self.reward if not key else self.reward[key]


@dataclass
class CommonFields(RewardValue):
    """The fields Slime's and Miles' `Sample` share (Miles' is a fork of Slime's); each double adds its own."""

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, Any]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: Any = None
    multimodal_train_inputs: Any = None  # the processor's vision tensors (pixel_values, image_grid_thw, ...)
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_routed_experts: Any = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None
    train_metadata: dict[str, Any] | None = None
    non_generation_time: float = 0.0
    generate_function_path: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sample(CommonFields):
    """Slime's rollout sample (fields as of 2026-08-21): the common fields and these."""

    multimodal_inputs: Any = None
    rollout_top_p_token_ids: list[Any] | None = None
    rollout_top_p_offsets: list[int] | None = None
    session_id: str | None = None
    custom_rm_path: str | None = None

    Status = status_enum(__name__)
    status: Status = Status.PENDING

    def get_source(self) -> Any:
        return self.metadata.get("source")  # raises AttributeError on a JSON-string metadata, as Slime does

    def append_response_tokens(
        self, *args: Any, **kwargs: Any
    ) -> None:  # present from 2026-06-21; our hooks do not need it
        raise AssertionError("the double does not implement append_response_tokens")


def task_sample(task: TaskRef, sample_type: Any = Sample, **fields: Any) -> Any:
    """A `Sample` as Slime's data source makes one from `task`'s row (`task_row`): its prompt, label
    and metadata; `fields` set the rest (index, group_index, session_id). `sample_type`: another
    framework's `Sample` (Miles'), filled the same way."""
    row = task_row(task)
    return sample_type(prompt=row["prompt"], label=row["label"], metadata=row["metadata"], **fields)


def rollout_args(host: str, port: int, **overrides: Any) -> SimpleNamespace:
    """A Slime-like `args` namespace: the fields our hooks read, as Slime fills them for a rollout
    on the SGLang router at `host:port` (no partial rollout, no group RM); `overrides` replace any."""
    values: dict[str, Any] = dict(
        sglang_router_ip=host,
        sglang_router_port=port,
        hf_checkpoint="offline:qwen3",
        rollout_max_context_len=4096,
        eval_max_context_len=None,
        rollout_max_response_len=256,
        partial_rollout=False,
        group_rm=False,
        router_policy="consistent_hashing",
        rollout_top_p=1.0,
        reward_key=None,
    )
    values.update(overrides)
    return SimpleNamespace(**values)


def call_generate(
    fn: Any, args: Any, sample: Sample, sampling_params: dict[str, Any], *, evaluation: bool = False
) -> Any:
    """How `generate_and_rm` calls a custom generate: three positional arguments, plus
    `evaluation=` only when a parameter literally named `evaluation` exists."""
    parameters = inspect.signature(fn).parameters
    if "evaluation" in parameters:
        return fn(args, sample, sampling_params, evaluation=evaluation)
    return fn(args, sample, sampling_params)


def validate_rollout_ids(output: Sample | list[Sample]) -> None:
    """Fan-out rule: every sibling carries the same, non-None `rollout_id`."""
    if isinstance(output, list):
        ids = {s.rollout_id for s in output}
        assert len(ids) == 1 and None not in ids, f"fan-out siblings need one shared non-None rollout_id, got {ids}"


def check_trainable(sample: Sample, args: Any = None) -> None:
    """Every invariant Slime relies on before training a sample (hooks contract §2-§3)."""
    assert isinstance(sample.index, int), "groups are sorted by index: it must be an int"
    assert type(sample.tokens) is list and all(type(t) is int for t in sample.tokens), "tokens must be a list of ints"
    assert type(sample.response_length) is int and sample.response_length >= 1, "never an empty response"
    assert len(sample.tokens) > sample.response_length, "at least one prompt token"
    assert type(sample.loss_mask) is list and len(sample.loss_mask) == sample.response_length, (
        f"loss mask length {len(sample.loss_mask or [])} != response length {sample.response_length}"
    )
    assert set(sample.loss_mask) <= {0, 1}
    assert type(sample.rollout_log_probs) is list and len(sample.rollout_log_probs) == sample.response_length, (
        "log_prob length mismatch"
    )
    assert all(type(lp) is float for lp in sample.rollout_log_probs)
    assert all(lp == 0.0 for lp, m in zip(sample.rollout_log_probs, sample.loss_mask) if m == 0), (
        "masked tokens carry log-prob 0.0"
    )
    assert all(lp <= 0.0 for lp in sample.rollout_log_probs), "log-probs are <= 0"
    assert sample.reward is not None, "reward must not be None when training starts"
    assert isinstance(sample.get_reward_value(args), float)
    assert isinstance(sample.metadata, dict), "metadata must stay a dict"
    sample.get_source()
    assert isinstance(sample.status, Sample.Status) and sample.status in (
        Sample.Status.COMPLETED,
        Sample.Status.TRUNCATED,
        Sample.Status.ABORTED,
    ), f"a finished sample is COMPLETED, TRUNCATED or ABORTED, not {sample.status}"
    assert type(sample.weight_versions) is list and all(isinstance(v, str) for v in sample.weight_versions)
    if sample.status is Sample.Status.ABORTED:
        assert sample.remove_sample, "an ABORTED sample that reaches training must be removed"
        assert not any(sample.loss_mask), "an ABORTED sample trains nothing"


def check_output(output: Sample | list[Sample], args: Any = None) -> list[Sample]:
    validate_rollout_ids(output)
    samples = output if isinstance(output, list) else [output]
    for sample in samples:
        check_trainable(sample, args)
    if len(samples) > 1:
        assert len({s.reward for s in samples}) == 1, "fan-out siblings share the rollout's reward"
    return samples


# slime/rollout/filter_hub/base_types.py (624b824): the dynamic filter's answer and how Slime reads it.
@dataclass
class DynamicFilterOutput:
    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


def read_dynamic_filter(output_type: Any, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """How Slime (and Miles, with its own `output_type`) reads a dynamic filter: no filter keeps; any
    answer that is not the framework's own `output_type` becomes `keep=<answer>`."""
    if fn is None:
        return output_type(keep=True)
    output = fn(*args, **kwargs)
    if not isinstance(output, output_type):
        output = output_type(keep=output)
    return output


def call_dynamic_filter(fn: Any, *args: Any, **kwargs: Any) -> DynamicFilterOutput:
    """Slime: no filter keeps; any answer that is not Slime's own `DynamicFilterOutput` becomes `keep=<answer>`."""
    return read_dynamic_filter(DynamicFilterOutput, fn, args, kwargs)

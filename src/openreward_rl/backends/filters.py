"""Dynamic-sampling filter: keep prompt groups that can teach something.

```
--dynamic-sampling-filter-path openreward_rl.backends.filters.keep_informative_groups
```

A group is dropped when any member is an infrastructure failure (ABORTED or `remove_sample`:
its 0.0 is a placeholder that would bias the group baseline), when fewer than two rollouts have
a reward, or when every rollout got the same reward (zero advantage under GRPO). Fan-out groups
(`list[list[Sample]]`) count each rollout once (siblings share `rollout_id` and reward).

The trainer wraps any return value that is not its own `DynamicFilterOutput` as `keep=<value>`
(`call_dynamic_filter` in `{slime,miles}/rollout/filter_hub/base_types.py`), so another trainer's
`DynamicFilterOutput` would read as a truthy keep. The verdict is therefore returned as the *caller's*
`DynamicFilterOutput` (with a drop reason for its metrics): the trainer is the package the group's
`Sample` class comes from (`slime.utils.types` or `miles.utils.types`), whatever else is importable.
When that cannot be told, or its class cannot be imported, the answer is a plain bool, which both
trainers wrap correctly.
"""

from __future__ import annotations

import importlib
from typing import Any

from openreward_rl.backends._sample.groups import flatten, rollout_key
from openreward_rl.backends.task_sampling import record_group

__all__ = ["keep_informative_groups", "group_verdict", "caller_trainer", "reads_members_as_samples"]

TRAINERS = ("slime", "miles")
# Slime's stock filters (`check_reward_nonzero_std` and its `_with_fallback` twin, at 624b824) call
# `get_reward_value` on each group member; Miles' flatten the group first.
SLIME_STOCK_FILTERS = "slime.rollout.filter_hub.dynamic_sampling_filters."
_OUTPUT_MODULE = "{trainer}.rollout.filter_hub.base_types"


def caller_trainer(samples: list[Any]) -> str | None:
    """ "slime" or "miles": the package of the group's `Sample` class; None when it is neither."""
    leaves = flatten(samples)
    if not leaves:
        return None
    package = type(leaves[0]).__module__.partition(".")[0]
    return package if package in TRAINERS else None


def reads_members_as_samples(filter_path: str | None) -> bool:
    """Whether the dynamic filter at `filter_path` reads each member of a group as one `Sample` (so a fan-out
    list there breaks it): Slime's stock filters.

    >>> reads_members_as_samples("slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std")
    True
    >>> reads_members_as_samples("openreward_rl.backends.filters.keep_informative_groups")
    False
    """
    return str(filter_path or "").startswith(SLIME_STOCK_FILTERS)


def _output_class(trainer: str | None) -> Any:
    if trainer is None:
        return None
    try:
        return importlib.import_module(_OUTPUT_MODULE.format(trainer=trainer)).DynamicFilterOutput
    except (ImportError, AttributeError):
        return None


def _reward_value(args: Any, sample: Any) -> float | None:
    getter = getattr(sample, "get_reward_value", None)
    value = getter(args) if getter is not None else sample.reward
    return None if value is None else float(value)


def _aborted(sample: Any) -> bool:
    status = getattr(sample, "status", None)
    return getattr(status, "name", None) == "ABORTED" or bool(getattr(sample, "remove_sample", False))


def group_verdict(args: Any, samples: list[Any], *, tolerance: float = 1e-6) -> tuple[bool, str | None]:
    """(keep, drop reason) for one prompt group, flat or nested by fan-out."""
    leaves = flatten(samples)
    if not leaves:
        return False, "empty_group"
    if any(_aborted(s) for s in leaves):
        return False, "aborted_member"
    per_rollout: dict[Any, float] = {}
    for position, sample in enumerate(leaves):
        value = _reward_value(args, sample)
        if value is None:
            return False, "missing_reward"
        per_rollout[rollout_key(sample, position)] = value
    rewards = list(per_rollout.values())
    if len(rewards) < 2:
        return False, "single_rollout"
    if max(rewards) - min(rewards) <= tolerance:
        return False, f"zero_std_{round(rewards[0], 1)}"
    return True, None


def keep_informative_groups(args: Any, samples: list[Any], **kwargs: Any) -> Any:
    """Slime/Miles `--dynamic-sampling-filter-path` hook (sync, called once per finished group)."""
    keep, reason = group_verdict(args, samples)
    record_group(flatten(samples), reason)  # for the task sampler (backends.task_sampling), in this process
    output_class = _output_class(caller_trainer(samples))
    if output_class is None:
        return keep
    return output_class(keep=keep, reason=reason)

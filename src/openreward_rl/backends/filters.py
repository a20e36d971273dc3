"""Dynamic-sampling filter: keep prompt groups that can teach something.

```
--dynamic-sampling-filter-path openreward_rl.backends.filters.keep_informative_groups
```

A group is dropped when any member is an infrastructure failure (ABORTED or `remove_sample`:
its 0.0 is a placeholder that would bias the group baseline), when fewer than two rollouts have
a reward, or when every rollout got the same reward (zero advantage under GRPO). Fan-out groups
(`list[list[Sample]]`) count each rollout once (siblings share `rollout_id` and reward).

The trainer wraps any return value that is not its own `DynamicFilterOutput` as `keep=<value>`,
so the verdict is returned as Slime's or Miles' `DynamicFilterOutput` (with a drop reason for
its metrics) when one can be imported, else as a plain bool.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from openreward_rl.backends.group_reward import flatten, rollout_key
from openreward_rl.backends.task_sampling import record_group

__all__ = ["keep_informative_groups", "group_verdict"]

_OUTPUT_CLASSES = (
    "slime.rollout.filter_hub.base_types",
    "miles.rollout.filter_hub.base_types",
)


@functools.cache
def _output_class() -> Any:
    for module_name in _OUTPUT_CLASSES:
        try:
            return importlib.import_module(module_name).DynamicFilterOutput
        except (ImportError, AttributeError):
            continue
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
    for sample in leaves:
        value = _reward_value(args, sample)
        if value is None:
            return False, "missing_reward"
        per_rollout[rollout_key(sample)] = value
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
    output_class = _output_class()
    if output_class is None:
        return keep
    return output_class(keep=keep, reason=reason)

"""Deprecated: `post_process_rewards` is now `openreward_rl.backends.advantages.slime_episode_post_process`.

`--custom-reward-post-process-path openreward_rl.backends.fork_normalization.post_process_rewards` keeps
working for one release, with a `DeprecationWarning`; this module goes in the release after.
"""

from __future__ import annotations

import warnings
from typing import Any

from openreward_rl.backends.advantages import NORMALIZED_ESTIMATORS, STD_ESTIMATORS, slime_episode_post_process

__all__ = ["NORMALIZED_ESTIMATORS", "STD_ESTIMATORS", "post_process_rewards"]


def post_process_rewards(args: Any, samples: list[Any]) -> tuple[list[float], list[float]]:
    """Deprecated alias of `advantages.slime_episode_post_process`."""
    warnings.warn(
        "openreward_rl.backends.fork_normalization.post_process_rewards is deprecated: pass "
        "--custom-reward-post-process-path openreward_rl.backends.advantages.slime_episode_post_process",
        DeprecationWarning,
        stacklevel=2,
    )
    return slime_episode_post_process(args, samples)

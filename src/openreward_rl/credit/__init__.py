"""Credit assignment: per-turn rewards and returns of an episode (`returns`) and advantage estimators
over a group of episodes (`estimators`), both free of any trainer; the Slime and Miles hooks that use
them live in `openreward_rl.backends.advantages`.
"""

from __future__ import annotations

from openreward_rl._lazy import lazy_exports

_EXPORTS = {
    "openreward_rl.credit.returns": ["TurnCredit", "reward_to_go", "turn_rewards", "turn_spans", "token_rewards"],
    "openreward_rl.credit.estimators": [
        "advantage_bound",
        "episode_advantages",
        "turn_advantages",
        "turn_index_advantages",
        "mixed_advantages",
        "group_advantages",
        "token_advantages",
    ],
    "openreward_rl.credit.group": ["group_token_advantages"],
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

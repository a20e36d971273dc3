"""openreward_rl: token-exact multi-turn tool-use RL on OpenReward environments.

The core is framework-agnostic: an `Episode` (default `ToolEpisode`) runs one task against an
`Engine`, parsing model text with a `ToolParser` and reducing step rewards with a `RewardReducer`.
Thin adapters in `openreward_rl.backends` expose it as Slime and Miles hooks.

Names are imported lazily, so `import openreward_rl.engines` (e.g. on a GPU host running only the
embedded engine) does not import the OpenReward SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and editors
    from openreward_rl.chat import ChatRenderer
    from openreward_rl.environment import EnvSession, TaskRef, open_session
    from openreward_rl.episode import Episode, EpisodeSettings, run_episode
    from openreward_rl.rollout import EpisodeBuilder, Rollouts
    from openreward_rl.tool_episode import ToolEpisode
    from openreward_rl.trajectory import StopReason, TokenLedger, Trajectory, Turn

__version__ = "0.1.0"

_EXPORTS = {
    "ChatRenderer": "openreward_rl.chat",
    "EnvSession": "openreward_rl.environment",
    "TaskRef": "openreward_rl.environment",
    "open_session": "openreward_rl.environment",
    "Episode": "openreward_rl.episode",
    "EpisodeSettings": "openreward_rl.episode",
    "run_episode": "openreward_rl.episode",
    "EpisodeBuilder": "openreward_rl.rollout",
    "Rollouts": "openreward_rl.rollout",
    "ToolEpisode": "openreward_rl.tool_episode",
    "StopReason": "openreward_rl.trajectory",
    "TokenLedger": "openreward_rl.trajectory",
    "Trajectory": "openreward_rl.trajectory",
    "Turn": "openreward_rl.trajectory",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'openreward_rl' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])

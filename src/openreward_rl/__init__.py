"""openreward_rl: token-exact multi-turn tool-use RL on OpenReward environments.

The core is framework-agnostic: an `Episode` (default `ToolEpisode`) runs one task against an
`Engine`, parsing model text with a `ToolParser` and reducing step rewards with a `RewardReducer`.
Thin adapters in `openreward_rl.backends` expose it as Slime, Miles and TRL hooks.

The packages, by concern:

| package | what it holds |
|---|---|
| `loop` | the episode loop: `Episode`, `ToolEpisode`, `Trajectory`, `Rollouts`; worker processes, resumable episodes |
| `task` | `TaskRef`: which task an episode runs, the one task identity every package names |
| `env` | the OpenReward side: the tasks of an environment, sessions, transport, local servers, tool output |
| `families` | one object per model family, the chat renderer and token text |
| `parsers`, `reducers`, `engines` | the ToolParser and RewardReducer protocols and their formats; sampling engines |
| `observe` | metrics, dumps, conversations, trajectory upload, WandB |
| `backends` | Slime/Miles/TRL hooks (trainer glue only) |
| `cli`, `show` | the `openreward-rl` command; the rollout viewer |

Names are imported lazily, so `import openreward_rl.engines` (e.g. on a GPU host running only the
embedded engine) does not import the OpenReward SDK.

>>> from openreward_rl import TaskRef
>>> TaskRef("MathEnv", "test", index=3).key
('MathEnv', 'test', None, 3)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openreward_rl._lazy import lazy_exports

if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and editors
    from openreward_rl.env.environment import EnvSession, open_session
    from openreward_rl.errors import OpenRewardRLError
    from openreward_rl.families.chat import ChatRenderer
    from openreward_rl.loop.context import ContextPolicy
    from openreward_rl.loop.episode import Episode, EpisodeSettings, run_episode
    from openreward_rl.loop.rollout import EpisodeBuilder, Rollouts
    from openreward_rl.loop.tool_episode import ToolEpisode
    from openreward_rl.loop.trajectory import StopReason, TokenLedger, Trajectory, Turn
    from openreward_rl.task import TaskRef

__version__ = "0.1.0"

_EXPORTS = {
    "openreward_rl.families.chat": ["ChatRenderer"],
    "openreward_rl.env.environment": ["EnvSession", "open_session"],
    "openreward_rl.errors": ["OpenRewardRLError"],
    "openreward_rl.loop.context": ["ContextPolicy"],
    "openreward_rl.loop.episode": ["Episode", "EpisodeSettings", "run_episode"],
    "openreward_rl.loop.rollout": ["EpisodeBuilder", "Rollouts"],
    "openreward_rl.loop.tool_episode": ["ToolEpisode"],
    "openreward_rl.loop.trajectory": ["StopReason", "TokenLedger", "Trajectory", "Turn"],
    "openreward_rl.task": ["TaskRef"],
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

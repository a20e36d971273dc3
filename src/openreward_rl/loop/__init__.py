"""The episode loop: the `Episode` protocol and `run_episode` (sessions, retries, timeouts), the default
`ToolEpisode`, what an episode produced (`Trajectory`, its token-exact `TokenLedger`), and `Rollouts`,
everything one process needs to run configured episodes.

>>> from openreward_rl.loop import StopReason
>>> StopReason.ENV_ERROR.is_infrastructure_failure
True
"""

from __future__ import annotations

from openreward_rl._lazy import lazy_exports

_EXPORTS = {
    "Episode": "openreward_rl.loop.episode",
    "EpisodeSettings": "openreward_rl.loop.episode",
    "run_episode": "openreward_rl.loop.episode",
    "episode_reward": "openreward_rl.loop.episode",
    "failed_trajectory": "openreward_rl.loop.episode",
    "format_system_prompt": "openreward_rl.loop.episode",
    "ToolEpisode": "openreward_rl.loop.tool_episode",
    "StopReason": "openreward_rl.loop.trajectory",
    "ToolResult": "openreward_rl.loop.trajectory",
    "Turn": "openreward_rl.loop.trajectory",
    "TokenSegment": "openreward_rl.loop.trajectory",
    "TokenLedger": "openreward_rl.loop.trajectory",
    "Trajectory": "openreward_rl.loop.trajectory",
    "EpisodeBuilder": "openreward_rl.loop.rollout",
    "Rollouts": "openreward_rl.loop.rollout",
    "episode_stack": "openreward_rl.loop.rollout",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

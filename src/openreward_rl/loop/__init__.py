"""The episode loop: the `Episode` protocol and `run_episode` (sessions, retries, timeouts), the default
`ToolEpisode`, its `ContextPolicy` (compaction as the context fills), what an episode produced (`Trajectory`, its token-exact `TokenLedger`), and `Rollouts`,
everything one process needs to run configured episodes.

>>> from openreward_rl.loop import StopReason
>>> StopReason.ENV_ERROR.is_infrastructure_failure
True
"""

from __future__ import annotations

from openreward_rl._lazy import lazy_exports

_EXPORTS = {
    "openreward_rl.loop.episode": [
        "Episode",
        "EpisodeSettings",
        "run_episode",
        "episode_reward",
        "failed_trajectory",
        "format_system_prompt",
    ],
    "openreward_rl.loop.tool_episode": ["ToolEpisode"],
    "openreward_rl.loop.trajectory": [
        "StopReason",
        "ToolResult",
        "Turn",
        "TokenSegment",
        "TokenLedger",
        "Trajectory",
        "Compaction",
    ],
    "openreward_rl.loop.context": [
        "ContextPolicy",
        "ContextView",
        "Rewrite",
        "Summarize",
        "ClearToolOutputs",
        "SummarizeContext",
        "context_policy",
        "register_context_policy",
    ],
    "openreward_rl.loop.rollout": ["EpisodeBuilder", "Rollouts", "episode_stack"],
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

"""Bring your own agent: an OpenAI-compatible endpoint that records every model call token-exact
(`AgentEndpoint`, `EpisodeRecorder`), and `AgentEpisode`, which runs an agent program (a Python callable
or a subprocess) against an OpenReward session through it."""

from __future__ import annotations

from openreward_rl._lazy import lazy_exports

_EXPORTS = {
    "openreward_rl.agent_endpoint.server": ["AgentEndpoint"],
    "openreward_rl.agent_endpoint.recorder": ["EpisodeRecorder", "RecorderSettings"],
    "openreward_rl.agent_endpoint.openai_shape": ["ChatRequest", "BadRequest"],
    "openreward_rl.agent_endpoint.episode": [
        "AgentEpisode",
        "AgentEpisodeBuilder",
        "AgentTask",
        "SubprocessAgent",
        "ToolAnswer",
        "AgentCrashed",
        "agent_episode_builder",
    ],
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

"""What runs leave behind for people: per-environment metrics (pass@k, stop reasons), trajectory dumps,
conversations, trajectory upload to OpenReward, and WandB logging.

>>> from openreward_rl.observe import pass_at_k
>>> round(pass_at_k(4, 1, 2), 3)
0.5
"""

from __future__ import annotations

from openreward_rl._lazy import lazy_exports

_EXPORTS = {
    "openreward_rl.observe.metrics": ["EpisodeStats", "EnvironmentSummary", "pass_at_k", "summarize", "flat_metrics"],
    "openreward_rl.observe.dumps": ["TrajectoryWriter", "read_records", "read_trajectories"],
    "openreward_rl.observe.conversation": ["conversation_steps"],
    "openreward_rl.observe.upload": ["TrajectoryUploader"],
    "openreward_rl.observe.wandb_logging": ["WandbLogger"],
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

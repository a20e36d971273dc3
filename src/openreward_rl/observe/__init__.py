"""What runs leave behind for people: per-environment metrics (pass@k, stop reasons), trajectory dumps,
conversations, trajectory upload to OpenReward, and WandB logging.

>>> from openreward_rl.observe import pass_at_k
>>> round(pass_at_k(4, 1, 2), 3)
0.5
"""

from __future__ import annotations

from openreward_rl._lazy import lazy_exports

_EXPORTS = {
    "EpisodeStats": "openreward_rl.observe.metrics",
    "EnvironmentSummary": "openreward_rl.observe.metrics",
    "pass_at_k": "openreward_rl.observe.metrics",
    "summarize": "openreward_rl.observe.metrics",
    "flat_metrics": "openreward_rl.observe.metrics",
    "TrajectoryWriter": "openreward_rl.observe.dumps",
    "read_records": "openreward_rl.observe.dumps",
    "read_trajectories": "openreward_rl.observe.dumps",
    "conversation_steps": "openreward_rl.observe.conversation",
    "TrajectoryUploader": "openreward_rl.observe.upload",
    "WandbLogger": "openreward_rl.observe.wandb_logging",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

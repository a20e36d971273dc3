"""The OpenReward side of an episode: which task it runs (`TaskRef`, the one task identity), the tasks of the
configured environments, one SDK session per task with faults sorted from model feedback, the pooled
transport, environment servers on 127.0.0.1, and tool output made safe for the model.

>>> from openreward_rl.env import TaskRef
>>> TaskRef("MathEnv", "test", index=3).label
'["test", 3, null]'
"""

from __future__ import annotations

from openreward_rl._lazy import lazy_exports

_EXPORTS = {
    "TaskRef": "openreward_rl.env.tasks",
    "task_hash": "openreward_rl.env.tasks",
    "list_tasks": "openreward_rl.env.tasks",
    "task_row": "openreward_rl.env.tasks",
    "task_from_metadata": "openreward_rl.env.tasks",
    "EnvSession": "openreward_rl.env.environment",
    "EnvironmentFault": "openreward_rl.env.environment",
    "ToolOutcome": "openreward_rl.env.environment",
    "ServerUnreachable": "openreward_rl.env.environment",
    "open_session": "openreward_rl.env.environment",
    "LocalEnvServer": "openreward_rl.env.local_server",
    "serve_environments": "openreward_rl.env.local_server",
    "load_environment_class": "openreward_rl.env.local_server",
    "clean_tool_text": "openreward_rl.env.tool_output",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

"""The OpenReward side of an episode: the tasks of the configured environments (each a `TaskRef`, the one
task identity, which lives in `openreward_rl.task` and is exported here too), one SDK session per task
with faults sorted from model feedback, a group of one task's episodes scored together (`score_group`),
session liveness (pings, traffic), environment servers on 127.0.0.1, and tool output made safe for the
model. The SDK's internals it needs (pooled transport, session calls, the SSE parser fix) are
`openreward_rl._compat.openreward`.

>>> from openreward_rl.env import TaskRef
>>> TaskRef("MathEnv", "test", index=3).label
'["test", 3, null]'
"""

from __future__ import annotations

from openreward_rl._lazy import lazy_exports

_EXPORTS = {
    "openreward_rl.env.tasks": ["TaskRef", "task_hash", "list_tasks", "resolve_task", "task_row", "task_from_metadata"],
    "openreward_rl.env.group_score": ["GroupScoring", "MemberScore", "score_group", "transcript"],
    "openreward_rl.env.environment": [
        "EnvSession",
        "EnvironmentFault",
        "ToolOutcome",
        "ServerUnreachable",
        "open_session",
    ],
    "openreward_rl.env.local_server": ["LocalEnvServer", "serve_environments", "load_environment_class"],
    "openreward_rl.env.tool_output": ["clean_tool_text"],
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

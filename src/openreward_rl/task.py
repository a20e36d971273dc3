"""`TaskRef`: which task of which environment an episode runs, the library's one task identity.

Every layer names a task with it: a teacher is bound to one (`engines.teacher`), a session opens one
(`env`), a `Trajectory` records one (`loop.trajectory`), reports group by its `label`. Listing tasks and
opening sessions for them is the OpenReward side's (`env.tasks`).

>>> TaskRef("MathEnv", "test", index=3).key
('MathEnv', 'test', None, 3)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["TaskRef", "task_hash"]


def task_hash(task_spec: Mapping[str, Any] | None) -> str:
    """A short stable digest of a task spec (key order does not matter).

    >>> task_hash({"q": 1, "a": 2}) == task_hash({"a": 2, "q": 1})
    True
    """
    return hashlib.sha256(json.dumps(task_spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


@attrs.frozen
class TaskRef:
    """Which task of which environment an episode runs. Holds no secrets.

    Either `index` (the server resolves the task) or `task_spec` (with the deployment fields that
    `env.tasks.list_tasks` returned) identifies the task. The deployment fields (`base_url`,
    `server_name`, `environment_name`, `namespace`) say where to run it, not which task it is: a
    trajectory records the task without them (`without_deployment`; on disk, `describe`).
    """

    environment: str
    split: str
    index: int | None = None
    task_spec: Mapping[str, Any] | None = None
    variant: str | None = None
    base_url: str | None = None
    server_name: str | None = None
    environment_name: str | None = None
    namespace: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.index is None and self.task_spec is None:
            raise ValueError(f"task of {self.environment!r} needs an index or a task_spec")

    @property
    def identity(self) -> int | str:
        """The task within its split: the index, or the task spec's hash when a spec names it."""
        return self.index if self.task_spec is None else task_hash(self.task_spec)  # type: ignore[return-value]

    @property
    def key(self) -> tuple[str, str, str | None, int | str]:
        """The task's one identity: (environment, split, variant, `identity`); equal keys, same task.

        >>> TaskRef("MathEnv", "test", index=3).key
        ('MathEnv', 'test', None, 3)
        """
        return (self.environment, self.split, self.variant, self.identity)

    @property
    def label(self) -> str:
        """The task within its environment as text: what metrics, pass@k, group scoring and the viewer group by.

        >>> TaskRef("MathEnv", "test", index=3).label
        '["test", 3, null]'
        >>> TaskRef("MathEnv", "test", task_spec={"q": 1}).label == TaskRef("MathEnv", "test", task_spec={"q": 2}).label
        False
        """
        return json.dumps([self.split, self.identity, self.variant], default=str)

    def without_deployment(self) -> TaskRef:
        """The task as a trajectory records it: all that names it, none of where it ran.

        >>> TaskRef("E", "test", index=2, base_url="http://127.0.0.1:8080").without_deployment()
        TaskRef(environment='E', split='test', index=2, task_spec=None, variant=None, base_url=None, server_name=None, environment_name=None, namespace=None)
        """
        return TaskRef(self.environment, self.split, index=self.index, task_spec=self.task_spec, variant=self.variant)

    def describe(self) -> dict[str, Any]:
        """The task as a trajectory dump records it (`Trajectory.to_dict()["task"]`): all that names it, no
        deployment details. `from_description` reads it back."""
        return {
            "environment": self.environment,
            "split": self.split,
            "index": self.index,
            "variant": self.variant,
            "task_spec": dict(self.task_spec) if self.task_spec is not None else None,
        }

    @classmethod
    def from_description(cls, task: Mapping[str, Any]) -> TaskRef | None:
        """The task a `describe()` dict (a dumped trajectory's `task`) names; None when it names none.

        >>> TaskRef.from_description({"environment": "E", "split": "test", "index": 2}).label
        '["test", 2, null]'
        >>> TaskRef.from_description({"environment": "E", "split": "test"}) is None
        True
        """
        if task.get("index") is None and task.get("task_spec") is None:
            return None
        return cls(
            environment=str(task.get("environment")),
            split=str(task.get("split")),
            index=task.get("index"),
            task_spec=task.get("task_spec"),
            variant=task.get("variant"),
        )

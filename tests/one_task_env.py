"""`OneTask`: the base of the tests' small environments that serve one split of one task."""

from __future__ import annotations

from typing import Any

from openreward.environments import Environment


class OneTask(Environment):
    """Split `SPLIT` holds one task, `TASK`."""

    SPLIT = "test"
    TASK: dict[str, Any] = {}

    @classmethod
    def list_splits(cls) -> list[str]:
        return [cls.SPLIT]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [dict(cls.TASK)]

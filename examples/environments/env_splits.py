"""`TrainTestEnvironment`: the splits and task listing the example environments share.

The examples import it as a sibling module (each puts its own folder on ``sys.path`` first), so
every one still loads by file path (``FILE.py:Class``) and runs as a script.

>>> class Counting(TrainTestEnvironment):
...     tasks_per_split = {"train": 2, "test": 1}
...     def get_prompt(self): return []
...     @classmethod
...     def task(cls, split, index): return {"id": f"{split}-{index}"}
>>> [s.name for s in Counting.list_splits()], Counting.list_tasks("train")
(['train', 'test'], [{'id': 'train-0'}, {'id': 'train-1'}])
>>> Counting.list_tasks("dev")
Traceback (most recent call last):
...
ValueError: unknown split 'dev'; Counting has ['test', 'train']
"""

from __future__ import annotations

from typing import ClassVar

from openreward.environments import Environment, Split

__all__ = ["TrainTestEnvironment"]


class TrainTestEnvironment(Environment):
    """An environment whose splits are the keys of `tasks_per_split` (train and test), with that many tasks each.

    A subclass sets `tasks_per_split` and says what task `index` of a split is in `task`.
    """

    tasks_per_split: ClassVar[dict[str, int]]

    @classmethod
    def list_splits(cls) -> list[Split]:
        return [Split(name=name, type=name) for name in cls.tasks_per_split]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        if split not in cls.tasks_per_split:
            raise ValueError(f"unknown split {split!r}; {cls.__name__} has {sorted(cls.tasks_per_split)}")
        return [cls.task(split, index) for index in range(cls.tasks_per_split[split])]

    @classmethod
    def task(cls, split: str, index: int) -> dict:
        """The spec of task `index` of `split` (deterministic)."""
        raise NotImplementedError

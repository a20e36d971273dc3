"""CombinationLock: open a lock digit by digit, with a progress reward for every right digit.

Each task is a lock of `length` digits (0-9). The model calls `try_digit(digit)` for the next position:
a right digit earns `PROGRESS_REWARD` and moves on; the digit that opens the lock earns `OPEN_REWARD`
and finishes the episode; a wrong digit earns 0.0 and tells whether the right one is higher or lower.
Rewards arrive per turn, so a turn's return (reward-to-go) says which turns made progress: the
environment for the `turn` advantage estimator (docs/training.md, "Credit").

Run a server: ``python examples/environments/combination_lock.py 8080``.

>>> combination(7, 4)
[5, 2, 6, 0]
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from openreward.environments import Server, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_splits import TrainTestEnvironment  # noqa: E402

__all__ = ["CombinationLock", "combination", "PROGRESS_REWARD", "OPEN_REWARD", "TASKS_PER_SPLIT"]

PROGRESS_REWARD = 0.1
OPEN_REWARD = 1.0
TASKS_PER_SPLIT = {"train": 32, "test": 8}


def combination(seed: int, length: int) -> list[int]:
    """The lock's digits: fixed by the task's seed."""
    rng = random.Random(seed)
    return [rng.randrange(10) for _ in range(length)]


class DigitArgs(BaseModel):
    digit: int = Field(ge=0, le=9, description="The digit to try at the current position.")


class CombinationLock(TrainTestEnvironment):
    """A lock opened digit by digit: 0.1 per right digit, 1.0 when it opens."""

    tasks_per_split = TASKS_PER_SPLIT

    def __init__(self, task_spec: dict, secrets: dict | None = None) -> None:
        super().__init__(task_spec, secrets=secrets or {})
        self.digits = combination(int(task_spec["seed"]), int(task_spec["length"]))
        self.position = 0

    @classmethod
    def task(cls, split: str, index: int) -> dict:
        offset = 0 if split == "train" else 10_000
        return {"id": f"lock-{split}-{index}", "seed": offset + index, "length": 2 + index % 3}

    def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(
                text=f"Open a lock of {len(self.digits)} digits. Call try_digit with one digit (0-9) at a time, from the first position."
            )
        ]

    @tool
    def try_digit(self, args: DigitArgs) -> ToolOutput:
        """Try a digit at the lock's current position."""
        right = self.digits[self.position]
        if args.digit != right:
            hint = "higher" if right > args.digit else "lower"
            return ToolOutput(
                blocks=[TextBlock(text=f"wrong: the digit at position {self.position + 1} is {hint}")], reward=0.0
            )
        self.position += 1
        if self.position == len(self.digits):
            return ToolOutput(blocks=[TextBlock(text="the lock opens")], reward=OPEN_REWARD, finished=True)
        return ToolOutput(
            blocks=[TextBlock(text=f"right: position {self.position + 1} of {len(self.digits)} next")],
            reward=PROGRESS_REWARD,
        )


if __name__ == "__main__":
    Server([CombinationLock]).run(host="127.0.0.1", port=int(sys.argv[1]))

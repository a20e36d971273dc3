"""PaintRoom: paint three walls, one reply per wall, each reply graded on its own.

Each task names three colours. The model's reply in each turn goes to `paint` (a one-argument tool:
`examples/reply_as_call.py` lets a model too small to write tool calls use it) and is graded like
PaintColour's (1.0 for exactly the colour, 0.5 + 0.5 x (colour letters / reply letters) when the colour
is among other words, 0.0 without it); the tool's reply names the next wall's colour; the third wall
finishes the episode. A reply cut off by the token limit ends the episode there, so the walls after it
earn nothing.

Rewards arrive per turn and each turn's reward depends on that turn alone: the environment where the
`turn` advantage estimator (each turn credited with its own return) should beat the `episode` one (every
turn credited with the sum), the learning-curve comparison in docs/training.md.

Run a server: ``python examples/environments/paint_room.py 8080``.

>>> room_colours("test", 0), len(PaintRoom.list_tasks("train"))
(('orange', 'purple', 'green'), 48)
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from openreward.environments import Server, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_splits import TrainTestEnvironment  # noqa: E402
from paint import COLOURS, grade  # noqa: E402

__all__ = ["PaintRoom", "WALLS", "TASKS_PER_SPLIT", "constant_baseline", "room_colours"]

WALLS = 3
TASKS_PER_SPLIT = {"train": 48, "test": 20}


def room_colours(split: str, index: int) -> tuple[str, ...]:
    """The colours of task `index` of `split`, wall by wall (deterministic)."""
    rng = random.Random(f"paint-room/{split}/{index}")
    return tuple(rng.choice(COLOURS) for _ in range(WALLS))


def constant_baseline(split: str) -> tuple[str, float]:
    """The best constant reply for `split` and its mean episode reward (chosen knowing the answers).

    >>> constant_baseline("test")
    ('purple', 0.6)
    """
    rooms = [room_colours(split, i) for i in range(TASKS_PER_SPLIT[split])]
    best = max(COLOURS, key=lambda c: (sum(grade(w, c) for room in rooms for w in room), c))
    return best, sum(grade(w, best) for room in rooms for w in room) / len(rooms)


class WallArgs(BaseModel):
    colour: str = Field(description="The colour for this wall.")


class PaintRoom(TrainTestEnvironment):
    """Name each wall's colour, one wall per reply."""

    tasks_per_split = TASKS_PER_SPLIT

    def __init__(self, task_spec: dict, secrets: dict | None = None) -> None:
        super().__init__(task_spec, secrets=secrets or {})
        self.wall = 0

    @classmethod
    def task(cls, split: str, index: int) -> dict:
        return {"id": f"{split}-{index:03d}", "colours": list(room_colours(split, index))}

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Paint the wall {self.task_spec['colours'][0]}.")]

    @tool
    def paint(self, args: WallArgs) -> ToolOutput:
        """Paint the current wall: 1.0 for exactly its colour, less for more words, 0.0 without it."""
        colours = self.task_spec["colours"]
        reward = grade(colours[self.wall], args.colour)
        self.wall += 1
        if self.wall == len(colours):
            return ToolOutput(blocks=[TextBlock(text="Done.")], reward=reward, finished=True)
        return ToolOutput(blocks=[TextBlock(text=f"Paint the next wall {colours[self.wall]}.")], reward=reward)


if __name__ == "__main__":
    Server([PaintRoom]).run(host="127.0.0.1", port=int(sys.argv[1]))

"""Corridor: a long walk with bulky observations, for long-horizon episodes and context compaction.

The agent stands at the start of a corridor of `length` rooms. `walk` enters the next room and
returns its description: a few hundred words of filler around one line that matters. The first
room's description holds the exit key; at the last room, `leave(key)` with that key finishes the
episode with reward 1.0 (a wrong key, or leaving early, finishes with 0.0).

Every observation stays in the context, so a long enough corridor overflows any context budget
unless old observations are cleared or summarised (`context_policy` in the config); the key must
survive that, in a summary or in the model's own words.

Run a server: ``python examples/environments/corridor.py 8080``.

>>> key_of("corridor-3")
'jade-4307'
>>> "jade-4307" in room_text({"id": "corridor-3", "length": 4, "bulk": 5}, 0)
True
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from openreward.environments import Server, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_splits import TrainTestEnvironment  # noqa: E402

__all__ = ["Corridor", "TASKS_PER_SPLIT", "key_of", "room_text"]

TASKS_PER_SPLIT = {"train": 8, "test": 2}
_COLOURS = ("amber", "cobalt", "crimson", "jade", "ochre", "slate", "umber", "violet")
_FILLER = (
    "The walls are lined with faded tapestries of ships and harbours; dust drifts in the lamplight, "
    "and the floorboards creak under old rugs whose patterns have long since worn away."
)


def key_of(task_id: str) -> str:
    digest = int(hashlib.sha256(task_id.encode()).hexdigest(), 16)
    return f"{_COLOURS[digest % len(_COLOURS)]}-{digest % 9000 + 1000}"


def room_text(spec: dict, room: int) -> str:
    """Room `room`'s description: `bulk` sentences of filler around what the agent needs."""
    length = spec["length"]
    lines = [f"Room {room + 1} of {length}."]
    lines += [_FILLER] * spec["bulk"]
    if room == 0:
        lines.append(
            f"Carved above the door: THE EXIT KEY IS {key_of(spec['id'])}. Remember it; you will not see it again."
        )
    if room == length - 1:
        lines.append("This is the last room. The exit door has a keyhole: call leave with the key.")
    else:
        lines.append("A doorway leads further along the corridor.")
    return "\n".join(lines)


class LeaveArgs(BaseModel):
    key: str = Field(description="The exit key carved above the first room's door.")


class Corridor(TrainTestEnvironment):
    """Walk to the end of a corridor and leave with the key from the first room."""

    tasks_per_split = TASKS_PER_SPLIT

    def __init__(self, task_spec: dict, secrets: dict | None = None) -> None:
        super().__init__(task_spec, secrets or {})
        self.room = -1  # outside the corridor until the first walk

    @classmethod
    def task(cls, split: str, index: int) -> dict:
        return {"id": f"corridor-{split}-{index}", "length": 6 + index % 3, "bulk": 12}

    def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(
                text=f"You are at the entrance of a corridor of {self.task_spec['length']} rooms. Call walk to enter "
                "each room in turn; at the last room call leave with the exit key carved in the first room."
            )
        ]

    @tool
    def walk(self) -> ToolOutput:
        """Enter the next room and read its description."""
        if self.room + 1 >= self.task_spec["length"]:
            return ToolOutput(
                blocks=[TextBlock(text="There is no further room: this is the last one. Call leave with the key.")]
            )
        self.room += 1
        return ToolOutput(blocks=[TextBlock(text=room_text(self.task_spec, self.room))])

    @tool
    def leave(self, args: LeaveArgs) -> ToolOutput:
        """Try the exit door with a key; ends the episode."""
        at_end = self.room == self.task_spec["length"] - 1
        correct = at_end and args.key.strip() == key_of(self.task_spec["id"])
        text = (
            "The door opens: you are out."
            if correct
            else "The door stays shut."
            if at_end
            else "There is no door here yet."
        )
        return ToolOutput(blocks=[TextBlock(text=text)], reward=1.0 if correct else 0.0, finished=True)


if __name__ == "__main__":
    Server([Corridor]).run(host="127.0.0.1", port=int(sys.argv[1]))

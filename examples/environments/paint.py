"""PaintColour: name the colour the task asks for, in as few words as possible.

Each task says "Paint the wall <colour>."; the model's first plain reply (no tool call) goes to the
``@terminal`` tool ``paint`` and is graded on its own:

| reply                                                        | reward |
|--------------------------------------------------------------|--------|
| exactly the colour (case and punctuation ignored)             | 1.0 |
| the colour as a word among others                             | 0.5 + 0.5 * (colour letters / reply letters) |
| no such word                                                  | 0.0 |
| none: the reply hit the token limit before it ended           | no reward (trained as 0.0) |

So the reward rewards naming the right colour and saying nothing else. SmolLM2-135M-Instruct
names it in about a third of its replies, usually inside a sentence ("Paint the wall red."), and
runs past a short token limit in about half: a spread GRPO can climb within minutes on a CPU. This
is the quickstart's training environment. A constant reply scores the share of tasks with that
colour (at most 0.2 on the test split: always "yellow"); `constant_baseline` computes it.

Run a server: ``python examples/environments/paint.py 8080``.

>>> grade("teal", "teal"), grade("teal", "Teal."), grade("teal", "Paint it teal"), grade("teal", "red")
(1.0, 1.0, 0.6818, 0.0)
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

from openreward.environments import Server, TextBlock, ToolOutput, terminal, tool
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_splits import TrainTestEnvironment  # noqa: E402

__all__ = ["COLOURS", "PaintColour", "TASKS_PER_SPLIT", "constant_baseline", "grade", "task_colours"]

TASKS_PER_SPLIT = {"train": 48, "test": 20}
COLOURS = ("red", "blue", "green", "yellow", "purple", "orange", "pink", "brown", "black", "white", "grey", "teal")


def _letters(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


def grade(colour: str, reply: str) -> float:
    """The reward of `reply` for a task asking for `colour` (see the table above)."""
    wanted, given = _letters(colour), _letters(reply)
    if given == wanted:
        return 1.0
    if re.search(rf"\b{re.escape(colour.lower())}\b", reply.lower()):
        return round(0.5 + 0.5 * len(wanted) / max(len(given), 1), 4)
    return 0.0


def task_colours(split: str) -> list[str]:
    """The colour of each task of `split`, in task order (deterministic)."""
    rng = random.Random(f"paint/{split}")
    return [rng.choice(COLOURS) for _ in range(TASKS_PER_SPLIT[split])]


def constant_baseline(split: str) -> tuple[str, float]:
    """The best constant reply for `split` and its mean reward (chosen knowing the answers).

    >>> constant_baseline("test")
    ('yellow', 0.2)
    """
    colours = task_colours(split)
    best = max(COLOURS, key=lambda c: (sum(grade(t, c) for t in colours), c))
    return best, sum(grade(t, best) for t in colours) / len(colours)


class PaintArgs(BaseModel):
    answer: str = Field(description="Your reply: the colour.")


class PaintColour(TrainTestEnvironment):
    """Say the colour the task names, and nothing else."""

    tasks_per_split = TASKS_PER_SPLIT

    @classmethod
    def task(cls, split: str, index: int) -> dict:
        return {"id": f"{split}-{index:03d}", "colour": task_colours(split)[index]}

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Paint the wall {self.task_spec['colour']}.")]

    @terminal
    @tool
    def paint(self, args: PaintArgs) -> ToolOutput:
        """Grade the reply: 1.0 for exactly the colour, less for more words, 0.0 without it."""
        reward = grade(self.task_spec["colour"], args.answer)
        return ToolOutput(
            blocks=[TextBlock(text=f"The task asked for {self.task_spec['colour']}; reward {reward:.2f}.")],
            metadata={"reward": reward},
            reward=reward,
            finished=True,
        )


if __name__ == "__main__":
    Server([PaintColour]).run(host="127.0.0.1", port=int(sys.argv[1]))

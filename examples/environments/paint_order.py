"""PaintOrder: look an order up with a tool, then paint the wall the colour it names.

Each task says "Order 42 says which colour to paint the wall. Read the order, then paint the wall.";
the colour is only in the order book, so a model must call ``read_order`` with the task's number,
read the reply ("Order 42: paint the wall teal.") and then answer with the colour: the plain reply
goes to the ``@terminal`` tool ``paint`` (the SDK lists terminal tools apart, so the model is shown
``read_order`` alone). Every other order number names another colour, so a call with the wrong
number misleads.

| step                                                 | reward |
|------------------------------------------------------|--------|
| ``read_order`` with the task's number (first time)   | 0.2 |
| ``read_order`` with another number, or again         | 0.0 |
| the answer: exactly the colour (case, punctuation ignored) | 1.0 |
| the answer: the colour as a word among others       | 0.5 + 0.5 * (colour letters / reply letters) |
| the answer: no such word                            | 0.0 |

With the default `sum` reduction an episode scores at most 1.2 (read, then answer exactly).
Answering without reading is a guess among 12 colours; the best constant reply scores 0.15 on the test split
(`constant_baseline`). SmolLM2-135M-Instruct, shown the tools in the Hermes format with one worked
call (config ``tool_call_example: true``), calls ``read_order`` in about half its first turns: a
spread GRPO can climb. This is the quickstart's training environment.

Run a server: ``python examples/environments/paint_order.py 8080``.

>>> book = order_book("test", 0); task = PaintOrder.task("test", 0)
>>> book[task["order"]] == task["colour"], len(set(book.values())) > 1
(True, True)
>>> constant_baseline("test")
('white', 0.15)
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from openreward.environments import Server, TextBlock, ToolOutput, terminal, tool
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_splits import TrainTestEnvironment  # noqa: E402
from paint import COLOURS, grade  # noqa: E402

__all__ = ["PaintOrder", "READ_REWARD", "TASKS_PER_SPLIT", "constant_baseline", "order_book"]

TASKS_PER_SPLIT = {"train": 64, "test": 20}
READ_REWARD = 0.2
ORDERS = range(10, 100)


def order_book(split: str, index: int) -> dict[int, str]:
    """Every order number's colour for task `index` of `split` (deterministic; the task's order is one of them)."""
    rng = random.Random(f"paint-order/{split}/{index}")
    return {order: rng.choice(COLOURS) for order in ORDERS}


def constant_baseline(split: str) -> tuple[str, float]:
    """The best constant paint reply for `split`, without reading, and its mean reward (chosen knowing the answers)."""
    colours = [PaintOrder.task(split, i)["colour"] for i in range(TASKS_PER_SPLIT[split])]
    best = max(COLOURS, key=lambda c: (sum(grade(t, c) for t in colours), c))
    return best, round(sum(grade(t, best) for t in colours) / len(colours), 4)


class ReadOrderArgs(BaseModel):
    order: int = Field(description="The order number.")


class PaintArgs(BaseModel):
    colour: str = Field(description="The colour to paint the wall.")


class PaintOrder(TrainTestEnvironment):
    """Read the task's order with `read_order`, then `paint` the colour it names."""

    tasks_per_split = TASKS_PER_SPLIT

    def __init__(self, task_spec: dict, secrets: dict | None = None) -> None:
        super().__init__(task_spec, secrets=secrets or {})
        self.read = False

    @classmethod
    def task(cls, split: str, index: int) -> dict:
        order = random.Random(f"paint-order/{split}/{index}/order").choice(ORDERS)
        return {"id": f"{split}-{index:03d}", "order": order, "colour": order_book(split, index)[order]}

    def get_prompt(self) -> list[TextBlock]:
        order = self.task_spec["order"]
        return [
            TextBlock(text=f"Order {order} says which colour to paint the wall. Read the order, then paint the wall.")
        ]

    @tool
    def read_order(self, args: ReadOrderArgs) -> ToolOutput:
        """Read an order from the order book: it names the colour to paint."""
        split, index = self.task_spec["id"].split("-")
        colour = order_book(split, int(index)).get(args.order)
        if colour is None:
            return ToolOutput(
                blocks=[TextBlock(text=f"There is no order {args.order}; orders run from 10 to 99.")],
                reward=0.0,
                finished=False,
            )
        first_right = args.order == self.task_spec["order"] and not self.read
        self.read = self.read or first_right
        return ToolOutput(
            blocks=[TextBlock(text=f"Order {args.order}: paint the wall {colour}.")],
            reward=READ_REWARD if first_right else 0.0,
            finished=False,
        )

    @terminal
    @tool
    def paint(self, args: PaintArgs) -> ToolOutput:
        """Paint the wall: 1.0 for exactly the ordered colour, less for more words, 0.0 without it."""
        reward = grade(self.task_spec["colour"], args.colour)
        return ToolOutput(
            blocks=[
                TextBlock(
                    text=f"Order {self.task_spec['order']} asked for {self.task_spec['colour']}; reward {reward:.2f}."
                )
            ],
            metadata={"read_order": self.read},
            reward=reward,
            finished=True,
        )


if __name__ == "__main__":
    Server([PaintOrder]).run(host="127.0.0.1", port=int(sys.argv[1]))

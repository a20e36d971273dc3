"""ClosestGuess and GradedGuess: estimate a product without tools, scored by how close the estimate is.

The only tool is the ``@terminal`` ``answer``: the first assistant message without a tool call is
the estimate (its last number). Pointwise, an estimate within 1% of the product earns 1.0, else
0.0. Compared within a group, ``score_group`` ranks the candidates by relative error: each one
earns the share of the *other* candidates it beats (a tie counts half), so the closest estimate
of a group gets 1.0 and the farthest 0.0 however rough they all are. A candidate without a number
loses to every candidate with one; a candidate without an assistant message fails the request. The same estimate therefore scores differently in different
groups, which is what makes this a group reward.

``GradedGuess`` asks easier questions (a two-digit number times a one-digit one) and grades each
estimate on its own by closeness (`closeness`): 1.0 when exact, falling linearly in
``|log(estimate / product)|`` to 0.0 at a factor of 1.25 off (5% off earns about 0.78, 10% off
about 0.55; 25% or more off, or no positive number, 0.0). So a reward above 0 means the estimate
was within 25% of the product. This is the quickstart's environment: SmolLM2-135M sometimes gets
one right or close.

Run a server: ``python examples/environments/closest_guess.py 8080`` (both classes).

>>> rank_rewards([Fraction(90), Fraction(100), None], target=100)
[0.5, 1.0, 0.0]
>>> rank_rewards([Fraction(7), Fraction(7)], target=100)
[0.5, 0.5]
>>> relative_error(Fraction(99), 100)
Fraction(1, 100)
>>> estimate_in("I'd say about 12,500.") == Fraction(12500)
True
>>> [round(closeness(Fraction(e), 1000), 2) for e in (1000, 1050, 1100, 900, 1250, 10)], closeness(None, 1000)
([1.0, 0.78, 0.57, 0.53, 0.0, 0.0], 0.0)
"""

from __future__ import annotations

import math
import random
import re
import sys
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

from openreward.environments import GroupCandidate, GroupScore, Server, TextBlock, ToolOutput, terminal, tool
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_splits import TrainTestEnvironment  # noqa: E402

__all__ = [
    "ClosestGuess",
    "GradedGuess",
    "TASKS_PER_SPLIT",
    "closeness",
    "estimate_in",
    "make_question",
    "rank_rewards",
    "relative_error",
]

TASKS_PER_SPLIT = {"train": 20, "test": 5}
TOLERANCE = Fraction(1, 100)

# a minus sign right after a word character or digit is subtraction, not a sign
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def estimate_in(text: str) -> Fraction | None:
    """The last number written in `text` (thousands separators allowed), exactly; None if there is none."""
    matches = _NUMBER.findall(text)
    return Fraction(matches[-1].replace(",", "")) if matches else None


def relative_error(estimate: Fraction, target: int) -> Fraction:
    """|estimate - target| / |target| (targets are never zero)."""
    return abs(estimate - target) / abs(target)


CLOSE_FACTOR = 1.25  # GradedGuess: an estimate this many times off (either way) earns 0


def closeness(estimate: Fraction | None, target: int) -> float:
    """1 - |log(estimate / target)| / log(1.25), floored at 0; 0.0 without a positive estimate."""
    if estimate is None or estimate <= 0:
        return 0.0
    return max(0.0, 1.0 - abs(math.log(estimate / target)) / math.log(CLOSE_FACTOR))


def rank_rewards(estimates: Sequence[Fraction | None], target: int = 100) -> list[float]:
    """Each estimate's share of the other estimates it beats on closeness to `target`; ties count half.

    None (no number) is worse than any estimate. A lone candidate earns 1.0 if it has a number.
    """
    errors = [None if e is None else relative_error(e, target) for e in estimates]
    if len(errors) == 1:
        return [0.0 if errors[0] is None else 1.0]

    def beats(mine: Fraction | None, theirs: Fraction | None) -> float:
        if mine is None:
            return 0.5 if theirs is None else 0.0
        if theirs is None:
            return 1.0
        return 1.0 if mine < theirs else 0.5 if mine == theirs else 0.0

    return [
        sum(beats(mine, theirs) for j, theirs in enumerate(errors) if j != i) / (len(errors) - 1)
        for i, mine in enumerate(errors)
    ]


def make_question(seed: str, *, small: bool = False) -> tuple[str, int]:
    """A (question, product) pair; equal seeds give equal questions. `small`: two digits times one."""
    rng = random.Random(seed)
    a, b = (rng.randint(12, 99), rng.randint(3, 9)) if small else (rng.randint(101, 9999), rng.randint(11, 999))
    return f"Estimate {a} * {b} in your head (no tools).", a * b


def _final_assistant_text(candidate: GroupCandidate) -> str:
    for message in reversed(candidate.messages):
        if message.role == "assistant":
            return "".join(block.text for block in message.blocks if isinstance(block, TextBlock))
    # nothing to judge: a malformed request, refused rather than scored as a zero
    raise ValueError("a score_group candidate has no assistant message")


class AnswerArgs(BaseModel):
    answer: str = Field(description="Your final message; its last number is taken as the estimate.")


class ClosestGuess(TrainTestEnvironment):
    """Mental estimation of a product; `score_group` ranks a group's estimates by closeness."""

    seed_prefix = "closest"  # task i of a split is make_question(f"{seed_prefix}/{split}/{i}")
    small_questions = False
    tasks_per_split = TASKS_PER_SPLIT

    @classmethod
    def task(cls, split: str, index: int) -> dict:
        question, target = make_question(f"{cls.seed_prefix}/{split}/{index}", small=cls.small_questions)
        return {"id": f"{split}-{index:03d}", "question": question, "answer": str(target)}

    def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(text=f"{self.task_spec['question']}\nReply with one short message that ends with your estimate.")
        ]

    @terminal
    @tool
    def answer(self, args: AnswerArgs) -> ToolOutput:
        """Grade the estimate on its own: 1.0 within 1% of the product."""
        target = int(self.task_spec["answer"])
        estimate = estimate_in(args.answer)
        close = estimate is not None and relative_error(estimate, target) <= TOLERANCE
        return ToolOutput(
            blocks=[TextBlock(text="Close enough." if close else "Not within 1%.")],
            metadata={"estimate": None if estimate is None else str(estimate)},
            reward=1.0 if close else 0.0,
            finished=True,
        )

    async def score_group(self, candidates: Sequence[GroupCandidate]) -> list[GroupScore]:
        """Rank the candidates' final answers against each other (index-aligned)."""
        target = int(self.task_spec["answer"])
        estimates = [estimate_in(_final_assistant_text(c)) for c in candidates]
        rewards = rank_rewards(estimates, target)
        return [
            GroupScore(
                reward=reward,
                metadata={
                    "estimate": None if estimate is None else str(estimate),
                    "relative_error": None if estimate is None else float(relative_error(estimate, target)),
                },
            )
            for estimate, reward in zip(estimates, rewards)
        ]


class GradedGuess(ClosestGuess):
    """Easier products than ClosestGuess's, each estimate graded on its own by `closeness` (no group needed)."""

    seed_prefix = "graded"
    small_questions = True

    @terminal
    @tool
    def answer(self, args: AnswerArgs) -> ToolOutput:
        """Grade the estimate by closeness: 1.0 exact, 0.0 when 25% or more off."""
        target = int(self.task_spec["answer"])
        estimate = estimate_in(args.answer)
        reward = closeness(estimate, target)
        seen = "no number" if estimate is None else f"{float(estimate):,.6g}"
        return ToolOutput(
            blocks=[TextBlock(text=f"Estimate {seen}; the product is {target:,}; closeness {reward:.2f}.")],
            metadata={"estimate": None if estimate is None else str(estimate), "closeness": reward},
            reward=reward,
            finished=True,
        )


if __name__ == "__main__":
    Server([ClosestGuess, GradedGuess]).run(host="127.0.0.1", port=int(sys.argv[1]))

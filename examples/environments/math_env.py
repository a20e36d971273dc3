"""MathEnv: deterministic arithmetic word problems answered by the assistant's final plain message.

The only tool the model sees is ``calculator``. The answer goes through the ``@terminal`` tool
``answer``: the harness sees ``is_assistant_message_final() is True`` and passes the text of the
first assistant message without a tool call to ``call_terminal_tool``. The last number in that
text is compared with the target: reward 1.0 if equal, else 0.0, and the episode finishes.

Run a server: ``python examples/environments/math_env.py 8080``.

>>> evaluate_expression("2 * (3 + 4) - 10 / 4")
Fraction(23, 2)
>>> last_number("So the baker has 1,234.50 rolls left.")
Fraction(2469, 2)
>>> last_number("no digits here") is None
True
"""

from __future__ import annotations

import ast
import operator
import random
import re
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

from openreward.environments import Server, TextBlock, ToolOutput, terminal, tool
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_splits import TrainTestEnvironment  # noqa: E402

__all__ = ["MathEnv", "evaluate_expression", "last_number", "make_problem", "CalculatorError", "TASKS_PER_SPLIT"]

TASKS_PER_SPLIT = {"train": 50, "test": 10}
MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 10**30


class CalculatorError(ValueError):
    """The expression is not plain arithmetic, or its value is undefined or too large."""


_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: operator.mod,
}
_UNARY: dict[type[ast.unaryop], Callable[[Fraction], Fraction]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def evaluate_expression(expression: str) -> Fraction:
    """Evaluate + - * / // % ** and parentheses over numbers exactly, without `eval`."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip().replace("^", "**").replace(",", ""), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression: {exc.msg}") from None
    return _evaluate(tree.body)


def _evaluate(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base, exponent = _evaluate(node.left), _evaluate(node.right)
        if exponent.denominator != 1 or abs(exponent) > MAX_EXPONENT:
            raise CalculatorError(f"exponents must be integers of at most {MAX_EXPONENT}")
        if base == 0 and exponent < 0:
            raise CalculatorError("division by zero")
        return _bounded(base ** int(exponent))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if right == 0 and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            raise CalculatorError("division by zero")
        return _bounded(_BINARY[type(node.op)](left, right))
    raise CalculatorError(f"unsupported syntax: {ast.unparse(node)!r}")


def _bounded(value: Fraction) -> Fraction:
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError("result too large")
    return value


def format_number(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    decimal = f"{float(value):.10g}"
    return f"{value.numerator}/{value.denominator} (about {decimal})"


# a minus sign right after a word character or digit is subtraction ("10-3"), not a sign
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def last_number(text: str) -> Fraction | None:
    """The last number written in `text` (thousands separators allowed), exactly; None if there is none."""
    matches = _NUMBER.findall(text)
    if not matches:
        return None
    return Fraction(matches[-1].replace(",", ""))


def _bakery(r: random.Random) -> tuple[str, int]:
    trays, per = r.randint(3, 19), r.randint(6, 24)
    sold = r.randint(1, trays * per - 1)
    return (
        f"A baker fills {trays} trays with {per} rolls each and sells {sold} rolls. How many rolls are left?",
        trays * per - sold,
    )


def _change(r: random.Random) -> tuple[str, int]:
    price, qty = r.randint(2, 15), r.randint(2, 9)
    question = f"Notebooks cost {price} coins each. Mia buys {qty} notebooks and pays with 200 coins. How much change does she get?"
    return question, 200 - price * qty


def _train(r: random.Random) -> tuple[str, int]:
    speed, hours, extra = r.randint(40, 160), r.randint(2, 7), r.randint(5, 99)
    question = f"A train travels at {speed} km per hour for {hours} hours, then another {extra} km. How many kilometres does it travel in total?"
    return question, speed * hours + extra


def _marbles(r: random.Random) -> tuple[str, int]:
    boxes, per, friends = r.randint(2, 12), r.randint(3, 15), r.randint(2, 8)
    question = f"There are {boxes} boxes with {per * friends} marbles each, shared equally among {friends} friends. How many marbles does each friend get?"
    return question, boxes * per


def _arithmetic(r: random.Random) -> tuple[str, int]:
    a, b, c = r.randint(12, 999), r.randint(12, 999), r.randint(1, 9999)
    return f"What is {a} * {b} - {c}?", a * b - c


_PROBLEMS = (_bakery, _change, _train, _marbles, _arithmetic)


def make_problem(seed: str) -> tuple[str, int]:
    """A (question, integer answer) pair; equal seeds give equal problems."""
    rng = random.Random(seed)
    return rng.choice(_PROBLEMS)(rng)


class CalculatorArgs(BaseModel):
    expression: str = Field(description="Arithmetic with + - * / // % ** and parentheses, e.g. '(17 * 12) - 45'.")


class AnswerArgs(BaseModel):
    answer: str = Field(description="Your final message; its last number is taken as the answer.")


class MathEnv(TrainTestEnvironment):
    """Arithmetic word problems with a calculator; the final plain assistant message is the answer."""

    tasks_per_split = TASKS_PER_SPLIT

    @classmethod
    def task(cls, split: str, index: int) -> dict:
        question, target = make_problem(f"math/{split}/{index}")
        return {"id": f"{split}-{index:03d}", "question": question, "answer": str(target)}

    def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(
                text=(
                    f"{self.task_spec['question']}\n"
                    "You may use the calculator tool. When done, reply with a short message (no tool call) "
                    "that ends with the final number."
                )
            )
        ]

    @tool
    def calculator(self, args: CalculatorArgs) -> ToolOutput:
        """Evaluate an arithmetic expression exactly."""
        try:
            value = evaluate_expression(args.expression)
        except CalculatorError as exc:
            return ToolOutput(blocks=[TextBlock(text=f"Error: {exc}")], metadata={"error": str(exc)})
        return ToolOutput(blocks=[TextBlock(text=format_number(value))])

    @terminal
    @tool
    def answer(self, args: AnswerArgs) -> ToolOutput:
        """Grade the final answer."""
        target = Fraction(self.task_spec["answer"])
        given = last_number(args.answer)
        correct = given == target
        if given is None:
            verdict = "No number found in the answer."
        else:
            verdict = "Correct." if correct else f"Incorrect: {format_number(given)} is not the answer."
        return ToolOutput(
            blocks=[TextBlock(text=verdict)],
            metadata={"target": self.task_spec["answer"], "given": None if given is None else str(given)},
            reward=1.0 if correct else 0.0,
            finished=True,
        )


if __name__ == "__main__":
    Server([MathEnv]).run(host="127.0.0.1", port=int(sys.argv[1]))

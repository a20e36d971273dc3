"""LongRead: a test environment for long horizons: `pages` reads of about 2,000 tokens each (Qwen3's
tokenizer), 120k tokens in all at the default 60, far past a 32k context window.

Each `read` returns the next page: a number to add up inside a page of filler. `answer(total)` with the
sum of every page's number finishes the episode with reward 1.0 (a wrong sum, or answering before the
last page, 0.0). Only an agent that carries its running total across context boundaries (in its own
words, or in a summary) can finish. The `train` split has two such tasks; the `oversized` split has one
whose prompt opens with a preface of `PREFACE_SENTENCES` filler sentences (about 29k tokens): the prompt
fits a 32k window, but no compaction can make room for more than one page beside it.

>>> number_of("long-0", 3) == number_of("long-0", 3) and 10 <= number_of("long-0", 3) < 100
True
"""

from __future__ import annotations

import hashlib

from openreward.environments import Environment, Split, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

PAGES = 60
FILLER_SENTENCES = 47  # about 2,000 tokens a page
PREFACE_SENTENCES = 690
_FILLER = (
    "The archive's shelves run on past the lamplight, ledgers bound in cracked leather and stacked two deep, "
    "their spines stamped with the years of harvests, tolls and weddings nobody alive remembers."
)


def number_of(task_id: str, page: int) -> int:
    digest = hashlib.sha256(f"{task_id}/{page}".encode()).hexdigest()
    return 10 + int(digest, 16) % 90


def page_text(task_id: str, page: int, pages: int) -> str:
    lines = [f"Page {page} of {pages}."] + [_FILLER] * (FILLER_SENTENCES // 2)
    lines.append(f"The number on page {page} is {number_of(task_id, page)}.")
    lines += [_FILLER] * (FILLER_SENTENCES - FILLER_SENTENCES // 2)
    lines.append(
        "That was the last page: call answer with the total." if page == pages else "Call read for the next page."
    )
    return "\n".join(lines)


class AnswerArgs(BaseModel):
    total: int = Field(description="The sum of the numbers on every page.")


class LongRead(Environment):
    """Read every page of a ledger and answer with the sum of the numbers on them."""

    def __init__(self, task_spec: dict, secrets: dict | None = None) -> None:
        super().__init__(task_spec, secrets or {})
        self.page = 0

    @classmethod
    def list_splits(cls) -> list[Split]:
        return [Split(name="train", type="train"), Split(name="oversized", type="test")]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        if split == "oversized":
            return [{"id": "long-preface", "pages": PAGES, "preface": PREFACE_SENTENCES}]
        return [{"id": f"long-{i}", "pages": PAGES} for i in range(2)]

    def get_prompt(self) -> list[TextBlock]:
        preface = "\n".join([_FILLER] * self.task_spec.get("preface", 0))
        task = (
            f"A ledger has {self.task_spec['pages']} pages, each with one number. Call read to read the next page; "
            "when you have read them all, call answer with the sum of the numbers."
        )
        return [TextBlock(text=f"{preface}\n\n{task}" if preface else task)]

    @tool
    def read(self) -> ToolOutput:
        """Read the next page."""
        if self.page >= self.task_spec["pages"]:
            return ToolOutput(blocks=[TextBlock(text="There are no more pages. Call answer with the total.")])
        self.page += 1
        return ToolOutput(blocks=[TextBlock(text=page_text(self.task_spec["id"], self.page, self.task_spec["pages"]))])

    @tool
    def answer(self, args: AnswerArgs) -> ToolOutput:
        """Give the sum of the numbers on every page; ends the episode."""
        expected = sum(number_of(self.task_spec["id"], p) for p in range(1, self.task_spec["pages"] + 1))
        correct = self.page == self.task_spec["pages"] and args.total == expected
        return ToolOutput(
            blocks=[TextBlock(text="Correct." if correct else "Wrong.")], reward=1.0 if correct else 0.0, finished=True
        )

"""Faulty: an environment whose tools misbehave on purpose, for fault-injection tests.

| tool            | behaviour                                                                  |
|-----------------|----------------------------------------------------------------------------|
| `explode`       | raises RuntimeError: the client gets ToolFailed, then the session is dead   |
| `wrong_return`  | returns a dict instead of a ToolOutput: also ToolFailed                    |
| `hang`          | sleeps `seconds` (default an hour) before answering; concurrent            |
| `flood`         | returns `megabytes` MiB of text                                            |
| `garble`        | returns control characters, ANSI escapes, NUL, BOM, bidi overrides, emoji  |
| `unencodable`   | returns a lone UTF-16 surrogate, which the server cannot encode as UTF-8   |
| `submit`        | normal: reward 1.0 if `answer` equals the task's `expected`, else 0.0      |

Run a server: ``python examples/environments/faulty.py 8080``.
"""

from __future__ import annotations

import asyncio
import sys

from openreward.environments import Environment, Server, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

__all__ = ["Faulty", "GARBLED_TEXT", "FLOOD_LINE"]

# Valid Unicode that is hostile to terminals, tokenizers and naive parsers.
GARBLED_TEXT = (
    "nul:\x00 bell:\x07 backspace:\x08 esc:\x1b[31mred\x1b[0m cr:\r vt:\x0b ff:\x0c del:\x7f c1:\x85\x9b "
    "bom:\ufeff zwj:a\u200db rtl:\u202eevil\u202c replacement:\ufffd combining:e\u0301\u0301\u0301 "
    'emoji:\U0001f575\ufe0f\u200d\u2640\ufe0f nonchar:\uffff private:\ue000 json:"}]<tool_call>'
)
FLOOD_LINE = "flood " * 10 + "\n"  # 61 bytes


class ExplodeArgs(BaseModel):
    message: str = Field(default="boom", description="Text of the exception to raise.")


class HangArgs(BaseModel):
    seconds: float = Field(default=3600.0, ge=0, le=86400, description="How long to sleep before answering.")


class FloodArgs(BaseModel):
    megabytes: float = Field(default=4.0, gt=0, le=64, description="Size of the returned text in MiB.")


class SubmitArgs(BaseModel):
    answer: str = Field(description="The answer; the expected one is 'ok'.")


class Faulty(Environment):
    """Tools that raise, hang, flood or garble, plus a well-behaved `submit`."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        if split != "train":
            raise ValueError(f"unknown split {split!r}; Faulty has ['train']")
        return [{"id": f"faulty-{i}", "expected": "ok"} for i in range(3)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Fault-injection task {self.task_spec['id']}: call submit with 'ok'.")]

    @tool
    def explode(self, args: ExplodeArgs) -> ToolOutput:
        """Raise an exception inside the tool."""
        raise RuntimeError(args.message)

    @tool
    def wrong_return(self) -> ToolOutput:
        """Return something that is not a ToolOutput."""
        return {"not": "a ToolOutput"}  # type: ignore[return-value]

    @tool(concurrent=True)
    async def hang(self, args: HangArgs) -> ToolOutput:
        """Sleep for `seconds` before answering."""
        await asyncio.sleep(args.seconds)
        return ToolOutput(blocks=[TextBlock(text=f"slept {args.seconds:g} s")])

    @tool
    def flood(self, args: FloodArgs) -> ToolOutput:
        """Return megabytes of text."""
        size = int(args.megabytes * 1024 * 1024)
        text = (FLOOD_LINE * (size // len(FLOOD_LINE) + 1))[:size]
        return ToolOutput(blocks=[TextBlock(text=text)], metadata={"chars": size})

    @tool
    def garble(self) -> ToolOutput:
        """Return text full of control characters and other hostile code points."""
        return ToolOutput(blocks=[TextBlock(text=GARBLED_TEXT)])

    @tool
    def unencodable(self) -> ToolOutput:
        """Return a lone surrogate, which cannot be encoded as UTF-8."""
        return ToolOutput(blocks=[TextBlock(text="before \ud800 after")])

    @tool
    def submit(self, args: SubmitArgs) -> ToolOutput:
        """Submit an answer; ends the episode."""
        correct = args.answer.strip() == self.task_spec["expected"]
        return ToolOutput(
            blocks=[TextBlock(text="correct" if correct else "incorrect")],
            reward=1.0 if correct else 0.0,
            finished=True,
        )


if __name__ == "__main__":
    Server([Faulty]).run(host="127.0.0.1", port=int(sys.argv[1]))

"""Journal: a test environment that records every session it opens and every tool call it runs.

Served in-process (the SDK's `Server` in a thread), so tests read `SESSIONS` and `CALLS` directly:
a resumed episode must show one session and each tool call once. `wait` blocks until the test
opens `GATE` (to hold an episode inside a tool call while the trainer aborts the step).
"""

from __future__ import annotations

import asyncio
import threading
import uuid

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

SESSIONS: list[str] = []
CALLS: list[tuple[str, str, str]] = []  # (session, tool, text)
GATE = threading.Event()
IN_WAIT = threading.Event()


def reset() -> None:
    SESSIONS.clear()
    CALLS.clear()
    GATE.set()
    IN_WAIT.clear()


class NoteArgs(BaseModel):
    text: str = Field(description="What to write down.")


class SubmitArgs(BaseModel):
    answer: str = Field(description="The answer; 'done' is right.")


class Journal(Environment):
    """Write notes, then submit 'done'."""

    def __init__(self, task_spec: dict, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets or {})
        self.session = uuid.uuid4().hex[:8]
        SESSIONS.append(self.session)

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"id": f"journal-{i}"} for i in range(64)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Task {self.task_spec['id']}: write notes with `note`, then submit 'done'.")]

    @tool
    def note(self, args: NoteArgs) -> ToolOutput:
        """Write a note down."""
        CALLS.append((self.session, "note", args.text))
        return ToolOutput(blocks=[TextBlock(text=f"noted #{sum(1 for s, *_ in CALLS if s == self.session)}")])

    @tool(concurrent=True)
    async def wait(self, args: NoteArgs) -> ToolOutput:
        """Wait until the test lets the call finish."""
        CALLS.append((self.session, "wait", args.text))
        IN_WAIT.set()
        await asyncio.to_thread(GATE.wait)
        return ToolOutput(blocks=[TextBlock(text="waited")])

    @tool
    def submit(self, args: SubmitArgs) -> ToolOutput:
        """Submit the answer; ends the episode."""
        CALLS.append((self.session, "submit", args.answer))
        right = args.answer.strip() == "done"
        return ToolOutput(
            blocks=[TextBlock(text="right" if right else "wrong")], reward=1.0 if right else 0.0, finished=True
        )

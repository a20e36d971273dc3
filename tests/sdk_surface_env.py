"""Environments that use the parts of the OpenReward SDK real environments use, for tests/test_sdk_surface.py.

| environment    | what it uses                                                                          |
|----------------|---------------------------------------------------------------------------------------|
| `IndexedTasks` | tasks by index only: `list_tasks` raises (the server answers 400), `num_tasks`/`get_task` serve them, as SWE-rebench-V2's environments do |
| `Workbench`    | a sandbox (`LocalSandbox`: shell commands in a temporary directory) that the SDK's session toolsets (`claude-code`) bind to; `ToolOutput.metadata`; a slow `run_tests` tool |
| `Leaky`        | quotes its secrets back: in the prompt, in a tool's error text and in its metadata      |
| `Gallery`      | image blocks in the prompt and in a tool's output                                     |
"""

from __future__ import annotations

import asyncio
import base64
import tempfile
from typing import Any

from openreward.environments import Environment, ImageBlock, TextBlock, ToolOutput, tool
from pydantic import BaseModel

from one_task_env import OneTask

# A 1x1 PNG.
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()


class Answer(BaseModel):
    answer: str


class IndexedTasks(Environment):
    """Three tasks per split, served by index only."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        raise NotImplementedError("too many tasks to list: use num_tasks and get_task")

    @classmethod
    async def num_tasks(cls, split: str) -> int:
        return 3

    @classmethod
    async def get_task(cls, split: str, index: int) -> dict:
        if not 0 <= index < 3:
            raise IndexError(index)
        return {"split": split, "a": 2, "b": index}

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Indexed task: what is {self.task_spec['a']} + {self.task_spec['b']}? Call answer.")]

    @tool
    def answer(self, args: Answer) -> ToolOutput:
        """Submit the sum."""
        right = args.answer.strip() == str(self.task_spec["a"] + self.task_spec["b"])
        return ToolOutput(blocks=[TextBlock(text="right" if right else "wrong")], reward=float(right), finished=True)


class RunResult(tuple):
    """What `Sandbox.run` returns: (output, exit code)."""

    truncated = False
    timed_out = False


class LocalSandbox:
    """The sandbox interface the SDK's toolsets call (`await run(command)` -> (output, exit code)), as
    shell commands in a temporary directory of this machine."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="workbench-")

    async def run(self, command: str, timeout: float | None = None, **_: Any) -> RunResult:
        process = await asyncio.create_subprocess_shell(
            command, cwd=self.root, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        output, _ = await asyncio.wait_for(process.communicate(), timeout)
        return RunResult((output.decode(), process.returncode))


class Seconds(BaseModel):
    seconds: float


class Workbench(OneTask):
    """Find the word in notes.txt with the session's toolset (`claude-code`: bash, read, ...) and submit it.
    Without a toolset it has only `submit` and `run_tests`."""

    TASK = {"word": "marigold"}

    def __init__(self, task_spec: dict = {}, secrets: dict[str, str] = {}) -> None:  # noqa: B006 - the SDK's signature
        super().__init__(task_spec, secrets)
        self.sandbox = LocalSandbox()

    async def setup(self) -> None:
        await self.sandbox.run(f"printf '%s\\n' {self.task_spec['word']} > notes.txt")

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Workbench: read the word in notes.txt and submit it.")]

    @tool
    def submit(self, args: Answer) -> ToolOutput:
        """Submit the word."""
        right = args.answer.strip() == self.task_spec["word"]
        return ToolOutput(
            blocks=[TextBlock(text="right" if right else "wrong")],
            reward=float(right),
            finished=True,
            metadata={"expected": self.task_spec["word"], "graded": "exact match"},
        )

    @tool
    async def run_tests(self, args: Seconds) -> ToolOutput:
        """Run the test suite (takes the given number of seconds)."""
        await asyncio.sleep(args.seconds)
        return ToolOutput(blocks=[TextBlock(text="all tests passed")], metadata={"passed": 3, "failed": 0})


class Report(BaseModel):
    text: str


class Leaky(OneTask):
    """A careless environment: it shows the model its secrets (`openai_api_key`, `leak_token`) in the
    prompt, in `login`'s error text and in `login`'s metadata. `report` takes what the model saw."""

    TASK = {"id": "leak-0"}

    def __init__(self, task_spec: dict = {}, secrets: dict[str, str] = {}) -> None:  # noqa: B006 - the SDK's signature
        super().__init__(task_spec, secrets)
        self.secrets = dict(secrets)

    def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(
                text=f"Leaky: log in, then report what the server said. (debug: session token {self.secrets.get('leak_token')})"
            )
        ]

    @tool
    def login(self) -> ToolOutput:
        """Log in with the configured keys."""
        keys = [self.secrets.get("openai_api_key", ""), self.secrets.get("leak_token", "")]
        return ToolOutput(
            blocks=[TextBlock(text=f"Error: 401 Unauthorized: rejected keys {keys[0]} and {keys[1]}")],
            metadata={"tried": keys},
        )

    @tool
    def report(self, args: Report) -> ToolOutput:
        """Report what the server said."""
        return ToolOutput(blocks=[TextBlock(text="noted")], reward=1.0, finished=True, metadata={"reported": args.text})


class Gallery(OneTask):
    """Shows an image in the prompt and another from `look`; `describe` ends the episode."""

    TASK = {"id": "picture-0"}

    def get_prompt(self) -> list[TextBlock | ImageBlock]:
        return [
            TextBlock(text="Gallery: what colour is this pixel? Call look for another view."),
            ImageBlock(data=PIXEL, mimeType="image/png"),
        ]

    @tool
    def look(self) -> ToolOutput:
        """Another view of the pixel."""
        return ToolOutput(blocks=[TextBlock(text="the pixel, zoomed:"), ImageBlock(data=PIXEL, mimeType="image/png")])

    @tool
    def describe(self, args: Answer) -> ToolOutput:
        """Say what you see."""
        return ToolOutput(blocks=[TextBlock(text="thanks")], reward=1.0, finished=True)

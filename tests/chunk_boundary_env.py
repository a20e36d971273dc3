"""ChunkBoundary: a test environment whose tool output puts whitespace where the SDK's server cuts
its `/call` result into server-sent-event chunks (every `CHUNK_SIZE` characters of the JSON it streams).

`boundary_text(kind)` is the exact text the tool returns; tests compare what the model sees with it.

| kind     | at each chunk boundary                                                         |
|----------|--------------------------------------------------------------------------------|
| `space`  | one space between two words (ordinary prose)                                    |
| `indent` | the start of a four-space indent (code, YAML), and once a chunk of only spaces  |
| `mixed`  | a no-break space (U+00A0), an ideographic space (U+3000), a space: `str.lstrip` drops all three |
"""

from __future__ import annotations

import string
from typing import Literal

from openreward.environments import TextBlock, ToolOutput, tool
from openreward.environments.reconnect import CHUNK_SIZE
from openreward.environments.types import RunToolOutput, RunToolSuccess
from pydantic import BaseModel, Field

from one_task_env import OneTask

KINDS = ("space", "indent", "mixed")
CHUNKS = 4  # the text spans this many chunks of the streamed result


def streamed_result(text: str) -> str:
    """The string the SDK's server streams for a tool that returns `text` (its `/call` handler's serialisation)."""
    return RunToolOutput(RunToolSuccess(output=ToolOutput(blocks=[TextBlock(text=text)]))).model_dump_json(indent=None)


def _text_offset() -> int:
    """Where the tool's text starts in the streamed result (its letters and spaces need no JSON escape)."""
    marker = "chunk-boundary-marker"
    return streamed_result(marker).index(marker)


def boundary_text(kind: str) -> str:
    """Letters, with whitespace placed at the chunk boundaries of the streamed result as `kind` says."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    start = _text_offset()
    chars = [string.ascii_lowercase[i % 26] for i in range(CHUNKS * CHUNK_SIZE)]
    boundaries = [k * CHUNK_SIZE - start for k in range(1, CHUNKS)]  # text indexes where a chunk begins
    for number, at in enumerate(boundaries):
        if kind == "space":
            chars[at] = " "
        elif kind == "indent":
            width = CHUNK_SIZE + 3 if number == 1 else 4  # the second boundary opens a chunk of spaces only
            chars[at : at + width] = " " * width
        else:
            chars[at] = ("\u00a0", "\u3000", " ")[number % 3]  # JSON keeps them as they are (a tab it escapes)
    return "".join(chars)


class EmitArgs(BaseModel):
    kind: Literal["space", "indent", "mixed"] = Field(description="Which whitespace to put at the chunk boundaries.")


class ChunkBoundary(OneTask):
    """Call `emit`; its long output is the test."""

    SPLIT, TASK = "train", {"id": "chunks-0"}

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Call emit.")]

    @tool
    def emit(self, params: EmitArgs) -> ToolOutput:
        """Return a long text with whitespace at the stream's chunk boundaries."""
        return ToolOutput(blocks=[TextBlock(text=boundary_text(params.kind))])

"""An environment that shows images, for tests/test_vision_episode.py: `Easel` puts a picture in the
prompt, `look` answers with text and a second picture of another size, `describe` ends the episode."""

from __future__ import annotations

import base64
import io

from openreward.environments import Environment, ImageBlock, TextBlock, ToolOutput, tool
from PIL import Image
from pydantic import BaseModel


def png(width: int, height: int, colour: tuple[int, int, int]) -> str:
    """A one-colour PNG, base64 (an `ImageBlock`'s data)."""
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


PROMPT_IMAGE = png(100, 60, (200, 30, 30))  # Qwen2.5-VL: 112x56 -> a 4x8 grid -> 8 vision tokens
LOOK_IMAGE = png(56, 84, (30, 30, 200))  # 56x84 -> 4x6 -> 6 vision tokens


class Answer(BaseModel):
    answer: str


class Easel(Environment):
    @classmethod
    def list_splits(cls) -> list[str]:
        return ["test"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"id": "easel-0"}]

    def get_prompt(self) -> list[TextBlock | ImageBlock]:
        return [
            TextBlock(text="Easel: what colour is this picture? Call look for a second one."),
            ImageBlock(data=PROMPT_IMAGE, mimeType="image/png"),
        ]

    @tool
    def look(self) -> ToolOutput:
        """A second picture."""
        return ToolOutput(
            blocks=[TextBlock(text="the second picture:"), ImageBlock(data=LOOK_IMAGE, mimeType="image/png")]
        )

    @tool
    def describe(self, args: Answer) -> ToolOutput:
        """Say what you see."""
        return ToolOutput(blocks=[TextBlock(text="thanks")], reward=1.0 if "red" in args.answer else 0.0, finished=True)

"""BrokenPaint: PaintColour whose every session fails before the first model call, as an environment that
is down would. Served with `--serve tests/broken_paint_env.py:BrokenPaint`: every episode ends `env_error`
without a token sampled, so a training step of it has nothing to train on."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "environments"))

from paint import PaintColour  # noqa: E402

__all__ = ["BrokenPaint"]


class BrokenPaint(PaintColour):
    """Every task's prompt raises: the session fails before the model is asked anything."""

    def get_prompt(self) -> Any:
        raise RuntimeError("injected environment fault: the environment is down")

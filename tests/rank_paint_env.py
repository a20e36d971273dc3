"""RankPaint: PaintColour that notes which process's episode asked for which task. Served with `--serve` by each
process of a multi-process run (each serves its own copy), it appends "RANK SPLIT-INDEX" to the file named by
`RANK_PAINT_LOG` when a session asks for its prompt (once per episode)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "environments"))

from paint import PaintColour  # noqa: E402

__all__ = ["RankPaint"]


class RankPaint(PaintColour):
    """PaintColour; each prompt asked for is one line of `RANK_PAINT_LOG`: the asking process's rank and the task id."""

    def get_prompt(self) -> Any:
        with open(os.environ["RANK_PAINT_LOG"], "a") as log:
            log.write(f"{os.environ.get('RANK', '0')} {self.task_spec['id']}\n")
        return super().get_prompt()

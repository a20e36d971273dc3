"""A scripted teacher for PaintOrder (examples/environments/paint_order.py), for `openreward-rl sft --teacher`.

It plays the task as it should be played: call `read_order` with the order the task names, then
answer with the colour the order book gave (a plain reply, which goes to the terminal tool `paint`). It writes what to do (`TeacherTurn`); the library writes each turn in the student
model's own call format, so the episodes are the student's own kind of sequence.

    openreward-rl sft --config examples/train_tool_agent_config.yaml \\
        --serve examples/environments/paint_order.py:PaintOrder --model offline:smollm2 --device cpu \\
        --teacher examples/paint_order_teacher.py:teacher --output-dir runs/warm

>>> teacher([{"role": "user", "content": "Order 42 says which colour to paint the wall."}], [])
TeacherTurn(content='', calls=(('read_order', {'order': 42}),), reasoning=None)
>>> teacher([{"role": "user", "content": "Order 42 ..."}, {"role": "tool", "content": "Order 42: paint the wall teal."}], [])
TeacherTurn(content='teal', calls=(), reasoning=None)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.engines.teacher import TeacherTurn


def teacher(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> TeacherTurn:
    read = [m for m in messages if m["role"] == "tool" and re.search(r"paint the wall (\w+)", str(m.get("content")))]
    if read:
        colour = re.search(r"paint the wall (\w+)", str(read[-1]["content"])).group(1)
        return TeacherTurn(content=colour)
    task = next(m for m in messages if m["role"] == "user")
    order = int(re.search(r"Order (\d+)", str(task["content"])).group(1))
    return TeacherTurn(calls=(("read_order", {"order": order}),))

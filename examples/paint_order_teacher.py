"""A scripted teacher for PaintOrder (examples/environments/paint_order.py), for `openreward-rl sft --teacher`.

It plays the task as it should be played, reading the answer from the task spec PaintOrder lists
(`{"id", "order", "colour"}`): call `read_order` with the task's order, then answer with its colour
(a plain reply, which goes to the terminal tool `paint`). It says what to do (`TeacherTurn`); the
library writes each turn in the student model's own call format, so the episodes are the student's
own kind of sequence. A teacher that takes no third argument, `teacher(messages, tools)`, works too.

    openreward-rl sft --config examples/train_tool_agent_config.yaml \\
        --serve examples/environments/paint_order.py:PaintOrder --model offline:smollm2 --device cpu \\
        --teacher examples/paint_order_teacher.py:teacher --output-dir runs/warm

>>> from openreward_rl import TaskRef
>>> task = TeacherTask(TaskRef("PaintOrder", "train", index=0, task_spec={"id": "train-000", "order": 42, "colour": "teal"}), "Order 42 ...")
>>> teacher([{"role": "user", "content": "Order 42 ..."}], [], task)
TeacherTurn(content='', calls=(('read_order', {'order': 42}),), reasoning=None)
>>> teacher([{"role": "user", "content": "Order 42 ..."}, {"role": "tool", "content": "Order 42: paint the wall teal."}], [], task)
TeacherTurn(content='teal', calls=(), reasoning=None)
"""

from openreward_rl.engines.teacher import TeacherTask, TeacherTurn


def teacher(messages: list[dict], tools: list[dict], task: TeacherTask) -> TeacherTurn:
    if not any(message["role"] == "tool" for message in messages):
        return TeacherTurn(calls=(("read_order", {"order": task.spec["order"]}),))
    return TeacherTurn(content=task.spec["colour"])

"""One reading of a trajectory's conversation, shared by `openreward-rl show` and the uploader.

Each model turn records the position of the assistant message it produced (`Turn.message_index`);
a tool message carries the `ToolResult` its call got. A result with no tool message (a `@terminal`
environment taking a plain answer) is yielded on its own, right after its turn's messages.

>>> from openreward_rl.loop.trajectory import StopReason, Trajectory
>>> from openreward_rl.task import TaskRef
>>> trajectory = Trajectory(task=TaskRef("e", "train", index=0), segments=[], turns=[], step_rewards=[], reward=None, stop_reason=StopReason.NO_TOOL_CALL,
...     messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])
>>> [(step.message["content"], step.turn) for step in conversation_steps(trajectory)]
[('Hi', None), ('Hello', None)]
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from openreward_rl.loop.trajectory import ToolResult, Trajectory, Turn

__all__ = ["ConversationStep", "conversation_steps", "turns_by_message"]


@attrs.frozen
class ConversationStep:
    """One message of the conversation, or one result that has no message.

    - `message`: the chat message; None for a result with no tool message.
    - `turn`, `turn_number`: the model turn that produced this assistant message (0-based number).
    - `result`: the result a tool message carries, or the unanswered result itself.
    """

    message: Mapping[str, Any] | None
    turn: Turn | None = None
    turn_number: int | None = None
    result: ToolResult | None = None
    position: int | None = None  # the message's index in `Trajectory.messages`


def turns_by_message(trajectory: Trajectory) -> dict[int, tuple[int, Turn]]:
    """Message position -> (turn number, turn) for every assistant message a model turn produced.

    Turns that recorded their `message_index` say it; older dumps (none recorded), or records whose
    positions do not all name assistant messages, align the turns with the last assistant messages,
    since every turn appended exactly one.
    """
    turns, messages = trajectory.turns, trajectory.messages
    positions = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    recorded = [t.message_index for t in turns]
    if turns and all(i is not None and i in positions for i in recorded) and len(set(recorded)) == len(turns):
        return {t.message_index: (n, t) for n, t in enumerate(turns) if t.message_index is not None}
    return {p: (n, t) for n, (p, t) in enumerate(zip(positions[len(positions) - len(turns) :], turns))}


def conversation_steps(trajectory: Trajectory) -> Iterator[ConversationStep]:
    """The conversation in order, each message with the turn or result it belongs to."""
    turn_at = turns_by_message(trajectory)
    open_results: dict[str, ToolResult] = {}

    def unanswered() -> Iterator[ConversationStep]:
        for result in open_results.values():
            yield ConversationStep(None, result=result)
        open_results.clear()

    for position, message in enumerate(trajectory.messages):
        role = message.get("role")
        if role == "assistant":
            yield from unanswered()
            number, turn = turn_at.get(position, (None, None))
            if turn is not None:
                open_results.update({r.call.id: r for r in turn.tool_results})
            yield ConversationStep(message, turn=turn, turn_number=number, position=position)
        elif role == "tool":
            yield ConversationStep(
                message, result=open_results.pop(str(message.get("tool_call_id", "")), None), position=position
            )
        else:
            yield ConversationStep(message, position=position)
    yield from unanswered()

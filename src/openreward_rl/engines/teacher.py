"""`TeacherEngine`: a scripted teacher as an engine, writing each turn in the student's own format.

A teacher is a function of the conversation so far and the tools: it says what the assistant does
next (`TeacherTurn`: content, calls, reasoning). The engine writes that turn exactly as the student
model's chat template writes such a message (the family's call format, closer and all), tokenized by
the student's tokenizer. Episodes sampled from it are token-exact in the student's format, so they are
supervised fine-tuning data for it (`openreward-rl sft --teacher`): a warm start for a model that
never calls a tool on its own.

>>> from openreward_rl.assets import load_tokenizer
>>> from openreward_rl.families import get_family
>>> renderer = get_family("chatml").renderer(load_tokenizer("offline:smollm2"))
>>> text = turn_text(renderer, [{"role": "user", "content": "Paint order 12."}], TeacherTurn(calls=(("read_order", {"order": 12}),)), [])
>>> print(text)
<tool_call>
{"name": "read_order", "arguments": {"order": 12}}
</tool_call><|im_end|>
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.engines.base import EngineRequestError, FinishReason, Generation, GenerationRequest
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.probe import assistant_message, template_turn

__all__ = ["Teacher", "TeacherEngine", "TeacherTurn", "turn_text"]


@attrs.frozen
class TeacherTurn:
    """What the assistant does next: `content`, tool `calls` as (name, arguments), optional `reasoning`."""

    content: str = ""
    calls: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    reasoning: str | None = None


Teacher = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]], TeacherTurn]


def turn_text(renderer: ChatRenderer, messages: Sequence[Mapping[str, Any]], turn: TeacherTurn, tools: Sequence[Mapping[str, Any]], index: int = 0) -> str:
    """The text the student's template writes for `turn` after `messages`, up to and including its closer."""
    family = renderer.family
    if family is None:
        raise EngineRequestError("a teacher writes turns in the student's family format: the student model needs a model family (docs/families.md)")
    message = assistant_message(
        turn.content, reasoning=turn.reasoning, calls=turn.calls, index=index, reasoning_key=family.reasoning_key,
        string_arguments=family.string_arguments, call_id_format=family.call_id_format, calls_as_text=family.tool_preamble,
    )  # fmt: skip
    eos = (renderer.tokenizer.eos_token,) if renderer.tokenizer.eos_token else ()
    closers = (family.tool_turn_stops if turn.calls else family.final_turn_stops) or eos
    return template_turn(renderer, list(messages), message, closers, list(tools) or None)


@attrs.define
class TeacherEngine:
    """An `Engine` whose every turn is the teacher's, written by `turn_text`; log-probs are 0 (not sampled)."""

    renderer: ChatRenderer
    teacher: Teacher
    _turns: Any = attrs.field(factory=itertools.count, init=False)

    async def generate(self, request: GenerationRequest) -> Generation:
        turn = self.teacher(list(request.messages or ()), list(request.tools or ()))
        ids = self.renderer.encode(turn_text(self.renderer, request.messages or (), turn, request.tools or (), next(self._turns)))
        return Generation(output_ids=tuple(ids), logprobs=(0.0,) * len(ids), finish_reason=FinishReason.STOP, text=self.renderer.decode(ids))

    async def aclose(self) -> None:
        return None

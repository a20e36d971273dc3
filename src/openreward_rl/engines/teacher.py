"""`TeacherEngine`: a scripted teacher as an engine, writing each turn in the student's own format.

A teacher is a function of the conversation so far, the tools and, where it takes a third argument,
the task it plays (`TeacherTask`: the environment's task spec and the task's prompt): it says what the
assistant does next (`TeacherTurn`: content, calls, reasoning). `function(messages, tools)` teachers
work unchanged. The engine writes that turn exactly as the student
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

import inspect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.engines.base import EngineRequestError, FinishReason, Generation, GenerationRequest
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.probe import assistant_message, template_turn
from openreward_rl.parsers.base import ParsedTurn
from openreward_rl.task import TaskRef

__all__ = ["Replay", "Teacher", "TeacherEngine", "TeacherTask", "TeacherTurn", "prompt_text", "takes_task", "turn_text"]


@attrs.frozen
class TeacherTurn:
    """What the assistant does next: `content`, tool `calls` as (name, arguments), optional `reasoning`."""

    content: str = ""
    calls: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    reasoning: str | None = None


@attrs.frozen
class TeacherTask:
    """The task a teacher plays: `ref` (environment, split, index), `prompt` (the text of the task's
    opening user messages, as the environment gave them) and `spec` (the environment's task spec, as
    its task listing gave it; None where the environment serves its tasks by index only)."""

    ref: TaskRef
    prompt: str

    @property
    def spec(self) -> Mapping[str, Any] | None:
        return self.ref.task_spec


# function(messages, tools) or function(messages, tools, task: TeacherTask)
Teacher = Callable[..., TeacherTurn]


def takes_task(teacher: Callable[..., Any]) -> bool:
    """Whether `teacher` takes the task as a third argument (else it is a `function(messages, tools)` teacher).

    >>> takes_task(lambda messages, tools: None), takes_task(lambda messages, tools, task: None)
    (False, True)
    """
    try:
        inspect.signature(teacher).bind(None, None, None)
    except (TypeError, ValueError):  # two parameters, or no signature to read (a builtin): called the old way
        return False
    return True


def prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the user messages before the first assistant message: the task's prompt.

    >>> prompt_text([{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Order 12."}]}])
    'Order 12.'
    """
    parts = []
    for message in messages:
        if message.get("role") == "assistant":
            break
        if message.get("role") == "user":
            content = message.get("content")
            parts.extend(
                [content]
                if isinstance(content, str)
                else [p.get("text", "") for p in content or () if isinstance(p, Mapping) and p.get("type") == "text"]
            )
    return "\n".join(parts)


def turn_text(
    renderer: ChatRenderer,
    messages: Sequence[Mapping[str, Any]],
    turn: TeacherTurn,
    tools: Sequence[Mapping[str, Any]],
    index: int = 0,
) -> str:
    """The text the student's template writes for `turn` after `messages`, up to and including its closer."""
    family = renderer.family
    if family is None:
        raise EngineRequestError(
            "a teacher writes turns in the student's family format: the student model needs a model family (docs/families.md)"
        )
    message = assistant_message(
        turn.content,
        reasoning=turn.reasoning,
        calls=turn.calls,
        index=index,
        reasoning_key=family.reasoning_key,
        string_arguments=family.string_arguments,
        call_id_format=family.call_id_format,
        calls_as_text=family.tool_preamble,
    )
    eos = (renderer.tokenizer.eos_token,) if renderer.tokenizer.eos_token else ()
    closers = (family.tool_turn_stops if turn.calls else family.final_turn_stops) or eos
    return template_turn(renderer, list(messages), message, closers, list(tools) or None)


@attrs.frozen
class Replay:
    """A teacher that plays a recorded episode's turns again, in order: any model's episode (another
    tokenizer's, a hosted model's) re-written in the student's own format by `TeacherEngine`, against
    the environment, which answers and rewards the replay itself (`openreward-rl sft --from-results`).
    A replay that runs past the recorded turns (the environment answered otherwise than when the
    episode was recorded) fails its episode with an `EngineRequestError` saying so.

    >>> from openreward_rl.parsers.base import ToolCall
    >>> call = ParsedTurn(content="", tool_calls=(ToolCall("read_order", {"order": 12}, "c0"),))
    >>> answer = ParsedTurn(content="teal", reasoning="the book says teal")
    >>> replay = Replay.of([call, answer], reasoning=False)
    >>> replay([{"role": "user", "content": "Order 12."}], [])
    TeacherTurn(content='', calls=(('read_order', {'order': 12}),), reasoning=None)
    >>> replay([{"role": "user", "content": "Order 12."}, {"role": "assistant", "content": ""}, {"role": "tool", "content": "teal"}], [])
    TeacherTurn(content='teal', calls=(), reasoning=None)
    """

    turns: tuple[TeacherTurn, ...]

    @classmethod
    def of(cls, parsed_turns: Iterable[ParsedTurn], *, reasoning: bool) -> Replay:
        """A recorded episode's model turns as parsed (each `Turn.parsed` of its trajectory: content, tool calls;
        reasoning where `reasoning`: the student's family marks it)."""
        return cls(
            tuple(
                TeacherTurn(
                    content=parsed.content or "",
                    calls=tuple((call.name, call.arguments) for call in parsed.tool_calls),
                    reasoning=parsed.reasoning if reasoning else None,
                )
                for parsed in parsed_turns
            )
        )

    def __call__(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> TeacherTurn:
        played = sum(1 for message in messages if message.get("role") == "assistant")
        if played >= len(self.turns):
            raise EngineRequestError(
                f"the replay ran past the {len(self.turns)} recorded turns: the environment answered otherwise than when the episode was recorded"
            )
        return self.turns[played]


@attrs.define
class TeacherEngine:
    """An `Engine` whose every turn is the teacher's, written by `turn_text`; log-probs are 0 (not sampled).

    A teacher that takes the task needs the engine bound to it: `task`, or one engine per episode from
    `for_task` (`openreward-rl sft` does this)."""

    renderer: ChatRenderer
    teacher: Teacher
    task: TaskRef | None = None
    _turns: Any = attrs.field(factory=itertools.count, init=False)

    def for_task(self, task: TaskRef) -> TeacherEngine:
        """The same teacher, bound to `task`: the engine of one episode of it."""
        return TeacherEngine(self.renderer, self.teacher, task)

    async def generate(self, request: GenerationRequest) -> Generation:
        messages, tools = list(request.messages or ()), list(request.tools or ())
        if takes_task(self.teacher):
            if self.task is None:
                raise EngineRequestError(
                    "this teacher takes the task (messages, tools, task): give its engine the task it plays (TeacherEngine.for_task)"
                )
            turn = self.teacher(messages, tools, TeacherTask(self.task, prompt_text(messages)))
        else:
            turn = self.teacher(messages, tools)
        ids = self.renderer.encode(
            turn_text(self.renderer, request.messages or (), turn, request.tools or (), next(self._turns))
        )
        return Generation(
            output_ids=tuple(ids),
            logprobs=(0.0,) * len(ids),
            finish_reason=FinishReason.STOP,
            text=self.renderer.decode(ids),
        )

    async def aclose(self) -> None:
        return None

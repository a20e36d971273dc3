"""A parser for models too small to write tool calls: every reply is a call to the environment's one tool.

Registered as `reply_as_call` when imported. It takes an environment that offers exactly one tool with
exactly one parameter (CombinationLock's `try_digit(digit)`), and turns the whole reply (reasoning
split off, surrounding spaces and a final full stop dropped) into that parameter, coerced by the tool's
JSON schema. A reply that does not fit (`"seven"` for an integer) is a parse error the episode reports
back to the model, like any malformed call, and costs the turn. It declares `tool_preamble = None`: the
model is taught no call syntax (the system prompt says what to reply), so the first prompt holds no
tool preamble. The benchmarks use it to train SmolLM2-135M on multi-turn episodes (`benchmarks/learning_curve.py --plugin examples/reply_as_call.py`).

>>> tools = [{"type": "function", "function": {"name": "try_digit", "parameters": {"type": "object",
...     "properties": {"digit": {"type": "integer"}}, "required": ["digit"]}}}]
>>> parser = ReplyAsCallParser()
>>> [(c.name, c.arguments) for c in parser.parse(" 7.", tools=tools).tool_calls]
[('try_digit', {'digit': 7})]
>>> [e.kind.value for e in parser.parse("seven", tools=tools).errors]
['invalid_arguments']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.parsers import ParsedTurn, ParseError, ParseErrorKind, ToolCall, register_parser
from openreward_rl.parsers.base import tool_names, tool_schema
from openreward_rl.parsers.common import new_call_id, split_reasoning
from openreward_rl.parsers.schema import CoercionError, coerce_value


@register_parser("reply_as_call")
class ReplyAsCallParser:
    """The reply is the one argument of the one tool offered. Never raises on model output."""

    name = "reply_as_call"
    # The reply is the call: there is no call syntax to teach, so the first prompt gets no tool preamble
    # (not the model family's, which teaches another parser's calls); the system prompt says what to reply.
    tool_preamble = None

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn:
        split = split_reasoning(text, generation_prompt=generation_prompt)
        reply = split.rest.strip().removesuffix(".").strip()
        names = sorted(tool_names(tools) or ())
        if len(names) != 1:
            error = ParseError(
                ParseErrorKind.MALFORMED_CALL,
                f"reply_as_call needs exactly one tool, the environment offers {len(names)}",
                raw=reply,
            )
            return ParsedTurn(content=reply, reasoning=split.reasoning, errors=(error,))
        [name] = names
        properties = dict((tool_schema(tools, name) or {}).get("properties") or {})
        if len(properties) != 1:
            error = ParseError(
                ParseErrorKind.MALFORMED_CALL,
                f"reply_as_call needs a tool with one parameter, {name} has {len(properties)}",
                raw=reply,
                tool_name=name,
            )
            return ParsedTurn(content=reply, reasoning=split.reasoning, errors=(error,))
        [(parameter, schema)] = properties.items()
        call_id = new_call_id()
        try:
            value = coerce_value(reply, schema)
        except CoercionError as problem:
            error = ParseError(
                ParseErrorKind.INVALID_ARGUMENTS,
                f"{parameter} of {name}: {problem}",
                raw=reply,
                tool_name=name,
                call_id=call_id,
            )
            return ParsedTurn(content="", reasoning=split.reasoning, errors=(error,))
        return ParsedTurn(
            content="", reasoning=split.reasoning, tool_calls=(ToolCall(name, {parameter: value}, call_id),)
        )


if __name__ == "__main__":
    import doctest

    print(doctest.testmod())

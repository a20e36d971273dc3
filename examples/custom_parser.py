"""A tool parser for a made-up format, registered under its own name and run on sample output.

The "at-call" format (invented for this example) writes one call per block, one `key = value` line
per argument, values in JSON:

    Let me look.
    @@call get_weather
    city = "Zürich"
    days = 3
    @@end

Run it: `python examples/custom_parser.py`. It prints each parsed turn as JSON.

Train with it from a config, by file (or `package.module:Class`), or by the name it registers once a
plugin has imported it; an unknown name is refused when the config loads:

    parser: examples/custom_parser.py:AtCallParser
    # or: plugins: [examples/custom_parser.py] and parser: at_call

To add a real format, put a module like this one in src/openreward_rl/parsers/ (it is discovered
automatically) and give it tests; see docs/parsers.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from openreward_rl.parsers import ParsedTurn, ParseError, ParseErrorKind, ToolCall, get_parser, register_parser
from openreward_rl.parsers.common import (
    JsonValueError,
    add_result,
    calls_in_reasoning,
    is_cut_off,
    join_content,
    loads_json_strict,
    scan_blocks,
    split_reasoning,
    unclosed_error,
    validate_call,
)

OPEN = "@@call "
CLOSE = "@@end"


@register_parser("at_call")
class AtCallParser:
    """Content, `<think>` reasoning and `@@call` blocks. Never raises on model output."""

    name = "at_call"

    def parse(
        self,
        text: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation_prompt: str = "",
        finish_reason: str | None = None,
    ) -> ParsedTurn:
        split = split_reasoning(text, generation_prompt=generation_prompt)
        calls: list[ToolCall] = []
        errors = calls_in_reasoning(split.reasoning, (OPEN,))
        body = split.rest

        def parse_block(start: int, opener: str) -> int:
            """Parse the block at `body[start]`; return where the text after it begins."""
            end = body.find(CLOSE, start)
            if end < 0 and is_cut_off(finish_reason):  # cut off by the length limit: never executed
                errors.append(unclosed_error(body[start:]))
                return len(body)
            block_end = len(body) if end < 0 else end  # a stop string may have swallowed @@end
            self._block(body[start:block_end], tools, calls, errors)
            return len(body) if end < 0 else end + len(CLOSE)

        content = scan_blocks(body, (OPEN,), parse_block)  # the text between blocks, in order
        return ParsedTurn(
            content=join_content(content), reasoning=split.reasoning, tool_calls=tuple(calls), errors=tuple(errors)
        )

    @staticmethod
    def _block(
        block: str, tools: Sequence[Mapping[str, Any]] | None, calls: list[ToolCall], errors: list[ParseError]
    ) -> None:
        header, _, rest = block[len(OPEN) :].partition("\n")
        arguments: dict[str, Any] = {}
        for line in rest.splitlines():
            if not line.strip():
                continue
            key, equals, value = line.partition("=")
            try:
                if not equals:
                    raise JsonValueError(f"expected 'key = value', got {line[:40]!r}")
                arguments[key.strip()] = loads_json_strict(value)
            except JsonValueError as error:
                errors.append(
                    ParseError(ParseErrorKind.INVALID_ARGUMENTS, str(error), raw=block, tool_name=header.strip())
                )
                return
        add_result(validate_call(header, arguments, tools=tools, raw=block), calls, errors)


def main() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    samples = {
        "two_calls": 'Let me look.\n@@call get_weather\ncity = "Zürich"\ndays = 3\n@@end\n@@call get_weather\ncity = "Oslo"\n@@end\nDone.',
        "unknown_tool": "@@call launch_rocket\nforce = 9\n@@end",
        "cut_off": '@@call get_weather\ncity = "Par',
        "in_reasoning": "<think>maybe @@call get_weather\n@@end</think>No tools needed.",
    }
    parser = get_parser("at_call")
    for label, text in samples.items():
        finish_reason = "length" if label == "cut_off" else "stop"
        turn = parser.parse(text, tools=tools, finish_reason=finish_reason)
        print(
            json.dumps(
                {
                    "sample": label,
                    "content": turn.content,
                    "reasoning": turn.reasoning,
                    "calls": [{"name": c.name, "arguments": c.arguments} for c in turn.tool_calls],
                    "errors": [e.kind.value for e in turn.errors],
                },
                ensure_ascii=False,
            )
        )


if __name__ == "__main__":
    main()

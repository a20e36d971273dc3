"""Parse time of every registered tool parser for one call with small, 20 KB and 100 KB arguments.

    python benchmarks/parsers.py

Each format's text is built here from its grammar (docs/parsers.md). Prints
per-parse time in microseconds (best of 5 repeats) and the 100KB/20KB ratio: ~5 means linear time.
A parser whose result is not exactly the expected call is reported as WRONG instead of timed.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from openreward_rl.parsers import available_parsers, get_parser  # noqa: E402

NAME = "run_code"
TOOLS = [
    {
        "type": "function",
        "function": {"name": NAME, "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}},
    }
]
SNIPPET = "def double(x):\n    return x * 2  # é 東\n"


def _json(value: str) -> str:
    return json.dumps({"code": value}, ensure_ascii=False)


def _kimi_k3(value: str) -> str:
    return (
        f'<|open|>tools<|sep|><|open|>call tool="{NAME}" index="1"<|sep|><|open|>argument key="code" type="string"<|sep|>'
        f"{value}<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"
    )


def _dsml(outer: str) -> Callable[[str], str]:
    def build(value: str) -> str:
        return (
            f'<｜DSML｜{outer}>\n<｜DSML｜invoke name="{NAME}">\n<｜DSML｜parameter name="code" string="true">{value}'
            f"</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜{outer}>"
        )

    return build


BUILDERS: dict[str, Callable[[str], str]] = {
    "hermes": lambda v: f'<tool_call>\n{{"name": "{NAME}", "arguments": {_json(v)}}}\n</tool_call>',
    "qwen3_coder": lambda v: (
        f"<tool_call>\n<function={NAME}>\n<parameter=code>\n{v}\n</parameter>\n</function>\n</tool_call>"
    ),
    "llama3_json": lambda v: f'<|python_tag|>{{"name": "{NAME}", "parameters": {_json(v)}}}',
    "pythonic": lambda v: f"[{NAME}(code={v!r})]",
    "mistral": lambda v: f"[TOOL_CALLS]{NAME}[ARGS]{_json(v)}",
    "gemma4": lambda v: f'<|tool_call>call:{NAME}{{code:<|"|>{v}<|"|>}}<tool_call|>',
    "gpt_oss": lambda v: f"<|channel|>commentary to=functions.{NAME} <|constrain|>json<|message|>{_json(v)}",
    "deepseek_v3": lambda v: (
        f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{NAME}\n```json\n{_json(v)}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    ),
    "deepseek_v31": lambda v: (
        f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{NAME}<｜tool▁sep｜>{_json(v)}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    ),
    "deepseek_v32": _dsml("function_calls"),
    "deepseek_v4": _dsml("tool_calls"),
    "kimi_k2": lambda v: (
        f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{NAME}:0<|tool_call_argument_begin|>{_json(v)}"
        "<|tool_call_end|><|tool_calls_section_end|>"
    ),
    "kimi_k3": _kimi_k3,
    "glm45": lambda v: f"<tool_call>{NAME}\n<arg_key>code</arg_key>\n<arg_value>{v}</arg_value>\n</tool_call>",
    "glm47": lambda v: f"<tool_call>{NAME}<arg_key>code</arg_key><arg_value>{v}</arg_value></tool_call>",
    "minimax_m2": lambda v: (
        f'<minimax:tool_call>\n<invoke name="{NAME}">\n<parameter name="code">{v}</parameter>\n</invoke>\n</minimax:tool_call>'
    ),
}


def _argument(size: int) -> str:
    if size < len(SNIPPET):
        return "hello"
    return (SNIPPET * (size // len(SNIPPET) + 1))[:size].rstrip()


def _time(parse: Callable[[], object]) -> float:
    """Microseconds per parse: best of 5 repeats of a loop that runs for about 0.1 s."""
    timer = timeit.Timer(parse)
    number, _ = timer.autorange()
    number = max(1, number // 2)
    return min(timer.repeat(repeat=5, number=number)) / number * 1e6


def main() -> None:
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs: {platform.processor() or platform.platform()}"
    )
    print(f"{'parser':<14}{'small µs':>11}{'20KB µs':>12}{'100KB µs':>13}{'100KB/20KB':>12}")
    for name in available_parsers():
        builder = BUILDERS.get(name)
        if builder is None:
            print(f"{name:<14}  (no text builder for this format in benchmarks/parsers.py)")
            continue
        parser = get_parser(name)
        row: list[float] = []
        for size in (0, 20_000, 100_000):
            value = _argument(size)
            text = builder(value)
            turn = parser.parse(text, tools=TOOLS, finish_reason="stop")
            if [(c.name, c.arguments) for c in turn.tool_calls] != [(NAME, {"code": value})]:
                print(
                    f"{name:<14}  WRONG at {size} bytes: calls={turn.tool_calls[:1]!r:.120} errors={turn.errors[:1]!r:.200}"
                )
                break
            row.append(_time(lambda parser=parser, text=text: parser.parse(text, tools=TOOLS, finish_reason="stop")))
        else:
            print(f"{name:<14}{row[0]:>11.1f}{row[1]:>12.1f}{row[2]:>13.1f}{row[2] / row[1]:>12.2f}")


if __name__ == "__main__":
    main()

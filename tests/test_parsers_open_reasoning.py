"""Class 4 of issue 13: a tool call that starts inside a reasoning block the generation prompt
opened and the model never closed (Qwen3.5/3.6 pre-fill `<think>`).

vLLM's Qwen3 reasoning parser (vllm/reasoning/qwen3_reasoning_parser.py: "<tool_call> is treated as
an implicit end of reasoning", when `<function=` follows) and its Kimi K2 parser, like llama.cpp,
end the reasoning at the call. That is the default here (`tool_call_ends_reasoning=True`); False
keeps the stricter policy of reporting the call CALL_IN_REASONING. Both are tested, with the real
Qwen3.5 template's generation prompt.
"""

from __future__ import annotations

import pytest

from openreward_rl.parsers import ParseErrorKind, get_parser
from openreward_rl.parsers.hermes import HermesParser
from openreward_rl.parsers.qwen3_coder import Qwen3CoderParser
from parser_renderings import TOOLS, TRL_TEMPLATES, families

QWEN35 = next(f for f in families() if f.label == "qwen3.5")
QWEN3 = next(f for f in families() if f.label == "qwen3 (hermes)")
CALL = [("run_code", {"code": "ls -la /tmp"})]


def _open_reasoning_completion(family) -> tuple[str, str]:
    """The real rendered call, after a reasoning block the model never closed."""
    prompt, completion = family.render(CALL)
    call = completion[completion.index("<tool_call>") :]
    prompt = prompt if prompt.rstrip().endswith("<think>") else prompt + "<think>\n"
    return prompt, "I should list the directory.\n\n" + call


@pytest.mark.parametrize(
    ("family", "parser_class"), [(QWEN35, Qwen3CoderParser), (QWEN3, HermesParser)], ids=["qwen3_coder", "hermes"]
)
def test_tool_call_ends_open_reasoning_by_default(family, parser_class) -> None:
    assert "<think>" in (TRL_TEMPLATES / "qwen3_5_think.jinja").read_text()
    prompt, completion = _open_reasoning_completion(family)
    assert "</think>" not in completion
    turn = get_parser(family.parser).parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
    assert turn.reasoning == "I should list the directory."
    assert [(c.name, c.arguments) for c in turn.tool_calls] == CALL and turn.errors == () and turn.content == ""
    assert parser_class().tool_call_ends_reasoning is True


@pytest.mark.parametrize(
    ("family", "parser_class"), [(QWEN35, Qwen3CoderParser), (QWEN3, HermesParser)], ids=["qwen3_coder", "hermes"]
)
def test_strict_setting_reports_the_call_in_open_reasoning(family, parser_class) -> None:
    prompt, completion = _open_reasoning_completion(family)
    turn = parser_class(tool_call_ends_reasoning=False).parse(
        completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop"
    )
    assert turn.tool_calls == () and [e.kind for e in turn.errors] == [ParseErrorKind.CALL_IN_REASONING]
    assert turn.reasoning.startswith("I should list the directory.") and "<tool_call>" in turn.reasoning


@pytest.mark.parametrize("ends", [True, False])
def test_a_call_cut_off_in_open_reasoning_is_never_executed(ends: bool) -> None:
    prompt, completion = _open_reasoning_completion(QWEN35)
    cut = completion[: completion.index("ls -la") + 3]
    turn = Qwen3CoderParser(tool_call_ends_reasoning=ends).parse(
        cut, tools=TOOLS, generation_prompt=prompt, finish_reason="length"
    )
    assert turn.tool_calls == ()
    assert [e.kind for e in turn.errors] == [
        ParseErrorKind.UNCLOSED_BLOCK if ends else ParseErrorKind.CALL_IN_REASONING
    ]


def test_a_mention_of_the_opener_does_not_end_reasoning() -> None:
    prompt = QWEN35.render(CALL)[0]
    text = "The format is <tool_call> then a function tag; still thinking"
    turn = get_parser("qwen3_coder").parse(text, tools=TOOLS, generation_prompt=prompt, finish_reason="length")
    assert turn.reasoning == text and turn.tool_calls == () and turn.content == ""


def test_a_rehearsal_inside_closed_reasoning_is_still_not_executed() -> None:
    prompt, completion = QWEN35.render(CALL)
    call = completion[completion.index("<tool_call>") :]
    text = "Maybe:\n" + call + "\nNo, not yet.\n</think>\n\nDone."
    turn = get_parser("qwen3_coder").parse(text, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
    assert (
        turn.tool_calls == ()
        and turn.content == "Done."
        and [e.kind for e in turn.errors] == [ParseErrorKind.CALL_IN_REASONING]
    )


@pytest.mark.parametrize(
    ("family", "parser_class"), [(QWEN35, Qwen3CoderParser), (QWEN3, HermesParser)], ids=["qwen3_coder", "hermes"]
)
def test_a_call_in_open_reasoning_may_quote_the_reasoning_closer(family, parser_class) -> None:
    """The closer inside the call's arguments does not close the reasoning (classes 1 and 4 together)."""
    calls = [("run_code", {"code": "grep -n '</think>' notes.md"})]
    prompt, completion = family.render(calls)
    call = completion[completion.index("<tool_call>") :]
    prompt = prompt if prompt.rstrip().endswith("<think>") else prompt + "<think>\n"
    turn = parser_class().parse(
        "Search the notes.\n\n" + call, tools=TOOLS, generation_prompt=prompt, finish_reason="stop"
    )
    assert (
        turn.reasoning == "Search the notes."
        and [(c.name, c.arguments) for c in turn.tool_calls] == calls
        and turn.errors == ()
    )
    strict = parser_class(tool_call_ends_reasoning=False).parse(
        "Search the notes.\n\n" + call, tools=TOOLS, generation_prompt=prompt, finish_reason="stop"
    )
    assert strict.tool_calls == ()

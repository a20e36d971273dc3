"""Class 1 of issue 13: a family's own markers quoted inside a string argument are content.

For every parser, hypothesis generates string arguments built from that family's own structural
markers (plus text), renders a turn with the family's official chat template or encoder
(tests/parser_renderings.py; grammar-written for the families with none installed), and requires
the parser to give back exactly the calls rendered: not cut at the quoted marker, not dropped as
reasoning, not turned into an unknown tool.

Raw-text formats (Qwen XML, GLM, DSML, MiniMax, Kimi K3) cannot tell a closer quoted in a value
from the real one when it is followed by the next structural tag (`x</parameter>\\n<parameter=y>`
is both); there a quoted marker is followed by a non-space character, as code quoting it is
(`print('</parameter>')`). Gemma's string quote `<|"|>` and LFM2's `'`/`\\` cannot be written inside
a string by their templates at all, so they are not generated.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openreward_rl.parsers import get_parser
from parser_renderings import TOOLS, FamilyRendering, families

FAMILIES = families()
_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")) | st.sampled_from("\n\t "), max_size=6
)


def _arguments(family: FamilyRendering) -> st.SearchStrategy[str]:
    marker = st.sampled_from(family.markers)
    if family.raw_values:
        piece = st.one_of(st.tuples(marker, st.sampled_from(["'", ")", "x", '"', "é"])).map("".join), _TEXT)
    else:
        piece = st.one_of(marker, _TEXT)
    value = st.lists(piece, min_size=1, max_size=8).map("".join)
    value = value.filter(
        lambda v: not any(c in v for c in family.forbidden) and family.forbidden not in v if family.forbidden else True
    )
    if (
        family.raw_values
    ):  # a raw value's outer whitespace is layout in several templates; code starts and ends with text
        value = value.map(lambda v: f"a{v}z")
    return value


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.label)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_family_markers_inside_string_arguments_round_trip(family: FamilyRendering, data: st.DataObject) -> None:
    code = data.draw(_arguments(family), label="code")
    note = data.draw(_arguments(family), label="note")
    calls = [("run_code", {"code": code, "note": note}), ("run_code", {"code": note})][: family.max_calls]
    prompt, completion = family.render(calls)
    for finish_reason in ("stop", None):
        turn = get_parser(family.parser).parse(
            completion, tools=TOOLS, generation_prompt=prompt, finish_reason=finish_reason
        )
        assert turn.errors == (), (completion, turn.errors)
        assert [(c.name, c.arguments) for c in turn.tool_calls] == calls, completion
        assert turn.content == ""


# Fixed cases named in the issue, one per family affected before the fix.
@pytest.mark.parametrize(
    ("label", "code"),
    [
        ("gpt-oss", "echo '<|end|><|start|>assistant<|channel|>final<|message|>done'"),
        ("llama3.1", 'print("<|python_tag|>{\\"name\\": \\"x\\"}")'),
        ("gemma4", "x = '<channel|>' + '<start_function_call>'"),
        ("deepseek-v3.1", "grep -n '</think>' notes.md"),
        ("kimi-k2 (grammar)", "s = '<|tool_call_section_end|>'"),
        ("mistral v13 (grammar)", "echo [/THINK] [TOOL_CALLS]"),
        ("lfm2.5 (pythonic)", "echo <|tool_call_end|> </think>"),
    ],
)
def test_named_marker_cases(label: str, code: str) -> None:
    family = next(f for f in FAMILIES if f.label == label)
    calls = [("run_code", {"code": code})]
    prompt, completion = family.render(calls)
    turn = get_parser(family.parser).parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
    assert (turn.errors, [(c.name, c.arguments) for c in turn.tool_calls]) == ((), calls)

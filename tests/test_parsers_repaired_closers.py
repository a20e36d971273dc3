"""Class 2 of issue 13: a closer the model often forgets, while the rest is unambiguous, is
restored instead of swallowing the next parameter or dropping the call.

- Qwen3-Coder XML (Qwen3.5/3.6 templates): `</parameter>` missing before the next `<parameter=`
  (on its own line, naming a parameter the tool declares) or before `</function>`;
- GLM-4.5/4.7/5.x: `</arg_value>` missing before `</tool_call>` (the last value) or before the
  next `<arg_key>`.

Turns are rendered by the official templates, then the closer is deleted, as a model that forgets
it would write. The repair is recorded as a REPAIRED_CLOSER note carrying the executed call's id
(counted in metrics, not sent back to the model, which only hears about errors of calls that did
not run). A cut-off turn is still never executed with a shortened argument.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openreward_rl.parsers import ParseErrorKind, get_parser
from parser_renderings import TOOLS, FamilyRendering, families

CLOSERS = {"qwen3_coder": "\n</parameter>", "glm45": "</arg_value>", "glm47": "</arg_value>"}
REPAIRABLE = [f for f in families() if f.parser in CLOSERS and f.label != "qwen3.5 nothink"]
VALUES = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"), exclude_characters="<>"),
    min_size=1,
    max_size=20,
).map(lambda v: f"x{v}y")


def _forget(completion: str, closer: str, which: int) -> str:
    """`completion` with its `which`-th `closer` removed."""
    position = -1
    for _ in range(which + 1):
        position = completion.index(closer, position + 1)
    return completion[:position] + completion[position + len(closer) :]


def _check_repaired(family: FamilyRendering, calls, prompt: str, text: str) -> None:
    turn = get_parser(family.parser).parse(text, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == calls, text
    notes = [e for e in turn.errors if e.kind is ParseErrorKind.REPAIRED_CLOSER]
    assert len(notes) == 1 and len(turn.errors) == 1, turn.errors
    assert notes[0].call_id in {c.id for c in turn.tool_calls}  # a note on a call that ran, not an error


@pytest.mark.parametrize("family", REPAIRABLE, ids=lambda f: f.label)
@settings(max_examples=40, deadline=None)
@given(code=VALUES, note=VALUES, which=st.integers(0, 2))
def test_a_forgotten_closer_is_restored(family: FamilyRendering, code: str, note: str, which: int) -> None:
    calls = [("run_code", {"code": code, "note": note}), ("run_code", {"code": note})]
    prompt, completion = family.render(calls)
    _check_repaired(family, calls, prompt, _forget(completion, CLOSERS[family.parser], which))


@pytest.mark.parametrize("family", REPAIRABLE, ids=lambda f: f.label)
def test_named_cases_from_the_issue(family: FamilyRendering) -> None:
    calls = [("run_code", {"code": "ls -la", "note": "list"}), ("run_code", {"code": "pwd"})]
    prompt, completion = family.render(calls)
    closer = CLOSERS[family.parser]
    # Before the next parameter: it used to be swallowed into the value ("ls -la\n<parameter=note>…").
    _check_repaired(family, calls, prompt, _forget(completion, closer, 0))
    # The last value of the last call, right before the function's / call's end: it used to be dropped.
    _check_repaired(family, calls, prompt, _forget(completion, closer, 2))
    # The last value of the first call: the next call used to be swallowed.
    _check_repaired(family, calls, prompt, _forget(completion, closer, 1))


@pytest.mark.parametrize("family", REPAIRABLE, ids=lambda f: f.label)
def test_a_quoted_opener_is_not_mistaken_for_a_forgotten_closer(family: FamilyRendering) -> None:
    """The opener of a parameter the tool does not declare, written in code, keeps the value whole."""
    code = "cat <<EOF\n<parameter=path>\n<arg_key>path</arg_key><arg_value>\nEOF"
    calls = [("run_code", {"code": code})]
    prompt, completion = family.render(calls)
    turn = get_parser(family.parser).parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == calls and turn.errors == ()


@pytest.mark.parametrize("family", REPAIRABLE, ids=lambda f: f.label)
@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_cut_off_turn_with_a_forgotten_closer_never_runs_a_shortened_call(
    family: FamilyRendering, which: int
) -> None:
    calls = [("run_code", {"code": "rm -rf /tmp/build", "note": "clean"}), ("run_code", {"code": "make install"})]
    prompt, completion = family.render(calls)
    text = _forget(completion, CLOSERS[family.parser], which)
    parser = get_parser(family.parser)
    for cut in range(len(text)):
        executed = [
            (c.name, c.arguments)
            for c in parser.parse(text[:cut], tools=TOOLS, generation_prompt=prompt, finish_reason="length").tool_calls
        ]
        assert executed == calls[: len(executed)], (cut, text[:cut], executed)

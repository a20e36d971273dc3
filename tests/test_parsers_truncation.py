"""Class 5 of issue 13: a call cut off by the length limit (or an abort) is never executed with a
shortened argument, in any parser.

Every family's real rendering (tests/parser_renderings.py) of two calls is cut at *every* position;
parsed with finish_reason "length" and "abort", the executed calls must be exactly the first k
calls rendered, for some k: a cut-off `rm -rf /tmp/build && make install` that ran as `rm -rf /tmp/b`
(or a timeout of 12 run as 1) would fail here.
"""

from __future__ import annotations

import pytest

from openreward_rl.parsers import get_parser
from parser_renderings import TOOLS, FamilyRendering, families

CALLS = [
    ("run_code", {"code": "rm -rf /tmp/build && make install", "timeout": 120}),
    ("run_code", {"code": 'echo "done" > /tmp/status', "note": "final step"}),
]


@pytest.mark.parametrize("family", families(), ids=lambda f: f.label)
@pytest.mark.parametrize("finish_reason", ["length", "abort"])
def test_no_cut_ever_executes_a_shortened_call(family: FamilyRendering, finish_reason: str) -> None:
    calls = CALLS[: family.max_calls]
    prompt, completion = family.render(calls)
    parser = get_parser(family.parser)
    full = parser.parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
    assert [(c.name, c.arguments) for c in full.tool_calls] == calls and full.errors == ()
    for cut in range(len(completion)):
        turn = parser.parse(completion[:cut], tools=TOOLS, generation_prompt=prompt, finish_reason=finish_reason)
        executed = [(c.name, c.arguments) for c in turn.tool_calls]
        assert executed == calls[: len(executed)], (cut, completion[:cut], executed)


@pytest.mark.parametrize("family", families(), ids=lambda f: f.label)
def test_no_cut_executes_a_shortened_call_that_quotes_the_family_markers(family: FamilyRendering) -> None:
    """The same, with the family's own markers quoted in the arguments (class 1 meets class 5)."""
    quoted = " ".join(f"'{m}'" for m in family.markers if not (family.forbidden and family.forbidden in m))
    if "'" in family.forbidden:
        quoted = quoted.replace("'", '"')
    calls = [
        ("run_code", {"code": f"echo {quoted} && rm -rf /tmp/x", "timeout": 7}),
        ("run_code", {"code": f"cat {quoted}"}),
    ][: family.max_calls]
    prompt, completion = family.render(calls)
    parser = get_parser(family.parser)
    full = parser.parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
    assert [(c.name, c.arguments) for c in full.tool_calls] == calls and full.errors == ()
    for cut in range(len(completion)):
        turn = parser.parse(completion[:cut], tools=TOOLS, generation_prompt=prompt, finish_reason="length")
        executed = [(c.name, c.arguments) for c in turn.tool_calls]
        assert executed == calls[: len(executed)], (cut, completion[:cut], executed)


def test_the_check_can_fail_a_stop_cut_executes_a_prefix() -> None:
    """Guard for the test itself: with finish_reason "stop" a missing closer is accepted, so some
    cut of a raw-value format does execute a shortened argument; "length" must prevent exactly that."""
    family = next(f for f in families() if f.label == "qwen3.5")
    prompt, completion = family.render(CALLS)
    parser = get_parser(family.parser)
    shortened = [
        cut
        for cut in range(len(completion))
        if [
            (c.name, c.arguments)
            for c in parser.parse(
                completion[:cut], tools=TOOLS, generation_prompt=prompt, finish_reason="stop"
            ).tool_calls
        ]
        not in [CALLS[:k] for k in range(len(CALLS) + 1)]
    ]
    assert shortened

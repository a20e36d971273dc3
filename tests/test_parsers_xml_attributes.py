"""Class 3 of issue 13: XML entities in Kimi K3 attributes (tool names, argument keys) are unescaped.

Kimi K3's XTML writes attribute values XML-escaped; the turn here is written from the grammar
(no K3 encoder is installed: see tests/parser_renderings.py) with the escaping an XML writer applies.
DSML and MiniMax are checked the other way: their official encoder / template write attribute
values unescaped, so `&amp;` there is literal text and must stay so.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from openreward_rl.parsers import get_parser
from parser_renderings import TOOLS, families, xml_attribute

KIMI_K3 = next(f for f in families() if f.parser == "kimi_k3")
DSV4 = next(f for f in families() if f.label == "deepseek-v4")
MINIMAX = next(f for f in families() if f.parser == "minimax_m2")
KEYS = st.text(alphabet=st.sampled_from("ab_-&<>\"'é;#x1 "), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(keys=st.lists(KEYS, min_size=1, max_size=3, unique=True))
def test_kimi_k3_argument_keys_round_trip_through_xml_escaping(keys: list[str]) -> None:
    calls = [("run_code", {key: f"value {i}" for i, key in enumerate(keys)})]
    prompt, completion = KIMI_K3.render(calls)
    turn = get_parser("kimi_k3").parse(completion, generation_prompt=prompt, finish_reason="stop")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == calls and turn.errors == ()


def test_kimi_k3_named_entities_and_numeric_references() -> None:
    text = (
        '<|open|>tools<|sep|><|open|>call tool="run_code" index="1"<|sep|>'
        '<|open|>argument key="a&amp;b&lt;&gt;&quot;&apos;&#233;&#x41;" type="string"<|sep|>v<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|>"
    )
    turn = get_parser("kimi_k3").parse(text, tools=TOOLS, finish_reason="stop")
    assert turn.tool_calls[0].arguments == {"a&b<>\"'éA": "v"}
    assert xml_attribute('a&b<>"') == "a&amp;b&lt;&gt;&quot;"


def test_dsml_and_minimax_attributes_are_not_unescaped() -> None:
    for family in (DSV4, MINIMAX):
        calls = [("run_code", {"a&amp;b": "x"})]
        prompt, completion = family.render(calls)
        assert 'name="a&amp;b"' in completion
        turn = get_parser(family.parser).parse(completion, tools=TOOLS, generation_prompt=prompt, finish_reason="stop")
        assert [(c.name, c.arguments) for c in turn.tool_calls] == calls

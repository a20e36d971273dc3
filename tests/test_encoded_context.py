"""The ledger's incrementally built JSON of the context is exactly `json.dumps` of the context, whatever
mix of appends, reads and prefix breaks came before; `SGLangEngine` splices it into the body unchanged."""

import json

from hypothesis import given
from hypothesis import strategies as st

from openreward_rl.engines.base import EncodedIds
from openreward_rl.engines.sglang import _generate_body, _ids_json
from openreward_rl.loop.trajectory import TokenLedger

ids = st.lists(st.integers(min_value=0, max_value=200_000), max_size=20)
step = st.one_of(
    st.tuples(st.just("environment"), ids),
    st.tuples(st.just("sampled"), ids),
    st.tuples(st.just("prompt"), ids),
    st.tuples(st.just("read"), st.just([])),
)


@given(st.lists(ids, min_size=1, max_size=1).filter(lambda p: p[0]), st.lists(step, max_size=30))
def test_encoded_context_is_json_dumps_of_the_context(
    first: list[list[int]], steps: list[tuple[str, list[int]]]
) -> None:
    ledger = TokenLedger.start(first[0])
    for kind, chunk in steps:
        if kind == "environment":
            ledger.append_environment(chunk)
        elif kind == "sampled":
            ledger.append_sampled(chunk, [-0.5] * len(chunk))
        elif kind == "prompt" and chunk:
            ledger.add_turn_prompt(chunk)  # may extend the context or break the prefix
        encoded = ledger.encoded_context()
        assert encoded == ledger.context()
        assert encoded.json_text == json.dumps(ledger.context())


def test_engine_body_is_the_json_it_would_have_sent() -> None:
    context = EncodedIds([3, 1, 4], json_text="[3, 1, 4]")
    payload = {
        "sampling_params": {"max_new_tokens": 8, "stop": ["</tool_call>"]},
        "return_logprob": True,
        "rid": "r_t0",
    }
    body = json.loads(_generate_body(_ids_json(context), payload))
    assert body == {"input_ids": [3, 1, 4], **payload}
    assert json.loads(_generate_body(_ids_json((5, 6)), payload))["input_ids"] == [5, 6]  # plain sequences too

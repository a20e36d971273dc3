"""TokenLedger: merge by exact prefix, split (and count) on a break."""

import pytest

from openreward_rl.loop.trajectory import TokenLedger


def test_turns_merge_when_each_prompt_extends_the_sequence() -> None:
    ledger = TokenLedger.start([1, 2, 3])
    ledger.append_sampled([10, 11], [-0.1, -0.2])
    assert ledger.add_turn_prompt([1, 2, 3, 10, 11, 50, 51])
    ledger.append_sampled([12], [-0.3])
    segment = ledger.current
    assert segment.prompt_ids == [1, 2, 3]
    assert segment.response_ids == [10, 11, 50, 51, 12]
    assert segment.loss_mask == [1, 1, 0, 0, 1]
    assert segment.rollout_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3]
    assert ledger.prefix_breaks == 0


def test_a_prompt_that_rewrites_history_starts_a_new_segment() -> None:
    ledger = TokenLedger.start([1, 2, 3])
    ledger.append_sampled([10, 11], [-0.1, -0.2])
    assert not ledger.add_turn_prompt([1, 2, 3, 99, 50])  # 10, 11 were re-rendered as 99
    ledger.append_sampled([12], [-0.3])
    assert ledger.prefix_breaks == 1
    assert [s.prompt_ids for s in ledger.segments] == [[1, 2, 3], [1, 2, 3, 99, 50]]
    assert ledger.segments[0].response_ids == [10, 11]
    assert ledger.current.response_ids == [12]


def test_masked_thinking_keeps_tokens_but_zeroes_mask_and_logprobs() -> None:
    ledger = TokenLedger.start([1])
    ledger.append_sampled([5, 6, 7], [-1.0, -2.0, -3.0], trained=[False, False, True])
    assert ledger.current.loss_mask == [0, 0, 1]
    assert ledger.current.rollout_logprobs == [0.0, 0.0, -3.0]


def test_rejects_misaligned_logprobs_and_empty_prompt() -> None:
    with pytest.raises(ValueError, match="at least one token"):
        TokenLedger.start([])
    with pytest.raises(ValueError, match="log-probs"):
        TokenLedger.start([1]).append_sampled([1, 2], [0.0])

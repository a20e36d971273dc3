"""Per-turn rewards, returns and token spans: on real episodes (the SDK's environment server running
CombinationLock, the SGLang wire double, the real Qwen3 tokenizer, Slime's `Sample` double) and on
hand-built trajectories with prefix breaks."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from doubles import slime_double
from openreward_rl.backends import slime
from openreward_rl.backends._sample import state as _state
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.config import ConfigError, parse_config
from openreward_rl.credit.returns import TurnCredit, reward_to_go, token_rewards, turn_spans
from openreward_rl.engines.base import FinishReason
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.loop.trajectory import StopReason, TokenSegment, Trajectory, Turn
from openreward_rl.parsers.base import ParsedTurn
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from test_backend_slime import EXPLODE, SAMPLING, make_args

pytestmark = pytest.mark.anyio


def digit(d: int) -> str:
    return f'<tool_call>\n{{"name": "try_digit", "arguments": {{"digit": {d}}}}}\n</tool_call>'


@pytest.fixture
def lock_config(served_config) -> Any:
    """context_policy: none: these tests read one Sample per rollout; with the default policy the hook returns a list
    for every rollout in training (test_backend_slime.py::test_the_default_context_policy_makes_a_list_of_every_training_rollout)."""
    none = {"context_policy": "none"}
    return served_config(
        {"CombinationLock": {"max_turns": 3, "nonterminal_reward": -0.5, **none}, "Faulty": none},
        advantage={"estimator": "turn", "gamma": 0.5},
    )


@pytest.fixture
async def sglang(qwen3_tokenizer) -> Any:
    async with SGLangTestServer(qwen3_tokenizer) as server:
        yield server
    await _state.close_states()


def lock_sample(index: int = 0) -> slime_double.Sample:
    return slime_double.task_sample(
        TaskRef("CombinationLock", "train", index=index), index=0, group_index=0, session_id="s0"
    )


async def test_each_turn_gets_its_reward_on_its_last_token_and_its_return(lock_config, sglang, qwen3_tokenizer) -> None:
    # lock-train-0 is [6, 6]: a wrong digit (0.0), a right one (0.1), the one that opens it (1.0)
    sglang.push(ScriptedCompletion(text=digit(3)), ScriptedCompletion(text=digit(6)), ScriptedCompletion(text=digit(6)))
    args = make_args(sglang)
    sample = await slime_double.call_generate(slime.generate, args, lock_sample(), copy.deepcopy(SAMPLING))
    slime_double.check_output(sample, args)
    json.dumps(sample.metadata)
    record = EpisodeRecord.from_metadata(sample.metadata)
    assert record.turn_rewards == [0.0, 0.1, 1.0]
    assert record.turn_returns == pytest.approx([0.0 + 0.5 * (0.1 + 0.5 * 1.0), 0.1 + 0.5 * 1.0, 1.0])
    assert record.returns_gamma == 0.5
    credit = record.credit
    assert credit is not None and [s[0] for s in credit.spans] == [0, 0, 0]
    im_end = qwen3_tokenizer.convert_tokens_to_ids("<|im_end|>")
    response = sample.tokens[-sample.response_length :]
    spans = [s[1:] for s in credit.spans]
    assert spans[0][0] == 0 and spans[-1][1] == sample.response_length  # the whole response, no gap
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    for (start, _), end in zip(spans, credit.sampled_ends):
        assert (
            all(sample.loss_mask[start:end]) and response[end - 1] == im_end
        )  # the turn's sampled tokens, ending at <|im_end|>
    for (_, end), sampled_end in zip(spans[:-1], credit.sampled_ends[:-1]):
        assert not any(sample.loss_mask[sampled_end:end])  # then the environment's reply, masked
    rewards = credit.segment_token_rewards(0, sample.response_length)
    assert [i for i, r in enumerate(rewards) if r] == [credit.sampled_ends[1] - 1, credit.sampled_ends[2] - 1]
    assert sum(rewards) == pytest.approx(1.1)


async def test_an_unfinished_episode_adds_the_nonterminal_reward_to_its_last_turn(lock_config, sglang) -> None:
    sglang.push(*(ScriptedCompletion(text=digit(1)) for _ in range(3)))  # three wrong digits: max_turns
    sample = await slime_double.call_generate(slime.generate, make_args(sglang), lock_sample(), copy.deepcopy(SAMPLING))
    record = EpisodeRecord.from_metadata(sample.metadata)
    assert record.stop_reason is StopReason.MAX_TURNS
    assert record.turn_rewards == [0.0, 0.0, -0.5] and record.turn_returns == [-0.125, -0.25, -0.5]
    assert record.episode_reward == -0.5  # the episode reducer appends the same step


async def test_an_infrastructure_failure_has_no_returns(lock_config, sglang) -> None:
    sglang.push(ScriptedCompletion(text=EXPLODE))
    row = task_row(TaskRef("Faulty", "train", index=0))
    sample = slime_double.Sample(index=0, group_index=0, prompt=row["prompt"], metadata=row["metadata"], session_id="s")
    sample = await slime_double.call_generate(slime.generate, make_args(sglang), sample, copy.deepcopy(SAMPLING))
    record = EpisodeRecord.from_metadata(sample.metadata)
    assert record.stop_reason is StopReason.ENV_ERROR and sample.remove_sample
    assert record.turn_returns is None and record.credit is None and "turn_returns" not in sample.metadata


def _turn(prompt_length: int, sampled: list[int], rewards: tuple[float, ...]) -> Turn:
    return Turn(
        prompt_length=prompt_length,
        sampled_ids=tuple(sampled),
        logprobs=(0.0,) * len(sampled),
        finish_reason=FinishReason.STOP,
        parsed=ParsedTurn(content=""),
        rewards=rewards,
    )


def test_turns_after_a_prefix_break_are_placed_in_their_segment() -> None:
    first = TokenSegment(
        prompt_ids=[1, 2], response_ids=[10, 11, 90, 91, 12], loss_mask=[1, 1, 0, 0, 1], rollout_logprobs=[0.0] * 5
    )
    second = TokenSegment(
        prompt_ids=[5, 6, 7], response_ids=[20, 21, 92, 22], loss_mask=[1, 1, 0, 1], rollout_logprobs=[0.0] * 4
    )
    turns = [_turn(2, [10, 11], (0.2,)), _turn(6, [12], ()), _turn(3, [20, 21], (0.3,)), _turn(6, [22], (1.0,))]
    task = TaskRef("e", "train", index=0)
    trajectory = Trajectory(
        task=task,
        segments=[first, second],
        turns=turns,
        messages=[],
        step_rewards=[0.2, 0.3, 1.0],
        reward=1.5,
        stop_reason=StopReason.COMPLETED,
        finished=True,
    )
    assert turn_spans(trajectory) == [(0, 0, 4), (0, 4, 5), (1, 0, 3), (1, 3, 4)]
    credit = TurnCredit.of_trajectory(trajectory)
    assert credit is not None and credit.returns == (1.5, 1.3, 1.3, 1.0) and credit.sampled_ends == (2, 5, 2, 4)
    assert credit.segment_token_rewards(1, 4) == [0.0, 0.3, 0.0, 1.0]


def test_a_turn_whose_tokens_are_nowhere_is_refused() -> None:
    segment = TokenSegment(prompt_ids=[1], response_ids=[10], loss_mask=[1], rollout_logprobs=[0.0])
    trajectory = Trajectory(
        task=TaskRef("e", "train", index=0),
        segments=[segment],
        turns=[_turn(1, [11], ())],
        messages=[],
        step_rewards=[],
        reward=None,
        stop_reason=StopReason.COMPLETED,
    )
    with pytest.raises(ValueError, match="in no segment"):
        turn_spans(trajectory)


def test_reward_to_go_and_token_rewards() -> None:
    assert reward_to_go([1.0, 0.0, 2.0]) == [3.0, 2.0, 2.0]
    assert reward_to_go([1.0, 0.0, 2.0], gamma=0.0) == [1.0, 0.0, 2.0]
    with pytest.raises(ValueError):
        reward_to_go([1.0], gamma=1.5)
    with pytest.raises(ValueError, match="outside"):
        token_rewards([(0, 2)], [1.0], 2, ends=[3])


@pytest.mark.parametrize(
    ("advantage", "message"),
    [
        ({"estimator": "grpo"}, "must be one of episode, turn, turn_index, mix"),
        ({"estimator": "turn", "gamma": 1.5}, "gamma: must be a number in"),
        ({"estimator": "mix", "mix_weight": -0.1}, "mix_weight: must be a number in"),
        ({"estimator": "turn", "mix_weight": 0.3}, "only the mix estimator"),
        ({"estimater": "turn"}, "did you mean 'estimator'"),
        ("turn", "must be a mapping"),
    ],
)
def test_advantage_settings_are_validated(advantage: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"environments": {"Env": {}}, "advantage": advantage})


def test_advantage_defaults_to_the_episode_estimator() -> None:
    settings = parse_config({"environments": {"Env": {}}}).advantage
    assert settings.estimator == "episode" and not settings.per_token
    assert (
        parse_config(
            {"environments": {"Env": {}}, "advantage": {"estimator": "mix", "mix_weight": 0.25}}
        ).advantage.mix_weight
        == 0.25
    )

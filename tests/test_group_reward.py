"""Group rewards through the SDK's real `score_group`: the ClosestGuess example environment served by
the SDK's own `Server` on 127.0.0.1 (it ranks a group's estimates), the Slime/Miles hooks driven end
to end against the SGLang wire-format double (`SGLangTestServer`, scripted completions, real Qwen3
tokenizer), checked by the test doubles of Slime's and Miles' `Sample` (tests/doubles/slime_double.py,
tests/doubles/miles_double.py: Slime and Miles cannot run here)."""

from __future__ import annotations

import asyncio
import copy
from fractions import Fraction
from typing import Any

import attrs
import pytest
from openreward.api.environments.types import GroupCandidate, Message, TextBlock

from doubles import miles_double, slime_double
from examples.environments.closest_guess import make_question, rank_rewards
from openreward_rl.backends import miles, slime
from openreward_rl.backends._sample import state as _state
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from test_backend_slime import SAMPLING, make_args, record_of, sglang, tokenizer  # noqa: F401  (fixtures)

pytestmark = pytest.mark.anyio

_, TARGET = make_question("closest/train/0")  # the product task 0 asks for
_, TARGET_1 = make_question("closest/train/1")


@pytest.fixture
def config_file(served_config) -> Any:
    """As a user writes it: the rows carry no variant, the config names each environment's class. context_policy: none:
    these tests read one Sample per rollout (test_backend_slime.py::test_the_default_context_policy_makes_a_list_of_every_training_rollout)."""
    return served_config(
        {
            "ClosestGuess": {"context_policy": "none", "max_turns": 2},
            "MathEnv": {"context_policy": "none", "max_turns": 2},
        }
    )


def slime_sample(environment: str = "ClosestGuess", index: int = 0, sample_index: int = 0) -> slime_double.Sample:
    sample = slime_double.task_sample(
        TaskRef(environment, "train", index=index), index=sample_index, group_index=0, session_id=f"s-{sample_index}"
    )
    assert sample.metadata["variant"] is None  # the hook must take the variant from the config
    return sample


async def slime_group(
    args: Any, sglang: SGLangTestServer, answers: list[ScriptedCompletion], **sample_kwargs: Any
) -> list[slime_double.Sample]:
    sglang.push(*answers)
    group = []
    for i in range(len(answers)):
        group.append(
            await slime_double.call_generate(
                slime.generate, args, slime_sample(sample_index=i, **sample_kwargs), copy.deepcopy(SAMPLING)
            )
        )
    assert sglang.pending_script == 0
    return group


def say(estimate: Any) -> ScriptedCompletion:
    return ScriptedCompletion(text=f"My estimate is {estimate}.")


async def direct_scores(env_server, client, texts: list[str], index: int = 0) -> list[Any]:
    """What the environment's `score_group` answers for these final messages, asked through the SDK directly."""
    environment = env_server.environment(client, "ClosestGuess")
    candidates = [GroupCandidate(messages=[Message(role="assistant", blocks=[TextBlock(text=t)])]) for t in texts]
    async with environment.session(split="train", index=index) as session:
        assert await session.supports_score_group()
        return await session.score_group(candidates)


async def test_closest_guess_scores_a_group_through_the_sdk(env_server, openreward_client, math_env) -> None:
    texts = [f"about {TARGET * 2}", "no idea", f"roughly {TARGET}", f"{TARGET + 1}"]
    scores = await direct_scores(env_server, openreward_client, texts)
    assert [s.reward for s in scores] == [1 / 3, 0.0, 1.0, 2 / 3]  # index-aligned, not sorted
    assert scores[0].metadata == {"estimate": str(TARGET * 2), "relative_error": 1.0}
    assert scores[1].metadata == {"estimate": None, "relative_error": None}
    async with math_env.session(split="train", index=0) as session:
        assert await session.supports_score_group() is False


async def test_slime_group_rm_rewards_are_the_environments_group_scores(
    config_file, sglang, env_server, openreward_client
) -> None:
    args = make_args(sglang, group_rm=True)
    estimates = [TARGET * 3 // 2, "nothing", TARGET, TARGET * 1005 // 1000]  # pointwise 0, 0, 1, 1
    group = await slime_group(args, sglang, [say(e) for e in estimates])
    assert [s.reward for s in group] == [0.0, 0.0, 1.0, 1.0]  # the generate hook's pointwise rewards
    expected = await direct_scores(env_server, openreward_client, [f"My estimate is {e}." for e in estimates])
    assert [s.reward for s in expected] == [1 / 3, 0.0, 1.0, 2 / 3]

    rewards = await slime.reward(args, group)

    assert rewards == [s.reward for s in expected]
    for sample, reward, score, pointwise in zip(group, rewards, expected, [0.0, 0.0, 1.0, 1.0]):
        assert record_of(sample).group_scored is True and record_of(sample).pointwise_reward == pointwise
        assert record_of(sample).group_score_metadata == score.metadata
        assert record_of(sample).group_score_error is None
        sample.reward = reward  # what Slime does with the list under --group-rm
        slime_double.check_trainable(sample, args)
    # without --group-rm the same samples keep their own rewards and no session is opened for scoring
    assert await slime.reward(make_args(sglang), group) == [0.0, 0.0, 1.0, 1.0]


async def test_aborted_members_are_neither_scored_nor_rewarded(
    config_file, sglang, env_server, openreward_client
) -> None:
    args = make_args(sglang, group_rm=True)
    # the aborted member's partial text names the exact product: were it sent to score_group, it would
    # take the top rank and push the others down
    answers = [say(TARGET * 2), ScriptedCompletion(text=f"It is {TARGET}", finish="abort"), say(TARGET * 3)]
    group = await slime_group(args, sglang, answers)
    aborted = group[1]
    assert aborted.status is slime_double.Sample.Status.ABORTED and aborted.remove_sample

    rewards = await slime.reward(args, group)

    expected = await direct_scores(
        env_server, openreward_client, [f"My estimate is {TARGET * 2}.", f"My estimate is {TARGET * 3}."]
    )
    assert rewards == [expected[0].reward, 0.0, expected[1].reward] == [1.0, 0.0, 0.0]
    assert record_of(aborted).group_scored is None
    for sample, reward in zip(group, rewards):
        sample.reward = reward
        slime_double.check_trainable(sample, args)


async def test_a_group_with_one_live_member_keeps_its_pointwise_reward(config_file, sglang) -> None:
    args = make_args(sglang, group_rm=True)
    group = await slime_group(args, sglang, [say(TARGET), ScriptedCompletion(text="cut", finish="abort")])
    assert await slime.reward(args, group) == [1.0, 0.0]
    assert not any(record_of(s).group_scored is not None for s in group)


async def test_each_task_of_a_mixed_list_is_scored_on_its_own(config_file, sglang) -> None:
    args = make_args(sglang, group_rm=True)
    first = await slime_group(args, sglang, [say(TARGET * 2), say(TARGET)], index=0)
    # task 1's estimates are far from task 1's product but would rank differently against task 0's
    second = await slime_group(args, sglang, [say(TARGET_1 * 5), say(TARGET_1 * 4)], index=1)
    assert await slime.reward(args, [*first, *second]) == [0.0, 1.0, 0.0, 1.0]


async def test_a_failing_score_group_keeps_pointwise_rewards_and_says_why(config_file, sglang) -> None:
    args = make_args(sglang, group_rm=True)
    group = await slime_group(args, sglang, [say(TARGET), say(TARGET * 2)])
    transcript = record_of(group[1]).transcript
    group[1].metadata = attrs.evolve(
        record_of(group[1]), transcript=[m for m in transcript if m["role"] != "assistant"]
    ).to_metadata(group[1].metadata)  # nothing to judge
    assert await slime.reward(args, group) == [1.0, 0.0]  # the environment raised: pointwise rewards stand
    for sample in group:
        assert (
            "ScoreGroupFailed" in record_of(sample).group_score_error
            and "no assistant message" in record_of(sample).group_score_error
        )
        assert record_of(sample).group_scored is None


async def test_environment_without_score_group_keeps_pointwise_rewards(config_file, sglang) -> None:
    from examples.environments.math_env import make_problem

    _, answer = make_problem("math/train/0")
    args = make_args(sglang, group_rm=True)
    sglang.push(say(answer), say(answer + 1))
    group = [
        await slime_double.call_generate(
            slime.generate, args, slime_sample("MathEnv", sample_index=i), copy.deepcopy(SAMPLING)
        )
        for i in range(2)
    ]
    assert await slime.reward(args, group) == [1.0, 0.0]
    assert [record_of(s).group_scored for s in group] == [False, False]  # asked, and the environment has none
    assert not any(
        record_of(s).group_score_error is not None or record_of(s).pointwise_reward is not None for s in group
    )


async def test_clamped_to_the_configured_reward_range(config_file, sglang) -> None:
    config_file.write_text(
        config_file.read_text().replace(
            "    max_turns: 2\n  MathEnv", "    max_turns: 2\n    min_reward: 0.25\n    max_reward: 0.5\n  MathEnv"
        )
    )
    args = make_args(sglang, group_rm=True)
    group = await slime_group(args, sglang, [say(TARGET), say(TARGET * 2), say(TARGET * 3)])
    assert await slime.reward(args, group) == [0.5, 0.5, 0.25]  # raw ranks 1.0, 0.5, 0.0
    assert [record_of(s).group_score for s in group] == [1.0, 0.5, 0.0]


async def test_miles_group_rm_fills_rewards_from_score_group(
    config_file, env_server, openreward_client, tokenizer
) -> None:
    async with SGLangTestServer(tokenizer) as server:
        try:
            args = make_args(server, group_rm=True)
            answers = [say(TARGET * 2), say(TARGET), ScriptedCompletion(text=f"{TARGET}", finish="abort")]
            server.push(*answers)
            group = []
            for i in range(len(answers)):
                row = task_row(TaskRef("ClosestGuess", "train", index=0))
                sample = miles_double.Sample(
                    index=i, group_index=0, prompt=row["prompt"], metadata=row["metadata"], routing_key=f"r-{i}"
                )
                group.append(await miles_double.call_generate(miles.generate, args, sample, copy.deepcopy(SAMPLING)))
            miles_double.group_rm_precheck(group)  # Miles asserts that a group RM meets no preset reward
            rewards = await miles.reward(args, group)
        finally:
            await _state.close_states()
    assert rewards == [0.0, 1.0, 0.0]  # the two live members ranked against each other; the aborted one 0.0
    assert [record_of(s).group_scored for s in group] == [True, True, None]
    for sample, reward in zip(group, rewards):
        sample.reward = reward
        miles_double.check_trainable(sample, args)
    miles_double.check_sibling_rewards(group)


def test_rank_rewards_properties() -> None:
    """The ranking the environment serves: closest first, ties halved, missing numbers last."""
    estimates = [Fraction(TARGET), None, Fraction(TARGET), Fraction(TARGET * 2)]
    rewards = rank_rewards(estimates, TARGET)
    assert rewards == [5 / 6, 0.0, 5 / 6, 1 / 3]
    assert sum(rewards) == pytest.approx(len(estimates) / 2)  # every pair hands out exactly one point
    assert rank_rewards([None], TARGET) == [0.0] and rank_rewards([Fraction(1)], TARGET) == [1.0]


async def test_a_hung_group_judge_is_bounded_by_tool_timeout(config_file, sglang, monkeypatch) -> None:
    """A judge that never answers: the SDK's `score_group` call is replaced by one that never returns
    (standing in for a hung environment server). The reward hook gives up after `tool_timeout`, keeps
    the pointwise rewards and says why."""
    from openreward.api.environments.client import AsyncSession

    async def never_answers(self: Any, candidates: Any) -> Any:
        await asyncio.sleep(3600)

    monkeypatch.setattr(AsyncSession, "score_group", never_answers)
    config_file.write_text(config_file.read_text().replace("parser: hermes", "tool_timeout: 1\nparser: hermes"))
    args = make_args(sglang, group_rm=True)
    group = await slime_group(args, sglang, [say(TARGET), say(TARGET * 2)])
    assert await slime.reward(args, group) == [1.0, 0.0]
    for sample in group:
        assert "tool_timeout" in record_of(sample).group_score_error


async def test_a_hung_group_judge_is_bounded_by_its_environments_own_tool_timeout(
    config_file, sglang, monkeypatch
) -> None:
    """An environment's own `tool_timeout` (no run-wide one) bounds its `score_group` too, and the error names that key."""
    from openreward.api.environments.client import AsyncSession

    async def never_answers(self: Any, candidates: Any) -> Any:
        await asyncio.sleep(3600)

    monkeypatch.setattr(AsyncSession, "score_group", never_answers)
    config_file.write_text(
        config_file.read_text().replace(
            "    max_turns: 2\n  MathEnv:", "    max_turns: 2\n    tool_timeout: 1\n  MathEnv:", 1
        )
    )
    args = make_args(sglang, group_rm=True)
    group = await slime_group(args, sglang, [say(TARGET), say(TARGET * 2)])
    assert await slime.reward(args, group) == [1.0, 0.0]
    for sample in group:
        assert "environments.ClosestGuess.tool_timeout (1s)" in record_of(sample).group_score_error

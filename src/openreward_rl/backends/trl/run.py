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
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from openreward_rl._options import same_named
from openreward_rl.backends.trl.adapter import SAMPLERS, TrlAdapter, task_dataset
from openreward_rl.backends.trl.ranks import Ranks
from openreward_rl.config import TrainConfig
from openreward_rl.credit.signal import StepSignal
from openreward_rl.engines.transformers import SamplingConfig, trainable_gguf
from openreward_rl.env.tasks import TaskRef
from openreward_rl.errors import ConfigError
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.observe.metrics import EnvironmentSummary, summarize

__all__ = [
    "EvalStats",
    "TrlOptions",
    "TrlSession",
    "checkpointing_argument",
    "check_optimizer",
    "eval_stats",
    "grpo_config",
    "last_checkpoint",
    "lora_config",
    "optimizer_argument",
    "quiet_trainer",
    "recognise_tied_weights",
    "release_optimizer",
    "rows_per_pass",
    "trainable_gguf",
    "training_callbacks",
]


LOW_PRECISION_DTYPES = frozenset({"bfloat16", "bf16", "float16", "fp16", "half", "torch.bfloat16", "torch.float16"})


@attrs.frozen
class TrlOptions:
    """What a TRL run is made of. Defaults fit a small model on a CPU.

    - `prompts_per_step` tasks per optimizer step, each run `n_samples` times (one GRPO group each);
      the step trains on `prompts_per_step * n_samples` episodes. With `ranks.count` processes (`accelerate
      launch`) that is the step over all of them: each samples and trains `prompts_per_step / ranks.count`
      whole groups, and the gradients are averaged (DDP).
    - `max_new_tokens` per model call, `max_context_len` per episode (None: the model's).
    - `concurrency`: episodes in flight at once in each process (None: all of its share of a step).
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
    - `micro_batch`: episodes per forward and backward pass of the training step: the step's episodes are split into
      passes of this many (the largest divisor of `episodes_per_step` at most this) whose gradients add up to the
      whole step's, with one optimizer step per step either way; the training pass's activations, LM-head tiles and
      their gradients are for one pass at a time. 0: every episode in one pass. None (the default): 4 on the CPU,
      where the pass's resident memory decides whether the quickstart fits a laptop, and every episode in one pass on
      a GPU, where 16 passes of 4 took a step of SmolLM2-135M from 1.4 to 5.6 s on one H200 for 0.3 GiB of memory.
    - `optim`: the optimizer, by the name transformers' `TrainingArguments.optim` gives it (`check_optimizer`); None:
      TRL's default (`adamw_torch`), whose two moments take twice the float32 weights' memory from the first step on.
      `adafactor` keeps a factored second moment (a row and a column per matrix) and no first moment: for
      SmolLM2-135M about 1 GiB less, which brings the CPU quickstart's processes under 3 GB.
    - `max_failed_steps`: training stops after this many steps in a row in which every episode failed
      (infrastructure failures: nothing to train on), keeping the checkpoints written so far; a single
      such step is reported and skipped (its loss is 0). 0: never stop for that.
    - `max_untrained_steps`: training stops after this many steps in a row that trained nothing (no group
      had reward spread: the model does as well, or as badly, on every sample), saying why and what to
      try; the model is saved and evaluated as at the end. 0: never stop for that.
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
    micro_batch: int | None = None
    optim: str | None = None
    sampler: str = SAMPLERS[0]
    sampler_memory: float = 0.5
    resample_zero_spread: int | None = None
    max_failed_steps: int = 3
    max_untrained_steps: int = 5
    ranks: Ranks = attrs.field(factory=Ranks.current)

    def __attrs_post_init__(self) -> None:
        if self.resample_zero_spread is not None and self.resample_zero_spread < 0:
            raise ConfigError(f"resample-zero-spread must be >= 0 (0: off), got {self.resample_zero_spread}")
        if not self.lr > 0:
            raise ConfigError(f"lr must be > 0 (the learning rate), got {self.lr:g}")
        if self.save_interval < 0:
            raise ConfigError(f"save-interval must be >= 0 (0: no checkpoints), got {self.save_interval}")
        if self.max_failed_steps < 0:
            raise ConfigError(
                f"max-failed-steps must be >= 0 (0: never stop for failed steps), got {self.max_failed_steps}"
            )
        if self.max_untrained_steps < 0:
            raise ConfigError(
                f"max-untrained-steps must be >= 0 (0: never stop for steps that train nothing), got {self.max_untrained_steps}"
            )
        check_optimizer(self.optim)
        if self.micro_batch is not None and self.micro_batch < 0:
            raise ConfigError(f"micro-batch must be >= 0 (0: the whole step in one pass), got {self.micro_batch}")
        for name in ("max_steps", "prompts_per_step", "max_new_tokens", "concurrency", "logging_steps"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.n_samples < 2:
            raise ConfigError(
                f"n-samples must be at least 2 (GRPO compares the samples of a group), got {self.n_samples}"
            )
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
    def weight_precision_warning(self) -> str | None:
        """Why training these weights may not move them, or None: full fine-tuning of bfloat16/float16 weights
        with AdamW loses most updates at the learning rates GRPO uses (an update below half a unit of the weight's
        last place rounds away). LoRA keeps its adapters in float32, so it is not warned."""
        if self.lora or str(self.dtype).lower() not in LOW_PRECISION_DTYPES:
            return None
        return (
            f"--dtype {self.dtype} trains {self.dtype} weights: at lr {self.lr:g} most AdamW updates are smaller than the "
            "weights' precision and are lost, so the reward may not move; keep the float32 weights (the default) and add --bf16 "
            "for bfloat16 autocast on a GPU, or train --lora"
        )

    @property
    def episodes_per_step(self) -> int:
        """A step's episodes over every process."""
        return self.prompts_per_step * self.n_samples

    @property
    def episodes_per_process(self) -> int:
        """A step's episodes in this process (its share of `episodes_per_step`; `check_split` says whether it splits)."""
        return self.episodes_per_step // self.ranks.count

    def check_split(self) -> None:
        """`ConfigError` unless a training step splits into whole groups over the processes (`grpo_config` needs it)."""
        if self.prompts_per_step % self.ranks.count:
            raise ConfigError(
                f"prompts-per-step {self.prompts_per_step} cannot be split over {self.ranks.count} processes: each samples whole groups, "
                f"so it must be a multiple of {self.ranks.count}"
            )

    @property
    def episodes_per_pass(self) -> int:
        """Episodes per forward and backward pass: `rows_per_pass` of this process's episodes and `micro_batch`."""
        micro_batch = self.micro_batch
        if micro_batch is None:
            micro_batch = CPU_MICRO_BATCH if self.resolved_device == "cpu" else 0
        return rows_per_pass(self.episodes_per_process, micro_batch or None)

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature, top_p=self.top_p)

    @property
    def resolved_device(self) -> str:
        """The device this process samples and trains on: `device`, else cuda where there is one; with several
        processes on GPUs, each process's own (`cuda:LOCAL_RANK`)."""
        if self.device:
            return self.ranks.device(self.device)
        import torch

        return self.ranks.device("cuda" if torch.cuda.is_available() else "cpu")


CPU_MICRO_BATCH = 4  # TrlOptions.micro_batch's default on the CPU


CPU_LM_HEAD_TILE = 256  # tokens per tile of TRL's fused LM head on the CPU (`training_callbacks`)


def training_callbacks(device: str) -> list[Any]:
    """The `TrainerCallback`s a trainer of a model on `device` trains under: on the CPU, TRL's fused LM head in tiles
    of `CPU_LM_HEAD_TILE` tokens (`_compat.trl.lm_head_tiles`: TRL's 4,096 without Triton left a 1.5 GiB transient in a
    pass of 4 episodes x 460 tokens of SmolLM2-135M; 256 left none to speak of, in the same time: docs/performance.md,
    section 8). Elsewhere none: Triton folds each tile token by token."""
    if str(device) != "cpu":
        return []
    from openreward_rl._compat import trl as compat_trl

    return [compat_trl.lm_head_tiles(CPU_LM_HEAD_TILE)]


def rows_per_pass(batch: int, micro_batch: int | None) -> int:
    """Rows per forward and backward pass of an optimizer step of `batch` rows: the largest divisor of `batch` at most
    `micro_batch` (None: `batch`), so that every pass has as many rows and the passes' gradients add up to the step's.

    >>> rows_per_pass(16, 4), rows_per_pass(16, 6), rows_per_pass(12, None), rows_per_pass(7, 4), rows_per_pass(3, 8)
    (4, 4, 12, 1, 3)
    """
    return max(size for size in range(1, min(micro_batch or batch, batch) + 1) if batch % size == 0)


def check_optimizer(name: str | None) -> None:
    """`ConfigError` unless `name` is None (the trainer's default) or an optimizer name transformers'
    `TrainingArguments.optim` takes (`OptimizerNames`)."""
    if name is None:
        return
    from transformers.training_args import OptimizerNames

    known = [optimizer.value for optimizer in OptimizerNames]
    if name not in known:
        raise ConfigError(f"optim {name!r} is not an optimizer transformers knows; one of: {', '.join(known)}")


def optimizer_argument(name: str | None) -> dict[str, Any]:
    """The keyword naming the optimizer in a `TrainingArguments` (`optim`); none for None (the trainer's default)."""
    return {} if name is None else {"optim": name}


def grpo_config(options: TrlOptions) -> Any:
    """TRL's `GRPOConfig` for these options: one generation per optimizer step (TRL's batch is per process; its
    sampler hands each process consecutive rows, so whole groups), trained in passes of `episodes_per_pass`
    episodes whose gradients accumulate (TRL samples once per `steps_per_generation` passes, which it sets to
    `gradient_accumulation_steps`)."""
    from trl import GRPOConfig

    options.check_split()
    passes = options.episodes_per_process // options.episodes_per_pass
    cpu = options.resolved_device == "cpu"
    return GRPOConfig(
        **same_named(
            options,
            "output_dir",
            "max_steps",
            "temperature",
            "top_p",
            "beta",
            "logging_steps",
            "report_to",
            "run_name",
            "seed",
            "bf16",
        ),
        **checkpointing_argument(GRPOConfig, options.gradient_checkpointing),
        **optimizer_argument(options.optim),
        learning_rate=options.lr,
        per_device_train_batch_size=options.episodes_per_pass,
        gradient_accumulation_steps=passes,
        num_generations=options.n_samples,
        max_completion_length=options.max_new_tokens,
        save_strategy="steps" if options.save_interval else "no",
        save_steps=options.save_interval or 500,
        use_cpu=cpu,
        dataloader_num_workers=0,
        log_completions=False,
        disable_tqdm=False,
    )


def checkpointing_argument(config_class: type, on: bool) -> dict[str, Any]:
    """The keyword that turns gradient checkpointing on or off in `config_class` (a `TrainingArguments`): transformers
    renamed `gradient_checkpointing` to `activation_checkpointing` and warns on the old name where it has the new one."""
    import dataclasses

    fields = {field.name for field in dataclasses.fields(config_class)}
    return {"activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing": on}


def lora_config(options: TrlOptions) -> Any:
    """peft's `LoraConfig` on every linear projection of the model (rank `lora_rank`, alpha 2x rank)."""
    from peft import LoraConfig

    return LoraConfig(
        r=options.lora_rank,
        lora_alpha=2 * options.lora_rank,
        lora_dropout=0.0,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )


_MODELS_WITH_TIE_HOOK: weakref.WeakSet[Any] = weakref.WeakSet()


def recognise_tied_weights(model: Any) -> Any:
    """Make `model.load_state_dict` count a weight tied to one it loaded as loaded, not missing.

    `save_pretrained` writes tied weights once (SmolLM2's `lm_head.weight` is its input embedding), so the
    Trainer's resume, which loads a checkpoint with `load_state_dict(strict=False)`, warned "There were
    missing keys in the checkpoint model loaded: ['lm_head.weight']" every time, though the embedding it
    shares was loaded. A load-state-dict post-hook (PyTorch's) drops those names from `missing_keys`; a
    weight none of whose ties was loaded is still reported. Once per model; returns `model`."""
    if model in _MODELS_WITH_TIE_HOOK:
        return model
    shared: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        shared.setdefault(id(parameter), []).append(name)
    ties = [names for names in shared.values() if len(names) > 1]

    def drop_loaded_ties(module: Any, incompatible: Any) -> None:
        missing = set(incompatible.missing_keys)
        for names in ties:
            if any(name not in missing for name in names):
                incompatible.missing_keys[:] = [key for key in incompatible.missing_keys if key not in names]

    if ties:
        model.register_load_state_dict_post_hook(drop_loaded_ties)
    _MODELS_WITH_TIE_HOOK.add(model)
    return model


def _not_unscored_rows(record: logging.LogRecord) -> bool:
    """False for TRL's warning about a row all reward functions scored None: our infrastructure failures are
    None on purpose (the step's line counts them), and the warning dumps the whole row, prompt included.
    (TRL logs through accelerate's adapter, which puts "[RANK n] " before the message.)"""
    return "All reward functions returned None" not in record.getMessage()


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
    stopped: str | None = None  # why training stopped early (`early_stop`), else None
    stopped_failed: bool = False  # it stopped for failures (every episode failed, or the served environment gone), not for steps that trained nothing
    server: Any = (
        None  # the `LocalEnvServer` serving `serve`, if any: a server that stopped stops training at the step's end
    )
    _trainer: Any = None

    @classmethod
    @contextlib.contextmanager
    def open(
        cls,
        config: TrainConfig,
        options: TrlOptions,
        *,
        serve: Sequence[str | type] = (),
        model: Any = None,
        tokenizer: Any = None,
        episode: Any = None,
        announce: Callable[[str], None] | None = None,
    ) -> Iterator[TrlSession]:
        """Serve `serve` (specs `file.py:Class` or classes), check the environments and list the training tasks,
        check the episode settings on the model's tokenizer (its parser, family and the tools the first prompt
        shows: `loop.rollout.episode_stack`), then load the model (or use `model`/`tokenizer`): whatever needs no
        model is refused before it loads. `announce` is called with "loading MODEL on DEVICE" just before."""
        import asyncio

        from openreward import AsyncOpenReward

        from openreward_rl.assets import load_tokenizer
        from openreward_rl.config import ConfigError, prepare_config
        from openreward_rl.engines.transformers import load_model
        from openreward_rl.env.local_server import serve_environments, variant_name
        from openreward_rl.errors import boundary
        from openreward_rl.loop.rollout import episode_stack
        from openreward_rl.preflight import check_ready

        options.ranks.start(options.resolved_device)
        with contextlib.ExitStack() as stack:
            base_url, served, server = None, {}, None
            if serve:
                server = stack.enter_context(serve_environments(list(serve)))
                base_url = server.base_url
                served = {variant_name(cls_): variant_name(cls_) for cls_ in server.classes}
            prepared = prepare_config(config, served=served, base_url=base_url, family=options.family)
            check_ready(prepared)
            tasks = asyncio.run(_training_tasks(prepared, options))
            if not tasks:
                raise ConfigError("the configured environments and splits have no tasks to train on")
            if tokenizer is None:
                with boundary(ConfigError, f"cannot load the model {options.model!r}"):
                    tokenizer = load_tokenizer.__wrapped__(
                        options.model
                    )  # its own, not the shared cached one: the trainer sets its pad token
            episode_stack(prepared, tokenizer, options.model)
            if model is None:
                if announce is not None:
                    announce(f"loading {options.model} on {options.resolved_device}")
                # float32 weights unless told otherwise (on CUDA too: `bf16` trains under autocast over them)
                with boundary(ConfigError, f"cannot load the model {options.model!r}"):
                    model, tokenizer = load_model(
                        options.model,
                        device=options.resolved_device,
                        dtype=options.dtype or "float32",
                        tokenizer=tokenizer,
                    )
            trainable_gguf(model)
            recognise_tied_weights(model)
            adapter = TrlAdapter.build(
                prepared,
                tokenizer,
                None,
                model=options.model,
                sampling=options.sampling,
                max_new_tokens=options.max_new_tokens,
                max_context_len=options.max_context_len,
                episode=episode,
                concurrency=options.concurrency,
                group_rm=options.group_rm,
                resample_zero_spread=prepared.resample_zero_spread
                if options.resample_zero_spread is None
                else options.resample_zero_spread,
                continuous_batching={}
                if options.resolved_device == "cpu"
                else {"max_memory_percent": options.sampler_memory},  # GPU: leave the trainer room
                max_sequences=options.concurrency or options.episodes_per_process,
                sampler=options.sampler,
                ranks=options.ranks,
            )

            async def make_client() -> Any:
                return AsyncOpenReward()  # the key from OPENREWARD_API_KEY; local servers need none

            adapter.rollouts.client = adapter.run(make_client())
            stack.callback(adapter.close)
            yield cls(prepared, options, model, tokenizer, adapter, tasks, server=server)

    def tasks_of(self, split: str, max_tasks: int | None = None) -> list[TaskRef]:
        """The tasks of `split` in every configured environment (first `max_tasks` of each, in order)."""
        from openreward_rl.config import prepare_config
        from openreward_rl.env.tasks import list_tasks

        config = prepare_config(self.config, split=split)
        tasks = self.adapter.run(
            list_tasks(self.adapter.rollouts.client, config, max_tasks=max_tasks, seed=self.options.seed)
        )
        return sorted(tasks, key=lambda t: (t.environment, t.split, t.index if t.index is not None else -1))

    def evaluate(self, tasks: Sequence[TaskRef], n: int, *, on_done: Callable[[Any], None] | None = None) -> list[Any]:
        """`n` episodes of each task sampled from the current model (the training sampler); trajectories in task order.
        `on_done` is called with each trajectory as it finishes (a progress bar) in this process. With several
        processes each samples its share (`Ranks.share`) and every one returns all of them: call it in every process."""
        model = self._trainer.model if self._trainer is not None else self.model
        ranks = self.options.ranks
        episodes = ranks.share([task for task in tasks for _ in range(n)])
        return ranks.gather(self.adapter.run_episodes(episodes, model=model, on_done=on_done))

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
                callbacks=[*callbacks, *training_callbacks(self.options.resolved_device), self._stop_guard()],
            )
            if self._trainer.is_fsdp_enabled or self._trainer.is_deepspeed_enabled:
                raise ConfigError(
                    "train --framework trl samples from each process's whole model, so it runs data-parallel (DDP: accelerate launch "
                    "--multi_gpu) only; FSDP and DeepSpeed shard the weights: launch without them"
                )
            if (
                self._trainer.hub_model_id is None
            ):  # set only when pushing to the hub; the model card's code then loads "None"
                self._trainer.hub_model_id = self.options.output_dir
        return self._trainer

    def early_stop(self) -> tuple[str, bool] | None:
        """Why training should stop now, and whether for failures; None to go on. Once the served environment
        server has stopped; after `max_failed_steps` steps in a row in which every episode failed; or after
        `max_untrained_steps` steps in a row that trained nothing (0: never, for either)."""
        adapter, options, server = self.adapter, self.options, self.server
        if server is not None and not server.running:
            served = ", ".join(cls_.__name__ for cls_ in server.classes)
            return f"the environment server serving {served} ({server.base_url}) has stopped", True
        if options.max_failed_steps and adapter.failed_steps >= options.max_failed_steps:
            why = _common_detail(adapter.last_trajectories)
            return (
                f"{adapter.failed_steps} steps in a row in which every episode failed (last: {adapter.last_failure}{f'; {why}' if why else ''})",
                True,
            )
        if options.max_untrained_steps and adapter.untrained_steps >= options.max_untrained_steps:
            return untrained_reason(adapter.untrained_steps, adapter.last_signal, adapter.last_trajectories), False
        return None

    def _stop_guard(self) -> Any:
        """A TrainerCallback that stops training when `early_stop` says so, and says why in `stopped`;
        checkpoints already written stay."""
        from transformers import TrainerCallback

        session = self

        class StopGuard(TrainerCallback):
            def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
                session.stopped, session.stopped_failed = None, False
                session.adapter.failed_steps = session.adapter.untrained_steps = 0

            def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
                # every process stops at the same step (one alone would leave the others waiting in the gradients' all-reduce)
                local = session.early_stop()
                stop = next(iter(session.options.ranks.gather([local] if local else [])), None)
                if stop is not None:
                    session.stopped, session.stopped_failed = f"stopped at step {state.global_step}: {stop[0]}", stop[1]
                    control.should_training_stop = True

        return StopGuard()


def untrained_reason(steps: int, signal: StepSignal, trajectories: Sequence[Trajectory]) -> str:
    """Why `steps` steps in a row trained nothing, from the last one's groups and episodes, and what to try.

    >>> from openreward_rl.loop.trajectory import StopReason
    >>> from openreward_rl.task import TaskRef
    >>> episode = Trajectory(TaskRef("e", "train", index=0), [], [], [], [], 0.0, StopReason.COMPLETED, metrics={"tool_calls": 0.0})
    >>> reason = untrained_reason(5, StepSignal(2, 2, 8, 8), [episode] * 8).split("; ")
    >>> print(reason[0])
    5 steps in a row trained nothing: every group's rewards were equal (last step: 2 of 2 groups without spread, mean reward 0.000, 0.00 tool calls/ep), so GRPO had no advantage to follow
    >>> print(reason[1])
    a model that never calls a tool or never succeeds needs a warm start first (openreward-rl sft, docs/training.md)
    """
    scored = [t.trained_reward for t in trajectories if t.trained_reward is not None]
    reward = f"mean reward {sum(scored) / len(scored):.3f}" if scored else "no episode scored"
    calls = sum(t.metrics.get("tool_calls", 0.0) for t in trajectories) / max(len(trajectories), 1)
    return (
        f"{steps} steps in a row trained nothing: every group's rewards were equal (last step: {signal.zero_spread_groups} of {signal.groups} "
        f"groups without spread, {reward}, {calls:.2f} tool calls/ep), so GRPO had no advantage to follow; a model that never calls a tool "
        "or never succeeds needs a warm start first (openreward-rl sft, docs/training.md); one that already succeeds every time is trained; "
        "else try more --n-samples, a higher --temperature or --resample-zero-spread N (--max-untrained-steps 0: never stop)"
    )


def _common_detail(trajectories: Sequence[Trajectory]) -> str | None:
    """The stop detail most of the failed `trajectories` share (what failed, e.g. "environment server unreachable
    while calling tool ..."), with how many of them it ended; None where none failed with one.

    >>> from openreward_rl.task import TaskRef
    >>> def t(detail): return Trajectory(TaskRef("e", "train", index=0), [], [], [], [], None, StopReason.ENV_ERROR, stop_detail=detail)
    >>> _common_detail([t("server unreachable"), t("server unreachable"), t("tool raised")])
    '2 of them: server unreachable'
    """
    import collections

    details = collections.Counter(t.stop_detail for t in trajectories if not t.trainable and t.stop_detail)
    if not details:
        return None
    detail, count = details.most_common(1)[0]
    return f"{count} of them: {detail}"


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
        if not self.scored:  # every episode an infrastructure failure: no reward to average
            return f"{self.environment}: no episode of {self.n} was scored  infra failures {self.infra_failures}"
        pass_k = ", ".join(f"pass@{k} {v:.2f}" for k, v in self.pass_at_k.items())
        return (
            f"{self.environment}: reward {self.reward_mean:.3f} ± {self.reward_std:.3f}  success {self.success:.2f}  n {self.n}  "
            f"tool calls/ep {self.tool_calls:.2f}  parse errors/ep {self.parse_errors:.2f}  "
            f"truncated {self.truncated:.2f}  {pass_k}  infra failures {self.infra_failures}"
        )


def eval_stats(trajectories: Sequence[Trajectory]) -> dict[str, EvalStats]:
    """`EvalStats` per environment (first-seen order) of evaluation trajectories: `observe.metrics.summarize`'s figures."""
    return {env: EvalStats.of(summary) for env, summary in summarize(trajectories).items()}

"""TRL's `GRPOTrainer` on OpenReward episodes: a `rollout_func` and a reward function.

    adapter = TrlAdapter.build(config, tokenizer, client, model="offline:smollm2", max_new_tokens=64)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=GRPOConfig(...),
                          train_dataset=task_dataset(tasks), reward_funcs=[adapter.trained_reward],
                          rollout_func=adapter)

What a step does (`TrlAdapter.__call__`, TRL's `rollout_func(prompts, trainer)`):

- Each prompt is a dataset row written by `task_dataset` (a task's metadata as JSON); TRL's sampler
  has already repeated each one `num_generations` times, consecutively, and expects exactly one
  completion per prompt, in order (its GRPO groups are `rewards.view(-1, num_generations)`).
- Every prompt runs one episode of its task through the config's one `Rollouts` runner
  (`episode_stack`: the same renderer, parser, reward policy, retries and timeouts as Slime, Miles
  and `openreward-rl eval`), sampling from the trainer's live model: one engine over `trainer.model`
  for the whole run, in eval mode and without gradients while a step samples, then the model's
  training mode is restored. On-policy: no weight copy, no sync. Under the trainer's bf16 autocast the
  sampler computes in bf16 as the trainer's forward does. The engine is the `sampler`'s: `waves` (the
  default, `WaveEngine`: the step's episodes declare themselves, so their turns run in lockstep waves,
  each one left-padded batch, as TRL's own generation runs) or `continuous` (`TransformersEngine`,
  suspended after each step: the continuous-batching manager switches the attention implementation;
  suspending restores it and keeps the paged cache, sized to the step's episodes, for the next step).
- All of a step's episodes are in flight at once unless `concurrency` caps them.
- An episode's training sequence (`Trajectory.segments[-1]`) becomes its completion, token for token:
  `prompt_ids` = the segment's prompt, `completion_ids` = its response ids (sampled turns and the
  tool/bridge tokens between them), `logprobs` = the sampler's log-probs (0.0 on masked tokens),
  `env_mask` = the loss mask (1 on sampled tokens, 0 on tool/bridge tokens). TRL multiplies
  `env_mask` into its loss mask, so it trains on exactly what was sampled.
- One completion per episode. The default loop (`ToolEpisode`) never breaks the prefix, so a
  trajectory has one segment until its context policy compacts it (the config's default does so at
  80% of the window); a compacted episode, or a custom loop that re-renders history, has several.
  TRL cannot take more completions than prompts, so only the last segment is trained and the
  earlier ones are counted (`dropped_segments` in the metrics, and a warning), as the Slime hook
  does for a `Sample` class without `rollout_id`.

Rewards (`TrlAdapter.trained_reward`, a TRL reward function reading the `trained_reward` column the
rollout returns): `Trajectory.trained_reward`, the environment's reduced reward under the config's
reward policy (reducer, `nonterminal_reward` for unfinished episodes, clamps); 0.0 when the episode
ended without a reward (a truncated or unanswered episode is the model's doing); **None for an
infrastructure failure** (`env_error`, `aborted`, `timeout`) or ids that are not token-exact. TRL turns None into NaN,
leaves it out of the group mean and std and zeroes its advantage; its `env_mask` is all 0 as well,
so it is never trained as a 0. An episode with no tokens at all (the environment failed before the
first prompt) becomes a one-token placeholder with mask 0 and reward None. With `group_rm=True`
an environment that implements `score_group` scores each group's episodes together
(`env.group_score.score_group`, as the Slime hook does; clamped to the environment's reward bounds).

Metrics: after each step the episodes' per-environment summary (`metrics.flat_metrics`: reward,
success, pass@k, stop reasons, infrastructure failures, turns, tokens) goes through TRL's
`log_metric` under `openreward/<environment>/...`, so it lands wherever the trainer logs (console,
WandB with `report_to="wandb"`). Beside it, the step's learning signal (`credit.signal`):
`openreward/zero_spread_share` (groups whose rewards have no spread), `openreward/untrained_share`
(episodes whose advantages are all zero under the config's estimator, failures included) and
`openreward/resampled_groups`; a step that trains nothing is logged as a warning. Under `accelerate launch`
each process runs the episodes TRL hands it (whole groups) and these figures are over every process's episodes
(gathered, `Ranks.gather`), so each process logs the same values and TRL's average over processes is them.

Groups that would train nothing (`resample_zero_spread`, the config key or `--resample-zero-spread N`;
0, the default, is off): before the step's completions go back to TRL, each group whose episodes would
all train nothing is run again (new episodes of the same task, replacing the group's), for at most N
rounds; a group still without signal after N rounds is trained as it is (loss 0 for it). Only the same
tasks can be rerun (TRL fixed the step's prompts), so it helps a task the model solves sometimes, not
one it always or never solves; each round costs a group's episodes again.

The episodes are async; TRL calls `rollout_func` synchronously. The adapter owns one event loop and
runs each step's episodes on it (`run_until_complete`), so the SDK client's sessions stay on one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

import openreward_rl._compat as _compat
from openreward_rl.backends._sample.fill import placeholder_ids
from openreward_rl.backends.trl.ranks import Ranks
from openreward_rl.config import TrainConfig
from openreward_rl.credit.group import trajectory_group_signal
from openreward_rl.credit.signal import StepSignal
from openreward_rl.engines.base import Engine
from openreward_rl.engines.transformers import SamplingConfig, TransformersEngine
from openreward_rl.engines.waves import WaveEngine
from openreward_rl.env.group_score import score_group, transcript
from openreward_rl.env.tasks import TaskRef, task_from_metadata, task_row
from openreward_rl.errors import ConfigError
from openreward_rl.loop.rollout import EpisodeBuilder, Rollouts, check_engine_reads_images
from openreward_rl.loop.trajectory import Trajectory
from openreward_rl.observe.metrics import flat_metrics, summarize

__all__ = ["SAMPLERS", "Completion", "TrlAdapter", "completion_of", "failures", "task_dataset", "task_prompt"]

logger = logging.getLogger(__name__)

METRIC_PREFIX = "openreward/"


def task_prompt(task: TaskRef) -> str:
    """The dataset prompt naming `task`: its `openreward-rl prepare` metadata as JSON (read back by `task_from_metadata`)."""
    return json.dumps(task_row(task)["metadata"], sort_keys=True)


def task_dataset(tasks: Sequence[TaskRef]) -> Any:
    """A `datasets.Dataset` with one `prompt` per task, for `GRPOTrainer(train_dataset=...)`."""
    from datasets import Dataset

    if not tasks:
        raise ConfigError("no tasks to train on")
    return Dataset.from_list([{"prompt": task_prompt(task)} for task in tasks])


def failures(trajectories: Sequence[Trajectory]) -> str:
    """Why the untrainable episodes among `trajectories` failed: each stop reason with its count, most
    first ("not token-exact" for an episode whose ids were not what the model saw).

    >>> from openreward_rl.loop.trajectory import StopReason
    >>> from openreward_rl.task import TaskRef
    >>> def t(stop): return Trajectory(TaskRef("e", "train", index=0), [], [], [], [], None, stop)
    >>> failures([t(StopReason.ENV_ERROR), t(StopReason.TIMEOUT), t(StopReason.ENV_ERROR), t(StopReason.COMPLETED)])
    'env_error 2, timeout 1'
    """
    import collections

    reasons = collections.Counter(
        t.stop_reason.value if t.stop_reason.is_infrastructure_failure else "not token-exact"
        for t in trajectories
        if not t.trainable
    )
    return ", ".join(f"{reason} {count}" for reason, count in reasons.most_common())


@attrs.frozen
class Completion:
    """One TRL completion: the trained segment of an episode, with its mask and the sampler's log-probs."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]
    dropped_segments: int = 0
    placeholder: bool = False


def completion_of(trajectory: Trajectory, tokenizer: Any) -> Completion:
    """The completion TRL trains for `trajectory` (see the module docstring); masked entirely when it is not trainable."""
    segments = [s for s in trajectory.segments if s.response_ids]
    if not segments:
        prompt_id, response_id = placeholder_ids(tokenizer)
        return Completion([prompt_id], [response_id], [0.0], [0], placeholder=True)
    segment = segments[-1]
    dropped = len(segments) - 1
    if dropped:
        logger.warning(
            "an episode of %s has %d earlier contexts (compactions or prefix breaks); TRL takes one completion per episode, so only its last is trained",
            trajectory.task.environment,
            dropped,
        )
    mask = list(map(int, segment.loss_mask)) if trajectory.trainable else [0] * len(segment.response_ids)
    logprobs = list(map(float, segment.rollout_logprobs)) if trajectory.trainable else [0.0] * len(segment.response_ids)
    return Completion(
        list(map(int, segment.prompt_ids)),
        list(map(int, segment.response_ids)),
        logprobs,
        mask,
        dropped_segments=dropped,
    )


def _reward(trajectory: Trajectory) -> float | None:
    """The reward TRL trains for `trajectory`: `Trajectory.trained_reward`, None (no reward, masked) where it is not trainable."""
    return trajectory.trained_reward if trajectory.trainable else None


SAMPLERS = ("waves", "continuous")  # how the live model is sampled (`TrlAdapter.sampler`); the first is the default


@contextlib.contextmanager
def sampling_mode(model: Any) -> Iterator[None]:
    """Eval mode and no gradients while sampling; the model's training mode comes back after."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _generation_model(model: Any) -> Any:
    """The transformers model to sample from: a peft model's base model (its LoRA layers are in it)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


@attrs.define(eq=False)
class TrlAdapter:
    """TRL's `rollout_func` (call the adapter) and reward function (`trained_reward`) over one `Rollouts` runner.

    - `rollouts`: the config's runner; its engine is the adapter's one engine over the live model.
    - `sampling`: the sampler (temperature, top_p); TRL's `GRPOConfig.temperature` should match (the CLI sets both).
    - `concurrency`: episodes in flight at once within a step (None: all of them).
    - `group_rm`: score each group with the environment's `score_group` where it has one.
    - `sampler`: `waves` (`WaveEngine`) or `continuous` (`TransformersEngine`) over the live model.
    - `continuous_batching`, `max_sequences`: the `continuous` engine's `ContinuousBatchingConfig` fields and
      sizing (`TransformersEngine`).
    - `resample_zero_spread`: rounds of rerunning the groups that would train nothing (0: off).
    - `ranks`: the run's processes (`accelerate launch`); each runs the episodes TRL hands it (whole groups), and
      the step's signal, failures and metrics below are over every process's episodes (the same in each).
    - `last_trajectories`: this process's episodes of the last step.
    - `failed_steps`: how many steps in a row had no trainable episode (every one an infrastructure
      failure); `last_failure` says why the last such step failed (`failures`), None after a step
      that trained something.
    - `untrained_steps`: how many steps in a row trained nothing (`StepSignal.trains_nothing`: every
      group without reward spread, or every episode failed).
    """

    rollouts: Rollouts
    tokenizer: Any
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    concurrency: int | None = None
    group_rm: bool = False
    continuous_batching: Mapping[str, Any] = attrs.field(factory=dict)
    resample_zero_spread: int = attrs.field(default=0)
    max_sequences: int | None = None
    sampler: str = SAMPLERS[0]
    ranks: Ranks = attrs.field(factory=Ranks)
    last_trajectories: list[Trajectory] = attrs.field(factory=list)
    last_signal: StepSignal = attrs.field(factory=StepSignal)
    _engine: WaveEngine | TransformersEngine | None = attrs.field(default=None)
    failed_steps: int = 0
    last_failure: str | None = None
    untrained_steps: int = 0
    _pending_metrics: dict[str, float] = attrs.field(factory=dict)
    _loop: asyncio.AbstractEventLoop | None = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        _compat.install()  # the SDK fixes, before any episode (`openreward_rl._compat`)

    @classmethod
    def build(
        cls,
        config: TrainConfig,
        tokenizer: Any,
        client: Any,
        *,
        model: str | None = None,
        sampling: SamplingConfig | None = None,
        max_new_tokens: int = 1024,
        max_context_len: int | None = None,
        episode: EpisodeBuilder | None = None,
        **options: Any,
    ) -> TrlAdapter:
        """The adapter for `config`: `Rollouts.from_config` (the one episode stack) with no engine yet; `episode`
        None takes the config's (`ToolEpisode` by default)."""
        rollouts = Rollouts.from_config(
            config,
            engine=None,  # type: ignore[arg-type]  # engine_for sets it
            tokenizer=tokenizer,
            client=client,
            model=model,
            max_context_len=max_context_len,
            max_new_tokens=max_new_tokens,
            episode=episode,
        )
        check_engine_reads_images(TransformersEngine, rollouts.renderer)  # the engine comes later; a VLM is refused now
        return cls(rollouts, tokenizer, sampling=sampling or SamplingConfig(), **options)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop

    def run(self, coroutine: Any) -> Any:
        """Run `coroutine` on the adapter's own event loop (the SDK client lives there)."""
        return self.loop.run_until_complete(coroutine)

    # -- episodes --------------------------------------------------------------------------------

    def run_episodes(
        self,
        tasks: Sequence[TaskRef],
        *,
        model: Any = None,
        engine: Engine | Sequence[Engine] | None = None,
        on_done: Callable[[Trajectory], None] | None = None,
    ) -> list[Trajectory]:
        """One episode per task (in order) through the adapter's `Rollouts`, on its event loop; blocking.

        Pass one of: `model`, sampled as it is now (the adapter's engine over it, in eval mode without gradients,
        suspended after); or `engine`, any `Engine` (a scripted teacher, a remote server), or one per task (a
        teacher bound to the task it plays). `on_done` sees each trajectory as it ends.
        """
        if (model is None) == (engine is None):
            raise ConfigError(
                "run_episodes takes one of model= (the policy sampled as it is now) or engine= (any Engine)"
            )
        if engine is not None:
            engines = list(engine) if isinstance(engine, Sequence) else [engine] * len(tasks)
            if len(engines) != len(tasks):
                raise ConfigError(
                    f"run_episodes got {len(engines)} engines for {len(tasks)} tasks: one per task, or one for all"
                )
            return self.run(self._episodes(engines, tasks, on_done))
        with sampling_mode(model):
            sampler = self.engine_for(model)
            try:
                return self.run(self._episodes([sampler] * len(tasks), tasks, on_done))
            finally:
                sampler.suspend()  # continuous: restores the attention implementation it switched; keeps the cache

    def engine_for(self, model: Any) -> WaveEngine | TransformersEngine:
        """The adapter's engine over `model` (one for the run; a new one only if the model object or `sampler` changes)."""
        generation_model = _generation_model(model)
        kind = WaveEngine if self.sampler == "waves" else TransformersEngine
        if self._engine is not None and (self._engine.model is not generation_model or type(self._engine) is not kind):
            self._engine.stop()
            self._engine = None
        if self._engine is None:
            options: dict[str, Any] = (
                {}
                if kind is WaveEngine
                else {"continuous_batching": self.continuous_batching, "max_sequences": self.max_sequences}
            )
            self._engine = kind(
                generation_model,
                self.tokenizer,
                sampling=self.sampling,
                default_max_new_tokens=self.rollouts.max_new_tokens,
                context_length=self.rollouts.max_context_len,
                **options,
            )
        return self._engine

    async def _episodes(
        self, engines: Sequence[Engine], tasks: Sequence[TaskRef], on_done: Callable[[Trajectory], None] | None = None
    ) -> list[Trajectory]:
        gate = asyncio.Semaphore(self.concurrency or max(len(tasks), 1))
        params = {"temperature": self.sampling.temperature, "top_p": self.sampling.top_p}

        async def one(engine: Engine, task: TaskRef) -> Trajectory:
            declare = engine.episode if isinstance(engine, WaveEngine) else contextlib.nullcontext
            async with gate:
                with declare():  # a wave waits for every episode in flight (`WaveEngine.episode`)
                    trajectory = await self.rollouts.run(task, sampling_params=params, engine=engine)
            if on_done is not None:
                on_done(trajectory)
            return trajectory

        return list(await asyncio.gather(*(one(engine, task) for engine, task in zip(engines, tasks, strict=True))))

    # -- TRL's rollout_func ----------------------------------------------------------------------

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's `rollout_func`: one episode per prompt, mapped to one completion each (see the module docstring)."""
        tasks = [task_from_metadata(prompt) for prompt in prompts]
        model = trainer.model
        size = _group_size(trainer)
        trajectories = self.run_episodes(tasks, model=model)
        resampled = self._resample_idle_groups(model, tasks, trajectories, size)
        rewards = [_reward(t) for t in trajectories]
        if self.group_rm:
            rewards = self.run(self._group_scores(tasks, trajectories, rewards, group_size=size))
        completions = [completion_of(t, self.tokenizer) for t in trajectories]
        self.last_trajectories = trajectories
        # the step over every process (each holds whole groups): its signal, failures and metrics are the same in each
        step = self.ranks.gather(
            [(t, r, c.dropped_segments, c.placeholder) for t, r, c in zip(trajectories, rewards, completions)]
        )
        everyone, every_reward = [t for t, *_ in step], [r for _, r, *_ in step]
        resampled = sum(self.ranks.gather([resampled]))
        self.last_signal = self.step_signal(everyone, every_reward, size)
        failed = not any(t.trainable for t in everyone)
        self.failed_steps = self.failed_steps + 1 if failed else 0
        self.last_failure = f"all {len(everyone)} episodes failed: {failures(everyone)}" if failed else None
        self.untrained_steps = self.untrained_steps + 1 if self.last_signal.trains_nothing else 0
        self._pending_metrics = self.step_metrics(
            everyone, [dropped for *_, dropped, _ in step], [placeholder for *_, placeholder in step]
        )
        self._pending_metrics.update(self.last_signal.metrics(METRIC_PREFIX.rstrip("/")))
        self._pending_metrics[f"{METRIC_PREFIX}resampled_groups"] = float(resampled)
        message = self.last_signal.warning()
        if message and self.ranks.main:
            logger.warning("%s%s", message, f" (after resampling {resampled} groups)" if resampled else "")
        return {
            "prompt_ids": [c.prompt_ids for c in completions],
            "completion_ids": [c.completion_ids for c in completions],
            "logprobs": [c.logprobs for c in completions],
            "env_mask": [c.env_mask for c in completions],
            "trained_reward": rewards,
            "stop_reason": [t.stop_reason.value for t in trajectories],
        }

    def _group_signal(self, group: Sequence[Trajectory], rewards: Sequence[float | None]) -> StepSignal:
        config = self.rollouts.config
        nonterminal = config.nonterminal_reward(group[0].task.environment)
        return trajectory_group_signal(group, config.advantage, rewards, nonterminal_reward=nonterminal)

    def step_signal(
        self, trajectories: Sequence[Trajectory], rewards: Sequence[float | None], group_size: int
    ) -> StepSignal:
        """The step's groups (`group_size` consecutive episodes) without reward spread, and its episodes that train nothing."""
        signal = StepSignal()
        for start in range(0, len(trajectories), group_size):
            signal += self._group_signal(trajectories[start : start + group_size], rewards[start : start + group_size])
        return signal

    def _resample_idle_groups(
        self, model: Any, tasks: Sequence[TaskRef], trajectories: list[Trajectory], group_size: int
    ) -> int:
        """Rerun, in place, each group that would train nothing, for at most `resample_zero_spread` rounds;
        how many groups were rerun (a group rerun in two rounds counts twice)."""
        rerun = 0
        for _ in range(self.resample_zero_spread):
            idle: list[int] = []
            for start in range(0, len(trajectories), group_size):
                group = trajectories[start : start + group_size]
                if self._group_signal(group, [_reward(t) for t in group]).trains_nothing:
                    idle.extend(range(start, min(start + group_size, len(trajectories))))
            if not idle:
                break
            for position, trajectory in zip(idle, self.run_episodes([tasks[i] for i in idle], model=model)):
                trajectories[position] = trajectory
            rerun += len(idle) // group_size
        return rerun

    async def _group_scores(
        self,
        tasks: Sequence[TaskRef],
        trajectories: Sequence[Trajectory],
        rewards: list[float | None],
        *,
        group_size: int,
    ) -> list[float | None]:
        """Each group's rewards from the environment's `score_group` (`env.group_score`, where it has one); failures stay None."""
        out = list(rewards)
        for start in range(0, len(trajectories), group_size):
            live = [
                i for i in range(start, min(start + group_size, len(trajectories))) if rewards[i] is not None
            ]  # faults are never scored
            if len(live) < 2:
                continue
            scoring = await score_group(
                self.rollouts.client,
                self.rollouts.config,
                tasks[start],
                [transcript(trajectories[i].messages) for i in live],
            )
            for i, member in zip(live, scoring.members or ()):
                out[i] = member.reward
        return out

    def step_metrics(
        self, trajectories: Sequence[Trajectory], dropped_segments: Sequence[int], placeholders: Sequence[bool]
    ) -> dict[str, float]:
        """The step's per-environment metrics (`flat_metrics` under `openreward/`), plus its completions' dropped
        segments and placeholders (`Completion`; one of each per trajectory)."""
        metrics = flat_metrics(summarize(trajectories), prefix=METRIC_PREFIX)
        by_env: dict[str, list[tuple[int, bool]]] = {}
        for trajectory, dropped, placeholder in zip(trajectories, dropped_segments, placeholders, strict=True):
            by_env.setdefault(trajectory.task.environment, []).append((dropped, placeholder))
        for env, items in by_env.items():
            metrics[f"{METRIC_PREFIX}{env}/dropped_segments"] = float(sum(dropped for dropped, _ in items))
            metrics[f"{METRIC_PREFIX}{env}/placeholders"] = float(sum(placeholder for _, placeholder in items))
        return metrics

    # -- TRL's reward function -------------------------------------------------------------------

    def trained_reward(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        trained_reward: Sequence[float | None],
        log_metric: Any = None,
        **_: Any,
    ) -> list[float | None]:
        """TRL reward function: the rewards `__call__` computed (None: an infrastructure failure, excluded by TRL)."""
        if log_metric is not None:
            for name, value in self._pending_metrics.items():
                log_metric(name, value)
        self._pending_metrics = {}
        return list(trained_reward)

    def close(self) -> None:
        """Stop the engine; close what the episode builder holds open (an agent builder's endpoints), the SDK
        client's sessions and the adapter's loop."""
        if self._engine is not None:
            self._engine.stop()
            self._engine = None
        if self._loop is None or self._loop.is_closed():
            return
        self._loop.run_until_complete(self.rollouts.aclose())
        closer = getattr(getattr(self.rollouts.client, "environments", None), "aclose", None)
        if closer is not None:
            self._loop.run_until_complete(closer())
        self._loop.close()


def _group_size(trainer: Any) -> int:
    mode = "train" if trainer.model.training else "eval"
    return int(trainer.num_generations if mode == "train" else trainer.num_generations_eval)

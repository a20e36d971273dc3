"""TRL's `GRPOTrainer` on OpenReward episodes: a `rollout_func` and a reward function.

    adapter = TrlAdapter.build(config, tokenizer, client, model="offline:smollm2", max_new_tokens=64)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=GRPOConfig(...),
                          train_dataset=task_dataset(tasks), reward_funcs=[adapter.episode_reward],
                          rollout_func=adapter)

What a step does (`TrlAdapter.__call__`, TRL's `rollout_func(prompts, trainer)`):

- Each prompt is a dataset row written by `task_dataset` (a task's metadata as JSON); TRL's sampler
  has already repeated each one `num_generations` times, consecutively, and expects exactly one
  completion per prompt, in order (its GRPO groups are `rewards.view(-1, num_generations)`).
- Every prompt runs one episode of its task through the config's one `Rollouts` runner
  (`episode_stack`: the same renderer, parser, reward policy, retries and timeouts as Slime, Miles
  and `openreward-rl eval`), sampling from the trainer's live model: a `TransformersEngine` over
  `trainer.model`, in eval mode and without gradients, started for the step and stopped after it
  (the continuous-batching manager switches the attention implementation; stopping restores it),
  then the model's training mode is restored. On-policy: no weight copy, no sync.
- An episode's training sequence (`Trajectory.segments[-1]`) becomes its completion, token for token:
  `prompt_ids` = the segment's prompt, `completion_ids` = its response ids (sampled turns and the
  tool/bridge tokens between them), `logprobs` = the sampler's log-probs (0.0 on masked tokens),
  `env_mask` = the loss mask (1 on sampled tokens, 0 on tool/bridge tokens). TRL multiplies
  `env_mask` into its loss mask, so it trains on exactly what was sampled.
- One completion per episode. The default loop (`ToolEpisode`) never breaks the prefix, so a
  trajectory has one segment. A custom loop that re-renders history gets several; TRL cannot take
  more completions than prompts, so only the last segment is trained and the earlier ones are
  counted (`dropped_segments` in the metrics, and a warning), as the Slime hook does for a `Sample`
  class without `rollout_id`.

Rewards (`TrlAdapter.episode_reward`, a TRL reward function reading the `episode_reward` column the
rollout returns): the environment's reduced reward under the config's reward policy (reducer,
`nonterminal_reward` for unfinished episodes, clamps); 0.0 when the episode ended without a reward
(a truncated or unanswered episode is the model's doing); **None for an infrastructure failure**
(`env_error`, `aborted`, `timeout`, or ids that are not token-exact). TRL turns None into NaN,
leaves it out of the group mean and std and zeroes its advantage; its `env_mask` is all 0 as well,
so it is never trained as a 0. An episode with no tokens at all (the environment failed before the
first prompt) becomes a one-token placeholder with mask 0 and reward None. With `group_rm=True`
an environment that implements `score_group` scores each group's episodes together (the Slime
hook's `group_reward.group_rewards`, clamped to the environment's reward bounds).

Metrics: after each step the episodes' per-environment summary (`metrics.flat_metrics`: reward,
success, pass@k, stop reasons, infrastructure failures, turns, tokens) goes through TRL's
`log_metric` under `openreward/<environment>/...`, so it lands wherever the trainer logs (console,
WandB with `report_to="wandb"`).

The episodes are async; TRL calls `rollout_func` synchronously. The adapter owns one event loop and
runs each step's episodes on it (`run_until_complete`), so the SDK client's sessions stay on one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import attrs

from openreward_rl.backends._generate import transcript
from openreward_rl.backends._samples import episode_metadata, placeholder_ids
from openreward_rl.backends.group_reward import group_rewards
from openreward_rl.config import TrainConfig
from openreward_rl.engines.transformers import SamplingConfig, TransformersEngine
from openreward_rl.env.tasks import TaskRef
from openreward_rl.observe.metrics import flat_metrics, summarize
from openreward_rl.loop.rollout import EpisodeBuilder, Rollouts
from openreward_rl.env.tasks import task_from_metadata, task_row
from openreward_rl.loop.tool_episode import ToolEpisode
from openreward_rl.loop.trajectory import Trajectory

__all__ = ["Completion", "TrlAdapter", "completion_of", "task_dataset", "task_prompt", "trained_reward"]

logger = logging.getLogger(__name__)

METRIC_PREFIX = "openreward/"


def task_prompt(task: TaskRef) -> str:
    """The dataset prompt naming `task`: its `openreward-rl prepare` metadata as JSON (read back by `task_from_metadata`)."""
    return json.dumps(task_row(task)["metadata"], sort_keys=True)


def task_dataset(tasks: Sequence[TaskRef]) -> Any:
    """A `datasets.Dataset` with one `prompt` per task, for `GRPOTrainer(train_dataset=...)`."""
    from datasets import Dataset

    if not tasks:
        raise ValueError("no tasks to train on")
    return Dataset.from_list([{"prompt": task_prompt(task)} for task in tasks])


def trained_reward(trajectory: Trajectory) -> float | None:
    """What TRL trains: None for an infrastructure failure (excluded), 0.0 when no reward was observed, else the reward.

    >>> from openreward_rl.loop.trajectory import StopReason
    >>> def t(reward, stop): return Trajectory({}, [], [], [], [], reward, stop)
    >>> trained_reward(t(0.5, StopReason.COMPLETED)), trained_reward(t(None, StopReason.TRUNCATED)), trained_reward(t(None, StopReason.ENV_ERROR))
    (0.5, 0.0, None)
    """
    if not trajectory.trainable:
        return None
    return 0.0 if trajectory.reward is None else float(trajectory.reward)


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
        logger.warning("an episode of %s has %d prefix breaks; TRL takes one completion per episode, so only its last segment is trained", trajectory.task.get("environment"), dropped)
    mask = list(map(int, segment.loss_mask)) if trajectory.trainable else [0] * len(segment.response_ids)
    logprobs = list(map(float, segment.rollout_logprobs)) if trajectory.trainable else [0.0] * len(segment.response_ids)
    return Completion(list(map(int, segment.prompt_ids)), list(map(int, segment.response_ids)), logprobs, mask, dropped_segments=dropped)


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
    """TRL's `rollout_func` (call the adapter) and reward function (`episode_reward`) over one `Rollouts` runner.

    - `rollouts`: the config's runner; its engine is replaced per step by one over the live model.
    - `sampling`: the sampler (temperature, top_p); TRL's `GRPOConfig.temperature` should match (the CLI sets both).
    - `concurrency`: episodes in flight at once within a step.
    - `group_rm`: score each group with the environment's `score_group` where it has one.
    - `continuous_batching`: extra `ContinuousBatchingConfig` fields for the engine.
    """

    rollouts: Rollouts
    tokenizer: Any
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    concurrency: int = 32
    group_rm: bool = False
    continuous_batching: Mapping[str, Any] = attrs.field(factory=dict)
    last_trajectories: list[Trajectory] = attrs.field(factory=list)
    _pending_metrics: dict[str, float] = attrs.field(factory=dict)
    _loop: asyncio.AbstractEventLoop | None = attrs.field(default=None)

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
        episode: EpisodeBuilder = ToolEpisode,
        **options: Any,
    ) -> TrlAdapter:
        """The adapter for `config`: `Rollouts.from_config` (the one episode stack) with no engine yet."""
        rollouts = Rollouts.from_config(
            config, engine=None, tokenizer=tokenizer, client=client, model=model, max_context_len=max_context_len, max_new_tokens=max_new_tokens, episode=episode
        )  # type: ignore[arg-type]
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

    def run_episodes(self, model: Any, tasks: Sequence[TaskRef], *, on_done: Callable[[Trajectory], None] | None = None) -> list[Trajectory]:
        """One episode per task (in order) sampled from `model` as it is now; blocking. `on_done` sees each trajectory as it ends."""
        with sampling_mode(model):
            engine = TransformersEngine(
                _generation_model(model), self.tokenizer, sampling=self.sampling,
                default_max_new_tokens=self.rollouts.max_new_tokens, continuous_batching=self.continuous_batching,
            )  # fmt: skip
            try:
                return self.run(self._episodes(engine, tasks, on_done))
            finally:
                engine.stop()  # restores the attention implementation continuous batching switched
                _release_cache(model)

    async def _episodes(self, engine: TransformersEngine, tasks: Sequence[TaskRef], on_done: Callable[[Trajectory], None] | None = None) -> list[Trajectory]:
        gate = asyncio.Semaphore(self.concurrency)
        params = {"temperature": self.sampling.temperature, "top_p": self.sampling.top_p}

        async def one(task: TaskRef) -> Trajectory:
            async with gate:
                trajectory = await self.rollouts.run(task, sampling_params=params, engine=engine)
            if on_done is not None:
                on_done(trajectory)
            return trajectory

        return list(await asyncio.gather(*(one(task) for task in tasks)))

    # -- TRL's rollout_func ----------------------------------------------------------------------

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's `rollout_func`: one episode per prompt, mapped to one completion each (see the module docstring)."""
        tasks = [task_from_metadata(prompt) for prompt in prompts]
        model = trainer.model
        trajectories = self.run_episodes(model, tasks)
        rewards = [trained_reward(t) for t in trajectories]
        if self.group_rm:
            rewards = self.run(self._group_scores(tasks, trajectories, rewards, group_size=_group_size(trainer)))
        completions = [completion_of(t, self.tokenizer) for t in trajectories]
        self.last_trajectories = trajectories
        self._pending_metrics = self.step_metrics(trajectories, completions)
        return {
            "prompt_ids": [c.prompt_ids for c in completions],
            "completion_ids": [c.completion_ids for c in completions],
            "logprobs": [c.logprobs for c in completions],
            "env_mask": [c.env_mask for c in completions],
            "episode_reward": rewards,
            "stop_reason": [t.stop_reason.value for t in trajectories],
        }

    async def _group_scores(self, tasks: Sequence[TaskRef], trajectories: Sequence[Trajectory], rewards: list[float | None], *, group_size: int) -> list[float | None]:
        """Each group's rewards from the environment's `score_group` (where it has one); failures stay None."""
        config = self.rollouts.config
        out = list(rewards)
        for start in range(0, len(trajectories), group_size):
            members = range(start, min(start + group_size, len(trajectories)))
            samples = [
                SimpleNamespace(metadata=episode_metadata(task_row(tasks[i])["metadata"], trajectories[i], transcript=transcript(trajectories[i])), rollout_id=i)
                for i in members
            ]
            scored = await group_rewards(samples, group_rm=True, client=self.rollouts.client, config=config)
            for i, value in zip(members, scored):
                out[i] = None if rewards[i] is None else float(value)
        return out

    def step_metrics(self, trajectories: Sequence[Trajectory], completions: Sequence[Completion]) -> dict[str, float]:
        """The step's per-environment metrics (`flat_metrics` under `openreward/`), plus dropped segments and placeholders."""
        metrics = flat_metrics(summarize(trajectories), prefix=METRIC_PREFIX)
        by_env: dict[str, list[Completion]] = {}
        for trajectory, completion in zip(trajectories, completions):
            by_env.setdefault(str(trajectory.task.get("environment")), []).append(completion)
        for env, items in by_env.items():
            metrics[f"{METRIC_PREFIX}{env}/dropped_segments"] = float(sum(c.dropped_segments for c in items))
            metrics[f"{METRIC_PREFIX}{env}/placeholders"] = float(sum(c.placeholder for c in items))
        return metrics

    # -- TRL's reward function -------------------------------------------------------------------

    def episode_reward(self, prompts: Sequence[Any], completions: Sequence[Any], episode_reward: Sequence[float | None], log_metric: Any = None, **_: Any) -> list[float | None]:
        """TRL reward function: the rewards `__call__` computed (None: an infrastructure failure, excluded by TRL)."""
        if log_metric is not None:
            for name, value in self._pending_metrics.items():
                log_metric(name, value)
        self._pending_metrics = {}
        return list(episode_reward)

    def close(self) -> None:
        """Close the SDK client's sessions and the adapter's loop."""
        if self._loop is None or self._loop.is_closed():
            return
        closer = getattr(getattr(self.rollouts.client, "environments", None), "aclose", None)
        if closer is not None:
            self._loop.run_until_complete(closer())
        self._loop.close()


def _release_cache(model: Any) -> None:
    """On CUDA, hand the sampler's KV cache back to the allocator before the optimizer step needs the memory."""
    import torch

    if getattr(getattr(model, "device", None), "type", None) == "cuda":
        torch.cuda.empty_cache()


def _group_size(trainer: Any) -> int:
    mode = "train" if trainer.model.training else "eval"
    return int(trainer.num_generations if mode == "train" else trainer.num_generations_eval)

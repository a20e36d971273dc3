"""Per-environment summaries of episodes: rewards, success, pass@k, stop reasons, per-episode metrics.

One path serves `openreward-rl eval` (its table) and the Slime/Miles rollout log (WandB): episodes
become `EpisodeStats` records (from a `Trajectory`, or from a trainer's sample by the backend),
`summarize` turns them into one `EnvironmentSummary` per environment, and `flat_metrics` /
`aggregate` flatten those into `{"<prefix>/<environment>/<name>": value}`.

Infrastructure failures (`StopReason.is_infrastructure_failure`: aborted, env_error, timeout) are
counted separately and never enter reward, success or pass@k: they say nothing about the model.
The reward figures are those of the reward the trainer optimises: a scored episode that observed no
reward (truncated before the environment gave one, and no `nonterminal_reward` configured) counts
0.0, as every trainer gets it (`Trajectory.trained_reward`, `EpisodeStats.trained_reward`), and is
counted apart as `unrewarded`.

>>> from openreward_rl.loop.trajectory import StopReason, Trajectory
>>> from openreward_rl.task import TaskRef
>>> def episode(index, reward, stop=StopReason.COMPLETED):
...     task = TaskRef("MathEnv", "test", index=index)
...     return Trajectory(task, [], [], [], [], reward, stop, metrics={"turns": 2.0})
>>> summary = summarize([episode(0, 1.0), episode(0, 0.0), episode(1, 0.0), episode(1, None, StopReason.ENV_ERROR)])
>>> env = summary["MathEnv"]
>>> env.episodes, env.scored, env.infrastructure_failures, round(env.reward_mean, 3), env.pass_at_k[1]
(4, 3, 1, 0.333, 0.25)
>>> flat = flat_metrics(summary)
>>> flat["MathEnv/success_rate"], flat["MathEnv/stop/env_error"], flat["MathEnv/pass@2"]
(0.3333333333333333, 0.25, 1.0)
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.loop.trajectory import StopReason, Trajectory, trained_reward

__all__ = [
    "EpisodeStats",
    "EnvironmentSummary",
    "pass_at_k",
    "summarize",
    "flat_metrics",
    "aggregate",
    "default_task_key",
    "ALL",
]

ALL = "all"  # the environment name `aggregate` gives the summary over every environment
# per-episode counts broken down by kind: an episode without the key had none of that kind
_BY_KIND = ("parse_errors/", "tool_errors/")
_KNOWN_STOPS = tuple(reason.value for reason in StopReason)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from `n` samples of which `c` succeeded: 1 - C(n-c, k) / C(n, k).

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 4), pass_at_k(4, 0, 2), round(pass_at_k(5, 2, 2), 4)
    (0.25, 1.0, 0.0, 0.7)
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def default_task_key(trajectory: Trajectory) -> str | None:
    """The task of an episode within its environment (`TaskRef.label`)."""
    return trajectory.task.label


@attrs.frozen
class EpisodeStats:
    """What one episode contributes to a summary.

    - `reward`: None when none was observed; an infrastructure failure's reward is never counted.
    - `metrics`: per-episode numbers (`Trajectory.metrics`: turns, tool_calls, parse_errors/<kind>, ...).
    - `task`: identifies the task within its environment (pass@k groups by it); None leaves the
      episode out of pass@k and of the task count.
    - `trainable`: None when the source cannot tell.
    """

    environment: str
    reward: float | None
    stop_reason: str
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    finished: bool = False
    task: str | None = None
    stop_detail: str = ""
    trainable: bool | None = None

    @property
    def infrastructure_failure(self) -> bool:
        try:
            return StopReason(self.stop_reason).is_infrastructure_failure
        except ValueError:
            return False

    @property
    def trained_reward(self) -> float | None:
        """The reward the trainer trains (`loop.trajectory.trained_reward`): None for an infrastructure failure."""
        return trained_reward(self.reward, failed=self.infrastructure_failure)

    def succeeded(self, threshold: float = 0.0) -> bool:
        """Scored, and the reward is above `threshold`."""
        return not self.infrastructure_failure and self.reward is not None and self.reward > threshold

    @classmethod
    def from_trajectory(
        cls, trajectory: Trajectory, task_key: Callable[[Trajectory], str | None] = default_task_key
    ) -> EpisodeStats:
        """A scored trajectory without "turns" / "sampled_tokens" metrics gets them counted from its
        turns, and "context_tokens" is its training sequence's length."""
        metrics = dict(trajectory.metrics)
        if not trajectory.stop_reason.is_infrastructure_failure:
            metrics.setdefault("turns", float(len(trajectory.turns)))
            metrics.setdefault("sampled_tokens", float(sum(len(turn.sampled_ids) for turn in trajectory.turns)))
            metrics.setdefault("context_tokens", float(len(trajectory.tokens)))
        return cls(
            environment=trajectory.task.environment,
            reward=None if trajectory.stop_reason.is_infrastructure_failure else trajectory.reward,
            stop_reason=trajectory.stop_reason.value,
            metrics=metrics,
            finished=trajectory.finished,
            task=task_key(trajectory),
            stop_detail=trajectory.stop_detail,
            trainable=trajectory.trainable,
        )


@attrs.frozen
class EnvironmentSummary:
    """What the episodes of one environment add up to.

    - `scored`: episodes that were not infrastructure failures; rewards, success and pass@k use only these.
    - `unrewarded`: scored episodes whose reward is None (the environment never gave one); the reward
      figures count them 0.0, as the trainer does, and they are not successes.
    - `tasks`: distinct tasks among the episodes that say which task they ran (None: none says).
    - `pass_at_k[k]`: mean over tasks of the unbiased estimator from each task's scored samples; a
      task with fewer than k scored samples (infrastructure failures) is left out of that k.
    - `stop_reasons`: fraction of all episodes per stop reason seen (infrastructure failures included).
    - `failures`: infrastructure failures per stop reason, with one example detail each.
    - `metric_means[key]`: mean of a per-episode metric over the episodes that report it; counts by
      kind ("parse_errors/...", "tool_errors/...") are 0 for episodes without them.
    - `prefix_break_rate`: fraction of episodes with a prefix break (None: no episode reports breaks).
    - `compaction_rate`: fraction of episodes a context policy compacted at least once (None: no
      episode reports compactions); `num_compactions_mean` (compactions per episode),
      `context_tokens_saved_mean` and `summary_turns_mean` are among `metric_means`.
    - `env_time_fraction`: environment seconds / (environment + model seconds), None without timings.
    """

    environment: str
    episodes: int
    scored: int
    unrewarded: int
    tasks: int | None
    reward_mean: float | None
    reward_std: float | None
    reward_min: float | None
    reward_max: float | None
    success_rate: float | None
    pass_at_k: Mapping[int, float]
    stop_reasons: Mapping[str, float]
    failures: Mapping[str, tuple[int, str]]
    finished_rate: float
    trainable_fraction: float | None
    metric_means: Mapping[str, float]
    prefix_break_rate: float | None
    env_time_fraction: float | None
    compaction_rate: float | None = None

    @property
    def infrastructure_failures(self) -> int:
        return self.episodes - self.scored

    @property
    def turns_mean(self) -> float | None:
        return self.metric_means.get("turns")

    @property
    def sampled_tokens_mean(self) -> float | None:
        return self.metric_means.get("sampled_tokens")

    @property
    def context_tokens_mean(self) -> float | None:
        return self.metric_means.get("context_tokens")


def _ks(samples_per_task: Sequence[int]) -> list[int]:
    """1, 2, 4, ... up to the most samples any task has, plus that number itself."""
    if not samples_per_task:
        return []
    most = max(samples_per_task)
    ks = [1 << i for i in range(most.bit_length()) if 1 << i <= most]
    return sorted(set([*ks, most]))


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _pass_at_ks(scored: Sequence[EpisodeStats], threshold: float) -> dict[int, float]:
    per_task: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for episode in scored:
        if episode.task is not None:
            per_task[episode.environment, episode.task].append(episode.succeeded(threshold))
    pass_k: dict[int, float] = {}
    for k in _ks([len(s) for s in per_task.values()]):
        eligible = [s for s in per_task.values() if len(s) >= k]
        pass_k[k] = sum(pass_at_k(len(s), sum(s), k) for s in eligible) / len(eligible)
    return pass_k


def _metric_means(episodes: Sequence[EpisodeStats]) -> dict[str, float]:
    means = {}
    for key in sorted({k for e in episodes for k in e.metrics}):
        if key.startswith(_BY_KIND):
            values = [e.metrics.get(key, 0.0) for e in episodes]
        else:
            values = [e.metrics[key] for e in episodes if key in e.metrics]
        means[key] = statistics.fmean(values)
    return means


def _summarize_one(environment: str, episodes: Sequence[EpisodeStats], threshold: float) -> EnvironmentSummary:
    count = len(episodes)
    scored = [e for e in episodes if not e.infrastructure_failure]
    rewards = [r for e in scored if (r := e.trained_reward) is not None]  # every scored one
    unrewarded = sum(e.reward is None for e in scored)
    stops = Counter(e.stop_reason for e in episodes)
    failures: dict[str, tuple[int, str]] = {}
    for episode in episodes:
        if episode.infrastructure_failure:
            failed, detail = failures.get(episode.stop_reason, (0, episode.stop_detail))
            failures[episode.stop_reason] = (failed + 1, detail)
    known_trainable = [float(e.trainable) for e in episodes if e.trainable is not None]
    tasks = {(e.environment, e.task) for e in episodes if e.task is not None}
    env_seconds = sum(e.metrics.get("env_seconds", 0.0) for e in episodes)
    model_seconds = sum(e.metrics.get("model_seconds", 0.0) for e in episodes)
    return EnvironmentSummary(
        environment=environment,
        episodes=count,
        scored=len(scored),
        unrewarded=unrewarded,
        tasks=len(tasks) if tasks else None,
        reward_mean=_mean(rewards),
        reward_std=statistics.pstdev(rewards) if rewards else None,
        reward_min=min(rewards) if rewards else None,
        reward_max=max(rewards) if rewards else None,
        success_rate=_mean([float(e.succeeded(threshold)) for e in scored]),
        pass_at_k=_pass_at_ks(scored, threshold),
        stop_reasons={reason: n / count for reason, n in sorted(stops.items())},
        failures=failures,
        finished_rate=sum(e.finished for e in episodes) / count,
        trainable_fraction=_mean(known_trainable),
        metric_means=_metric_means(episodes),
        prefix_break_rate=(
            sum(1 for e in episodes if e.metrics.get("prefix_breaks", 0) > 0) / count
            if any("prefix_breaks" in e.metrics for e in episodes)
            else None
        ),
        env_time_fraction=env_seconds / (env_seconds + model_seconds) if env_seconds + model_seconds > 0 else None,
        compaction_rate=(
            sum(1 for e in episodes if e.metrics.get("num_compactions", 0) > 0) / count
            if any("num_compactions" in e.metrics for e in episodes)
            else None
        ),
    )


def _records(
    episodes: Iterable[Trajectory | EpisodeStats], task_key: Callable[[Trajectory], str | None]
) -> list[EpisodeStats]:
    return [e if isinstance(e, EpisodeStats) else EpisodeStats.from_trajectory(e, task_key) for e in episodes]


def summarize(
    episodes: Iterable[Trajectory | EpisodeStats],
    *,
    task_key: Callable[[Trajectory], str | None] = default_task_key,
    success_threshold: float = 0.0,
) -> dict[str, EnvironmentSummary]:
    """One `EnvironmentSummary` per environment, in first-seen order. Trajectories are converted
    with `EpisodeStats.from_trajectory` (`task_key` names their task); records are taken as they are."""
    grouped: dict[str, list[EpisodeStats]] = {}
    for record in _records(episodes, task_key):
        grouped.setdefault(record.environment, []).append(record)
    return {env: _summarize_one(env, items, success_threshold) for env, items in grouped.items()}


def _flat_one(item: EnvironmentSummary) -> dict[str, float]:
    values: dict[str, Any] = {
        "episodes": item.episodes,
        "scored": item.scored,
        "infra_failures": item.infrastructure_failures,
        "infra_failure_rate": item.infrastructure_failures / item.episodes,
        "unrewarded": item.unrewarded,
        "tasks": item.tasks,
        "reward_mean": item.reward_mean,
        "reward_std": item.reward_std,
        "reward_min": item.reward_min,
        "reward_max": item.reward_max,
        "reward_observed_rate": (item.scored - item.unrewarded) / item.episodes,
        "success_rate": item.success_rate,
        "finished_rate": item.finished_rate,
        "trainable_fraction": item.trainable_fraction,
        "prefix_break_rate": item.prefix_break_rate,
        "env_time_fraction": item.env_time_fraction,
        "compaction_rate": item.compaction_rate,
    }
    values.update({f"pass@{k}": v for k, v in item.pass_at_k.items()})
    seen = sorted(set(item.stop_reasons) - set(_KNOWN_STOPS))
    values.update({f"stop/{reason}": item.stop_reasons.get(reason, 0.0) for reason in [*_KNOWN_STOPS, *seen]})
    values.update({f"{key}_mean": v for key, v in item.metric_means.items()})
    return {key: float(v) for key, v in values.items() if v is not None}


def flat_metrics(summary: Mapping[str, EnvironmentSummary], *, prefix: str = "") -> dict[str, float]:
    """`{"<prefix><env>/<metric>": value}` for logging (WandB); metrics without a value are left out.

    Keys: episodes, scored, infra_failures, infra_failure_rate, unrewarded, tasks, reward_mean,
    reward_std, reward_min, reward_max, reward_observed_rate, success_rate, finished_rate,
    trainable_fraction, prefix_break_rate, env_time_fraction, compaction_rate, pass@<k>, stop/<reason> (every
    `StopReason`, 0 when unseen), and <key>_mean per episode metric (turns_mean, sampled_tokens_mean,
    context_tokens_mean, tool_calls_mean, num_compactions_mean, context_tokens_saved_mean,
    summary_turns_mean, parse_errors/<kind>_mean, ...).
    """
    return {f"{prefix}{env}/{key}": value for env, item in summary.items() for key, value in _flat_one(item).items()}


def aggregate(
    episodes: Iterable[Trajectory | EpisodeStats], prefix: str = "openreward", *, success_threshold: float = 0.0
) -> dict[str, float]:
    """Flat metrics per environment, `<prefix>/<environment>/<name>`, and over all as `<prefix>/all/<name>`.

    >>> a = EpisodeStats("Org/Env", 1.0, "completed", {"turns": 2.0, "env_seconds": 1.0, "model_seconds": 3.0})
    >>> b = EpisodeStats("Org/Env", 0.0, "max_turns", {"turns": 4.0, "parse_errors/invalid_json": 1.0})
    >>> m = aggregate([a, b])
    >>> m["openreward/Org/Env/reward_mean"], m["openreward/Org/Env/success_rate"], m["openreward/Org/Env/stop/max_turns"]
    (0.5, 0.5, 0.5)
    >>> m["openreward/Org/Env/turns_mean"], m["openreward/Org/Env/parse_errors/invalid_json_mean"], m["openreward/Org/Env/env_time_fraction"]
    (3.0, 0.5, 0.25)
    """
    records = _records(episodes, default_task_key)
    if not records:
        return {}
    summary = dict(sorted(summarize(records, success_threshold=success_threshold).items()))
    summary[ALL] = _summarize_one(ALL, records, success_threshold)
    return flat_metrics(summary, prefix=f"{prefix}/")

"""Episodes spent per informative group: the dynamic filter alone, against difficulty-aware selection.

A deterministic simulation (no model, no environment server): a task mix with known solve rates, each
episode a Bernoulli draw of its task's rate (reward 1.0 or 0.0), groups of `--group` episodes. Every
rollout step must collect `--batch` informative groups (rewards with spread), as Slime's and Miles'
dynamic sampling does: it keeps drawing prompts from the shuffled task file, runs each group and keeps
it if `openreward_rl.backends.filters.group_verdict` (the filter's own verdict) keeps it. Measured:
episodes run per kept group, over `--steps` steps. The library's own code decides everything that is
being compared:

- `filter`: the dynamic filter alone, over every task;
- `prepare`: `openreward-rl prepare --difficulty` first: each task has `--logged` logged rollouts of a
  base model whose solve rate is the task's, shifted by a random offset (the logged statistics come from
  another model), and `env.difficulty.DifficultyRule` drops the tasks without spread;
- `online`: the task sampler (`backends.task_sampling.SkipPolicy` over a `TaskRecord`, window 2, floor
  0.1) in front of the filter, learning from the run's own groups;
- `both`: prepare's selection, then the online sampler.

Solve rates do not change during the run (no learning is simulated): the figures are what selection
saves at a fixed policy; a learning policy moves tasks into and out of saturation, which the online
sampler follows and a file written before training does not.

    PYTHONPATH=src python benchmarks/task_selection.py [--tasks 400] [--group 8] [--batch 32] [--steps 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
from types import SimpleNamespace
from typing import Any

from openreward_rl.backends.filters import group_verdict
from openreward_rl.backends.task_sampling import SkipPolicy, TaskRecord
from openreward_rl.env.difficulty import DifficultyRule

MIX = (
    ("always solved", 0.35, lambda rng: 1.0),
    ("never solved", 0.25, lambda rng: 0.0),
    ("mixed", 0.30, lambda rng: rng.uniform(0.1, 0.9)),
    ("rare", 0.10, lambda rng: rng.uniform(0.01, 0.05)),
)


def task_mix(count: int, rng: random.Random) -> list[tuple[str, float]]:
    """(kind, solve rate) per task, in the proportions of MIX."""
    tasks = []
    for kind, share, rate in MIX:
        tasks += [(kind, rate(rng)) for _ in range(round(share * count))]
    rng.shuffle(tasks)
    return tasks


def logged_statistics(rate: float, logged: int, rng: random.Random) -> Any:
    """What get_task_difficulty would report: `logged` rollouts of a model whose rate is shifted by up to ±0.1."""
    shifted = min(1.0, max(0.0, rate + rng.uniform(-0.1, 0.1))) if 0.0 < rate < 1.0 else rate
    rewards = [1.0 if rng.random() < shifted else 0.0 for _ in range(logged)]
    return SimpleNamespace(
        min_reward=min(rewards), max_reward=max(rewards), num_rollouts=logged, response_chars=SimpleNamespace(p50=0.0)
    )


class Run:
    def __init__(self, tasks: list[tuple[str, float]], indices: list[int], args: Any, online: bool, seed: int) -> None:
        self.tasks, self.indices, self.args = tasks, indices, args
        self.rng = random.Random(seed)
        self.order: list[int] = []
        self.record = TaskRecord(window=2)
        self.policy = SkipPolicy(self.record, floor=0.1, seed=seed) if online else None
        self.episodes = self.kept = 0
        self.kept_by_kind: dict[str, int] = {}

    def draw(self, count: int) -> list[list[Any]]:
        """`count` prompt groups from the shuffled file, epoch after epoch (Slime's data source)."""
        out = []
        for _ in range(count):
            if not self.order:
                self.order = list(self.indices)
                self.rng.shuffle(self.order)
            out.append([SimpleNamespace(task=self.order.pop())])
        return out

    def step(self) -> None:
        kept = 0
        while kept < self.args.batch:
            groups = self.policy.fill(self.draw, 1, key=lambda sample: sample.task) if self.policy else self.draw(1)
            task = groups[0][0].task
            kind, rate = self.tasks[task]
            samples = [
                SimpleNamespace(reward=1.0 if self.rng.random() < rate else 0.0, status=None, rollout_id=None)
                for _ in range(self.args.group)
            ]
            self.episodes += len(samples)
            keep, _ = group_verdict(None, samples)
            self.record.record(task, keep)
            if keep:
                kept += 1
                self.kept_by_kind[kind] = self.kept_by_kind.get(kind, 0) + 1
        self.kept += kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--logged", type=int, default=8, help="logged rollouts per task behind get_task_difficulty")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    tasks = task_mix(args.tasks, rng)
    rule = DifficultyRule(min_rollouts=4)
    selected = [
        i for i, (_, rate) in enumerate(tasks) if rule.verdict(logged_statistics(rate, args.logged, rng)) is None
    ]
    everything = list(range(len(tasks)))
    kinds = ", ".join(f"{sum(k == kind for k, _ in tasks)} {kind}" for kind, _, _ in MIX)
    print(
        f"{len(tasks)} tasks: {kinds}; groups of {args.group}, {args.batch} informative groups per step, {args.steps} steps"
    )
    print(
        f"prepare --difficulty ({args.logged} logged rollouts, min_rollouts 4) keeps {len(selected)} tasks: "
        + ", ".join(f"{sum(tasks[i][0] == kind for i in selected)} {kind}" for kind, _, _ in MIX)
    )
    print(f"{'selection':>9}  {'episodes':>8}  {'per informative group':>21}  {'saved':>6}  kept groups by kind")
    baseline = None
    for name, indices, online in (
        ("filter", everything, False),
        ("prepare", selected, False),
        ("online", everything, True),
        ("both", selected, True),
    ):
        run = Run(tasks, indices, args, online, seed=args.seed + 1)
        for _ in range(args.steps):
            run.step()
        per_group = run.episodes / run.kept
        baseline = baseline or per_group
        kinds = ", ".join(f"{kind} {run.kept_by_kind.get(kind, 0)}" for kind, _, _ in MIX)
        print(f"{name:>9}  {run.episodes:>8}  {per_group:>21.2f}  {1 - per_group / baseline:>6.0%}  {kinds}")


if __name__ == "__main__":
    main()

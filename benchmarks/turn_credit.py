"""How well each advantage estimator credits the right turns, on CombinationLock-shaped episodes.

A deterministic simulation (no model, no trainer): episodes of `examples/environments/combination_lock.py`
(a lock of `--length` digits; a right digit earns PROGRESS_REWARD, the last one OPEN_REWARD and ends
the episode; at most `--max-turns` turns), where each turn is right with probability `--skill`. Groups of
`--group` episodes go through this library's estimators (`credit.returns.reward_to_go`,
`credit.estimators.group_advantages`) and every turn's advantage is compared with what the turn did:

- separation: mean advantage of right turns minus that of wrong turns (higher: the gradient tells the
  two apart), in each estimator's own scale (normalised by a different std), so compare it within one row;
- sign errors: share of wrong turns with a positive advantage plus right turns with a negative one,
  over all turns in groups with any signal (lower: fewer turns pushed the wrong way);
- largest |advantage|: over every turn of every group (each estimator's bound is in `credit.estimators`).

This measures credit, not learning: learning curves need a trainer (see docs/training.md).

    PYTHONPATH=src python benchmarks/turn_credit.py [--groups 2000] [--group 8] [--length 3] [--max-turns 6] [--skill 0.4] [--gamma 1.0] [--seed 0]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
from pathlib import Path

from openreward_rl.credit.estimators import group_advantages
from openreward_rl.credit.returns import reward_to_go

_LOCK = Path(__file__).resolve().parents[1] / "examples" / "environments" / "combination_lock.py"


def lock_rewards() -> tuple[float, float]:
    spec = importlib.util.spec_from_file_location("combination_lock", _LOCK)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.PROGRESS_REWARD, module.OPEN_REWARD


def episode(
    rng: random.Random, length: int, max_turns: int, skill: float, progress: float, opened: float
) -> tuple[list[float], list[bool]]:
    """(per-turn rewards, whether each turn was right)."""
    rewards, right, position = [], [], 0
    while len(rewards) < max_turns and position < length:
        ok = rng.random() < skill
        position += ok
        rewards.append((opened if position == length else progress) if ok else 0.0)
        right.append(ok)
    return rewards, right


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--length", type=int, default=3)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--skill", type=float, default=0.4)
    parser.add_argument("--gamma", type=float, default=1.0, help="discount of the per-turn returns (advantage.gamma)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    progress, opened = lock_rewards()
    rng = random.Random(args.seed)
    groups = []
    for _ in range(args.groups):
        groups.append(
            [episode(rng, args.length, args.max_turns, args.skill, progress, opened) for _ in range(args.group)]
        )
    print(
        f"{args.groups} groups of {args.group}; lock of {args.length}, {args.max_turns} turns at most, each turn right with p={args.skill}; "
        f"rewards {progress} per right digit, {opened} to open; gamma {args.gamma}"
    )
    print(f"{'estimator':>14}  {'separation':>10}  {'sign errors':>11}  {'largest |adv|':>13}")
    for name, estimator, weight in (
        ("episode", "episode", 0.5),
        ("turn", "turn", 0.5),
        ("turn_index", "turn_index", 0.5),
        ("mix 0.5", "mix", 0.5),
    ):
        right_sum = wrong_sum = 0.0
        right_n = wrong_n = errors = counted = 0
        largest = 0.0
        for group in groups:
            returns = [reward_to_go(rewards, args.gamma) for rewards, _ in group]
            totals = [sum(rewards) for rewards, _ in group]
            advantages = group_advantages(estimator, returns, totals, weight=weight)
            if all(abs(a) < 1e-9 for per_turn in advantages for a in per_turn):  # type: ignore[union-attr]
                continue
            largest = max(largest, *(abs(a) for per_turn in advantages for a in per_turn))  # type: ignore[union-attr]
            for (_, right), per_turn in zip(group, advantages):
                for ok, a in zip(right, per_turn):  # type: ignore[arg-type]
                    counted += 1
                    if ok:
                        right_sum, right_n, errors = right_sum + a, right_n + 1, errors + (a < 0)
                    else:
                        wrong_sum, wrong_n, errors = wrong_sum + a, wrong_n + 1, errors + (a > 0)
        print(
            f"{name:>14}  {right_sum / right_n - wrong_sum / wrong_n:>10.3f}  {errors / counted:>11.1%}  {largest:>13.2f}"
        )


if __name__ == "__main__":
    main()

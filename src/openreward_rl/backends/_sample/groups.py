"""How a trainer's batch of samples falls into prompt groups and rollouts: one rule for every hook.

A *rollout* is one episode. Fan-out siblings (one episode forked into a sample per context) share its
`rollout_id`; a sample without one is its own rollout, named by its `index`, else by its position.
A *prompt group* is the rollouts of one prompt: the samples' `group_index` where every sample has one,
else consecutive blocks of `n_samples_per_prompt` rollouts (a block counts rollouts, not samples, so a
fork does not shift the groups after it).

>>> from types import SimpleNamespace as S
>>> batch = [S(rollout_id=0, index=0), S(rollout_id=0, index=1), S(rollout_id=1, index=2), S(rollout_id=2, index=3), S(rollout_id=3, index=4)]
>>> prompt_groups(S(n_samples_per_prompt=2), batch)
[{('rollout', 0): [0, 1], ('rollout', 1): [2]}, {('rollout', 2): [3], ('rollout', 3): [4]}]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openreward_rl.errors import TrainerError

__all__ = ["flatten", "prompt_groups", "rollout_key"]


def flatten(samples: Sequence[Any]) -> list[Any]:
    """Leaf samples of a group that may nest fan-out lists."""
    out: list[Any] = []
    for item in samples:
        out.extend(flatten(item) if isinstance(item, list) else [item])
    return out


def rollout_key(sample: Any, position: int) -> tuple[str, Any]:
    """The rollout (episode) `sample` belongs to; `position` is its place in the batch, the last resort."""
    rollout_id = getattr(sample, "rollout_id", None)
    if rollout_id is not None:
        return ("rollout", rollout_id)
    index = getattr(sample, "index", None)
    return ("index", index) if index is not None else ("row", position)


def prompt_groups(args: Any, samples: Sequence[Any]) -> list[dict[tuple[str, Any], list[int]]]:
    """The batch's prompt groups, in order: each maps its rollouts (`rollout_key`) to their samples' positions."""
    by_group_index = all(getattr(s, "group_index", None) is not None for s in samples)
    per_prompt = int(getattr(args, "n_samples_per_prompt", 0) or 0)
    if not by_group_index and per_prompt < 1:
        raise TrainerError(f"{len(samples)} samples without group_index need args.n_samples_per_prompt to be grouped")
    groups: dict[Any, dict[tuple[str, Any], list[int]]] = {}
    block_of: dict[tuple[str, Any], int] = {}
    for position, sample in enumerate(samples):
        rollout = rollout_key(sample, position)
        if by_group_index:
            group = sample.group_index
        else:
            group = block_of.setdefault(rollout, len(block_of) // per_prompt)
        groups.setdefault(group, {}).setdefault(rollout, []).append(position)
    return list(groups.values())

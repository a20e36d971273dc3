"""Turn-level credit in TRL's `GRPOTrainer`: per-token advantages from the episodes' per-turn returns.

TRL computes one advantage per completion (GRPO over the reward functions' scalars). Its loss takes
an advantage tensor of shape (completions, completion tokens) as well ("to support subclasses",
`GRPOTrainer._compute_loss`), so `turn_credit_trainer_class()` returns a `GRPOTrainer` subclass that,
after TRL has generated and scored a batch, replaces `advantages` with the config's estimator
(`advantage: {estimator: turn | turn_index | mix}`) applied to each GRPO group of the adapter's trajectories:

- the same estimator the Slime and Miles hooks use (`openreward_rl.credit.group_token_advantages`):
  each turn's sampled tokens get that turn's return (reward-to-go, discounted by `gamma`) less the
  estimator's baseline, over the group's pooled spread (bounded: `credit.estimators`); `mix` blends in
  the episode advantage;
- a group is `num_generations` consecutive completions, as TRL forms them (the adapter's rollout
  returns the episodes in prompt order);
- an infrastructure failure gets 0.0 everywhere (its `env_mask` is 0, so it is never trained) and is
  left out of its group's statistics, as in TRL's own episode advantages;
- the environment's tokens after a turn (tool results, the next prompt) carry that turn's value, as in
  the Slime and Miles hooks; TRL's loss mask (`env_mask`) leaves them out of the loss.

`advantage: {estimator: episode}` (the default) keeps TRL's own GRPO advantages and the plain
`GRPOTrainer`. Refused up front (`TrainerError`): several processes (a group's completions can sit on
different ranks; the adapter sees only its own) and `group_rm` (the environment's group score replaces
the episode rewards, but the turn returns come from the per-step rewards).

>>> row_advantages([[0.5, -0.5], None, [1.0]], width=3)
[[0.5, -0.5, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from openreward_rl._compat import trl as compat_trl
from openreward_rl.config import TrainConfig
from openreward_rl.credit.group import group_token_advantages
from openreward_rl.errors import TrainerError
from openreward_rl.loop.trajectory import Trajectory

__all__ = ["batch_token_advantages", "row_advantages", "turn_credit_trainer_class"]


def batch_token_advantages(
    trajectories: Sequence[Trajectory], config: TrainConfig, group_size: int
) -> list[list[float] | None]:
    """Per-token advantages of a TRL batch: `group_token_advantages` under `config.advantage` over each run of
    `group_size` consecutive episodes (one task, so one environment and its `nonterminal_reward`)."""
    if group_size < 1 or len(trajectories) % group_size:
        raise TrainerError(f"{len(trajectories)} episodes do not split into GRPO groups of {group_size}")
    out: list[list[float] | None] = []
    for start in range(0, len(trajectories), group_size):
        group = trajectories[start : start + group_size]
        nonterminal = config.nonterminal_reward(group[0].task.environment)
        out.extend(group_token_advantages(group, config.advantage, nonterminal_reward=nonterminal))
    return out


def row_advantages(per_token: Sequence[Sequence[float] | None], width: int) -> list[list[float]]:
    """Rows of `width` for TRL's right-padded completions: each list padded with 0.0 (None: all 0.0)."""
    rows = []
    for values in per_token:
        values = list(values or ())
        if len(values) > width:
            raise TrainerError(
                f"a completion has {len(values)} advantages but the batch holds {width} completion tokens"
            )
        rows.append(values + [0.0] * (width - len(values)))
    return rows


@functools.cache
def turn_credit_trainer_class() -> type:
    """The `GRPOTrainer` subclass with per-token advantages (built once per process: it imports trl)."""
    import torch
    from trl import GRPOTrainer

    class TurnCreditGRPOTrainer(GRPOTrainer):
        """`GRPOTrainer(..., rollout_func=adapter)` where the adapter's config asks for `turn` or `mix`: see the module docstring."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            adapter = kwargs.get("rollout_func")
            if adapter is None or not hasattr(adapter, "last_trajectories"):
                raise TrainerError("turn-level credit needs openreward_rl's TrlAdapter as the rollout_func")
            estimator = adapter.rollouts.config.advantage.estimator
            if not adapter.rollouts.config.advantage.per_token:
                raise TrainerError(f"advantage.estimator {estimator!r} is TRL's own GRPO advantage; use GRPOTrainer")
            if adapter.group_rm:
                raise TrainerError(
                    f"advantage.estimator {estimator!r} cannot be combined with group_rm: the group score replaces the episode rewards the turn returns come from"
                )
            super().__init__(*args, **kwargs)
            if self.accelerator.num_processes > 1:
                raise TrainerError(
                    f"advantage.estimator {estimator!r} runs on one process; this run has {self.accelerator.num_processes}"
                )
            self.credit_adapter = adapter

        def turn_credit(self, output: dict[str, Any]) -> dict[str, Any]:
            """TRL's generated and scored batch with the turn-level advantages in place of its own."""
            trajectories = self.credit_adapter.last_trajectories
            completions = output["completion_ids"]
            if len(trajectories) != completions.shape[0]:
                raise TrainerError(
                    f"{completions.shape[0]} completions but the rollout ran {len(trajectories)} episodes"
                )
            assert (
                self.model is not None and self.num_generations is not None and self.num_generations_eval is not None
            )  # set by GRPOTrainer.__init__
            mode = "train" if self.model.training else "eval"
            group_size = self.num_generations if mode == "train" else self.num_generations_eval
            per_token = batch_token_advantages(trajectories, self.credit_adapter.rollouts.config, group_size)
            advantages = torch.tensor(
                row_advantages(per_token, completions.shape[1]), dtype=torch.float32, device=completions.device
            )
            output["advantages"] = advantages
            mask = output["completion_mask"] * output.get("tool_mask", torch.ones_like(output["completion_mask"]))
            trained = advantages[mask.bool()]
            if trained.numel():
                compat_trl.log_metric(self, mode, "turn_credit/advantage_mean", trained.mean().item())
                compat_trl.log_metric(self, mode, "turn_credit/advantage_abs_mean", trained.abs().mean().item())
            return output

    return compat_trl.with_scored_batch(TurnCreditGRPOTrainer, TurnCreditGRPOTrainer.turn_credit)

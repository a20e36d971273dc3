"""TRL's GRPO trainer internals the turn-level credit uses: the step that generates and scores a batch
(`GRPOTrainer._generate_and_score_completions`, extended in one subclass) and its metrics table (`_metrics`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openreward_rl._compat._gate import Gate, Internal

__all__ = ["GATE", "with_scored_batch", "log_metric"]


def _internals() -> list[Internal]:
    import inspect

    from trl import GRPOTrainer

    return [
        Internal(
            "trl.GRPOTrainer._generate_and_score_completions(inputs)",
            lambda: (
                list(inspect.signature(GRPOTrainer._generate_and_score_completions).parameters) == ["self", "inputs"]
            ),
        )
    ]


GATE = Gate("trl", ">=1.16,<2", _internals)


def with_scored_batch(trainer_class: type, rescore: Callable[[Any, dict[str, Any]], dict[str, Any]]) -> type:
    """A subclass of `trainer_class` (a `GRPOTrainer` subclass) whose every generated and scored batch (TRL's
    output dict: completion ids, advantages, ...) passes through `rescore(trainer, output)` before the loss."""
    GATE.check()

    class Rescored(trainer_class):
        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            return rescore(self, super()._generate_and_score_completions(inputs))

    Rescored.__name__ = Rescored.__qualname__ = trainer_class.__name__
    Rescored.__module__ = trainer_class.__module__
    return Rescored


def log_metric(trainer: Any, mode: str, name: str, value: float) -> None:
    """Add `value` to what `trainer` (a `GRPOTrainer`) logs as `name` in `mode` ("train" or "eval") at its next log."""
    trainer._metrics[mode][name].append(value)

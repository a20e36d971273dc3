"""TRL's internals: the GRPO trainer's step that generates and scores a batch (`GRPOTrainer._generate_and_score_completions`,
extended in one subclass) and its metrics table (`_metrics`), which the turn-level credit uses; the token count of
a tile of TRL's fused LM head (`trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE`), lowered for one trainer's training
on the CPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openreward_rl._compat._gate import Gate, Internal

__all__ = ["GATE", "lm_head_tiles", "with_scored_batch", "log_metric"]


def _internals() -> list[Internal]:
    import inspect

    from trl import GRPOTrainer
    from trl.kernels import chunked_logprob

    return [
        Internal(
            "trl.GRPOTrainer._generate_and_score_completions(inputs)",
            lambda: (
                list(inspect.signature(GRPOTrainer._generate_and_score_completions).parameters) == ["self", "inputs"]
            ),
        ),
        Internal(
            "trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE (an int, read at each call)",
            lambda: isinstance(chunked_logprob.TOKEN_CHUNK_SIZE, int),
        ),
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


def lm_head_tiles(tokens: int) -> Any:
    """A `TrainerCallback` under which a trainer's training projects at most `tokens` tokens per tile through TRL's
    fused LM head: TRL's `TOKEN_CHUNK_SIZE` is set when training begins and restored when it ends.

    Without Triton (the CPU), TRL folds each tile of `TOKEN_CHUNK_SIZE` tokens x 32,768 vocabulary columns with
    whole-tile torch operations, each leaving a float32 temporary of the tile's size, several alive at once: for a
    pass of 1,840 tokens, 240 MB each. Fewer tokens per tile make smaller temporaries and the same numbers (each
    token's log-probability is its own; only the order in which the weight's gradient adds up the tiles changes)."""
    if tokens < 1:
        raise ValueError(f"tokens per tile must be at least 1, got {tokens}")
    GATE.check()
    from transformers import TrainerCallback
    from trl.kernels import chunked_logprob

    class LmHeadTiles(TrainerCallback):
        def __init__(self) -> None:
            self.tokens = tokens
            self.before: int | None = None

        def on_train_begin(self, *_: Any, **__: Any) -> None:
            self.before, chunked_logprob.TOKEN_CHUNK_SIZE = chunked_logprob.TOKEN_CHUNK_SIZE, self.tokens

        def on_train_end(self, *_: Any, **__: Any) -> None:
            if self.before is not None:
                chunked_logprob.TOKEN_CHUNK_SIZE, self.before = self.before, None

    return LmHeadTiles()

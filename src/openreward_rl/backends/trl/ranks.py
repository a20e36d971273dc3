"""The processes of one `train --framework trl` run under `accelerate launch` (or `torchrun`): which one this is,
its share of a list, and the one collective the TRL path needs (every process's items, in rank order).

The launcher sets `RANK`, `WORLD_SIZE` and `LOCAL_RANK`; without them the run is one process and every
method here is the identity. `start` joins the process group through accelerate's `PartialState` (gloo on
the CPU, NCCL on GPUs), the same one TRL's trainer then uses.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, TypeVar

import attrs

__all__ = ["Ranks"]

T = TypeVar("T")


@attrs.frozen
class Ranks:
    """`index` of this process among `count` on all machines; `local` its index on this machine (its GPU).

    >>> ranks = Ranks(index=1, count=2, local=1)
    >>> ranks.share(list("abcde")), Ranks(index=0, count=2).share(list("abcde"))
    (['d', 'e'], ['a', 'b', 'c'])
    >>> ranks.device("cuda"), ranks.device("cpu"), Ranks().device("cuda")
    ('cuda:1', 'cpu', 'cuda')
    """

    index: int = 0
    count: int = 1
    local: int = 0

    @classmethod
    def current(cls) -> Ranks:
        """This process, from the launcher's environment variables (one process where they are unset)."""
        return cls(
            index=int(os.environ.get("RANK", 0)),
            count=int(os.environ.get("WORLD_SIZE", 1)),
            local=int(os.environ.get("LOCAL_RANK", 0)),
        )

    @property
    def main(self) -> bool:
        """The process that prints, writes files and logs (rank 0)."""
        return self.index == 0

    def start(self, device: str) -> None:
        """Join the run's process group (accelerate's `PartialState`, shared with the trainer): gloo where
        `device` is the CPU, NCCL on GPUs. Nothing for one process."""
        if self.count > 1:
            from accelerate import PartialState

            PartialState(cpu=device == "cpu")

    def device(self, device: str) -> str:
        """The device this process uses for `device`: its own GPU (`cuda:LOCAL_RANK`) where several processes share `cuda`."""
        return f"cuda:{self.local}" if self.count > 1 and device == "cuda" else device

    def share(self, items: Sequence[T]) -> list[T]:
        """This process's contiguous share of `items` (the first `len(items) % count` processes take one more);
        `gather` of every process's share is `items` again."""
        size, extra = divmod(len(items), self.count)
        start = self.index * size + min(self.index, extra)
        return list(items[start : start + size + (self.index < extra)])

    def gather(self, items: Sequence[T]) -> list[T]:
        """Every process's `items`, concatenated in rank order (each process gets the same list). Every process
        must call it, at the same point."""
        if self.count == 1:
            return list(items)
        import torch.distributed as dist

        parts: list[Any] = [None] * self.count
        dist.all_gather_object(parts, list(items))
        return [item for part in parts for item in part]

"""Ctrl-C that a training run cannot lose.

Python runs a signal handler between two bytecodes of the main thread. When those bytecodes belong to a
finalizer (a `__del__`, a weakref callback, run by the garbage collector), the `KeyboardInterrupt` the
handler raises is printed ("Exception ignored in ...") and dropped, and a training run goes on to its
last step. `Interrupts` raises `KeyboardInterrupt` as Python's own handler does and also remembers the
request; its trainer callback raises it again at the next step's end if the first was dropped.

>>> interrupts = Interrupts()
>>> class Collected:
...     def __del__(self):
...         interrupts.handle(signal.SIGINT, None)  # as if Ctrl-C came while the collector ran this
>>> Collected() and None  # the interrupt raised in __del__ is dropped, as Python drops it
>>> try:
...     interrupts.raise_if_requested()
... except KeyboardInterrupt:
...     print("interrupted at the step's end")
interrupted at the step's end
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import attrs

__all__ = ["Interrupts"]


@attrs.define
class Interrupts:
    """Ctrl-C requests during one command: `installed()` handles SIGINT with `handle` for the command's span."""

    requested: bool = False

    def handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        raise KeyboardInterrupt

    def raise_if_requested(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[Interrupts]:
        """SIGINT goes to `handle` inside the block (the main thread only: elsewhere Python sets no handlers)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self.handle)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)

    def callback(self) -> Any:
        """A TrainerCallback raising a remembered Ctrl-C at each step's end."""
        from transformers import TrainerCallback

        interrupts = self

        class InterruptAtStepEnd(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
                interrupts.raise_if_requested()

        return InterruptAtStepEnd()

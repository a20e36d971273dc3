"""What `openreward-rl` prints when an error reaches the top of a command: one line naming the problem,
and the traceback only under `--debug` (or `OPENREWARD_RL_DEBUG=1`).

| error | line | exit status |
|---|---|---|
| Ctrl-C (`KeyboardInterrupt`) | `interrupted` | 130 |
| bad input: `ConfigError`, `ModelFamilyError`, `TrainerError`, any `ValueError` | its message | 2 |
| a fault of a part we drive: `EnvError`, `EngineError` | its message | 1 |
| a missing file (`FileNotFoundError`) | `no such file or directory: PATH` | 2 |
| anything else | `TYPE: first line (--debug shows the traceback)` | 1 |

Library code names the problem where it calls a part it does not own with
`openreward_rl.errors.boundary` (a model loader's `OSError` becomes "cannot load the model ...: ..."),
so the line says what failed rather than where.

>>> classify(KeyboardInterrupt())
('interrupted', 130)
>>> classify(ValueError("--lr must be > 0, got -1e-05"))
('--lr must be > 0, got -1e-05', 2)
>>> classify(AssertionError("Torch not compiled with CUDA enabled"))
('AssertionError: Torch not compiled with CUDA enabled (--debug shows the traceback)', 1)
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from openreward_rl.errors import EngineError, EnvError, OpenRewardRLError, first_line

__all__ = ["DEBUG_ENV", "classify", "debug_requested", "report"]

DEBUG_ENV = "OPENREWARD_RL_DEBUG"
EXIT_INPUT, EXIT_FAULT, EXIT_INTERRUPTED = 2, 1, 130


def classify(error: BaseException) -> tuple[str, int]:
    """(the line to print, the exit status) for an error that ended a command."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupted", EXIT_INTERRUPTED
    if isinstance(error, (EnvError, EngineError)):
        return _message(error), EXIT_FAULT
    if isinstance(error, (OpenRewardRLError, ValueError)):
        return _message(error), EXIT_INPUT
    if isinstance(error, FileNotFoundError) and error.filename:
        return f"no such file or directory: {error.filename}", EXIT_INPUT
    return f"{type(error).__name__}: {first_line(error)} (--debug shows the traceback)", EXIT_FAULT


def _message(error: BaseException) -> str:
    """A message written for people, kept whole; an empty one says the type."""
    return str(error).strip() or type(error).__name__


def debug_requested(args: Any = None) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes")


def report(prog: str, error: BaseException, *, debug: bool, stream: Any = None) -> int:
    """Print `error` for a person (the traceback first under `debug`); the exit status."""
    stream = stream or sys.stderr
    if debug:
        traceback.print_exception(error, file=stream)
    line, status = classify(error)
    print(f"{prog}: {line}", file=stream, flush=True)
    return status

"""What `openreward-rl` prints when an error reaches the top of a command, classified by the library's own
error types (`openreward_rl.errors`): what the user can fix is one line naming the problem; anything else is
a bug of this library, shown with its traceback and a line asking for a report.

| error | what is printed | exit status |
|---|---|---|
| Ctrl-C (`KeyboardInterrupt`) | `interrupted` | 130 |
| bad input: `ConfigError`, `ModelFamilyError`, `TrainerError` (any `OpenRewardRLError` but the two below) | its message | 2 |
| a missing file (`FileNotFoundError`) | `no such file or directory: PATH`, or its message when it names no path | 2 |
| a fault of a part we drive: `EnvError`, `EngineError` | its message | 1 |
| anything else, a plain `ValueError` included (an internal invariant that failed) | the traceback, `TYPE: first line`, and that it is a bug to report | 1 |

`--debug` (or `OPENREWARD_RL_DEBUG=1`) prints the traceback of every error. Library code raises the
library's types where input enters (`errors.py` says how), and names the problem where it calls a part it
does not own with `openreward_rl.errors.boundary` (a model loader's `OSError` becomes "cannot load the model
...: ..."), so that only its own mistakes reach the last row.

>>> from openreward_rl.errors import ConfigError
>>> classify(KeyboardInterrupt())
('interrupted', 130)
>>> classify(ConfigError("--lr must be > 0, got -1e-05"))
('--lr must be > 0, got -1e-05', 2)
>>> classify(ValueError("3 log-probs for 4 output ids"))
('ValueError: 3 log-probs for 4 output ids', 1)
>>> is_bug(ValueError("3 log-probs for 4 output ids")), is_bug(ConfigError("bad")), is_bug(KeyboardInterrupt())
(True, False, False)
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

from openreward_rl.errors import EngineError, EnvError, OpenRewardRLError, first_line

__all__ = ["DEBUG_ENV", "BUG_LINE", "classify", "debug_requested", "is_bug", "report"]

DEBUG_ENV = "OPENREWARD_RL_DEBUG"
EXIT_INPUT, EXIT_FAULT, EXIT_INTERRUPTED = 2, 1, 130
BUG_LINE = "this is a bug in openreward-rl, not in your input: please report it, with the traceback above"


def is_bug(error: BaseException) -> bool:
    """Whether `error` is none of the library's own errors nor an interrupt or a missing file: an internal error."""
    return not isinstance(error, (KeyboardInterrupt, OpenRewardRLError, FileNotFoundError))


def classify(error: BaseException) -> tuple[str, int]:
    """(the line to print, the exit status) for an error that ended a command."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupted", EXIT_INTERRUPTED
    if isinstance(error, (EnvError, EngineError)):
        return _message(error), EXIT_FAULT
    if isinstance(error, OpenRewardRLError):
        return _message(error), EXIT_INPUT
    if isinstance(error, FileNotFoundError):
        return (f"no such file or directory: {error.filename}" if error.filename else _message(error)), EXIT_INPUT
    return f"{type(error).__name__}: {first_line(error)}", EXIT_FAULT


def _message(error: BaseException) -> str:
    """A message written for people, kept whole; an empty one says the type."""
    return str(error).strip() or type(error).__name__


def debug_requested(args: Any = None) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes")


def report(prog: str, error: BaseException, *, debug: bool, stream: Any = None) -> int:
    """Print `error` for a person: the traceback first under `debug`, and always for a bug (`is_bug`), which
    also gets `BUG_LINE`; the exit status."""
    stream = stream or sys.stderr
    bug = is_bug(error)
    if debug or bug:
        traceback.print_exception(error, file=stream)
    line, status = classify(error)
    print(f"{prog}: {line}", file=stream, flush=True)
    if bug:
        print(f"{prog}: {BUG_LINE}", file=stream, flush=True)
    return status

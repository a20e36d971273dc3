"""One error vocabulary: `OpenRewardRLError`, and one subclass per boundary the library crosses.

```
Exception
└── OpenRewardRLError                      every error this library raises on purpose
    ├── ConfigError (ValueError)           input: a bad config value, command-line flag or option, or input file
    │   ├── ResultsError                   an `eval --output` results file this run cannot use
    │   ├── DumpError                      a trajectory dump that cannot be read (observe.dumps)
    │   └── UnsupportedSamplingError       a sampling parameter the engine cannot honour (engines.sampling)
    ├── ModelFamilyError (ValueError)      model family: unknown or refused, a chat template the bridge cannot cut
    │   ├── UnsupportedModelError          (families.base)
    │   ├── TemplateBridgeError            (families.chat)
    │   └── ModelCheckError                the token-exactness probe failed (families.probe)
    ├── EnvError                           environment: the OpenReward side failed, never the model's doing
    │   ├── EnvironmentFault (RuntimeError)      mid-episode (env.environment)
    │   ├── ServerUnreachable (ConnectionError)  (env.environment)
    │   ├── EnvServerStartError (RuntimeError)   a local server that would not start (env.local_server)
    │   └── AtCapacityError (RuntimeError)       the environment answered 429 through every retry (retry)
    ├── EngineError (RuntimeError)         engine: the sampling engine failed or refused a request
    │   ├── ContextLengthError             the request does not fit the model's context (engines.base)
    │   └── EngineRequestError             the engine refused the request (engines.base)
    └── TrainerError                       trainer: Slime, Miles or TRL cannot be launched or driven as asked
        └── LaunchError (ValueError)       `openreward-rl train` cannot start the run (cli.launcher)
```

Each keeps the built-in base it had (`ValueError` for bad input, `RuntimeError` for faults), so
existing `except ValueError` code keeps working. Faults (`EnvError`, `EngineError`) end an episode as
an infrastructure failure, never as a reward: `openreward_rl.loop.episode.fault_stop` is the one mapping.

The rule for raising and adding one:

- Bad input raises `ConfigError` where it enters: the flag, option or config key is checked at the
  command line, the options object or the config parser, and the message names it and the fix. A plain
  `ValueError` is for a caller's programming error inside the library (an invariant, a wrong argument
  to an internal function), never for something a user typed: `openreward-rl` reports any error that is
  not one of these as a bug, with its traceback (`cli.failures`).
- A new class is added only for a new boundary, or where a caller must tell one failure from its
  siblings (`ResultsError`: `eval` offers --overwrite for it). It subclasses the boundary's class
  (never `Exception` directly), keeps that class's built-in base, is defined here (or, where only one
  module raises it, next to it, subclassing one of these) and gets a line in the tree above.

>>> from openreward_rl.errors import ConfigError, OpenRewardRLError, ResultsError
>>> issubclass(ConfigError, OpenRewardRLError) and issubclass(ConfigError, ValueError)
True
>>> issubclass(ResultsError, ConfigError)
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = [
    "OpenRewardRLError",
    "ConfigError",
    "ResultsError",
    "ModelFamilyError",
    "EnvError",
    "EngineError",
    "TrainerError",
    "boundary",
    "first_line",
]


class OpenRewardRLError(Exception):
    """Every error this library raises on purpose."""


class ConfigError(OpenRewardRLError, ValueError):
    """Bad input (a config value, a command-line argument, an input file); the message names it and the fix."""


class ResultsError(ConfigError):
    """A results file this run cannot use (another run's settings, another writer, not a results file); the message names the file and what to do."""


class ModelFamilyError(OpenRewardRLError, ValueError):
    """The model's family is unknown or refused, or its chat template cannot be bridged token-exactly."""


class EnvError(OpenRewardRLError):
    """The OpenReward environment side failed: an infrastructure fault, never the model's doing."""


class EngineError(OpenRewardRLError, RuntimeError):
    """The engine failed (connection, HTTP 5xx, timeout, malformed answer): an infrastructure fault."""


class TrainerError(OpenRewardRLError):
    """A trainer (Slime, Miles, TRL) cannot be launched or driven as asked; the message says what to change."""


def first_line(error: BaseException) -> str:
    """The first non-empty line of `error`'s message; its type's name when it has none.

    >>> first_line(OSError("acme/foo-7b is not a valid model identifier\\nIf this is a private repository, ..."))
    'acme/foo-7b is not a valid model identifier'
    >>> first_line(AssertionError())
    'AssertionError'
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


@contextlib.contextmanager
def boundary(error_cls: type[OpenRewardRLError], what: str) -> Iterator[None]:
    """Where the library calls a part it does not own (a model loader, the SDK): any exception raised inside
    becomes `error_cls("{what}: {first line}")`, the original chained as its cause. This library's own
    errors and interrupts pass unchanged.

    >>> with boundary(ConfigError, "cannot load the model 'acme/foo-7b'"):
    ...     raise OSError("acme/foo-7b is not a local folder and is not a valid model identifier")
    Traceback (most recent call last):
    ...
    openreward_rl.errors.ConfigError: cannot load the model 'acme/foo-7b': acme/foo-7b is not a local folder and is not a valid model identifier
    """
    try:
        yield
    except OpenRewardRLError:
        raise
    except Exception as error:
        raise error_cls(f"{what}: {first_line(error)}") from error

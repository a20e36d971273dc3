"""One error vocabulary: `OpenRewardRLError`, and one subclass per boundary the library crosses.

| boundary | class | raised for |
|---|---|---|
| input | `ConfigError` | a bad config value, command-line argument or input file; the message names it and the fix |
| model family | `ModelFamilyError` | a model family that is unknown or refused, a chat template the bridge cannot cut |
| environment | `EnvError` | the OpenReward environment failed (`EnvironmentFault` mid-episode, an unreachable or unstartable server) |
| engine | `EngineError` | the sampling engine failed or refused a request |
| trainer | `TrainerError` | a trainer (Slime, Miles, TRL) cannot be launched or driven as asked |

Each keeps the built-in base it had (`ValueError` for bad input, `RuntimeError` for faults), so
existing `except ValueError` code keeps working. Faults (`EnvError`, `EngineError`) end an episode as
an infrastructure failure, never as a reward: `openreward_rl.loop.episode.fault_stop` is the one mapping.

>>> from openreward_rl.errors import ConfigError, OpenRewardRLError
>>> issubclass(ConfigError, OpenRewardRLError) and issubclass(ConfigError, ValueError)
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["OpenRewardRLError", "ConfigError", "ModelFamilyError", "EnvError", "EngineError", "TrainerError", "boundary", "first_line"]


class OpenRewardRLError(Exception):
    """Every error this library raises on purpose."""


class ConfigError(OpenRewardRLError, ValueError):
    """Bad input (a config value, a command-line argument, an input file); the message names it and the fix."""


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

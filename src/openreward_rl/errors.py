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

__all__ = ["OpenRewardRLError", "ConfigError", "ModelFamilyError", "EnvError", "EngineError", "TrainerError"]


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

"""Checks that run before any work starts: each problem is one `ConfigError` naming it and the fix.

`check_ready(config)` needs no network: it finds environments that need an OpenReward API key
(remote ones: no `base_url` and no `env_base_url`) when none is set, and registers every resolved
secret and every known credential (`redaction.KNOWN_SECRET_VARIABLES`) for redaction before
anything can log it. `check_environments(client, config)` asks each environment server for its
splits: an unknown environment, variant or split, or a server that cannot be reached, is reported
before the first episode.

>>> from openreward_rl.config import parse_config
>>> config = parse_config({"environments": {"GeneralReasoning/WhoDunIt": {}}}, source="train_config.yaml")
>>> check_ready(config, environ={})
Traceback (most recent call last):
...
openreward_rl.errors.ConfigError: train_config.yaml: environment 'GeneralReasoning/WhoDunIt' is served by OpenReward (no base_url or env_base_url is set), which needs an API key: set OPENREWARD_API_KEY
>>> check_ready(config, environ={"OPENREWARD_API_KEY": "or-key-123"})
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import aiohttp

from openreward_rl.config import ConfigError, TrainConfig
from openreward_rl.env.transport import use_pooled_transport
from openreward_rl.redaction import register_known_secrets, register_secrets
from openreward_rl.retry import RetryPolicy, call_with_retries, describe_error, is_transient

__all__ = ["check_ready", "check_environments", "remote_environments"]

API_KEY_VARIABLE = "OPENREWARD_API_KEY"


def remote_environments(config: TrainConfig) -> list[str]:
    """The configured environments served by OpenReward itself (no local base URL)."""
    return [name for name in config.environments if not config.base_url_for(name)]


def check_ready(config: TrainConfig, *, environ: Mapping[str, str] | None = None, api_key: str | None = None) -> None:
    """Raise `ConfigError` for the first problem that would stop a run; register secrets for redaction.

    `api_key` is a key given on the command line; otherwise `OPENREWARD_API_KEY` is read from `environ`.
    """
    environ = os.environ if environ is None else environ
    register_known_secrets(environ)
    for name in config.environments:
        config.resolve_secrets(name, environ)  # resolving registers them for redaction
    key = api_key or environ.get(API_KEY_VARIABLE, "")
    if key:
        register_secrets([key])
    remote = remote_environments(config)
    if remote and not key.strip():
        names = ", ".join(repr(n) for n in remote)
        plural = "s" if len(remote) > 1 else ""
        raise ConfigError(
            f"{config.source}: environment{plural} {names} {'are' if plural else 'is'} served by OpenReward "
            f"(no base_url or env_base_url is set), which needs an API key: set {API_KEY_VARIABLE}"
        )
    for name in config.environments:
        url = config.base_url_for(name)
        if url and not url.startswith(("http://", "https://")):
            raise ConfigError(f"{config.source}: environments.{name}: base URL {url!r} must start with http:// or https://")


async def check_environments(client: Any, config: TrainConfig, *, retry: RetryPolicy | None = None) -> None:
    """Ask every configured environment for its splits; `ConfigError` if one is unknown or unreachable."""
    policy = retry or RetryPolicy(attempts=2, initial_s=1.0, max_s=5.0)
    use_pooled_transport(client)  # before the first session: every later episode of `client` uses it too
    for name, env_config in config.environments.items():
        url = config.base_url_for(name)
        where = url or "OpenReward"
        environment = client.environments.get(name, variant=env_config.variant, base_url=url)
        try:
            splits = await call_with_retries(environment.list_splits, policy, what=f"listing the splits of {name}", retry_on=is_transient)
        except aiohttp.ClientResponseError as error:
            if error.status == 404:
                variant = f" with variant {env_config.variant!r}" if env_config.variant else ""
                raise ConfigError(
                    f"{config.source}: environment {name!r}{variant} was not found at {where} ({describe_error(error)}); "
                    "check the name (case-sensitive), the variant and the base URL"
                ) from None
            raise ConfigError(f"{config.source}: environment {name!r} at {where} answered an error: {describe_error(error)}") from None
        except Exception as error:  # unreachable, authentication, at capacity: all stop the run here
            raise ConfigError(f"{config.source}: environment {name!r} at {where} cannot be used: {describe_error(error)}") from None
        available = [getattr(s, "name", s) for s in splits]
        missing = [s for s in env_config.splits if s not in available]
        if missing:
            raise ConfigError(
                f"{config.source}: environments.{name}.splits: {', '.join(repr(s) for s in missing)} not offered by the "
                f"environment; it has: {', '.join(map(str, available))}"
            )

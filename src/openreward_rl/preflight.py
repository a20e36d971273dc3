"""Checks that run before any work starts: each problem is one `ConfigError` naming it and the fix.

`check_ready(config)` needs no network: it finds environments that need an OpenReward API key
(remote ones: no `base_url` and no `env_base_url`) when none is set, an unknown or unfit episode or
context policy (`loop.rollout.check_extensions`), and registers every resolved
secret and every known credential (`redaction.KNOWN_SECRET_VARIABLES`) for redaction before
anything can log it. `check_environments(client, config)` asks each
environment server which environments it hosts and for their splits: a server that cannot be
reached (under a short retry policy, `PREFLIGHT_RETRY`: a refused connection at start-up is not
worth the long back-off of work already under way), an environment name or variant a local server
does not serve, or an unknown split is reported before the first episode; so is a secret that
OpenReward lists as required for an environment (the SDK's `list_required_secrets`, asked for every
environment with an owner, `owner/name`, when an API key is set) and the config does not give it. A
secret the config reads from an unset environment variable is reported by `check_ready`.

>>> from openreward_rl.config import parse_config
>>> config = parse_config({"environments": {"GeneralReasoning/WhoDunIt": {}}}, source="train_config.yaml")
>>> check_ready(config, environ={})
Traceback (most recent call last):
...
openreward_rl.errors.ConfigError: train_config.yaml: environment 'GeneralReasoning/WhoDunIt' is served by OpenReward (no base_url or env_base_url is set), which needs an API key: set OPENREWARD_API_KEY
>>> check_ready(config, environ={"OPENREWARD_API_KEY": "or-key-123"})
"""  # noqa: E501  (the doctest's expected error is one line)

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

import aiohttp

from openreward_rl.config import ConfigError, TrainConfig
from openreward_rl.env.traffic import use_pooled_transport
from openreward_rl.loop.rollout import check_extensions
from openreward_rl.redaction import register_known_secrets, register_secrets
from openreward_rl.retry import RetryPolicy, call_with_retries, describe_error, is_transient

__all__ = [
    "check_ready",
    "check_environments",
    "check_required_secrets",
    "remote_environments",
    "served_environments",
    "PREFLIGHT_RETRY",
]

logger = logging.getLogger(__name__)

API_KEY_VARIABLE = "OPENREWARD_API_KEY"
# Start-up checks: two tries half a second apart; a server that is down is reported in about a second.
PREFLIGHT_RETRY = RetryPolicy(attempts=2, initial_s=0.5, max_s=1.0, jitter_s=0.0)
# Seconds one start-up request may take (a host that drops packets instead of refusing).
PROBE_TIMEOUT_S = 5.0


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
            raise ConfigError(
                f"{config.source}: environments.{name}: base URL {url!r} must start with http:// or https://"
            )
    check_extensions(config)  # the episode and context policies, which the config's layer cannot look up


def _cannot_connect(error: BaseException) -> bool:
    return isinstance(error, (aiohttp.ClientConnectionError, asyncio.TimeoutError))


async def served_environments(
    url: str, *, retry: RetryPolicy = PREFLIGHT_RETRY, timeout_s: float = PROBE_TIMEOUT_S
) -> list[str] | None:
    """The environments the server at `url` hosts (the SDK server's `GET /list_environments`: lowercased
    class names, the default one first), or None when it answers without that list (not an SDK server,
    e.g. a proxy). Failures to connect are retried under `retry`, then raised."""

    async def ask(http: aiohttp.ClientSession) -> list[str] | None:
        async with http.get(f"{url.rstrip('/')}/list_environments") as response:
            if response.status != 200:
                return None
            try:
                names = await response.json(content_type=None)
            except ValueError:
                return None
        return names if isinstance(names, list) and names and all(isinstance(n, str) for n in names) else None

    async with aiohttp.ClientSession(trust_env=True, timeout=aiohttp.ClientTimeout(total=timeout_s)) as http:
        return await call_with_retries(lambda: ask(http), retry, what=f"reaching {url}", retry_on=_cannot_connect)


async def _servers(config: TrainConfig, retry: RetryPolicy) -> dict[str, list[str] | None]:
    """Each local server's environments (`served_environments`); `ConfigError` naming one that cannot be reached."""
    users: dict[str, list[str]] = {}
    for name in config.environments:
        url = config.base_url_for(name)
        if url:
            users.setdefault(url, []).append(name)
    served: dict[str, list[str] | None] = {}
    for url, names in users.items():
        try:
            served[url] = await served_environments(url, retry=retry)
        except Exception as error:  # refused, unknown host, timed out, not a URL
            raise ConfigError(
                f"{config.source}: cannot reach the environment server at {url} (for {', '.join(map(repr, names))}): "
                f"{describe_error(error)}; is it running? check env_base_url / base_url"
            ) from None
    return served


def _check_served(config: TrainConfig, name: str, url: str, served: list[str]) -> None:
    """`ConfigError` unless the requests for `name` reach the environment of that name (or variant) on `url`.

    A local server ignores the environment name: without a variant every request goes to its default
    (first) environment, whatever the name says."""
    variant = config.environments[name].variant
    hosts = ", ".join(served)
    if variant is not None:
        if variant.lower() not in served:
            raise ConfigError(
                f"{config.source}: environment {name!r} with variant {variant!r} is not served at {url}; it serves: {hosts}"
            )
        return
    wanted = name.split("/")[-1].lower()
    if wanted == served[0]:
        return
    if wanted in served:
        raise ConfigError(
            f"{config.source}: environment {name!r} has no variant, so its requests would go to the default environment "
            f"{served[0]!r} at {url}; set environments.{name}.variant: {wanted}"
        )
    raise ConfigError(
        f"{config.source}: environment {name!r} is not served at {url}; it serves: {hosts} (name one of them, or set its variant)"
    )


async def check_environments(
    client: Any, config: TrainConfig, *, retry: RetryPolicy = PREFLIGHT_RETRY, split_option: str | None = None
) -> None:
    """`ConfigError` for the first configured environment that cannot be used: its server is unreachable,
    does not serve it, does not offer one of its splits, or needs a secret the config does not give it
    (`check_required_secrets`). `split_option` names the command-line option
    that set every environment's splits (eval's `--split`), for the message."""
    use_pooled_transport(client)  # before the first session: every later episode of `client` uses it too
    servers = await _servers(config, retry)
    for name, env_config in config.environments.items():
        url = config.base_url_for(name)
        where = url or "OpenReward"
        served = servers.get(url) if url else None
        if url is not None and served is not None:
            _check_served(config, name, url, served)
        environment = client.environments.get(name, variant=env_config.variant, base_url=url)
        try:
            splits = await call_with_retries(
                environment.list_splits, retry, what=f"listing the splits of {name}", retry_on=is_transient
            )
        except aiohttp.ClientResponseError as error:
            if error.status == 404:
                variant = f" with variant {env_config.variant!r}" if env_config.variant else ""
                raise ConfigError(
                    f"{config.source}: environment {name!r}{variant} was not found at {where} ({describe_error(error)}); "
                    "check the name (case-sensitive), the variant and the base URL"
                ) from None
            raise ConfigError(
                f"{config.source}: environment {name!r} at {where} answered an error: {describe_error(error)}"
            ) from None
        except Exception as error:  # unreachable, authentication, at capacity: all stop the run here
            raise ConfigError(
                f"{config.source}: environment {name!r} at {where} cannot be used: {describe_error(error)}"
            ) from None
        available = [getattr(s, "name", s) for s in splits]
        missing = [s for s in env_config.splits if s not in available]
        if missing:
            offered = ", ".join(map(str, available))
            if split_option:
                raise ConfigError(
                    f"{split_option} {missing[0]!r}: environment {name!r} has no such split; it has: {offered}"
                )
            raise ConfigError(
                f"{config.source}: environments.{name}.splits: {', '.join(repr(s) for s in missing)} not offered by the "
                f"environment; it has: {offered}"
            )
        await check_required_secrets(environment, config, name)


async def check_required_secrets(
    environment: Any, config: TrainConfig, name: str, *, timeout_s: float = PROBE_TIMEOUT_S
) -> None:
    """`ConfigError` naming the first secret OpenReward lists as required for environment `name` (the SDK's
    `AsyncEnvironment.list_required_secrets`, from the platform API) that the config does not give it.

    Asked only where the platform can know the environment: a name with an owner (`owner/name`) and an
    API key to ask with. A lookup that fails (the platform unreachable or not knowing a locally served
    environment) is logged and skipped: the check is a courtesy, the environment has the last word.
    """
    if "/" not in name or not getattr(environment, "api_key", ""):
        return
    try:
        required = await asyncio.wait_for(environment.list_required_secrets(), timeout_s)
    except Exception as error:  # unreachable, unknown to the platform, timed out
        logger.info("could not ask OpenReward which secrets %s requires (%s); not checked", name, describe_error(error))
        return
    given = config.resolve_secrets(name)
    for secret in required:
        if secret in given:
            continue
        other_case = [key for key in given if key.lower() == str(secret).lower()]
        hint = (
            f" (the config has {other_case[0]!r}: the environment looks its secrets up by exact name)"
            if other_case
            else ""
        )
        raise ConfigError(
            f"{config.source}: environment {name!r} requires the secret {secret!r} (OpenReward's required secrets: "
            f"{', '.join(map(str, required))}), which the config does not give it{hint}; add it under "
            f"environments.{name}.secrets or secrets, e.g. {secret}: null to read it from the environment variable {str(secret).upper()}"
        )

"""One cheap request to a model server before any episode runs, so that a server that is down, not
ready, or refusing the API key is one clear error and not a run of `aborted` episodes.

- SGLang (`--engine sglang`): `GET <base>/health`.
- OpenAI-compatible (`--engine openai`): `GET <base>/models` with the API key.

Any answer but a refused connection, a timeout, 401/403 or a 5xx counts as reachable: not every
OpenAI-compatible server lists its models.

>>> check_model_endpoint("sglang", "http://127.0.0.1:1", timeout=2.0)
Traceback (most recent call last):
...
openreward_rl.errors.ConfigError: cannot reach the model server at http://127.0.0.1:1 (GET http://127.0.0.1:1/health: ...); start it or fix --base-url
"""

from __future__ import annotations

import urllib.error
import urllib.request

from openreward_rl.errors import ConfigError

__all__ = ["check_model_endpoint", "probe_url"]

_PATHS = {"sglang": "/health", "openai": "/models"}


def probe_url(engine: str, base_url: str) -> str:
    """The URL `check_model_endpoint` asks.

    >>> probe_url("openai", "http://127.0.0.1:8000/v1/")
    'http://127.0.0.1:8000/v1/models'
    """
    return base_url.rstrip("/") + _PATHS[engine]


def check_model_endpoint(
    engine: str, base_url: str, *, api_key: str | None = None, key_name: str = "the API key", timeout: float = 10.0
) -> None:
    """A `ConfigError` (a --base-url to fix, a server to start) naming the server and the problem, unless it answers like a model server."""
    url = probe_url(engine, base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout):
            return
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            raise ConfigError(
                f"the model server at {base_url} refuses {key_name} (HTTP {error.code} on GET {url})"
            ) from None
        if error.code >= 500:
            raise ConfigError(f"the model server at {base_url} is not ready (HTTP {error.code} on GET {url})") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ConfigError(
            f"cannot reach the model server at {base_url} (GET {url}: {reason}); start it or fix --base-url"
        ) from None

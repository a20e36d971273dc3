"""The SDK's environments API with pooled HTTP sessions (`use_pooled_transport`).

The SDK (`AsyncEnvironmentsAPI.get`) makes one `aiohttp.ClientSession` per base URL with
`trust_env=True`, which costs two thread-pool hops per request (a `~/.netrc` read and a proxy
lookup), and every tool call is a server-sent-event stream the SDK leaves as soon as it has read
the `end` event, before the stream's last chunk: aiohttp then closes the connection instead of
pooling it, so every tool call opens a new TCP connection.

`PooledEnvironmentsAPI` is the SDK's API with only these things changed. It places its own sessions
in the SDK's per-URL table (`_clients`) before the SDK would make one, and the SDK does everything
else (requests, retries, the session protocol):

- proxy and `~/.netrc` credentials are resolved once per base URL (`_compat.aiohttp.env_settings`)
  and the session is made with `trust_env=False`;
- its responses are `DrainingResponse`s (`_compat.aiohttp`): read to their end when left early, so
  their connection is pooled, and a tool call waits `CALL_ANSWER_WAIT_S` for the head of its answer
  (the SDK re-POSTs a `/call` that got no answer within its 30-s heartbeat: docs/upstream.md, fix 2);
- their server-sent events are parsed as the specification says (`_compat.openreward.sse`, fix 1);
- each session carries the caller's traffic record (an aiohttp trace: `env.traffic`);
- one connection pool of at most 40% of the process's open-file limit (`_limits.pool_limit`; the
  SDK's own pool is unbounded, and past the limit requests failed to open a connection).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import aiohttp
from openreward.api.environments.client import AsyncEnvironmentsAPI

from openreward_rl._compat.aiohttp import DrainingResponse, env_settings
from openreward_rl._compat.openreward import sse
from openreward_rl._limits import pool_limit

__all__ = ["PooledEnvironmentsAPI", "use_pooled_transport", "TrafficRecord"]


class TrafficRecord(Protocol):
    """What a pooled session carries to record its traffic (`env.traffic.SessionTraffic`)."""

    trace_config: aiohttp.TraceConfig

    def attach(self, client: aiohttp.ClientSession) -> None: ...


class PooledEnvironmentsAPI(AsyncEnvironmentsAPI):
    """`AsyncEnvironmentsAPI` whose per-URL HTTP sessions pool their connections (see the module).
    `traffic`: makes the traffic record of each new session (None: none recorded)."""

    def __init__(self, *args: Any, traffic: Callable[[], TrafficRecord] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.traffic = traffic

    def _get_connector(self) -> aiohttp.TCPConnector:
        if self._connector is None or self._connector.closed:
            self._connector = aiohttp.TCPConnector(limit=pool_limit())
        return self._connector

    def _pooled_session(self, url: str) -> aiohttp.ClientSession:
        sse.install()  # idempotent: `_compat.install()` put it there unless the caller skipped the entry points
        record = self.traffic() if self.traffic is not None else None
        client = aiohttp.ClientSession(
            base_url=url,
            timeout=self.timeout,
            connector=self._get_connector(),
            trust_env=False,
            response_class=DrainingResponse,
            trace_configs=[record.trace_config] if record is not None else None,
            **env_settings(url),
        )
        if record is not None:
            record.attach(client)
        return client

    def get(self, name: str, variant: str | None = None, base_url: str | None = None) -> Any:
        from openreward.api._session.http import set_retry_policy

        url = base_url if base_url is not None else self.base_url
        if url not in self._clients:
            self._clients[url] = self._pooled_session(url)
            set_retry_policy(self._clients[url], "env-server")  # as the SDK tags its env-server sessions
        if self.api_base_url and self.api_base_url not in self._clients:
            self._clients[self.api_base_url] = self._pooled_session(self.api_base_url)
        return super().get(name, variant=variant, base_url=base_url)


def use_pooled_transport(client: Any, traffic: Callable[[], TrafficRecord] | None = None) -> Any:
    """Give `client` (an `AsyncOpenReward`) a `PooledEnvironmentsAPI`, unless its environments API
    already holds sessions (then it is left as it is). Anything else is returned untouched."""
    if not hasattr(client, "_environments_api") or not hasattr(client, "session_base_url"):
        return client
    current = client._environments_api
    if isinstance(current, PooledEnvironmentsAPI):
        return client
    if current is not None and (type(current) is not AsyncEnvironmentsAPI or current._clients):
        return client
    client._environments_api = PooledEnvironmentsAPI(
        base_url=client.session_base_url, api_key=client.api_key, api_base_url=client.base_url, traffic=traffic
    )
    return client

"""The OpenReward side of an episode: one SDK session per task, with SDK errors sorted into
model feedback (`ToolOutcome.error`) and infrastructure faults (`EnvironmentFault`)."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import attrs
from openreward.api.environments import OpenRewardError, ToolCallError
from openreward.api.environments.types import AuthenticationError
from openreward.api.errors import SessionTerminatedError

import openreward_rl._compat as _compat
from openreward_rl._compat import openreward as sdk
from openreward_rl._compat.openreward.calls import run_calls_in_caller, until_dead
from openreward_rl.config import ToolTimeouts
from openreward_rl.env.keepalive import adopt_pings
from openreward_rl.env.shown_text import ShownText
from openreward_rl.env.tasks import TaskRef, sdk_task
from openreward_rl.env.tool_output import has_lone_surrogate
from openreward_rl.env.traffic import traffic_of, use_pooled_transport
from openreward_rl.errors import EnvError
from openreward_rl.redaction import redact, register_secrets
from openreward_rl.retry import (
    NO_RETRY,
    AtCapacityError,
    RetryPolicy,
    call_with_retries,
    describe_error,
    is_busy,
    is_transient,
)

__all__ = [
    "ToolOutcome",
    "EnvironmentFault",
    "EnvSession",
    "LivenessProbe",
    "ServerUnreachable",
    "UNRESPONSIVE_S",
    "open_session",
    "nested_tool_specs",
    "blocks_to_text",
]


@attrs.frozen
class ToolOutcome:
    """What a tool call gave back. `error` is the SDK's reason when the call was rejected (model's fault).
    `metadata` is the environment's `ToolOutput.metadata`, kept for the record (the model does not see it).
    `content`: the output's text and image parts in order, where the model reads images and the output
    holds one (`ShownText.parts`); None otherwise (`text` is then all of it)."""

    text: str
    reward: float | None = None
    finished: bool = False
    error: str | None = None
    metadata: Mapping[str, Any] | None = None
    content: tuple[Mapping[str, Any], ...] | None = None


class EnvironmentFault(EnvError, RuntimeError):
    """The environment failed (session died, tool raised, transport gave up, 5xx): not the model's fault.

    `kind` names the cause (`ToolFailed`, `Timeout`, `ServerUnreachable`, `AtCapacity`, `NotFound`,
    ...). The message never holds a registered secret value (see `openreward_rl.redaction`).
    """

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(redact(message))
        self.kind = kind


# Exceptions that mean the environment, not the model, failed. ToolCallError is handled before these.
_INFRA_ERRORS: tuple[type[BaseException], ...] = (
    OpenRewardError,
    AuthenticationError,
    aiohttp.ClientError,
    asyncio.TimeoutError,
    OSError,
    AtCapacityError,
)
# Seconds the session close may take once the server is known to be unreachable (it cannot answer).
UNREACHABLE_CLOSE_S = 0.5
DEFAULT_CLOSE_TIMEOUT_S = 10.0
# Opening a session: repeated on busy answers and transport failures, ~1 + 2 s of backoff in all.
DEFAULT_OPEN_RETRY = RetryPolicy(attempts=3, initial_s=1.0, max_s=10.0, jitter_s=0.5)
# Reads inside a session (prompt, tools): repeated only while the server answers busy (429/5xx
# gateway errors); a transport failure means the session's server is gone, and a fresh session
# (run_episode's next attempt) is the only remedy.
DEFAULT_READ_RETRY = RetryPolicy(attempts=3, initial_s=1.0, max_s=10.0, jitter_s=0.5)


class _Timeout(Exception):
    """Our own bound on one operation ran out (not retried, unlike transport timeouts)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"{seconds:g}s")
        self.seconds = seconds


_FAULTS: tuple[type[BaseException], ...] = (_Timeout, *_INFRA_ERRORS)  # what `_fault` turns into an EnvironmentFault


class ServerUnreachable(EnvError, ConnectionError):
    """The liveness probe found the environment server down: it refuses connections, or answers nothing."""


def _fault(error: BaseException, action: str) -> EnvironmentFault:
    if isinstance(error, EnvironmentFault):
        return error
    if isinstance(error, _Timeout):
        return EnvironmentFault(f"environment timed out after {error.seconds:g}s while {action}", kind="Timeout")
    if isinstance(error, AtCapacityError):
        return EnvironmentFault(str(error), kind="AtCapacity")
    if isinstance(error, ServerUnreachable):
        return EnvironmentFault(f"environment server unreachable while {action}: {error}", kind="ServerUnreachable")
    if isinstance(
        error, SessionTerminatedError
    ):  # its reason without the session id: one line for a server's every session
        return EnvironmentFault(
            f"the environment session ended while {action}: {error.reason}", kind="SessionTerminated"
        )
    if isinstance(error, AuthenticationError):
        return EnvironmentFault(
            f"authentication failed while {action}: the OpenReward API key is missing or invalid (set OPENREWARD_API_KEY)",
            kind="AuthenticationError",
        )
    return EnvironmentFault(f"environment failed while {action}: {describe_error(error)}", kind=type(error).__name__)


# A server that answers nothing at all for this long while calls wait on it (not /health, not any
# request on its HTTP client) is unresponsive: stopped, hung, or cut off without a refusal.
UNRESPONSIVE_S = 60.0


@attrs.define(eq=False)
class LivenessProbe:
    """Tells a dead or hung environment server from a slow one while calls are in flight.

    The SDK keeps retrying a dead server for ~15 s per tool call (and ~6 s more to close the
    session), and waits for a hung one (it accepts connections, answers nothing) for up to
    `open_timeout` (600 s) per session open and `_compat.aiohttp.CALL_ANSWER_WAIT_S` (300 s) per tool
    call. While any call has been running for `after_s`, the probe GETs `/health` every
    `interval_s` over the SDK's own HTTP client (same proxy settings), each bounded by
    `request_timeout_s`. The server is down when:
    - `failures` probes in a row fail to *connect* (refused, DNS): within ~2 s; or
    - it answered nothing for `unresponsive_s` (`UNRESPONSIVE_S`, 60 s by default) since the watch
      began: no /health answer and no answer to any request on the same HTTP client (`env.traffic`
      sees every response head there). A server found so stays down until it answers again: a later
      call watches at once (not after `after_s`) and one unanswered probe repeats the verdict (~2 s).
    Any HTTP answer, even an error status, counts as alive, and so does a server slow on /health
    while it answers other requests: a busy server is left to the timeouts (at 10,000 concurrent
    episodes one saturated local server kept requests waiting over 90 s, yet answered hundreds a
    second).

    One probe serves every session on the same HTTP client (`for_environment` hands out one per
    client and settings), and it runs one watch at a time however many calls wait: the calls that
    outlast `after_s` subscribe to it, a verdict reaches all of them, and the watch stops once no
    call waits. (A watch per call made /health requests grow with the calls in flight: at 1,000
    concurrent episodes on 2 cores, ~8 probes per tool call, as many requests as the calls.)
    """

    http: Any  # the SDK's aiohttp.ClientSession for the environment's base URL
    after_s: float = 1.0
    interval_s: float = 0.5
    failures: int = 2
    request_timeout_s: float = 2.0
    unresponsive_s: float = attrs.field(factory=lambda: UNRESPONSIVE_S)
    _watch: asyncio.Task[str] | None = attrs.field(default=None, init=False)
    _waiting: dict[asyncio.Task[str], int] = attrs.field(factory=dict, init=False)  # calls waiting on each watch
    _answered_at: float = attrs.field(default=float("-inf"), init=False)  # loop time of the latest /health answer
    _found_unresponsive_at: float | None = attrs.field(
        default=None, init=False
    )  # the latest "answered nothing" verdict

    @classmethod
    def for_environment(cls, environment: Any, **options: Any) -> LivenessProbe | None:
        http = getattr(environment, "client", None)
        if not isinstance(http, aiohttp.ClientSession):
            return None
        shared = _PROBES.setdefault(http, {})
        key = tuple(sorted(options.items()))
        if key not in shared:
            shared[key] = cls(http, **options)
        return shared[key]

    async def unreachable(self) -> str:
        """Return (a reason) only once the server is down; runs until cancelled otherwise."""
        await asyncio.sleep(self.after_s)
        return await self.watch()

    async def watch(self) -> str:
        """Probe now and every `interval_s`; return (a reason) once the server is found down (see the class)."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        refused = 0
        while True:
            outcome = await self._probe_once()
            now = loop.time()
            refused = refused + 1 if outcome is not None and outcome.refused else 0
            if outcome is None:
                self._answered_at = now
            elif refused >= self.failures:
                return f"{refused} connection attempts to /health failed: {outcome.reason}"
            elif not outcome.refused:
                heard = self.last_answer()
                if self._found_unresponsive_at is not None and heard >= self._found_unresponsive_at:
                    self._found_unresponsive_at = None  # it answered since that verdict
                silent_s = now - max(began, heard)
                if silent_s >= self.unresponsive_s or self._found_unresponsive_at is not None:
                    self._found_unresponsive_at = now
                    since = (
                        f"for {silent_s:.0f} s"
                        if silent_s >= self.unresponsive_s
                        else "since it was found unresponsive"
                    )
                    return f"the server accepts connections but has answered nothing {since}: /health {outcome.reason}"
            await asyncio.sleep(self.interval_s)

    def known_unresponsive(self) -> bool:
        """Found answering nothing, and has not answered since."""
        return self._found_unresponsive_at is not None and self.last_answer() < self._found_unresponsive_at

    def last_answer(self) -> float:
        """Loop time of the latest answer the server gave: to /health, or to any request on the same client."""
        traffic = traffic_of(self.http)
        return max(self._answered_at, traffic.last_answer if traffic is not None else float("-inf"))

    def subscribe(self) -> asyncio.Task[str]:
        """The running watch (started if none runs), with one more call waiting on it."""
        loop = asyncio.get_running_loop()
        if self._watch is None or self._watch.done() or self._watch.get_loop() is not loop:
            self._watch = loop.create_task(self.watch())
            self._watch.add_done_callback(_retrieve)
        self._waiting[self._watch] = self._waiting.get(self._watch, 0) + 1
        return self._watch

    def unsubscribe(self, watch: asyncio.Task[str]) -> None:
        """One call stopped waiting on `watch`; the last one to leave stops it."""
        left = self._waiting.pop(watch, 1) - 1
        if left > 0:
            self._waiting[watch] = left
            return
        if not watch.done():
            watch.cancel()
        if self._watch is watch:
            self._watch = None

    async def check(self) -> str | None:
        """Whether the server refuses connections now: a reason after `failures` refused probes in a row
        (`interval_s` apart), None as soon as one is not refused."""
        for attempt in range(1, self.failures + 1):
            outcome = await self._probe_once()
            if outcome is None or not outcome.refused:
                return None
            if attempt == self.failures:
                return f"{attempt} connection attempts to /health failed: {outcome.reason}"
            await asyncio.sleep(self.interval_s)
        return None

    async def _probe_once(self) -> _ProbeFailure | None:
        try:
            async with self.http.get(
                "/health", timeout=aiohttp.ClientTimeout(total=self.request_timeout_s)
            ) as response:
                await response.read()
        except aiohttp.ClientConnectorError as error:
            return _ProbeFailure(refused=True, reason=f"{type(error).__name__}: {error}")
        except TimeoutError:
            return _ProbeFailure(refused=False, reason=f"got no answer within {self.request_timeout_s:g} s")
        except aiohttp.ClientError:
            return None  # answered badly: alive as far as we can tell
        return None


@attrs.frozen
class _ProbeFailure:
    refused: bool  # the connection failed (refused, DNS); otherwise it got no answer in time
    reason: str


def _retrieve(watch: asyncio.Task[str]) -> None:
    """A watch that failed (its client closed under it) has no verdict: its error is dropped."""
    if not watch.cancelled():
        watch.exception()


# One probe per (HTTP client, settings): every session on a client shares its watch.
_PROBES: weakref.WeakKeyDictionary[aiohttp.ClientSession, dict[tuple[Any, ...], LivenessProbe]] = (
    weakref.WeakKeyDictionary()
)


async def _race_liveness(operation: Awaitable[Any], probe: LivenessProbe | None) -> Any:
    """Await `operation`, unless the probe finds the server down first (then `ServerUnreachable`).

    The operation runs in the calling task; once it has run `after_s` (a timer, not a task, until
    then: most calls end sooner and cost no extra task) it subscribes to the probe's shared watch.
    A watch that finds the server down cancels every subscribed caller, and that cancellation
    becomes `ServerUnreachable`."""
    if probe is None:
        return await operation
    loop = asyncio.get_running_loop()
    caller = asyncio.current_task()
    assert caller is not None
    found: list[str] = []
    watcher: list[asyncio.Task[str]] = []
    waiting = [True]

    def on_verdict(watch: asyncio.Task[str]) -> None:
        # A verdict scheduled as the operation ended must not cancel the caller after it left.
        if not watch.cancelled() and watch.exception() is None and waiting[0]:
            found.append(watch.result())
            caller.cancel()

    def start_watch() -> None:
        watcher.append(probe.subscribe())
        watcher[0].add_done_callback(on_verdict)

    timer = loop.call_later(0.0 if probe.known_unresponsive() else probe.after_s, start_watch)
    try:
        result = await operation
    except asyncio.CancelledError:
        if found and caller.uncancel() == 0:  # cancelled by the verdict alone
            raise ServerUnreachable(found[0]) from None
        raise
    finally:
        waiting[0] = False
        timer.cancel()
        if watcher:
            watcher[0].remove_done_callback(on_verdict)
            probe.unsubscribe(watcher[0])
    if found:  # the verdict came as the operation ended, which absorbed the cancellation: the result stands
        caller.uncancel()
    return result


async def _bounded(operation: Awaitable[Any], timeout: float | None, probe: LivenessProbe | None) -> Any:
    if timeout is None:
        return await _race_liveness(operation, probe)
    try:
        async with asyncio.timeout(timeout) as scope:
            return await _race_liveness(operation, probe)
    except TimeoutError:
        if scope.expired():
            raise _Timeout(timeout or 0.0) from None
        raise


def blocks_to_text(blocks: Any) -> str:
    """The text of SDK blocks; images become `shown_text.IMAGE_PLACEHOLDER` (the models served here read text).

    Episodes read blocks through their session's `ShownText`, which also masks secrets and counts images."""
    return ShownText("").blocks(blocks, "blocks")


def nested_tool_specs(flat_tools: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """SDK `list_tools(format="openai")` (flat) -> the nested Chat Completions shape chat templates expect."""
    nested = []
    for tool in flat_tools:
        parameters = tool.get("parameters") or {"type": "object", "properties": {}}
        nested.append(
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool.get("description") or "",
                    "parameters": parameters,
                },
            }
        )
    return nested


@attrs.define
class EnvSession:
    """An open SDK session with the calls an episode makes. Obtain one with `open_session`.

    Prompt and tool listing are retried while the server answers busy (`read_retry`); tool calls
    never are (a repeated call may run the tool twice). Every call is bounded by the liveness
    probe (a dead server ends it within seconds) and tool calls by `tool_timeout` (a `ToolTimeouts`, or one
    number for every tool). What the environment says reaches the caller through `shown` (secrets masked,
    images accounted for).
    """

    sdk_session: Any
    task: TaskRef
    tool_timeout: ToolTimeouts = attrs.field(
        factory=lambda: ToolTimeouts(None), converter=lambda t: t if isinstance(t, ToolTimeouts) else ToolTimeouts(t)
    )
    probe: LivenessProbe | None = None
    read_retry: RetryPolicy = DEFAULT_READ_RETRY
    unreachable: bool = False  # set once the probe found the server down
    finished: bool = False  # set once a tool call's answer said the episode is over
    _in_flight: int = attrs.field(default=0, init=False)
    _overlapped: bool = attrs.field(default=False, init=False)  # two calls were ever in flight at once
    shown: ShownText = attrs.field(
        default=attrs.Factory(lambda self: ShownText(self.task.environment), takes_self=True)
    )

    async def _guard(
        self,
        action: str,
        operation: Callable[[], Awaitable[Any]],
        *,
        timeout: float | None = None,
        retry: RetryPolicy = NO_RETRY,
    ) -> Any:
        try:
            return await call_with_retries(
                lambda: _bounded(operation(), timeout, self.probe),
                retry,
                what=f"{self.task.environment}: {action}",
                retry_on=is_busy,
            )
        except ToolCallError:
            raise
        except ServerUnreachable as error:
            self.unreachable = True
            raise _fault(error, action) from error
        except _FAULTS as error:
            raise _fault(error, action) from error

    async def prompt_messages(self) -> list[dict[str, Any]]:
        """The task's opening conversation as chat messages (`get_messages`, or the prompt as one user turn)."""
        messages = await self._guard(
            "getting the prompt", lambda: self.sdk_session.get_messages(format="openai"), retry=self.read_retry
        )
        return [self._plain_message(m) for m in messages]

    async def tools(self) -> list[dict[str, Any]]:
        flat = await self._guard(
            "listing tools", lambda: self.sdk_session.list_tools(format="openai"), retry=self.read_retry
        )
        return self.shown.value(nested_tool_specs(flat), "the tool list")

    async def terminal_tool(self) -> Any:
        sdk.reuse_listed_terminal_tool(self.sdk_session)
        return await self._guard(
            "reading the terminal tool", lambda: self.sdk_session.terminal_tool(), retry=self.read_retry
        )

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        if has_lone_surrogate(arguments):
            # JSON lets a model write "\\ud800"; the SDK server cannot encode it back and the session
            # would die with ToolFailed: an infrastructure fault caused by the model. Refuse it here.
            return ToolOutcome(
                text="Error: the tool arguments contain invalid Unicode (a lone UTF-16 surrogate); the call was not executed.",
                error="bad_input_shape",
            )
        return await self._call(name, lambda: self.sdk_session.call_tool(name, dict(arguments)))

    async def call_terminal_tool(self, message: str) -> ToolOutcome:
        name = None
        if self.tool_timeout.per_tool:  # a limit of its own is looked up by its name
            spec = await self.terminal_tool()
            name = getattr(spec, "name", None)
        return await self._call(
            name, lambda: self.sdk_session.call_terminal_tool(message), action="calling the terminal tool"
        )

    async def _call(
        self, name: str | None, operation: Callable[[], Awaitable[Any]], action: str | None = None
    ) -> ToolOutcome:
        where = f"tool {name!r}" if name else "the terminal tool"
        timeout = self.tool_timeout.seconds(name)
        self._in_flight += 1
        self._overlapped = self._overlapped or self._in_flight > 1
        try:
            output = await self._guard(action or f"calling tool {name!r}", operation, timeout=timeout)
        except ToolCallError as error:
            # Refused as finished though no answer said so, and no other call could have finished it
            # (parallel calls of one turn may): an answer was lost.
            if error.reason == "episode_finished" and not self.finished and not self._overlapped:
                raise _lost_result(where, self.task.environment, error) from error
            return ToolOutcome(text=self.shown.text(f"Error: {error.detail}", where), error=str(error.reason))
        except EnvironmentFault as fault:
            if fault.kind != "Timeout" or timeout is None:
                raise
            raise EnvironmentFault(
                f"{where} of {self.task.environment} timed out after {timeout:g}s and was cut; "
                f"if it needs longer (a sandbox's test run may take 600 s), raise {self.tool_timeout.knob(name)}",
                kind="Timeout",
            ) from fault
        finally:
            self._in_flight -= 1
        self.finished = self.finished or bool(output.finished)
        text, content = self.shown.parts(output.blocks, where)
        return ToolOutcome(
            text=text,
            content=content,
            reward=None if output.reward is None else float(output.reward),
            finished=bool(output.finished),
            metadata=None if output.metadata is None else self.shown.value(output.metadata, where),
        )

    async def while_alive(self, operation: Awaitable[Any]) -> Any:
        """Await `operation` (an episode's run on this session); should the session die meanwhile (its pings
        found the server gone, `env.keepalive`), cancel it wherever it waits, a model call included, and
        raise an `EnvironmentFault` (`_compat.openreward.calls.until_dead`)."""
        try:
            return await until_dead(self.sdk_session, operation)
        except SessionTerminatedError as error:
            raise _fault(error, "the episode ran") from error

    def _plain_message(self, message: Mapping[str, Any]) -> dict[str, Any]:
        plain = {k: self.shown.value(v, "the prompt") for k, v in message.items() if k != "content"}
        plain["content"] = self.shown.content(message.get("content"), "the prompt")
        return plain


def _lost_result(where: str, environment: str, error: ToolCallError) -> EnvironmentFault:
    """The server refused a call because the episode is over, though no answer this session read
    said so: a call's answer was lost on the way (the SDK sends a `/call` again when the first
    attempt got no answer in time, and the server may have run both). Not the model's doing."""
    return EnvironmentFault(
        f"{where} of {environment} was refused because the episode had already finished, but no answer "
        f"this session received said so: an earlier call's answer was lost in transport ({error.detail})",
        kind="LostResult",
    )


@contextlib.asynccontextmanager
async def open_session(
    client: Any,
    task: TaskRef,
    *,
    secrets: Mapping[str, str | tuple[str, list[str]]] | None = None,
    tool_timeout: float | ToolTimeouts | None = None,
    toolset: str | None = None,
    open_timeout: float | None = None,
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT_S,
    open_retry: RetryPolicy = DEFAULT_OPEN_RETRY,
    read_retry: RetryPolicy = DEFAULT_READ_RETRY,
    liveness: bool = True,
) -> AsyncIterator[EnvSession]:
    """Open an SDK session for `task`. Failures to open are `EnvironmentFault`s.

    `client` is an `openreward.AsyncOpenReward`. Opening is retried under `open_retry` (busy
    answers, transport failures; a half-open session is deleted before the next try). Closing is
    bounded by `close_timeout` (much less once the server is known to be down). Secrets go to the
    session only; they are registered for redaction and never appear in errors raised from here.
    `toolset` names an SDK session toolset (`config.SESSION_TOOLSETS`) the server binds to the session.
    """
    if secrets:
        register_secrets(secrets)
    where = task.base_url or "OpenReward"
    _compat.install()  # the SDK fixes (idempotent: the entry points installed them already)
    use_pooled_transport(client)  # pooled connections, no per-request thread hops (env.traffic)
    try:
        environment = client.environments.get(task.environment, variant=task.variant, base_url=task.base_url)
    except ValueError as error:  # the SDK's check for a remote environment without an API key
        raise EnvironmentFault(f"cannot reach {task.environment}: {error}", kind="Configuration") from error
    register_secrets([getattr(environment, "api_key", None)])  # the SDK forwards it to the environment too
    probe = LivenessProbe.for_environment(environment) if liveness else None
    spec_task = sdk_task(task)
    session_secrets = dict(secrets) if secrets else None

    async def open_once() -> tuple[Any, Any]:
        try:
            if spec_task is not None:
                context = environment.session(task=spec_task, secrets=session_secrets, toolset=toolset)
            else:
                context = environment.session(
                    split=task.split, index=task.index, secrets=session_secrets, toolset=toolset
                )
        except ValueError as error:  # e.g. a secret name the SDK has no allowed domains for, an unknown toolset
            raise EnvironmentFault(
                f"cannot open a session for {task.environment}: {error}", kind="Configuration"
            ) from error
        try:
            opening = asyncio.get_running_loop().time()  # the server knows the session from after this on
            sdk_session = await _bounded(context.__aenter__(), open_timeout, probe)
            adopt_pings(
                sdk_session, heard_at=opening, probe=probe
            )  # its pings on this loop and the pooled client (env.keepalive)
            run_calls_in_caller(sdk_session)  # no tasks of its own per call (_compat.openreward.calls)
            return context, sdk_session
        except Exception as error:
            # Delete whatever half-exists (the SDK does not when __aenter__ fails), bounded.
            down = isinstance(error, ServerUnreachable)
            await _close(context, min(close_timeout, UNREACHABLE_CLOSE_S) if down else close_timeout)
            raise

    action = f"opening a session for {task.environment} at {where}"
    try:
        context, sdk_session = await call_with_retries(open_once, open_retry, what=action, retry_on=is_transient)
    except ToolCallError as error:
        raise EnvironmentFault(
            f"could not open a session for {task.environment}: {error}", kind="ToolCallError"
        ) from error
    except aiohttp.ClientResponseError as error:
        if error.status == 404:
            raise EnvironmentFault(
                f"environment {task.environment!r} (variant {task.variant!r}, split {task.split!r}) was not found at {where}: "
                f"{describe_error(error)}; check the name (case-sensitive), the variant and the base URL",
                kind="NotFound",
            ) from error
        raise _fault(error, action) from error
    except _FAULTS as error:
        raise _fault(error, action) from error
    session = EnvSession(
        sdk_session=sdk_session, task=task, tool_timeout=tool_timeout, probe=probe, read_retry=read_retry
    )
    try:
        yield session
    finally:
        await _close(context, min(close_timeout, UNREACHABLE_CLOSE_S) if session.unreachable else close_timeout)


async def _close(context: Any, timeout: float) -> None:
    """Leave the SDK session context (stop its ping, delete it on the server) within `timeout` seconds."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(context.__aexit__(None, None, None), timeout)

"""Trajectory upload to OpenReward with the SDK's rollout API, off the episode's path.

`TrajectoryUploader.submit` only enqueues: the SDK's `rollout.create` blocks on an HTTP round
trip (and never times out on its own), so it runs on the uploader's worker threads. A dead or
slow endpoint therefore costs an episode nothing; upload failures are logged, never raised.
`close`/`aclose` drains the queue (bounded by a timeout) and then closes the SDK's rollout API
once; it also runs at process exit, before the SDK's own exit handler.

The conversation becomes OpenReward message types (`trajectory_events`):

>>> from openreward_rl.loop.trajectory import StopReason, Trajectory
>>> from openreward_rl.task import TaskRef
>>> trajectory = Trajectory(task=TaskRef("e", "train", index=0), segments=[], turns=[],
...     messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
...     step_rewards=[], reward=None, stop_reason=StopReason.NO_TOOL_CALL)
>>> [(type(e.message).__name__, e.message.content, e.is_finished) for e in trajectory_events(trajectory)]
[('UserMessage', 'Hi', False), ('AssistantMessage', 'Hello', True)]
"""

from __future__ import annotations

import atexit
import concurrent.futures
import json
import logging
import os
import queue
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import attrs
from openreward import AssistantMessage, ReasoningItem, SystemMessage, ToolCall, ToolResult, UserMessage
from openreward.models import RolloutInfo

from openreward_rl._compat import openreward as sdk
from openreward_rl.loop.trajectory import Trajectory
from openreward_rl.observe.conversation import conversation_steps

__all__ = ["UploadEvent", "trajectory_events", "rollout_name_for", "TrajectoryUploader", "DEFAULT_RUN_NAME"]

logger = logging.getLogger(__name__)

DEFAULT_RUN_NAME = "openreward-rl"
_STOP = object()


@attrs.frozen
class UploadEvent:
    """One `Rollout.log(message, reward=, is_finished=, metadata=)` call; a tool result's `metadata` is
    the environment's `ToolOutput.metadata`."""

    message: Any
    reward: float | None = None
    is_finished: bool = False
    metadata: dict[str, Any] | None = None


def _arguments_json(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _text(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def trajectory_events(trajectory: Trajectory) -> list[UploadEvent]:
    """The trajectory's conversation as upload events, in order.

    Assistant turns give a reasoning item, their text, then one tool call each; tool messages give
    tool results carrying the step reward their call earned and the environment's metadata. Results that have no tool message
    (a `@terminal` environment's answer) follow their turn as a call/result pair. The last event
    is marked finished.
    """
    events: list[UploadEvent] = []
    for step in conversation_steps(trajectory):
        message, result = step.message, step.result
        if message is None:  # a result with no tool message: its call and result, after its turn
            assert result is not None
            events.append(
                UploadEvent(
                    ToolCall(
                        name=result.call.name, content=_arguments_json(result.call.arguments), call_id=result.call.id
                    )
                )
            )
            events.append(
                UploadEvent(
                    ToolResult(content=result.text, call_id=result.call.id),
                    reward=result.reward,
                    metadata=_tool_metadata(result),
                )
            )
            continue
        role = message.get("role")
        content = _text(message.get("content"))
        if role == "assistant":
            if message.get("reasoning_content"):
                events.append(UploadEvent(ReasoningItem(content=_text(message["reasoning_content"]))))
            tool_calls = message.get("tool_calls") or []
            if content or not tool_calls:
                events.append(UploadEvent(AssistantMessage(content=content)))
            for call in tool_calls:
                function = call.get("function", call)
                events.append(
                    UploadEvent(
                        ToolCall(
                            name=str(function.get("name", "")),
                            content=_arguments_json(function.get("arguments", {})),
                            call_id=str(call.get("id", "")),
                        )
                    )
                )
        elif role == "tool":
            events.append(
                UploadEvent(
                    ToolResult(content=content, call_id=str(message.get("tool_call_id", ""))),
                    reward=result.reward if result else None,
                    metadata=_tool_metadata(result),
                )
            )
        elif role == "system":
            events.append(UploadEvent(SystemMessage(content=content)))
        else:
            events.append(UploadEvent(UserMessage(content=content)))
    if events:
        events[-1] = attrs.evolve(events[-1], is_finished=True)
    return events


def _tool_metadata(result: Any) -> dict[str, Any] | None:
    return dict(result.metadata) if result is not None and result.metadata else None


def rollout_name_for(environment: str, split: str, index: int | None) -> str:
    """Unique per sample: the n samples of one task must not share an upload name.

    >>> name = rollout_name_for("Org/Env", "train", 3)
    >>> name.startswith("Org/Env-train-3-") and name != rollout_name_for("Org/Env", "train", 3)
    True
    """
    return f"{environment}-{split}-{'spec' if index is None else index}-{uuid.uuid4().hex[:12]}"


def _metadata(trajectory: Trajectory) -> dict[str, Any]:
    return {
        "reward": trajectory.reward,
        "step_rewards": list(trajectory.step_rewards),
        "stop_reason": trajectory.stop_reason.value,
        "stop_detail": trajectory.stop_detail,
        "finished": trajectory.finished,
        "turns": len(trajectory.turns),
        "prefix_breaks": trajectory.prefix_breaks,
        "token_exact": trajectory.token_exact,
        "metrics": dict(trajectory.metrics),
    }


@attrs.frozen
class _Job:
    trajectory: Trajectory
    environment: str
    split: str
    variant: str | None
    task_spec: Mapping[str, Any] | None
    rollout_name: str
    rollout_info: RolloutInfo | None
    done: concurrent.futures.Future[bool]


class TrajectoryUploader:
    """Uploads finished trajectories as OpenReward rollouts without ever blocking the caller.

    `client` is an `openreward.AsyncOpenReward` (the platform URL is `OPENREWARD_API_URL`).
    `run_name`: explicit, else `$OPENREWARD_RUN_NAME`, else "openreward-rl" (use `from_config`
    for the config's `openreward_run_name` / `upload`). With `enabled=False` every call is a no-op.
    At most `max_pending` uploads wait; beyond that new ones are dropped with a warning.
    """

    def __init__(
        self,
        client: Any,
        run_name: str | None = None,
        enabled: bool = True,
        *,
        workers: int = 4,
        max_pending: int = 10_000,
        close_timeout: float = 30.0,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.client = client
        self.run_name = run_name or os.environ.get("OPENREWARD_RUN_NAME") or DEFAULT_RUN_NAME
        self.enabled = enabled
        self.close_timeout = close_timeout
        self.uploaded = 0
        self.failed = 0
        self.dropped = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._pending: set[concurrent.futures.Future[bool]] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._workers: list[threading.Thread] = []
        if not enabled:
            return
        # Touching `client.rollout` creates the SDK's rollout API now, so its exit handler is
        # registered before ours and runs after it (atexit is last-in, first-out).
        self._rollouts = client.rollout
        for number in range(workers):
            worker = threading.Thread(target=self._work, name=f"openreward-upload-{number}", daemon=True)
            worker.start()
            self._workers.append(worker)
        atexit.register(self.close)

    @classmethod
    def from_config(cls, client: Any, config: Any, **options: Any) -> TrajectoryUploader:
        """From a `TrainConfig`: its run name (`OPENREWARD_RUN_NAME` wins) and its `upload` switch.

        Off, with a warning, when the client has no OpenReward API key to upload with (a run against
        local environment servers needs none)."""
        enabled = config.upload
        if enabled and not getattr(client, "api_key", ""):
            logger.warning(
                "trajectory upload is off: no OpenReward API key (set OPENREWARD_API_KEY, or `upload: false` in the config)"
            )
            enabled = False
        return cls(client, config.run_name(), enabled=enabled, **options)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def submit(
        self,
        trajectory: Trajectory,
        *,
        rollout_name: str | None = None,
        step: int | None = None,
        sampling_params: Mapping[str, Any] | None = None,
    ) -> concurrent.futures.Future[bool] | None:
        """Queue one trajectory; returns at once. The future resolves to True once its events
        are handed to the SDK, False when the upload failed; None means nothing was queued.

        The rollout's environment, split, variant and task spec are the trajectory's own
        (`Trajectory.task`)."""
        if not self.enabled:
            return None
        task = trajectory.task
        environment, split, index = task.environment, task.split, task.index
        sampling = sampling_params or {}
        info = None
        if isinstance(index, int):
            info = RolloutInfo(
                task_index=index,
                current_step=step,
                temperature=sampling.get("temperature"),
                top_p=sampling.get("top_p"),
                top_k=sampling.get("top_k"),
                max_tokens=sampling.get("max_new_tokens"),
                duration_ms=int(trajectory.metrics["episode_seconds"] * 1000)
                if "episode_seconds" in trajectory.metrics
                else None,
                harness="openreward-rl",
            )
        done: concurrent.futures.Future[bool] = concurrent.futures.Future()
        job = _Job(
            trajectory=trajectory,
            environment=environment,
            split=split,
            variant=task.variant,
            task_spec=task.task_spec,
            rollout_name=rollout_name
            or rollout_name_for(environment, split, index if isinstance(index, int) else None),
            rollout_info=info,
            done=done,
        )
        with self._lock:
            if self._closed:
                logger.warning("trajectory upload after close() dropped (%s)", job.rollout_name)
                return None
            try:
                self._queue.put_nowait(job)
            except queue.Full:
                self.dropped += 1
                logger.warning(
                    "upload queue full (%d waiting); trajectory %s dropped", self._queue.maxsize, job.rollout_name
                )
                return None
            self._pending.add(done)
        done.add_done_callback(self._forget)
        return done

    def _forget(self, done: concurrent.futures.Future[bool]) -> None:
        with self._lock:
            self._pending.discard(done)

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            try:
                ok = self._upload(job)
            except BaseException as error:  # never let a worker die: the queue would stall
                logger.warning("upload of %s failed: %s: %s", job.rollout_name, type(error).__name__, error)
                ok = False
            with self._lock:
                if ok:
                    self.uploaded += 1
                else:
                    self.failed += 1
            job.done.set_result(ok)

    def _upload(self, job: _Job) -> bool:
        events = trajectory_events(job.trajectory)
        rollout = self._rollouts.create(
            self.run_name,
            rollout_name=job.rollout_name,
            environment=job.environment,
            variant=job.variant,
            split=job.split,
            metadata=_metadata(job.trajectory),
            task_spec=dict(job.task_spec) if job.task_spec is not None else None,
        )
        if sdk.rollout_disabled(rollout):  # the SDK logged why (start POST failed)
            return False
        for number, event in enumerate(events):
            last = number == len(events) - 1
            rollout.log(
                event.message,
                reward=event.reward,
                is_finished=event.is_finished,
                metadata=event.metadata,
                rollout_info=job.rollout_info if last else None,
            )
        return True

    def close(self, timeout: float | None = None) -> None:
        """Wait (up to `timeout`, default `close_timeout`) for queued uploads, then close the SDK's
        rollout API once, which sends what it buffered. Idempotent; never raises."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = set(self._pending)
        if not self.enabled:
            return
        atexit.unregister(self.close)
        timeout = self.close_timeout if timeout is None else timeout
        _, not_done = concurrent.futures.wait(pending, timeout=timeout)
        if not_done:
            logger.warning("%d trajectory uploads still waiting after %gs; abandoning them", len(not_done), timeout)
        for _ in self._workers:
            try:
                self._queue.put_nowait(_STOP)
            except queue.Full:
                break  # workers are daemons stuck on a dead endpoint; they end with the process
        try:
            self._rollouts.close()
        except Exception as error:
            logger.warning("closing the OpenReward rollout API failed: %s: %s", type(error).__name__, error)

    async def aclose(self, timeout: float | None = None) -> None:
        """`close` from async code, without blocking the event loop."""
        import asyncio

        await asyncio.to_thread(self.close, timeout)

"""Trajectory upload through the real SDK rollout API to a local sink.

The sink is a faithful stand-in for OpenReward's platform API as the SDK uses it: it accepts
`POST /v1/rollouts` with `{"events": [...]}` (answers `{}`) and 404s every other path (the SDK's
environment-id lookup). `OPENREWARD_API_URL` points the real `AsyncOpenReward` client at it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading

import pytest
from aiohttp import web

from observe_fixtures import real_trajectory
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.observe.upload import TrajectoryUploader, trajectory_events
from openreward_rl.task import TaskRef


class UploadSink:
    """An aiohttp server on 127.0.0.1 in its own thread. `gate` closed = every POST waits."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.posts = 0
        self.gate = threading.Event()
        self.gate.set()
        self.first_post = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _rollouts(self, request: web.Request) -> web.Response:
        self.first_post.set()
        while not self.gate.is_set():
            await asyncio.sleep(0.01)
        body = await request.json()
        self.events.extend(body["events"])
        self.posts += 1
        return web.json_response({})

    async def _other(self, request: web.Request) -> web.Response:
        return web.json_response({"detail": "not found"}, status=404)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/rollouts", self._rollouts)
        app.router.add_route("*", "/{tail:.*}", self._other)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._runner = runner
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    def __enter__(self) -> UploadSink:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.gate.set()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def of_type(self, event_type: str) -> list[dict]:
        return [e for e in self.events if e.get("eventType") == event_type]


def _client(monkeypatch: pytest.MonkeyPatch, api_url: str):
    from openreward import AsyncOpenReward

    monkeypatch.setenv("OPENREWARD_API_URL", api_url)
    monkeypatch.setenv("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    return AsyncOpenReward(api_key="test-key")


def _dead_url() -> str:
    with socket.socket() as probe:  # bound, never listening: connection refused
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_conversation_becomes_openreward_messages():
    trajectory = real_trajectory()
    events = trajectory_events(trajectory)
    shape = [(type(e.message).__name__, e.reward, e.is_finished) for e in events]
    assert shape == [
        ("SystemMessage", None, False),
        ("UserMessage", None, False),
        ("ReasoningItem", None, False),
        ("AssistantMessage", None, False),
        ("ToolCall", None, False),
        ("ToolResult", 0.25, False),
        ("ReasoningItem", None, False),
        ("ToolCall", None, False),
        ("ToolResult", 1.0, True),
    ]
    add_call, add_result = events[4].message, events[5].message
    assert (add_call.name, json.loads(add_call.content)) == ("add", {"a": 2, "b": 3})
    assert add_result.call_id == add_call.call_id and add_result.content == "5"
    assert events[2].message.content == "I should add first."
    assert [e.reward for e in events if e.reward is not None] == trajectory.step_rewards


def test_terminal_answers_without_tool_messages_are_uploaded_as_call_and_result():
    trajectory = real_trajectory()
    data = trajectory.to_dict()
    # what a @terminal environment's episode records: the plain answer went to the terminal tool
    data["messages"] = data["messages"][:2] + [{"role": "assistant", "content": "5"}]
    last = data["turns"][-1]
    data["turns"] = [dict(last, message_index=2)]
    last = data["turns"][-1]
    last["tool_results"] = [
        dict(
            last["tool_results"][0],
            call={"id": "terminal", "name": "__terminal__", "arguments": {"message": "5"}},
            text="correct",
            reward=1.0,
        )
    ]
    events = trajectory_events(Trajectory.from_dict(data))
    assert [type(e.message).__name__ for e in events[-3:]] == ["AssistantMessage", "ToolCall", "ToolResult"]
    assert (events[-1].reward, events[-1].is_finished, events[-1].message.call_id) == (1.0, True, "terminal")


def test_events_reach_the_sink(monkeypatch: pytest.MonkeyPatch):
    trajectory = real_trajectory()
    with UploadSink() as sink:
        uploader = TrajectoryUploader(_client(monkeypatch, sink.url), "obs-run")
        first = uploader.submit(trajectory, sampling_params={"temperature": 0.7})
        second = uploader.submit(trajectory)
        assert first is not None and second is not None
        asyncio.run(uploader.aclose())
        assert first.result() is True and second.result() is True

    rollouts = sink.of_type("rollout")
    assert len(rollouts) == 2
    assert {r["runName"] for r in rollouts} == {"obs-run"}
    names = [r["rolloutName"] for r in rollouts]
    assert names[0] != names[1] and all(n.startswith("addenv-train-0-") for n in names)
    assert rollouts[0]["environment"] == "addenv" and rollouts[0]["split"] == "train"
    assert rollouts[0]["metadata"]["reward"] == 1.25 and rollouts[0]["metadata"]["stop_reason"] == "completed"

    messages = [m for m in sink.of_type("message") if m["rolloutEventId"] == rollouts[0]["eventId"]]
    messages.sort(key=lambda m: m["index"])
    assert [m["type"] for m in messages] == [
        "system_message",
        "user_message",
        "reasoning",
        "assistant_message",
        "tool_call",
        "tool_result",
        "reasoning",
        "tool_call",
        "tool_result",
    ]
    assert messages[1]["content"] == "Compute 2+3 with the add tool, then submit."
    assert [(m.get("reward"), m["isFinished"]) for m in messages if m["type"] == "tool_result"] == [
        (0.25, False),
        (1.0, True),
    ]
    assert messages[4]["name"] == "add" and json.loads(messages[4]["content"]) == {"a": 2, "b": 3}

    updates = sink.of_type("rollout_update")
    assert len(updates) == 2
    infos = sorted((u["rollout_info"] for u in updates), key=lambda i: "temperature" in i)
    assert [i.get("temperature") for i in infos] == [None, 0.7]  # only the first submit named one
    assert all(i["task_index"] == 0 and i["harness"] == "openreward-rl" for i in infos)
    assert all(e.get("x-api-key") is None for e in sink.events)  # the key travels in a header only


def test_the_rollout_is_named_by_the_trajectorys_own_task(monkeypatch: pytest.MonkeyPatch):
    """A task named by its spec (no index): the trajectory keeps the whole task, so the uploader
    needs nothing beside it to name the rollout's environment, split and task spec."""
    from observe_fixtures import LocalEnvServer, run_real_episode

    spec = {"q": "2+3", "target": "5"}
    with LocalEnvServer() as env:
        trajectory = asyncio.run(run_real_episode(env.url, index=None, task_spec=spec))
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.25
    assert trajectory.task == TaskRef("addenv", "train", task_spec=spec)
    assert trajectory.to_dict()["task"] == {
        "environment": "addenv",
        "split": "train",
        "index": None,
        "variant": None,
        "task_spec": spec,
    }
    assert Trajectory.from_dict(json.loads(json.dumps(trajectory.to_dict()))).task == trajectory.task
    with UploadSink() as sink:
        uploader = TrajectoryUploader(_client(monkeypatch, sink.url), "obs-run")
        future = uploader.submit(trajectory)
        asyncio.run(uploader.aclose())
        assert future is not None and future.result() is True
    [rollout] = sink.of_type("rollout")
    assert (rollout["environment"], rollout["split"]) == ("addenv", "train")
    assert rollout["rolloutName"].startswith("addenv-train-spec-")
    assert spec in [v for k, v in rollout.items() if "spec" in k.lower()]


def test_submit_returns_while_the_endpoint_is_blocked(monkeypatch: pytest.MonkeyPatch):
    trajectory = real_trajectory()
    with UploadSink() as sink:
        sink.gate.clear()  # every POST hangs until released
        uploader = TrajectoryUploader(_client(monkeypatch, sink.url), "obs-run", workers=1)
        futures = [uploader.submit(trajectory) for _ in range(3)]
        # all three returned although the sink has accepted nothing and one create is stuck in it
        assert sink.first_post.wait(10)
        assert sink.posts == 0 and sink.events == []
        assert all(f is not None and not f.done() for f in futures)
        assert uploader.pending == 3
        sink.gate.set()
        uploader.close()
        assert [f.result() for f in futures] == [True, True, True]
    assert len(sink.of_type("rollout")) == 3


def test_a_dead_endpoint_neither_raises_nor_blocks(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    trajectory = real_trajectory()
    uploader = TrajectoryUploader(_client(monkeypatch, _dead_url()), "obs-run")
    with caplog.at_level(logging.WARNING):
        future = uploader.submit(trajectory)
        assert future is not None
        assert future.result(timeout=60) is False  # the SDK disabled the rollout after the start POST failed
        asyncio.run(uploader.aclose())
    assert uploader.failed == 1 and uploader.uploaded == 0
    assert uploader.submit(trajectory) is None  # closed: dropped, not raised


def test_an_episode_with_upload_to_a_blocked_endpoint_completes(monkeypatch: pytest.MonkeyPatch):
    """The full path a rollout takes: run a real episode, submit it, run the next one, while the
    upload endpoint accepts nothing."""
    from observe_fixtures import LocalEnvServer, run_real_episode

    with UploadSink() as sink, LocalEnvServer() as env:
        sink.gate.clear()
        uploader = TrajectoryUploader(_client(monkeypatch, sink.url), "obs-run", workers=1)

        async def two_episodes() -> list[Trajectory]:
            done = []
            for index in (0, 1):
                trajectory = await run_real_episode(env.url, index=index)
                uploader.submit(trajectory)
                done.append(trajectory)
            return done

        trajectories = asyncio.run(two_episodes())
        assert [t.stop_reason for t in trajectories] == [StopReason.COMPLETED, StopReason.COMPLETED]
        assert sink.posts == 0 and uploader.pending == 2
        sink.gate.set()
        uploader.close()
    assert len(sink.of_type("rollout")) == 2


def test_disabled_uploader_does_nothing(monkeypatch: pytest.MonkeyPatch):
    uploader = TrajectoryUploader(object(), "obs-run", enabled=False)
    assert uploader.submit(real_trajectory()) is None
    uploader.close()


def test_run_name_comes_from_the_environment_when_not_given(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENREWARD_RUN_NAME", "from-env")
    assert TrajectoryUploader(object(), enabled=False).run_name == "from-env"
    assert TrajectoryUploader(object(), "explicit", enabled=False).run_name == "explicit"


def test_from_config_is_off_without_an_api_key(monkeypatch: pytest.MonkeyPatch, caplog):
    from openreward import AsyncOpenReward

    from openreward_rl.config import parse_config

    monkeypatch.delenv("OPENREWARD_API_KEY", raising=False)
    config = parse_config({"environments": {"addenv": {}}, "upload": True, "openreward_run_name": "cfg-run"})
    monkeypatch.delenv("OPENREWARD_RUN_NAME", raising=False)
    with caplog.at_level(logging.WARNING):
        keyless = TrajectoryUploader.from_config(AsyncOpenReward(), config)
    assert not keyless.enabled and "no OpenReward API key" in caplog.text
    keyed = TrajectoryUploader.from_config(AsyncOpenReward(api_key="k"), config)
    assert keyed.enabled and keyed.run_name == "cfg-run"
    keyed.close()

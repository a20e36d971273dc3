"""`_compat.openreward.calls.run_calls_in_caller`: an SDK session's requests awaited in the caller's task, with the
SDK's `_run_or_die` contract, checked side by side with an untouched SDK session on the SDK's real
environment `Server` (in process, 127.0.0.1)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from openreward import AsyncOpenReward
from openreward.api._session.ping import ErrorResponse
from openreward.api.errors import SessionTerminatedError
from openreward.environments import TextBlock, ToolOutput, tool
from pydantic import BaseModel

from one_task_env import OneTask
from openreward_rl._compat.openreward.calls import run_calls_in_caller
from openreward_rl.env.local_server import LocalEnvServer, serve_environments
from openreward_rl.env.traffic import use_pooled_transport

pytestmark = pytest.mark.anyio


class SleepArgs(BaseModel):
    seconds: float = 0.0


class Sleepy(OneTask):
    """One tool, `sleep`, that answers after the given number of seconds."""

    TASK = {"id": 0}

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Sleep.")]

    @tool(concurrent=True)
    async def sleep(self, args: SleepArgs) -> ToolOutput:
        """Sleep, then say so."""
        await asyncio.sleep(args.seconds)
        return ToolOutput(blocks=[TextBlock(text=f"slept {args.seconds:g}")])


@pytest.fixture(scope="module")
def server() -> Any:
    with serve_environments([Sleepy]) as served:
        yield served


@pytest.fixture
async def sessions(server: LocalEnvServer) -> AsyncIterator[tuple[Any, Any]]:
    """(adopted, untouched): two SDK sessions on the same task, the first given `run_calls_in_caller`."""
    client = use_pooled_transport(AsyncOpenReward(api_key="local"))  # as every episode's client (env.traffic)
    environment = client.environments.get("Sleepy", variant="sleepy", base_url=server.base_url)
    try:
        async with (
            environment.session(split="test", index=0) as adopted,
            environment.session(split="test", index=0) as untouched,
        ):
            assert run_calls_in_caller(adopted)
            yield adopted, untouched
    finally:
        await client.environments.aclose()


def count_tasks() -> list[int]:
    """A counter of the tasks the running loop creates from now on (its task factory records them)."""
    created = [0]
    loop = asyncio.get_running_loop()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        created[0] += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    return created


async def test_an_adopted_session_answers_as_the_sdk_does_with_two_tasks_fewer_per_call(
    sessions: tuple[Any, Any],
) -> None:
    adopted, untouched = sessions
    for session in sessions:  # connections made, so that only the calls' own tasks are counted
        await session.call_tool("sleep", {"seconds": 0})
    created = count_tasks()
    try:
        ours = await adopted.call_tool("sleep", {"seconds": 0})
        ours_tasks, created[0] = created[0], 0
        theirs = await untouched.call_tool("sleep", {"seconds": 0})
        their_tasks = created[0]
    finally:
        asyncio.get_running_loop().set_task_factory(None)
    assert ours == theirs and ours.blocks[0].text == "slept 0"
    assert their_tasks - ours_tasks == 2  # the SDK's request task and its "session died" watcher


async def test_an_error_from_a_call_is_annotated_with_the_session_as_the_sdk_does(
    server: LocalEnvServer, sessions: tuple[Any, Any]
) -> None:
    raised = []
    async with aiohttp.ClientSession() as http:
        for session in sessions:  # deleted behind the client's back: the next call is refused (404)
            async with http.post(f"{server.base_url}/delete", headers={"X-Session-ID": session.sid}) as response:
                assert response.status == 200
            with pytest.raises(Exception) as caught:
                await session.call_tool("sleep", {"seconds": 0})
            raised.append(caught.value)
    ours, theirs = raised
    assert type(ours) is type(theirs) and getattr(ours, "status", None) == getattr(theirs, "status", None) == 404
    assert ours.__notes__ == [f"(environment session sid={sessions[0].sid})"]
    assert theirs.__notes__ == [f"(environment session sid={sessions[1].sid})"]


async def test_the_sessions_death_ends_calls_in_flight_with_its_error(sessions: tuple[Any, Any]) -> None:
    adopted, _ = sessions
    calls = [asyncio.create_task(adopted.call_tool("sleep", {"seconds": 30})) for _ in range(2)]
    await asyncio.sleep(0.3)
    adopted._mark_dead(ErrorResponse(type="error", message="5 x 5 consecutive ping failures"))
    for call in calls:
        with pytest.raises(SessionTerminatedError, match="consecutive ping failures"):
            await asyncio.wait_for(call, 5)
    with pytest.raises(SessionTerminatedError):  # and nothing more is sent
        await adopted.call_tool("sleep", {"seconds": 0})


async def test_a_cancellation_from_outside_is_a_cancellation_and_the_session_lives_on(
    sessions: tuple[Any, Any],
) -> None:
    adopted, _ = sessions
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await adopted.call_tool("sleep", {"seconds": 1})
    assert adopted._dead_exception is None
    assert (await adopted.call_tool("sleep", {"seconds": 0})).blocks[0].text == "slept 0"


async def test_a_session_terminated_error_from_a_request_marks_the_session_dead(sessions: tuple[Any, Any]) -> None:
    adopted, _ = sessions

    async def gone() -> None:
        raise SessionTerminatedError("server returned 410: gone", sid=adopted.sid)

    with pytest.raises(SessionTerminatedError, match="410"):
        await adopted._run_or_die(gone())
    assert adopted._dead_exception is not None
    with pytest.raises(SessionTerminatedError):
        await adopted.call_tool("sleep", {"seconds": 0})


async def test_a_call_that_finishes_as_the_session_dies_keeps_its_result(sessions: tuple[Any, Any]) -> None:
    adopted, _ = sessions

    async def answer_then_die() -> str:
        await asyncio.sleep(0)
        adopted._mark_dead(
            ErrorResponse(type="error", message="died as the answer came")
        )  # from inside the call: not ended by it
        return "answer"

    assert await adopted._run_or_die(answer_then_die()) == "answer"
    assert asyncio.current_task().cancelling() == 0


async def test_a_session_class_with_its_own_run_or_die_is_left_as_it_is(sessions: tuple[Any, Any]) -> None:
    _, untouched = sessions

    class Custom(type(untouched)):
        async def _run_or_die(self, coro: Any) -> Any:
            return await coro

    untouched.__class__ = Custom
    assert not run_calls_in_caller(untouched)
    assert "_run_or_die" not in vars(untouched)
    assert not run_calls_in_caller(object())

"""A tool call refused because the episode had finished, when no answer this session read said so,
is an environment fault (`LostResult`), never a tool error shown to the model: the episode's
finishing answer was lost on the way. Seen at 6,000 concurrent episodes on one local server: the SDK
sends a `/call` again when the first attempt got no response headers within its 30-s read timeout,
the server ran both, and the second was refused with `episode_finished`; shown to the model as a
tool error, the episode ran out of turns unrewarded (`max_turns`, reward 0).

Real parts: the SDK's environment `Server` (the `Faulty` example environment) in a child process and
the SDK's `AsyncOpenReward`. The lost answer is a call made on the SDK session behind the library's
back (its answer never reaches `EnvSession`), as the SDK's re-sent call is."""

from __future__ import annotations

from typing import Any

import pytest
from openreward import AsyncOpenReward

from openreward_rl.env.environment import EnvironmentFault, open_session
from openreward_rl.env.local_server import LocalEnvServer, serve_environments
from openreward_rl.env.tasks import TaskRef

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def env_server(example_env_specs: dict[str, str]) -> Any:
    with serve_environments([example_env_specs["Faulty"]], subprocess=True) as server:
        yield server


def faulty_task(server: LocalEnvServer) -> TaskRef:
    return TaskRef("Faulty", "train", index=0, variant=server.variant_for("Faulty"), base_url=server.base_url)


async def test_a_refusal_after_a_lost_finishing_answer_is_an_environment_fault(env_server: LocalEnvServer) -> None:
    client = AsyncOpenReward(api_key="local")
    try:
        async with open_session(client, faulty_task(env_server), liveness=False) as session:
            lost = await session.sdk_session.call_tool("submit", {"answer": "ok"})  # the answer the library never saw
            assert lost.finished
            with pytest.raises(EnvironmentFault, match="already finished") as caught:
                await session.call_tool("submit", {"answer": "ok"})
            assert caught.value.kind == "LostResult"
    finally:
        await client.environments.aclose()


async def test_a_call_after_a_seen_finish_is_still_a_tool_error(env_server: LocalEnvServer) -> None:
    client = AsyncOpenReward(api_key="local")
    try:
        async with open_session(client, faulty_task(env_server), liveness=False) as session:
            first = await session.call_tool("submit", {"answer": "ok"})
            assert first.finished and first.reward == 1.0
            again = await session.call_tool("submit", {"answer": "ok"})
            assert again.error == "episode_finished" and not again.finished
    finally:
        await client.environments.aclose()

"""openreward_rl.env.local_server: loading environment classes and serving them on 127.0.0.1 (in a thread or a child)."""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.request

import aiohttp
import pytest
from openreward import AsyncOpenReward
from openreward.api.environments import TransportError
from openreward.environments import Environment, TextBlock, ToolOutput, tool

from openreward_rl.env.local_server import (
    LocalEnvServer,
    class_spec,
    load_environment_class,
    loopback_environ,
    main,
    serve_environments,
    variant_name,
)
from openreward_rl.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore:coroutine .resumable_sse. was never awaited:RuntimeWarning")


def _health(base_url: str) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{base_url}/health", timeout=5) as response:
        return json.loads(response.read())


class Echo(Environment):
    """A module-level environment: a child process imports it from this test module."""

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{"n": 1}]

    def get_prompt(self):
        return [TextBlock(text="echo")]

    @tool
    def ping(self) -> ToolOutput:
        """Answer pong."""
        return ToolOutput(blocks=[TextBlock(text="pong")])


# -- loading ------------------------------------------------------------------------------------


def test_load_file_spec_is_cached_per_path(example_env_specs):
    cls = load_environment_class(example_env_specs["WhoDunIt"])
    assert issubclass(cls, Environment) and cls.__name__ == "WhoDunIt"
    assert load_environment_class(example_env_specs["WhoDunIt"]) is cls


def test_load_module_spec(example_env_specs, monkeypatch):
    monkeypatch.syspath_prepend(example_env_specs["MathEnv"].rpartition("/")[0])
    cls = load_environment_class("math_env:MathEnv")
    assert cls.__module__ == "math_env" and class_spec(cls) == "math_env:MathEnv"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("examples/environments/whodunit.py", "must look like"),
        ("no/such/file.py:Env", "does not exist"),
        ("no_such_module_xyz:Env", "cannot import module 'no_such_module_xyz'"),
        ("json:NoSuchClass", "has no attribute 'NoSuchClass'"),
    ],
)
def test_load_bad_specs_name_the_problem(spec, message):
    with pytest.raises(ConfigError, match=message):
        load_environment_class(spec)


def test_load_rejects_non_environment_classes():
    with pytest.raises(ConfigError, match="not an openreward Environment subclass"):
        load_environment_class("json:JSONDecoder")


def test_class_spec_round_trips_file_classes_and_rejects_local_ones(example_env_specs):
    cls = load_environment_class(example_env_specs["Faulty"])
    assert class_spec(cls) == example_env_specs["Faulty"]
    assert load_environment_class(class_spec(cls)) is cls

    class Local(Echo):
        pass

    with pytest.raises(ValueError, match="not importable from another process"):
        class_spec(Local)


def test_server_validates_classes_before_serving():
    with pytest.raises(ValueError, match="at least one environment"):
        LocalEnvServer([])
    with pytest.raises(ValueError, match="duplicate env echo"):
        LocalEnvServer([Echo, Echo])

    class NoTools(Echo):
        ping = None

    with pytest.raises(ValueError, match="no tools"):
        serve_environments(NoTools)


def test_loopback_environ_keeps_existing_no_proxy_entries():
    env = loopback_environ({"NO_PROXY": "internal.example", "PATH": "/bin"})
    assert env["NO_PROXY"] == "internal.example,127.0.0.1,localhost"
    assert env["no_proxy"] == "127.0.0.1,localhost"
    assert env["OPENREWARD_DISABLE_UPDATE_CHECK"] == "1" and env["PATH"] == "/bin"


# -- variants and routing -------------------------------------------------------------------------


def test_variants_are_lowercased_names_of_served_classes(env_server):
    assert variant_name(Echo) == "echo"
    assert env_server.variant_for("WhoDunIt") == "whodunit"
    assert env_server.variant_for(load_environment_class(env_server.specs[1])) == "mathenv"
    with pytest.raises(ValueError, match="not served here"):
        env_server.variant_for(Echo)


@pytest.mark.anyio
async def test_variant_routes_to_its_class_and_no_variant_goes_to_the_first(env_server, openreward_client):
    math_env = env_server.environment(openreward_client, "MathEnv")
    assert [t["name"] for t in await math_env.list_tools(format="openai")] == ["calculator"]
    # the SDK pitfall this helper exists for: the name is ignored, no variant means the default class
    unrouted = openreward_client.environments.get("MathEnv", base_url=env_server.base_url)
    names = {t["name"] for t in await unrouted.list_tools(format="openai")}
    assert names == {"list_suspects", "interview", "inspect", "accuse"}


# -- in-process mode ---------------------------------------------------------------------------


def test_in_process_server_stops_and_frees_its_port():
    with serve_environments(Echo) as server:
        assert server.running and server.pid is None
        assert _health(server.base_url) == {"status": "ok"}
        base_url = server.base_url
    assert not server.running
    with pytest.raises(OSError):
        _health(base_url)


@pytest.mark.anyio
async def test_in_process_server_as_async_context_manager(openreward_client):
    async with serve_environments([Echo]) as server:
        env = server.environment(openreward_client, Echo)
        async with env.session(split="train", index=0) as session:
            out = await session.call_tool("ping")
        assert out.blocks[0].text == "pong"
    assert not server.running


def test_in_process_server_answers_kept_alive_connections_without_nagle_delay():
    """Every accepted connection has TCP_NODELAY: without it each answer after the first on a kept-alive
    connection waited ~40 ms for the client's delayed ACK (the response goes out in two writes)."""
    import http.client
    import socket

    with serve_environments(Echo) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        try:
            for _ in range(2):  # the second rides the same connection
                connection.request("GET", "/health")
                assert json.loads(connection.getresponse().read()) == {"status": "ok"}
            accepted = [c.transport.get_extra_info("socket") for c in server._uvicorn.server_state.connections]
            assert accepted, "the server holds no connection"
            assert all(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for sock in accepted)
        finally:
            connection.close()


def test_several_in_process_servers_each_open_sessions(capfd):
    """sse-starlette's process-wide shutdown event binds to the first loop that waits on it; every
    in-process server, running at once or one after another, must still open sessions (else
    `/create_session` fails, then "Session already exists")."""

    async def ping(server: LocalEnvServer) -> list[str]:
        client = AsyncOpenReward(api_key="local")

        async def one() -> str:
            async with server.environment(client, Echo).session(split="train", index=0) as session:
                return (await session.call_tool("ping")).blocks[0].text

        try:  # sessions opened together: some SSE stream is still open when its exit listener waits
            return list(await asyncio.gather(*(one() for _ in range(8))))
        finally:
            await client.environments.aclose()

    with serve_environments(Echo) as first:
        assert asyncio.run(ping(first)) == ["pong"] * 8
        with serve_environments(Echo) as second:
            assert asyncio.run(ping(second)) == ["pong"] * 8
            assert asyncio.run(ping(first)) == ["pong"] * 8
    with serve_environments(Echo) as third:
        assert asyncio.run(ping(third)) == ["pong"] * 8
    # the SDK retries a failed /create_session, so the answers alone can hide the fault: the server must not have failed one
    logged = "".join(capfd.readouterr())
    assert "bound to a different event loop" not in logged and "unhandled_exception" not in logged


def test_starting_twice_is_refused():
    with serve_environments(Echo) as server:
        with pytest.raises(RuntimeError, match="already serving"):
            server.start()


# -- subprocess mode ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_subprocess_server_serves_then_kill_makes_calls_fail_with_transport_errors(example_env_specs):
    server = serve_environments([example_env_specs["WhoDunIt"], Echo], subprocess=True)
    client = AsyncOpenReward(api_key="local")
    try:
        async with server:
            assert server.pid is not None and server.running
            async with aiohttp.ClientSession(trust_env=True) as http:
                async with http.get(f"{server.base_url}/health") as response:
                    assert await response.json() == {"status": "ok"}
            echo = server.environment(client, "Echo")
            async with echo.session(split="train", index=0) as session:
                assert (await session.call_tool("ping")).blocks[0].text == "pong"

                server.kill()
                assert not server.running and server.returncode == -signal.SIGKILL
                # The SDK retries refused connections for ~3 s, then raises aiohttp's error for this GET
                # (call_tool retries for ~15 s and raises MaxRetriesError, a TransportError).
                with pytest.raises((TransportError, aiohttp.ClientConnectionError)):
                    await asyncio.wait_for(session.get_prompt(), timeout=60)
    finally:
        await client.environments.aclose()


def test_subprocess_server_stops_gracefully(example_env_specs):
    with serve_environments(example_env_specs["MathEnv"], subprocess=True, log_level="info") as server:
        assert _health(server.base_url) == {"status": "ok"}
    assert server.returncode == -signal.SIGTERM  # uvicorn re-raises SIGTERM once it has shut down
    assert "Application shutdown complete" in server.logs()  # the lifespan ran: live sessions were deleted


def test_subprocess_needs_classes_a_child_can_import():
    class Local(Echo):
        pass

    with pytest.raises(ValueError, match="not importable from another process"):
        serve_environments(Local, subprocess=True)


# -- command line ------------------------------------------------------------------------------


def test_cli_help_describes_specs_and_variants(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "path/to/file.py:ClassName" in text and "variant=<lowercased class name>" in text


def test_cli_rejects_bad_spec_with_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["no/such/file.py:Env", "--port", "1"])
    assert exit_info.value.code == 2
    assert "does not exist" in capsys.readouterr().err


class Raising(Environment):
    """Every call of `fail` raises inside the environment's own code."""

    def __init__(self, task_spec=None, secrets=None):
        super().__init__(task_spec or {}, secrets=secrets or {})

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{}]

    def get_prompt(self):
        return [TextBlock(text="fail")]

    @tool
    def fail(self) -> ToolOutput:
        raise RuntimeError(f"the environment's own bug in session {id(self)}"[:36])  # the same text in every session


async def fail_in_sessions(server: LocalEnvServer, sessions: int) -> None:
    """`sessions` sessions of `Raising` on `server`, each calling its failing tool once."""
    client = AsyncOpenReward(api_key="local")
    try:
        for _ in range(sessions):
            async with server.environment(client, Raising).session(split="train", index=0) as session:
                with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's error for a tool that raised
                    await session.call_tool("fail")
    finally:
        await client.environments.aclose()


def test_an_in_process_servers_failures_are_one_line_each_and_their_tracebacks_go_to_its_log(capfd):
    """Served in the training process, the environment's own tracebacks do not reach the terminal: its log file
    holds them, and stderr gets one line per distinct failure (a broken environment printed one per episode)."""
    import openreward.environments.server as sdk_server

    sdk_logger = sdk_server.logger

    with serve_environments(Raising) as server:
        asyncio.run(fail_in_sessions(server, 4))
        log_file = server.log_file
    assert sdk_server.logger is sdk_logger  # as before the server (the SDK's own once no in-process server runs)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    said = [line for line in err.splitlines() if line.startswith("environment server (in this process)")]
    assert len(said) == 1 and "RuntimeError: the environment's own bug" in said[0], err
    logged = open(log_file, encoding="utf-8").read()
    assert logged.count("Traceback") >= 4 and "RuntimeError: the environment's own bug" in logged


def test_a_server_started_beside_a_running_one_says_its_failures_again(capfd):
    """The SDK's server loggers are process-wide, so servers running at once share one log; a server that
    starts beside another (a second command's run in one process, as in a test suite) begins a new run, whose
    distinct failures reach the terminal again instead of being taken for the first run's."""

    with serve_environments(Raising) as first:
        asyncio.run(fail_in_sessions(first, 1))
        with serve_environments(Raising) as second:
            asyncio.run(fail_in_sessions(second, 2))
    said = [
        line for line in capfd.readouterr().err.splitlines() if line.startswith("environment server (in this process)")
    ]
    assert len(said) == 2 and all("RuntimeError: the environment's own bug" in line for line in said), said

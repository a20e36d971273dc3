"""CPU per request of the agent endpoint (`openreward_rl.agent_endpoint.AgentEndpoint`) under many concurrent episodes.

What runs: `AgentEndpoint` in this process, in front of `SGLangEngine` on the zero-latency SGLang double (a
child process, benchmarks/common.py) with the Qwen3 tokenizer and template; `--episodes` agent episodes at
once, each a tool loop of `--turns` requests (the conversation so far, the answer as returned, a
300-character tool result), sent by a second child process with aiohttp. Each request is parsed, placed
against the episode's record (continued through the bridge), sampled through the engine, parsed by the
Hermes parser and answered in the API's shape.

Measured: this process's CPU (user + system, all threads, `getrusage`) over all requests, divided by
their number: the endpoint, its engine client and the event loop, not the clients' or the double's CPU
(printed apart). The machine may be shared; wall time is printed for reference only.

    PYTHONPATH=src python benchmarks/agent_endpoint.py [--episodes 1000] [--turns 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import TOKENIZER, SGLangDoubleProcess, machine, process_cpu_seconds  # noqa: E402

STEP = {
    "type": "function",
    "function": {
        "name": "step",
        "description": "Walk one step.",
        "parameters": {"type": "object", "properties": {"note": {"type": "string"}}},
    },
}
TOOL_RESULT = "You walk into a room. " * 14  # ~300 characters


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def clients(base: str, keys: list[str], turns: int) -> None:
    import aiohttp

    async def episode(session: aiohttp.ClientSession, key: str) -> None:
        messages: list[dict] = [{"role": "user", "content": f"Walk the corridor ({key})."}]
        for _ in range(turns):
            async with session.post(
                f"{base}/episodes/{key}/v1/chat/completions", json={"model": "p", "messages": messages, "tools": [STEP]}
            ) as answer:
                body = await answer.json()
                if answer.status != 200:
                    raise RuntimeError(body)
            message = body["choices"][0]["message"]
            messages.append(message)
            for call in message.get("tool_calls") or ():
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT})

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(episode(session, key) for key in keys))


async def serve(episodes: int, turns: int) -> dict:
    from openreward_rl.agent_endpoint import AgentEndpoint, RecorderSettings
    from openreward_rl.assets import load_tokenizer
    from openreward_rl.engines.sglang import SGLangEngine
    from openreward_rl.families import get_family
    from openreward_rl.parsers import get_parser

    tokenizer, family = load_tokenizer(TOKENIZER), get_family("qwen3")
    with SGLangDoubleProcess() as double:
        engine = SGLangEngine(double.url, max_attempts=1)
        endpoint = AgentEndpoint(
            engine, family.renderer(tokenizer), get_parser(family.parser), RecorderSettings(max_new_tokens=512)
        )
        async with endpoint:
            keys = [f"ep{i}" for i in range(episodes)]
            for key in keys:
                endpoint.open_episode(key)
            env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
            command = [sys.executable, __file__, "clients", f"http://127.0.0.1:{endpoint.port}", str(turns), *keys]
            cpu0, double0, wall0 = own_cpu(), double.cpu_seconds(), time.perf_counter()
            child = await asyncio.create_subprocess_exec(*command, env=env)
            client_cpu = 0.0
            while child.returncode is None:
                try:
                    client_cpu = process_cpu_seconds(child.pid)
                except (FileNotFoundError, ProcessLookupError):
                    pass
                try:
                    await asyncio.wait_for(child.wait(), 0.5)
                except TimeoutError:
                    pass
            cpu, wall, double_cpu = own_cpu() - cpu0, time.perf_counter() - wall0, double.cpu_seconds() - double0
            if child.returncode != 0:
                raise RuntimeError(f"the clients failed with status {child.returncode}")
            recorded = [endpoint.close_episode(key) for key in keys]
        await engine.aclose()
    requests = sum(r.requests for r in recorded)
    assert all(len(r.ledger.segments) == 1 for r in recorded), "every episode must stay one segment"
    return {
        "episodes": episodes,
        "turns": turns,
        "requests": requests,
        "endpoint_cpu_ms_per_request": round(1000 * cpu / requests, 3),
        "double_cpu_ms_per_request": round(1000 * double_cpu / requests, 3),
        "clients_cpu_s_at_last_look": round(client_cpu, 2),
        "wall_s": round(wall, 1),
        "load_average": os.getloadavg(),
        "machine": machine(),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "clients":
        asyncio.run(clients(sys.argv[2], sys.argv[4:], int(sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(serve(args.episodes, args.turns))))


if __name__ == "__main__":
    main()

"""An agent program not written for openreward_rl: the `openai` client's function-calling loop, as its
docs write it. It reads its model's base URL and key from OPENAI_BASE_URL / OPENAI_API_KEY (the client's
own defaults), its task from OPENREWARD_TASK (the opening messages and the tools, as JSON), runs each tool
call by POSTing the arguments to OPENREWARD_TOOLS_URL/<name>, and prints its final answer.

Run by `openreward_rl.agent_endpoint.SubprocessAgent(["python", "examples/own_agent/openai_tool_loop.py"])`,
or import `solve` to run it in process (`AgentEpisode(endpoint, solve)`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import httpx
from openai import AsyncOpenAI

MAX_TURNS = 8
SYSTEM_PROMPT = "You are a painter. Read the order with the tool, then reply with the colour only."


async def run_loop(client: AsyncOpenAI, messages: list[Any], tools: list[dict[str, Any]], call_tool: Any) -> str:
    for _ in range(MAX_TURNS):
        response = await client.chat.completions.create(model="policy", messages=messages, tools=tools)
        message = response.choices[0].message
        messages.append(message)
        if not message.tool_calls:
            return message.content or ""
        for tool_call in message.tool_calls:
            result = await call_tool(tool_call.function.name, json.loads(tool_call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": result["text"]})
            if result.get("finished"):
                return ""
    return ""


async def solve(task: Any) -> str:
    """In process: an `AgentTask` gives the base URL, the key, the task and `call_tool`."""

    async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return (await task.call_tool(name, arguments)).to_dict()

    async with AsyncOpenAI(base_url=task.base_url, api_key=task.api_key) as client:
        return await run_loop(
            client, [{"role": "system", "content": SYSTEM_PROMPT}, *task.prompt], task.tools, call_tool
        )


async def main() -> None:
    task = json.loads(os.environ["OPENREWARD_TASK"])
    async with httpx.AsyncClient(timeout=600) as http, AsyncOpenAI() as client:

        async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            answer = await http.post(f"{os.environ['OPENREWARD_TOOLS_URL']}/{name}", json=arguments)
            answer.raise_for_status()
            return answer.json()

        print(
            await run_loop(
                client, [{"role": "system", "content": SYSTEM_PROMPT}, *task["prompt"]], task["tools"], call_tool
            )
        )


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)

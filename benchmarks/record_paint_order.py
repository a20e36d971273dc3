"""Record PaintOrder episodes as another model would, through the real `openreward-rl eval`, for `sft --from-results`.

    python benchmarks/record_paint_order.py --engine sglang --output runs/qwen.jsonl
    python benchmarks/record_paint_order.py --engine openai --output runs/hosted.jsonl

No model server can run here, so a scripted player stands behind a local double: `--engine sglang` serves
the SGLang test double (`openreward_rl.testing.SGLangTestServer`) with the real Qwen3 tokenizer (another
vocabulary than SmolLM2's: the ids a bigger model would write), `--engine openai` a local OpenAI-compatible
/v1/chat/completions server that answers with server-side tool calls (a hosted model: its episodes are
re-tokenized, not token-exact). The player reads the order with `read_order`, then answers its colour,
except on orders divisible by 3, where it answers "white" (0.2 for the read alone), so that keeping
episodes by reward keeps some and drops others. `eval` writes the file as it would for a real model.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "examples" / "train_tool_agent_config.yaml")
SERVE = str(REPO / "examples" / "environments" / "paint_order.py") + ":PaintOrder"
ORDER = re.compile(r"Order (\d+) says which colour")
READ = re.compile(r"Order (\d+): paint the wall (\w+)\.")


def next_move(conversation: str) -> tuple[int | None, str | None]:
    """(order to read, None) before the order was read; (None, the answer) after: its colour, or "white" on orders divisible by 3.

    >>> next_move("Order 42 says which colour to paint the wall."), next_move("Order 42: paint the wall teal."), next_move("Order 43: paint the wall teal.")
    ((42, None), (None, 'white'), (None, 'teal'))
    """
    read = READ.search(conversation)
    if read is None:
        return int(ORDER.search(conversation).group(1)), None
    return None, "white" if int(read.group(1)) % 3 == 0 else read.group(2)


def qwen_player(tokenizer: Any) -> Any:
    """The SGLang double's script: the call in Qwen3's Hermes format, then the plain answer."""
    from openreward_rl.testing import ScriptedCompletion

    def answer(request: Any) -> ScriptedCompletion:
        order, colour = next_move(tokenizer.decode(request.input_ids))
        if colour is not None:
            return ScriptedCompletion(text=colour)
        return ScriptedCompletion(
            text=f'<tool_call>\n{{"name": "read_order", "arguments": {{"order": {order}}}}}\n</tool_call>'
        )

    return answer


async def chat_completions(request: web.Request) -> web.Response:
    """/v1/chat/completions as a hosted model answers: a server-side tool call, then the plain answer."""
    body = await request.json()
    order, colour = next_move("\n".join(str(m.get("content") or "") for m in body["messages"]))
    if colour is not None:
        message: dict[str, Any] = {"role": "assistant", "content": colour}
    else:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "read_order", "arguments": json.dumps({"order": order})},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
    choice = {
        "index": 0,
        "message": message,
        "finish_reason": "stop" if colour is not None else "tool_calls",
        "logprobs": None,
    }
    usage = {"prompt_tokens": 9, "completion_tokens": 3}
    return web.json_response(
        {"id": "chatcmpl-1", "object": "chat.completion", "model": "hosted", "choices": [choice], "usage": usage}
    )


async def list_models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "hosted", "object": "model"}]})


@contextlib.asynccontextmanager
async def model_server(engine: str) -> AsyncIterator[list[str]]:
    """The double for `engine`, on 127.0.0.1 for the block; yields `eval`'s flags to reach it."""
    from openreward_rl.assets import load_tokenizer

    if engine == "sglang":
        from openreward_rl.testing import SGLangTestServer

        qwen = load_tokenizer("offline:qwen3")
        async with SGLangTestServer(qwen, script=qwen_player(qwen)) as server:
            yield [
                "--engine",
                "sglang",
                "--base-url",
                server.url,
                "--model",
                "Qwen/Qwen3-8B",
                "--tokenizer",
                "offline:qwen3",
            ]
        return
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", list_models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield [
            "--engine",
            "openai",
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
            "--model",
            "hosted",
            "--tokenizer",
            "offline:qwen3",
        ]
    finally:
        await runner.cleanup()


def record(engine: str, output: Path, *, split: str = "train", max_tasks: int | None = None, n: int = 1) -> int:
    """`openreward-rl eval` on PaintOrder's `split` against `engine`'s double, written to `output`; its exit status."""
    from openreward_rl.cli import main

    async def run() -> int:
        async with model_server(engine) as flags:
            command = [
                "eval",
                "--config",
                CONFIG,
                "--serve",
                SERVE,
                "--split",
                split,
                "--n",
                str(n),
                "--output",
                str(output),
                *flags,
            ]
            return await asyncio.to_thread(main, [*command, *(["--max-tasks", str(max_tasks)] if max_tasks else [])])

    return asyncio.run(run())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("sglang", "openai"), required=True)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--split", default="train")
    parser.add_argument("--max-tasks", type=int, default=None)
    parser.add_argument("--n", type=int, default=1)
    args = parser.parse_args()
    sys.exit(record(args.engine, args.output, split=args.split, max_tasks=args.max_tasks, n=args.n))

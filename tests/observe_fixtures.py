"""Real trajectories for the observability tests.

An SDK `Environment` served by the SDK's own `Server` on 127.0.0.1 (uvicorn in a thread), the real
Qwen3 tokenizer and chat template, the real `ToolEpisode` and `run_episode`. Only the model is a
double: `ScriptedEngine` plays fixed assistant texts, tokenized with the real tokenizer and ended
with the real end-of-turn token, as a token-in/token-out engine would return them.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import os
import threading
from collections.abc import Sequence
from typing import Any

import attrs
from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel

from openreward_rl.assets import load_tokenizer
from openreward_rl.engines.base import FinishReason, Generation, GenerationRequest
from openreward_rl.env.local_server import serve_environments
from openreward_rl.env.tasks import TaskRef
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.loop.episode import EpisodeSettings, run_episode
from openreward_rl.loop.tool_episode import ToolEpisode
from openreward_rl.loop.trajectory import Trajectory
from openreward_rl.parsers.base import get_parser

SECRET_VALUE = "sk-observe-SECRET-4242"


class AddArgs(BaseModel):
    a: int
    b: int


class Answer(BaseModel):
    answer: str


class AddEnv(Environment):
    """Add two numbers, then submit the answer. `add` pays 0.25 once; `submit` pays 1.0 if right."""

    def __init__(self, task_spec: dict = {}, secrets: dict = {}) -> None:  # noqa: B006 - the SDK's signature
        super().__init__(task_spec, secrets)
        self.api_key = secrets.get("OPENAI_API_KEY", "")

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"q": "2+3", "target": "5"}, {"q": "4+4", "target": "8"}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Compute {self.task_spec['q']} with the add tool, then submit.")]

    @tool
    async def add(self, args: AddArgs) -> ToolOutput:
        """Add two integers."""
        return ToolOutput(blocks=[TextBlock(text=str(args.a + args.b))], reward=0.25)

    @tool
    async def submit(self, args: Answer) -> ToolOutput:
        """Submit the final answer."""
        # the secret reached the environment; it must not reach the trajectory
        ok = args.answer.strip() == self.task_spec["target"] and self.api_key == SECRET_VALUE
        return ToolOutput(blocks=[TextBlock(text="correct" if ok else "wrong")], reward=float(ok), finished=True)


class LocalEnvServer:
    """The SDK's `Server([AddEnv])` on a free 127.0.0.1 port, in a daemon thread (the library's thread mode)."""

    def __init__(self) -> None:
        os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
        self._server = serve_environments([AddEnv])

    @property
    def url(self) -> str:
        return self._server.base_url

    def __enter__(self) -> LocalEnvServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


@attrs.define
class ScriptedEngine:
    """Plays `texts` in order, one per model call, as real token ids of `tokenizer`."""

    tokenizer: Any
    texts: Sequence[str]
    calls: int = 0

    async def generate(self, request: GenerationRequest) -> Generation:
        text = self.texts[min(self.calls, len(self.texts) - 1)]
        self.calls += 1
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ids = tuple(self.tokenizer.encode(text, add_special_tokens=False)) + (end,)
        return Generation(
            output_ids=ids, logprobs=tuple(-0.5 for _ in ids), finish_reason=FinishReason.STOP, matched_stop=end
        )

    async def aclose(self) -> None:
        return None


GOOD_SCRIPT = (
    '<think>\nI should add first.\n</think>\n\nLet me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>',
    '<think>\nThe sum is 5.\n</think>\n\n<tool_call>\n{"name": "submit", "arguments": {"answer": "5"}}\n</tool_call>',
)


@functools.cache
def qwen3_tokenizer() -> Any:
    return load_tokenizer("offline:qwen3")


async def run_real_episode(
    url: str, script: Sequence[str] = GOOD_SCRIPT, index: int | None = 0, task_spec: dict[str, Any] | None = None
) -> Trajectory:
    """One real episode of AddEnv task `index` (or the task `task_spec` names), with the secret passed to the session."""
    from openreward import AsyncOpenReward

    tokenizer = qwen3_tokenizer()
    engine = ScriptedEngine(tokenizer, script)
    renderer = ChatRenderer(tokenizer)
    settings = EpisodeSettings(max_turns=4, system_prompt="You are a careful calculator.")
    client = AsyncOpenReward(api_key="local")
    try:
        return await run_episode(
            lambda: ToolEpisode(engine, renderer, get_parser("hermes"), settings),
            client,
            TaskRef(environment="addenv", split="train", index=index, task_spec=task_spec, base_url=url),
            secrets={"OPENAI_API_KEY": SECRET_VALUE},
        )
    finally:
        await client.environments.aclose()


def real_trajectory(script: Sequence[str] = GOOD_SCRIPT, index: int = 0) -> Trajectory:
    """A fresh copy of the (per-process cached) trajectory of one real episode: tests may mutate it."""
    return Trajectory.from_dict(copy.deepcopy(_real_trajectory_dict(tuple(script), index)))


@functools.cache
def _real_trajectory_dict(script: tuple[str, ...], index: int) -> dict[str, Any]:
    with LocalEnvServer() as server:
        return asyncio.run(run_real_episode(server.url, script, index)).to_dict()


def read_offline_run(directory: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(config, history rows) of the one offline wandb run under `directory`.

    wandb 0.31 writes offline runs only as `run-<id>.wandb`: the LevelDB log format (a 7-byte
    ":W&B" header, then 32 KiB blocks of records with a crc32/length/type header) holding
    `wandb_internal_pb2.Record` protobufs. No reader ships with wandb any more, so this one is ours.
    """
    import glob
    import json

    files = [
        f for f in glob.glob(os.path.join(str(directory), "**", "run-*.wandb"), recursive=True) if "latest-run" not in f
    ]
    if len(files) != 1:
        raise AssertionError(f"expected one offline run under {directory}, found {files}")
    # `run.finish()` can return before wandb-core has written the run's last records: wait for its exit record
    for _ in range(300):
        payloads = _records(open(files[0], "rb").read())
        if any(p.WhichOneof("record_type") == "exit" for p in payloads):
            break
        threading.Event().wait(0.1)
    else:
        raise AssertionError(f"{files[0]} has no exit record: the run was not finished")
    config: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for record in payloads:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            config.update({u.key: json.loads(u.value_json) for u in record.run.config.update})
        elif kind == "config":
            config.update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item})
    return config, rows


def _records(data: bytes) -> list[Any]:
    import struct

    from wandb.proto import wandb_internal_pb2

    block, position, pending, payloads = 32768, 7, b"", []
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:
            position += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if length == 0 and kind == 0:
            position += left
            continue
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 1:
            payloads.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            payloads.append(pending + chunk)
    records = []
    for payload in payloads:
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(payload)
        except Exception:  # a record still being written
            break
        records.append(record)
    return records

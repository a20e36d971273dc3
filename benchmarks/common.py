"""Shared pieces of the benchmarks: a workload environment, the scripted model turn, server launchers,
and in-process doubles of the two transports.

The workload is `Corridor`, an SDK environment whose only tool `step` answers with a reply of a set
size and finishes the episode after `turns` calls (reward 1.0). The "model" always samples the same
pre-tokenized turn of the same length (a short thinking block and one `step` call, words varying
by turn), so every turn costs the library the same work and the context grows linearly.

Two ways to run an episode:

- over the wire: `SGLangTestServer` (zero latency unless asked, `ids` scripts, `record=False`) in a child process,
  `LocalEnvServer` in subprocess mode, the SDK's real `AsyncOpenReward` client and `SGLangEngine`;
- in process (`InProcessEngine`, `InProcessSdkSession`): the same library code (`ToolEpisode`,
  `ChatRenderer`, the Hermes parser, `TokenLedger`, `EnvSession`, `SGLangEngine`'s payload building,
  JSON encoding of `input_ids` and response parsing) with the two HTTP hops replaced by precomputed
  answers, so the CPU time measured is the library's own.

Run `python benchmarks/common.py sglang-double` to serve the double (prints `PORT <n>`, stops on EOF
of stdin or SIGTERM).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
for _key in ("NO_PROXY", "no_proxy"):
    _entries = [e for e in os.environ.get(_key, "").split(",") if e.strip()]
    os.environ[_key] = ",".join(dict.fromkeys([*_entries, "127.0.0.1", "localhost"]))

from openreward.environments import Environment, Split, TextBlock, ToolOutput, tool  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

THIS_FILE = Path(__file__).resolve()
REPO_ROOT = THIS_FILE.parents[1]
CORRIDOR_SPEC = f"{THIS_FILE}:Corridor"
TOKENIZER = "offline:qwen3"

_WORDS = (
    "amber",
    "basalt",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "granite",
    "harbor",
    "iris",
    "juniper",
    "kelp",
    "lumen",
    "marble",
    "nectar",
    "onyx",
    "pebble",
    "quartz",
    "river",
    "slate",
    "tundra",
)


def corridor_reply(step: int, words: int) -> str:
    """The text `step` returns on call number `step` (1-based): `words` words, about 1.1 tokens each."""
    body = " ".join(_WORDS[(step * 7 + i) % len(_WORDS)] for i in range(words))
    return f"Room {step}: {body}."


class StepArgs(BaseModel):
    note: str = Field(description="What you observed in the last room.")


class Corridor(Environment):
    """Walk a corridor of `turns` rooms; each `step` describes the next room, the last one ends it.

    Task spec: `{"turns": int, "reply_words": int}` (index tasks: `list_tasks`).
    """

    def __init__(self, task_spec: dict, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets)
        self.steps = 0

    @classmethod
    def list_splits(cls) -> list[Split]:
        return [Split(name="train", type="train")]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"turns": turns, "reply_words": 60} for turns in (5, 10, 20, 50)]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Walk down the corridor with the step tool until it ends, noting each room.")]

    @tool
    def step(self, args: StepArgs) -> ToolOutput:
        """Go to the next room and describe it."""
        self.steps += 1
        done = self.steps >= int(self.task_spec["turns"])
        return ToolOutput(
            blocks=[TextBlock(text=corridor_reply(self.steps, int(self.task_spec["reply_words"])))],
            reward=1.0 if done else None,
            finished=done,
        )


CORRIDOR_TOOLS_FLAT = [
    {
        "name": "step",
        "description": "Go to the next room and describe it.",
        "parameters": StepArgs.model_json_schema(),
    }
]


SCRIPTED_TURNS = 64


def model_turn_text(turn: int, think_words: int = 30, note_words: int = 12, sample: int = 0) -> str:
    """What the scripted model samples on turn `turn` (before its end-of-turn token); turns differ in
    their words (so no cache keyed on a turn's content can hit), not in their length. `sample` > 0 draws
    the words from a generator seeded with it, as two episodes' samples of one turn differ."""
    if sample:
        draw = random.Random(sample * SCRIPTED_TURNS + turn)
        thought = " ".join(draw.choice(_WORDS) for _ in range(think_words))
        note = " ".join(draw.choice(_WORDS) for _ in range(note_words))
    else:
        thought = " ".join(_WORDS[(turn + i * 3) % len(_WORDS)] for i in range(think_words))
        note = " ".join(_WORDS[(turn * 11 + i * 5) % len(_WORDS)] for i in range(note_words))
    call = json.dumps({"name": "step", "arguments": {"note": f"{note} {turn}"}})
    return f"<think>\n{thought}\n</think>\n\n<tool_call>\n{call}\n</tool_call>"


def model_turn_ids(tokenizer: Any, turn: int, sample: int = 0) -> tuple[int, ...]:
    return tuple(tokenizer.encode(model_turn_text(turn, sample=sample), add_special_tokens=False))


# ---------------------------------------------------------------------------------------------- servers


class SGLangDoubleProcess:
    """`SGLangTestServer` in a child process answering each request with the pre-tokenized turn of its turn index."""

    def __init__(
        self,
        tokenizer_name: str = TOKENIZER,
        context_len: int = 65536,
        latency_s: float = 0.0,
        kv_cache: Mapping[str, Any] | None = None,
        distinct: bool = False,
    ) -> None:
        """`kv_cache`: the fields of a `KVCacheModel` (the double then plays a KV-cache pool and SGLang's scheduler);
        `distinct`: each episode samples its own words (see `_serve_double`)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")])
        kv_args = ["--kv-cache", json.dumps(dict(kv_cache))] if kv_cache else []
        kv_args += ["--distinct"] if distinct else []
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(THIS_FILE),
                "sglang-double",
                "--tokenizer",
                tokenizer_name,
                "--context-len",
                str(context_len),
                "--latency",
                str(latency_s),
                *kv_args,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            self.process.kill()
            raise RuntimeError(f"the SGLang double did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.process.pid)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> SGLangDoubleProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve_double(
    tokenizer_name: str,
    context_len: int,
    latency_s: float = 0.0,
    kv_cache: Mapping[str, Any] | None = None,
    distinct: bool = False,
) -> None:
    from openreward_rl.assets import load_tokenizer
    from openreward_rl.testing import KVCacheModel, ScriptedCompletion, SGLangTestServer

    tokenizer = load_tokenizer(tokenizer_name)
    completions: dict[tuple[int, int], ScriptedCompletion] = {}

    def complete(request: Any) -> ScriptedCompletion:
        rid = request.rid or "_t0"
        # distinct: each episode (the rid before `_t<turn>`) samples its own words, so episodes share only
        # their prompt in a prefix cache, as a real model's samples do
        key = (turn_of_rid(rid), zlib.crc32(rid.rsplit("_t", 1)[0].encode()) + 1 if distinct else 0)
        if key not in completions:
            completions[key] = ScriptedCompletion(ids=model_turn_ids(tokenizer, *key))
        return completions[key]

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.readline() else None)
        async with SGLangTestServer(
            tokenizer,
            complete,
            context_len=context_len,
            record=False,
            latency_s=latency_s,
            kv_cache=KVCacheModel(**kv_cache) if kv_cache else None,
        ) as server:
            print(f"PORT {server.port}", flush=True)
            await stop.wait()

    asyncio.run(serve())


# ---------------------------------------------------------------------------------------------- in-process doubles


SUMMARY_TEXT = "Summary: I have walked down the corridor with the step tool, noting each room; the walk goes on."


def in_process_engine(tokenizer: Any, latency_s: float = 0.0) -> Any:
    """An `SGLangEngine` whose HTTP exchange answers in process: the request body is built by the library
    as usual (payload, JSON of `input_ids`), and the answer is a precomputed `/generate` body for the
    scripted turn of that request's turn index (read from its `rid`), parsed by the library as usual.
    A summary turn's request (`<run>_s<n>`, a context policy's) gets `SUMMARY_TEXT`. `latency_s`: each
    answer waits that long first (keeps many episodes alive at once)."""
    from openreward_rl.engines.sglang import SGLangEngine
    from openreward_rl.testing.sglang_server import scripted_logprob

    answers = []
    for turn in range(SCRIPTED_TURNS + 1):
        turn_ids = (
            model_turn_ids(tokenizer, turn)
            if turn < SCRIPTED_TURNS
            else tokenizer.encode(SUMMARY_TEXT, add_special_tokens=False)
        )
        ids = [*turn_ids, tokenizer.eos_token_id]
        body = {
            "text": tokenizer.decode(ids[:-1], skip_special_tokens=True),
            "output_ids": ids,
            "meta_info": {
                "id": "bench",
                "finish_reason": {"type": "stop", "matched": tokenizer.eos_token_id},
                "prompt_tokens": 0,
                "completion_tokens": len(ids),
                "cached_tokens": 0,
                "weight_version": "default",
                "output_token_logprobs": [[scripted_logprob(t, i), t, None] for i, t in enumerate(ids)],
            },
        }
        answers.append(json.dumps(body).encode())

    class _Engine(SGLangEngine):
        async def _exchange(self, url: str, body: bytes, headers: Mapping[str, str] | None) -> tuple[int, bytes]:
            if latency_s:
                await asyncio.sleep(latency_s)
            rid = body[body.rindex(b'"rid"') :].decode().split('"')[3]
            return 200, answers[SCRIPTED_TURNS if rid.rsplit("_", 1)[-1].startswith("s") else turn_of_rid(rid)]

    if not hasattr(SGLangEngine, "_exchange"):  # the engine before its JSON work moved (before/after runs)

        class _Engine(SGLangEngine):  # type: ignore[no-redef]
            async def _post_generate(self, payload: dict[str, Any], headers: Mapping[str, str] | None) -> Any:
                json.dumps(payload).encode()  # what aiohttp does with `json=payload`
                return json.loads(answers[turn_of_rid(payload["rid"])])

    return _Engine("http://in-process.invalid")


def turn_of_rid(text: str) -> int:
    """The turn index in a ToolEpisode request id (`<run>_t<turn>`), modulo the scripted turns."""
    digits = text.rsplit("_t", 1)[1]
    return int("".join(c for c in digits if c.isdigit())) % SCRIPTED_TURNS


class _Output:
    def __init__(self, text: str, reward: float | None, finished: bool) -> None:
        self.blocks = [TextBlock(text=text)]
        self.reward = reward
        self.finished = finished
        self.metadata = None


class InProcessSdkSession:
    """The SDK session calls `EnvSession` makes, answered in process with Corridor's behaviour."""

    def __init__(self, turns: int, reply_words: int) -> None:
        self.turns, self.reply_words, self.steps = turns, reply_words, 0

    async def get_messages(self, format: str = "openai") -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": "Walk down the corridor with the step tool until it ends, noting each room."}
        ]

    async def list_tools(self, format: str = "openai") -> list[dict[str, Any]]:
        return [dict(t) for t in CORRIDOR_TOOLS_FLAT]

    async def terminal_tool(self) -> None:
        return None

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> _Output:
        self.steps += 1
        done = self.steps >= self.turns
        return _Output(corridor_reply(self.steps, self.reply_words), 1.0 if done else None, done)


def corridor_task(turns: int, reply_words: int, base_url: str | None = None) -> Any:
    from openreward_rl import TaskRef

    return TaskRef(
        "Corridor",
        "train",
        task_spec={"turns": turns, "reply_words": reply_words},
        base_url=base_url,
        variant="corridor" if base_url else None,
    )


def write_corridor_config(
    directory: Path, base_url: str, *, max_turns: int, name: str = "train_config.yaml", extra: str = ""
) -> Path:
    """The hooks' config for Corridor at `base_url` (one attempt, no upload); `extra` adds top-level YAML lines."""
    file = directory / name
    file.write_text(
        f"""
environments:
  Corridor:
    variant: corridor
    base_url: {base_url}
    max_turns: {max_turns}
parser: hermes
attempts: 1
upload: false
{extra}"""
    )
    return file


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    load = os.getloadavg()
    return f"{os.cpu_count()} cores, {cpu}, Python {sys.version.split()[0]}, load average {load[0]:.2f}"


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    double = commands.add_parser("sglang-double", help="serve the SGLang double for the scripted turn")
    double.add_argument("--tokenizer", default=TOKENIZER)
    double.add_argument("--context-len", type=int, default=65536)
    double.add_argument("--latency", type=float, default=0.0, help="seconds each answer waits")
    double.add_argument(
        "--kv-cache",
        type=json.loads,
        default=None,
        help="JSON of KVCacheModel fields: play a KV-cache pool and SGLang's scheduler",
    )
    double.add_argument("--distinct", action="store_true", help="each episode samples its own words")
    args = parser.parse_args()
    _serve_double(args.tokenizer, args.context_len, args.latency, args.kv_cache, args.distinct)

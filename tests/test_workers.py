"""Episodes in worker processes (`rollout_workers` in the training config): the Slime hook with
episodes in spawned workers gives the same samples as in process, and a worker that dies turns
its episodes into ABORTED samples (never lost ones, never rewards), after which a fresh worker
runs the next episode. Real parts: the SDK's environment server (conftest `env_server`), the
SGLang wire double with scripted completions and the real Qwen3 tokenizer, real spawned
processes; Slime's `Sample` is the double of tests/doubles/slime_double.py."""

from __future__ import annotations

import asyncio
import copy
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from doubles import slime_double
from openreward_rl.backends import slime
from openreward_rl.backends._sample import state as _state
from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.config import ConfigError, parse_config
from openreward_rl.env.tasks import TaskRef
from openreward_rl.loop.trajectory import StopReason
from openreward_rl.loop.workers import ProcessWorkers, WorkerRollouts, make_workers
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from test_backend_slime import SAMPLING, make_args, make_sample

pytestmark = pytest.mark.anyio

GARBLE = '<tool_call>\n{"name": "garble", "arguments": {}}\n</tool_call>'
SUBMIT_OK = '<tool_call>\n{"name": "submit", "arguments": {"answer": "ok"}}\n</tool_call>'
HANG = '<tool_call>\n{"name": "hang", "arguments": {"seconds": 60}}\n</tool_call>'


def write_config(
    directory: Path, base_url: str, workers: int, backend: str = "process", file: Path | None = None
) -> Path:
    file = file or directory / f"config_{workers}.yaml"
    file.write_text(
        f"""
environments:
  Faulty:
    variant: faulty
    base_url: {base_url}
parser: hermes
attempts: 1
upload: false
rollout_workers: {workers}
rollout_worker_backend: {backend}
"""
    )
    return file


@pytest.fixture
async def sglang(qwen3_tokenizer: Any) -> Any:
    async with SGLangTestServer(qwen3_tokenizer, weight_version="w7") as server:
        yield server
    await _state.close_states()


async def episode(args: Any, sample_index: int) -> Any:
    """One training rollout's sample; the default context policy makes the hook return a list (of one:
    these episodes are short), in workers as in process."""
    sample = make_sample(sample_index=sample_index)
    (only,) = await slime_double.call_generate(slime.generate, args, sample, copy.deepcopy(SAMPLING))
    return only


def comparable(sample: Any) -> dict[str, Any]:
    """What the trainer reads from a sample, less the wall-clock timings."""
    metadata = {k: v for k, v in sample.metadata.items() if k not in ("metrics",)}
    metrics = {k: v for k, v in sample.metadata["metrics"].items() if not k.endswith("_seconds")}
    return {
        "tokens": sample.tokens,
        "response": sample.response,
        "response_length": sample.response_length,
        "loss_mask": sample.loss_mask,
        "rollout_log_probs": sample.rollout_log_probs,
        "reward": sample.reward,
        "status": sample.status,
        "weight_versions": sample.weight_versions,
        "metadata": metadata,
        "metrics": metrics,
    }


async def test_worker_episodes_give_the_same_samples_as_in_process(sglang, env_server, tmp_path, monkeypatch) -> None:
    args = make_args(sglang)
    results = {}
    for workers in (0, 2):
        monkeypatch.setenv("OPENREWARD_RL_CONFIG", str(write_config(tmp_path, env_server.base_url, workers)))
        sglang.push(ScriptedCompletion(text=GARBLE), ScriptedCompletion(text=SUBMIT_OK))
        results[workers] = await episode(args, sample_index=0)
        slime_double.check_output(results[workers], args)
        if workers:
            assert isinstance(_state.state_for(args).rollouts, WorkerRollouts)
            assert any(pid not in (None, os.getpid()) for pid in _state.state_for(args).rollouts.workers.pids())
    in_process, in_workers = comparable(results[0]), comparable(results[2])
    assert in_process["status"] is slime_double.Sample.Status.COMPLETED and in_process["reward"] == 1.0
    assert in_process["metrics"]["turns"] == 2
    assert in_workers == in_process


async def lose_the_worker_mid_episode(
    args: Any, sglang: Any, kill: Callable[[Any], Awaitable[int]], cause: str
) -> tuple[Any, int]:
    """Two episodes hang in one worker; `kill(workers)` kills it (returning the pid it killed): both come
    back ABORTED naming `cause` with no reward observed, and the next episode runs in a fresh worker.
    Returns the workers and the killed pid."""
    sglang.push(ScriptedCompletion(text=HANG), ScriptedCompletion(text=HANG))
    running = [asyncio.ensure_future(episode(args, sample_index=i)) for i in range(2)]
    while len(sglang.requests) < 2:  # both episodes are in the worker, past their first model turn
        await asyncio.sleep(0.05)
    workers = _state.state_for(args).rollouts.workers
    pid = await kill(workers)
    lost = await asyncio.gather(*running)
    for sample in lost:
        slime_double.check_output(sample, args)
        assert sample.status is slime_double.Sample.Status.ABORTED
        record = EpisodeRecord.from_metadata(sample.metadata)
        assert record.stop_reason is StopReason.ABORTED and cause in record.stop_detail
        assert record.reward_observed is False
    sglang.push(ScriptedCompletion(text=SUBMIT_OK))
    after = await episode(args, sample_index=2)
    assert after.status is slime_double.Sample.Status.COMPLETED and after.reward == 1.0
    return workers, pid


async def test_a_worker_that_dies_aborts_its_episodes_and_the_next_one_runs(
    sglang, env_server, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("OPENREWARD_RL_CONFIG", str(write_config(tmp_path, env_server.base_url, 1)))

    async def kill(workers: Any) -> int:
        (pid,) = workers.pids()
        os.kill(pid, signal.SIGKILL)
        return pid

    workers, pid = await lose_the_worker_mid_episode(make_args(sglang), sglang, kill, "died")
    (new_pid,) = workers.pids()
    assert new_pid not in (None, pid)


async def test_partial_rollout_episodes_stay_in_process() -> None:
    """An episode with its own engine (partial rollout parks it in this process) is not sent out."""

    class Local:
        engine = "the engine"

        async def run(self, task: Any, **kwargs: Any) -> str:
            return f"local {kwargs['engine']}"

    class NoWorkers(ProcessWorkers):
        async def run(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("sent to a worker")

    rollouts = WorkerRollouts(Local(), NoWorkers(factory=dict, count=1))
    assert rollouts.engine == "the engine"
    assert await rollouts.run("task", engine="parking") == "local parking"


def test_config_keys_are_checked() -> None:
    base = {"environments": {"e": {}}}
    assert parse_config(base).rollout_workers == 0
    assert parse_config({**base, "rollout_workers": 4}).rollout_workers == 4
    with pytest.raises(ConfigError, match="rollout_workers: must be 0"):
        parse_config({**base, "rollout_workers": -1})
    with pytest.raises(ConfigError, match="rollout_worker_backend: must be one of auto, process, ray"):
        parse_config({**base, "rollout_worker_backend": "threads"})
    with pytest.raises(RuntimeError, match="Ray is not initialised"):
        make_workers(dict, 1, "ray")
    assert isinstance(make_workers(dict, 1, "auto"), ProcessWorkers)  # auto picks processes


class FaultyRunner:
    """A runner (made in the worker) that fails in the two ways a worker can: it raises, or its result
    cannot travel back over the pipe."""

    async def run(self, task: TaskRef, *, sampling_params: Any, routing_key: Any, evaluation: bool) -> Any:
        if task.index == 0:
            raise ValueError("the runner broke")
        return lambda: "not picklable"


async def test_a_runner_that_fails_aborts_its_episode_naming_the_cause() -> None:
    workers = ProcessWorkers(factory=FaultyRunner, count=1)
    try:
        raised, unsendable = await asyncio.gather(
            *(
                workers.run(TaskRef("e", "train", index=i), sampling_params=None, routing_key=None, evaluation=False)
                for i in (0, 1)
            )
        )
    finally:
        await workers.aclose()
    assert raised.stop_reason is StopReason.ABORTED and raised.reward is None
    assert "could not run the episode: ValueError: the runner broke" in raised.stop_detail
    assert unsendable.stop_reason is StopReason.ABORTED and "could not be sent back" in unsendable.stop_detail
    assert workers.pids() == [None]

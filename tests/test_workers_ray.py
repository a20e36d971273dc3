"""Episodes in Ray actors (`rollout_worker_backend: ray`), on a real local Ray instance
(`ray.init`, 2 CPUs): the Slime hook gives the same samples as in process, an actor killed with
episodes in flight turns them into ABORTED samples and a fresh actor runs the next episode, and a
runner that raises aborts its episode naming the cause. Ray is a test dependency (the `test`
extra), not a dependency of the library; where it is missing the file fails at collection. Other real parts
as in tests/test_workers.py."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest
import ray  # the `test` extra installs it: a missing Ray fails collection here, never skips the file

from doubles import slime_double
from openreward_rl.backends._sample import state as _state
from openreward_rl.env.tasks import TaskRef
from openreward_rl.loop.trajectory import StopReason
from openreward_rl.loop.workers import RayWorkers, WorkerRollouts
from openreward_rl.testing import ScriptedCompletion
from test_backend_slime import make_args
from test_workers import (
    GARBLE,
    SUBMIT_OK,
    FaultyRunner,
    comparable,
    episode,
    lose_the_worker_mid_episode,
    sglang,  # noqa: F401
    write_config,
)

pytestmark = pytest.mark.anyio

# Ray's worker processes take their environment from `ray.init`: the config path and the tests'
# directory (for FaultyRunner) are fixed before it; the file is written once the env server runs.
_RAY_CONFIG = Path(tempfile.mkdtemp(prefix="openreward-rl-ray-")) / "config.yaml"


@pytest.fixture(scope="module")
def local_ray() -> Any:
    tests = str(Path(__file__).parent)
    saved = {name: os.environ.get(name) for name in ("OPENREWARD_RL_CONFIG", "PYTHONPATH")}
    os.environ["OPENREWARD_RL_CONFIG"] = str(_RAY_CONFIG)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (tests, saved["PYTHONPATH"]) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


async def test_ray_actor_episodes_give_the_same_samples_as_in_process(
    local_ray, sglang, env_server, tmp_path, monkeypatch
) -> None:
    args = make_args(sglang)
    monkeypatch.setenv("OPENREWARD_RL_CONFIG", str(write_config(tmp_path, env_server.base_url, 0)))
    sglang.push(ScriptedCompletion(text=GARBLE), ScriptedCompletion(text=SUBMIT_OK))
    in_process = await episode(args, sample_index=0)
    monkeypatch.setenv(
        "OPENREWARD_RL_CONFIG", str(write_config(tmp_path, env_server.base_url, 1, "ray", file=_RAY_CONFIG))
    )
    sglang.push(ScriptedCompletion(text=GARBLE), ScriptedCompletion(text=SUBMIT_OK))
    in_actor = await episode(args, sample_index=0)
    slime_double.check_output(in_actor, args)
    rollouts = _state.state_for(args).rollouts
    assert isinstance(rollouts, WorkerRollouts) and isinstance(rollouts.workers, RayWorkers)
    (actor,) = rollouts.workers.actors()
    assert await actor.pid.remote() != os.getpid()
    assert in_process.status is slime_double.Sample.Status.COMPLETED and in_process.reward == 1.0
    assert comparable(in_actor) == comparable(in_process)


async def test_a_ray_actor_that_dies_aborts_its_episodes_and_the_next_one_runs(
    local_ray, sglang, env_server, monkeypatch
) -> None:
    monkeypatch.setenv(
        "OPENREWARD_RL_CONFIG", str(write_config(_RAY_CONFIG.parent, env_server.base_url, 1, "ray", file=_RAY_CONFIG))
    )

    async def kill(workers: Any) -> int:
        (actor,) = workers.actors()
        pid = await actor.pid.remote()
        os.kill(pid, signal.SIGKILL)
        return pid

    workers, pid = await lose_the_worker_mid_episode(make_args(sglang), sglang, kill, "episode actor 0 died")
    (new_actor,) = workers.actors()
    assert await new_actor.pid.remote() != pid


async def test_a_runner_that_fails_in_an_actor_aborts_its_episode_naming_the_cause(local_ray) -> None:
    workers = RayWorkers(factory=FaultyRunner, count=1)
    try:
        raised = await workers.run(
            TaskRef("e", "train", index=0), sampling_params=None, routing_key=None, evaluation=False
        )
    finally:
        await workers.aclose()
    assert raised.stop_reason is StopReason.ABORTED and raised.reward is None
    assert "episode actor 0 could not run the episode: ValueError: the runner broke" in raised.stop_detail

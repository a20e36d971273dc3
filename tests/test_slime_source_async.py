"""The Slime hooks under partial rollout and fully-async rollout, through Slime's own code (tests/slime_source.py
says what runs and what stands in): `generate_rollout` with `--partial-rollout` (its `abort()` collects the
groups still in flight into the data buffer, the next step draws them first) and
`slime.rollout.fully_async_rollout` (a worker thread with its own loop keeps groups in flight across steps,
while a weight update's `/pause_generation` aborts what SGLang is running).

Both take one Sample per rollout, so under the default config the Corridor runs uncompacted (at
`--rollout-max-context-len 6144`, which holds a whole walk); a config that names a context policy is
refused through Slime's own calls. Players: tests/slime_source.py `Player`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from openreward_rl.backends._sample.record import EpisodeRecord
from openreward_rl.backends._sample.state import close_states
from openreward_rl.config import ConfigError
from openreward_rl.testing import SGLangTestServer
from slime_source import (  # noqa: F401
    EIGHT_ROOMS,
    SEVEN_ROOMS,
    SIX_ROOMS,
    UNCOMPACTED,
    Player,
    SlimeCode,
    close_other_loops_states,
    corridor_config,
    corridor_rows,
    corridor_sample,
    finite_data_source,
    serve_sglang,
    slime,
    slime_args,
    start_step,
    train_data,
)
from test_slime_source import NAMED_POLICY, SAMPLING, check_trainable

pytestmark = pytest.mark.timeout(120)  # a step that never ends fails here


@pytest.fixture
def sglang(slime: SlimeCode) -> Iterator[SGLangTestServer]:
    """The SGLang double playing the Corridor: quitters answer 2 s late and a walker's 3rd request (after its first
    room) stays in flight until it is aborted, so a step that ends on quitters finds the walks under way, and a
    weight update finds both walks in a model call."""
    from openreward_rl.assets import load_tokenizer

    yield from serve_sglang(slime, Player(load_tokenizer("offline:qwen3"), quit_latency_s=2.0, hold_at=3))


def record(sample: Any) -> EpisodeRecord:
    return EpisodeRecord.from_metadata(sample.metadata)


def test_partial_rollout_parks_the_long_tail_at_the_steps_abort_and_resumes_it_next_step(
    slime, sglang, corridor_config, tmp_path, env_server
) -> None:
    """Step 0 keeps the first group to finish (two quitters) and aborts the walkers mid-corridor: Slime's `abort()`
    puts their ABORTED samples into the data buffer; step 1 draws them first and the hook resumes each walk
    where it stopped, with its environment session, and it trains."""
    prompts = corridor_rows(tmp_path / "corridor.jsonl", [SIX_ROOMS, EIGHT_ROOMS])
    args = slime_args(sglang, prompts, rollout_batch_size=1, partial_rollout=True, rollout_max_context_len=UNCOMPACTED)
    start_step(slime, args)
    data_source = slime.data_source.RolloutDataSourceWithBuffer(args)

    quitters, _ = train_data(slime, args, data_source, rollout_id=0)
    assert [s.metadata["index"] for s in quitters] == [EIGHT_ROOMS] * 2 and [s.reward for s in quitters] == [0.0, 0.0]
    (parked,) = data_source.buffer
    assert all(
        s.status is slime.Sample.Status.ABORTED and "resume" in s.metadata and not s.metadata.get("placeholder")
        for s in parked
    )
    assert {s.metadata["start_rollout_id"] for s in parked} == {0}
    walks_so_far = [s.response_length for s in parked]

    walkers, data = train_data(slime, args, data_source, rollout_id=1)
    assert [s.index for s in walkers] == [s.index for s in parked]
    assert [[s.index for s in group] for group in data_source.buffer] == [
        [4, 5]
    ]  # step 1's over-sampled group, aborted in turn
    for sample, before in zip(walkers, walks_so_far):
        check_trainable(slime, args, sample)
        assert sample.reward == 1.0 and sample.response_length > before and record(sample).segments == 1
        assert sample.metadata["metrics"]["suspensions"] >= 1.0  # resumed, not restarted
    assert data["raw_reward"] == [1.0, 1.0]


def test_a_sync_steps_abort_is_the_trainers_and_is_not_continued(
    slime, sglang, corridor_config, tmp_path, env_server
) -> None:
    """Without `--partial-rollout` Slime's `abort()` sets `GenerateState.aborted` before it aborts the requests in
    flight: the hook reads that abort as the trainer's, so the held walks end there (no continuation request), and
    Slime drops them; only the quitters train."""
    prompts = corridor_rows(tmp_path / "corridor.jsonl", [SIX_ROOMS, EIGHT_ROOMS])
    args = slime_args(sglang, prompts, rollout_batch_size=1)
    start_step(slime, args)
    data_source = slime.data_source.RolloutDataSourceWithBuffer(args)
    quitters, data = train_data(slime, args, data_source, rollout_id=0)
    assert [s.metadata["index"] for s in quitters] == [EIGHT_ROOMS] * 2 and data["raw_reward"] == [0.0, 0.0]
    assert not data_source.buffer and not sglang.in_flight
    walked = {r.routing_key for r in sglang.requests if "Room 1 of 6" in sglang.tokenizer.decode(r.input_ids)}
    assert len(walked) == 2  # both walks were a room in when the step ended
    assert not any("_p" in (r.rid or "") for r in sglang.requests)  # no turn continued after the trainer's abort


def test_partial_rollout_with_a_named_policy_is_refused_through_slimes_step(
    slime, sglang, corridor_config, tmp_path, env_server
) -> None:
    corridor_config(NAMED_POLICY)
    args = slime_args(
        sglang, corridor_rows(tmp_path / "corridor.jsonl", [SIX_ROOMS]), rollout_batch_size=1, partial_rollout=True
    )
    start_step(slime, args)
    with pytest.raises(
        ConfigError, match=r"--partial-rollout cannot take the fan-out samples a context policy makes \(Corridor\)"
    ):
        slime.rollout.generate_rollout(args, 0, slime.data_source.RolloutDataSourceWithBuffer(args))


async def post(server: SGLangTestServer, path: str) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(server.url + path, json={}) as response:
            assert response.status == 200


def test_fully_async_rollout_trains_walks_cut_by_a_weight_update(
    slime, sglang, corridor_config, tmp_path, env_server
) -> None:
    """Slime's fully-async worker runs the two walks of one prompt; a weight update (`/pause_generation`, SGLang's
    default mode "abort", then `/continue_generation`) cuts the turns in flight, which the hook continues in place
    (the worker never sets `GenerateState.aborted`); the step's rollout function collects the group and the
    manager converts it. Under a named context policy the worker's `generate_and_rm_group` is refused."""
    args = slime_args(
        sglang,
        corridor_rows(tmp_path / "corridor.jsonl", [SIX_ROOMS]),
        rollout_batch_size=1,
        sglang_server_concurrency=2,
        rollout_function_path="slime.rollout.fully_async_rollout.generate_rollout_fully_async",
        rollout_max_context_len=UNCOMPACTED,
    )
    start_step(slime, args)
    data_source = finite_data_source(slime, args, groups=1)  # Slime's worker outlives the test: it then idles
    step: list[Any] = []

    def run_step() -> None:
        try:
            step.append(train_data(slime, args, data_source, rollout_id=0))
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            step.append(error)

    runner = threading.Thread(target=run_step, daemon=True)
    runner.start()
    deadline = time.monotonic() + 60
    while len(sglang.in_flight) < 2:  # both walks a room in, each held in a model call (`Player.hold_at`)
        assert time.monotonic() < deadline and runner.is_alive(), f"the walks never got under way: {step}"
        time.sleep(0.01)
    slime.run(post(sglang, "/pause_generation"))
    sglang.weight_version = "2"
    slime.run(post(sglang, "/continue_generation"))
    runner.join(timeout=90)
    samples, data = step[0]
    assert len(samples) == 2 and data["raw_reward"] == [1.0, 1.0]
    for sample in samples:
        check_trainable(slime, args, sample)
        assert sample.weight_versions[0] == "default" and sample.weight_versions[-1] == "2"
        assert (
            sample.metadata["metrics"]["continuations"] == 1.0
        )  # the cut turn continued in place, in the same session

    corridor_config(NAMED_POLICY)
    close_other_loops_states(slime)  # the worker's hook state, before this loop's call replaces it in the cache
    slime.run(close_states())
    with pytest.raises(
        ConfigError, match=r"fully-async rollout cannot take the fan-out samples a context policy makes \(Corridor\)"
    ):
        slime.run(
            slime.rollout.generate_and_rm_group(
                args, [corridor_sample(slime, 0), corridor_sample(slime, 1)], dict(SAMPLING)
            )
        )

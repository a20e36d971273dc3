"""What a trainer process needs to run episodes, built once per process from the trainer's `args`.

The cache below is this package's one piece of process-wide state. It is keyed by the settings
that shape it (router address, checkpoint, config file) and remembers the event loop it was built
on: SDK and HTTP sessions belong to one loop, so a new loop (a test, a restarted actor) gets a
fresh state instead of a dead connection pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

import openreward_rl._compat as _compat
from openreward_rl.assets import load_tokenizer
from openreward_rl.backends.filters import reads_members_as_samples
from openreward_rl.config import CHECK_MODEL_ENV, ConfigError, TrainConfig, config_path, load_config
from openreward_rl.engines.admission import AdmissionController, SGLangLoads
from openreward_rl.loop.rollout import Rollouts
from openreward_rl.loop.workers import IN_WORKER_ENV, WorkerRollouts, make_workers
from openreward_rl.observe.upload import TrajectoryUploader
from openreward_rl.preflight import check_ready
from openreward_rl.redaction import install_log_redaction

if TYPE_CHECKING:
    from openreward_rl.env.tasks import TaskRef
    from openreward_rl.loop.trajectory import Trajectory

__all__ = [
    "BackendState",
    "HookRunner",
    "admission_controller",
    "trainer_concurrency",
    "state_for",
    "close_states",
    "router_url",
    "spread_over_workers",
    "one_sample_per_rollout",
    "one_sample_rule",
]


def router_url(args: Any) -> str:
    """`http://{sglang_router_ip}:{sglang_router_port}` from the trainer's args."""
    ip, port = getattr(args, "sglang_router_ip", None), getattr(args, "sglang_router_port", None)
    if not ip or not port:
        raise ConfigError(
            "the trainer's args have no sglang_router_ip/sglang_router_port; run the hook inside Slime or Miles (or set both on args)"
        )
    host = f"[{ip}]" if ":" in str(ip) and not str(ip).startswith("[") else ip
    return f"http://{host}:{port}"


def _positive_or_none(args: Any, name: str) -> int | None:
    value = getattr(args, name, None)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 2:
        raise ConfigError(f"--{name.replace('_', '-')} must be an integer of at least 2, got {value!r}")
    return value


@attrs.define(eq=False)
class BackendState:
    """Config, tokenizer, engine, SDK client and the `Rollouts` runner of one trainer process."""

    config: TrainConfig
    tokenizer: Any
    engine: Any
    client: Any
    rollouts: Rollouts
    eval_rollouts: Rollouts
    uploader: TrajectoryUploader
    loop: asyncio.AbstractEventLoop | None = None
    admission: AdmissionController | None = None  # `concurrency: auto`: episodes in flight from the engines' load

    def admitted(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """Where an episode waits for its turn to start: the admission controller's slot, or at once."""
        return self.admission.admitted() if self.admission is not None else contextlib.nullcontext()

    async def aclose(self) -> None:
        # the episode workers, when the config has them, and the episode builder's endpoints (eval_rollouts shares both)
        await self.rollouts.aclose()
        if self.admission is not None:
            await self.admission.aclose()
        await self.engine.aclose()
        await self.client.environments.aclose()

    def rollouts_for(self, evaluation: bool) -> Rollouts:
        return self.eval_rollouts if evaluation else self.rollouts

    @classmethod
    def from_args(cls, args: Any) -> BackendState:
        """Build from Slime/Miles args: `sglang_router_ip/port`, `hf_checkpoint`,
        `rollout_max_context_len`, `eval_max_context_len`, `rollout_max_response_len`."""
        from openreward_rl.engines.sglang import SGLangEngine

        checkpoint = getattr(args, "hf_checkpoint", None)
        if not checkpoint:
            raise ConfigError(
                "the trainer's args have no hf_checkpoint; the hooks load the tokenizer from it (--hf-checkpoint)"
            )
        config, tokenizer, client, uploader = load_process_parts(str(checkpoint))
        if one_sample_per_rollout(args):
            config = config.without_default_compaction()
        engine = SGLangEngine(router_url(args))
        train_context = _positive_or_none(args, "rollout_max_context_len")
        eval_context = _positive_or_none(args, "eval_max_context_len") or train_context
        max_new_tokens = getattr(args, "rollout_max_response_len", None) or 4096
        rollouts = Rollouts.from_config(
            config,
            engine=engine,
            tokenizer=tokenizer,
            client=client,
            model=str(checkpoint),
            max_context_len=train_context,
            max_new_tokens=max_new_tokens,
        )
        # With `rollout_workers: N` episodes run in N worker processes (or Ray actors); see `loop/workers.py`.
        rollouts, eval_rollouts = spread_over_workers(
            config, args, rollouts, attrs.evolve(rollouts, max_context_len=eval_context)
        )
        return cls(
            config=config,
            tokenizer=tokenizer,
            engine=engine,
            client=client,
            rollouts=rollouts,
            eval_rollouts=eval_rollouts,
            uploader=uploader,
            loop=_running_loop(),
            admission=admission_controller(config, args),
        )


def trainer_concurrency(args: Any) -> int | None:
    """Episodes the trainer itself lets run at once: `--sglang-server-concurrency` per engine, times the
    engines (Slime's `--rollout-num-engines`, else `--rollout-num-gpus` over `--rollout-num-gpus-per-engine`);
    None where args do not say."""
    per_engine = getattr(args, "sglang_server_concurrency", None)
    if not isinstance(per_engine, int) or isinstance(per_engine, bool) or per_engine < 1:
        return None
    engines = getattr(args, "rollout_num_engines", None)
    if not isinstance(engines, int) or engines < 1:
        gpus, per = getattr(args, "rollout_num_gpus", None), getattr(args, "rollout_num_gpus_per_engine", None)
        engines = gpus // per if isinstance(gpus, int) and isinstance(per, int) and per > 0 else 1
    return per_engine * max(engines, 1)


def admission_controller(config: TrainConfig, args: Any) -> AdmissionController | None:
    """The hook process's admission controller under `concurrency: auto` (None otherwise, and in an episode
    worker, whose episodes the hook's process already admitted). Its ceiling: the config's, else the
    trainer's own limit (`trainer_concurrency`), else 512 (Slime's default per engine)."""
    settings = config.concurrency
    if not settings.adaptive or os.environ.get(IN_WORKER_ENV):
        return None
    ceiling = settings.ceiling or trainer_concurrency(args) or 512
    return AdmissionController(
        SGLangLoads(router_url(args)),
        floor=min(settings.floor, ceiling),
        ceiling=ceiling,
        interval_s=settings.poll_interval,
    )


def one_sample_per_rollout(args: Any) -> bool:
    """Whether the trainer's rollout driver takes one `Sample` per rollout, never a list: partial rollout
    (both trainers' `abort()`), `--group-rm` (Slime's `generate_and_rm_group` and Miles' `batched_async_rm`
    set `.reward` on each group member) and fully-async rollout (Slime's `generate_rollout_fully_async` and
    Miles' `--fully-async` sort groups by their first sample's `index`, at the pinned commits) and Slime's stock
    dynamic filters (`check_reward_nonzero_std*` call `get_reward_value` on each group member; Miles' flatten
    the group first). There the environments left at the default context policy run without one
    (`one_sample_rule` names the flag)."""
    return one_sample_rule(args) is not None


def one_sample_rule(args: Any) -> str | None:
    """The trainer flag that makes a rollout one `Sample` (see `one_sample_per_rollout`), or None."""
    if getattr(args, "partial_rollout", False):
        return "--partial-rollout"
    if getattr(args, "group_rm", False):
        return "--group-rm"
    if bool(getattr(args, "fully_async", False)) or "fully_async" in str(
        getattr(args, "rollout_function_path", None) or ""
    ):
        return "fully-async rollout"
    dynamic_filter = getattr(args, "dynamic_sampling_filter_path", None)
    if reads_members_as_samples(dynamic_filter):
        return f"--dynamic-sampling-filter-path {dynamic_filter}"
    return None


def load_process_parts(checkpoint: str) -> tuple[TrainConfig, Any, Any, TrajectoryUploader]:
    """What a hook process loads once, whatever the hook: log redaction installed, the config (checked
    ready: an API key for remote environments; its secrets registered for redaction), the checkpoint's
    tokenizer, an SDK client and the config's uploader."""
    from openreward import AsyncOpenReward

    install_log_redaction()
    _compat.install()  # the SDK fixes and process-wide patches, checked against the installed libraries (`openreward_rl._compat`)
    config = load_config()
    if os.environ.get(CHECK_MODEL_ENV) == "0":  # `openreward-rl train --skip-check-model`
        config = attrs.evolve(config, check_model=False)
    check_ready(config)
    tokenizer = load_tokenizer(checkpoint)
    client = AsyncOpenReward()
    return config, tokenizer, client, _uploader(client, config)


def _uploader(client: Any, config: TrainConfig) -> TrajectoryUploader:
    """The config's uploader; off in an episode worker, whose trajectories the hook's process uploads."""
    if os.environ.get(IN_WORKER_ENV):
        return TrajectoryUploader(client, config.run_name(), enabled=False)
    return TrajectoryUploader.from_config(client, config)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _key(args: Any) -> tuple[Any, ...]:
    return (
        os.getpid(),
        getattr(args, "sglang_router_ip", None),
        getattr(args, "sglang_router_port", None),
        getattr(args, "hf_checkpoint", None),
        getattr(args, "rollout_max_context_len", None),
        getattr(args, "eval_max_context_len", None),
        getattr(args, "rollout_max_response_len", None),
        one_sample_per_rollout(args),
        str(config_path().resolve()),
    )


_STATES: dict[tuple[Any, ...], BackendState] = {}


def state_for(args: Any) -> BackendState:
    """The state for these args in this process and event loop, built on first use.

    Building is synchronous (no await), so concurrent first calls on one loop cannot race.
    """
    key = _key(args)
    state = _STATES.get(key)
    loop = _running_loop()
    if (
        state is None
        or (state.loop is not None and state.loop is not loop)
        or (state.loop is not None and state.loop.is_closed())
    ):
        state = BackendState.from_args(args)
        _STATES[key] = state
    return state


async def close_states() -> None:
    """Close the HTTP sessions of every cached state built on the running loop, and forget them all."""
    loop = _running_loop()
    states = list(_STATES.values())
    _STATES.clear()
    for state in states:
        if state.loop is loop:
            await state.aclose()


@attrs.frozen
class HookRunner:
    """The runner of the Slime/Miles hooks in a worker: the same `BackendState` the hook would build
    from `args` (engine, tokenizer, SDK client, config) on the worker's loop."""

    args: Any

    async def run(
        self, task: TaskRef, *, sampling_params: Mapping[str, Any] | None, routing_key: str | None, evaluation: bool
    ) -> Trajectory:
        rollouts = state_for(self.args).rollouts_for(evaluation)
        return await rollouts.run(task, sampling_params=sampling_params, routing_key=routing_key)

    async def aclose(self) -> None:
        await close_states()


def spread_over_workers(config: Any, args: Any, rollouts: Any, eval_rollouts: Any) -> tuple[Any, Any]:
    """The hooks' two runners, sent to `config.rollout_workers` workers when that is set (and this
    process is not itself a worker); unchanged otherwise."""
    count = getattr(config, "rollout_workers", 0)
    if not count or os.environ.get(IN_WORKER_ENV):
        return rollouts, eval_rollouts
    workers = make_workers(
        functools.partial(HookRunner, args), count, getattr(config, "rollout_worker_backend", "auto")
    )
    return WorkerRollouts(rollouts, workers, evaluation=False), WorkerRollouts(eval_rollouts, workers, evaluation=True)

"""Slime's own rollout code (THUDM/slime at the commit `../shared/thirdparty/slime/COMMIT` names) driving the
library's hooks on this machine: `generate_and_rm`, `generate_and_rm_group`, `generate_rollout` with its data
source, `abort`, the eval loop, the dynamic filters, `fully_async_rollout` and `RolloutManager`'s conversion
of a step to train data, all unchanged. `tests/trainer_source.py` finds the package or skips.

Stand-ins, each for something that cannot run on a CPU, and only as large as the code path needs:

- `slime_args`: the `Namespace` of Slime's `parse_args`, which needs SGLang's `ServerArgs` and Megatron's
  parser; it holds the fields Slime's rollout code reads, as `parse_args` fills them for the flags named.
- the SGLang router and server: the library's SGLang double (`openreward_rl.testing.SGLangTestServer`),
  which also answers the router's `GET /workers` and the server's `GET /v1/loads` that Slime's `abort()` reads.
- `train_data`: `RolloutManager` is a Ray actor whose constructor starts SGLang engines; its class's own
  `_get_rollout_data` and `_convert_samples_to_train_data` run on an instance built without that
  constructor. `slime.ray.rollout` imports SGLang at module level for names that path never uses
  (memory-type constants, `ServerArgs`, `kill_process_tree`, the router's args): empty modules stand in
  for them while it is imported, and are removed again.

Everything runs as Slime runs it: every rollout step's coroutine on Slime's one background loop
(`slime.utils.async_utils.run`), the fully-async worker on its own thread and loop. The SGLang double is
served from Slime's loop thread too, so that it answers while a test's thread waits on a step.
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import json
import sys
import types
from argparse import Namespace
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_calls import call
from openreward_rl.assets import offline_tokenizer_dir
from openreward_rl.backends._sample import state as _state
from openreward_rl.backends._sample.state import close_states
from openreward_rl.backends._sample.suspended import reset_store
from openreward_rl.env.tasks import TaskRef, task_row
from openreward_rl.testing import KVCacheModel, ScriptedCompletion, SGLangTestServer
from openreward_rl.testing.sglang_server import RecordedRequest
from test_context_policy import CorridorAgent
from trainer_source import use_trainer_source

__all__ = [
    "SlimeCode",
    "slime_code",
    "slime_args",
    "write_rows",
    "serve_sglang",
    "train_data",
    "HOOKS",
    "Player",
    "slime",
    "sglang",
    "corridor_config",
    "corridor_sample",
    "prompts",
]

HOOKS = {
    "custom_generate_function_path": "openreward_rl.backends.slime.generate",
    "custom_rm_path": "openreward_rl.backends.slime.reward",
}
CHECKPOINT = (
    "qwen3"  # the offline Qwen3 tokenizer folder: Slime loads it with transformers, the hooks with openreward_rl.assets
)
_SGLANG_NAMES = {
    "sglang": {},
    "sglang.srt": {},
    "sglang.srt.constants": {
        "GPU_MEMORY_TYPE_CUDA_GRAPH": "cuda_graph",
        "GPU_MEMORY_TYPE_KV_CACHE": "kv_cache",
        "GPU_MEMORY_TYPE_WEIGHTS": "weights",
    },
    "sglang.srt.server_args": {"ServerArgs": object},
    "sglang.srt.utils": {"kill_process_tree": None},
    "sglang_router": {},
    "sglang_router.launch_router": {"RouterArgs": object},
}


class SlimeCode(types.SimpleNamespace):
    """Slime's modules the tests drive: `rollout` (sglang_rollout), `data_source`, `fully_async`, `filters`
    (dynamic_sampling_filters), `filter_types` (filter_hub.base_types), `types` (utils.types), `eval_config`,
    `async_utils`, `http_utils`, `misc`."""

    def run(self, coroutine: Any) -> Any:
        """`coroutine` on Slime's background loop, as Slime runs a rollout step."""
        return self.async_utils.run(coroutine)

    @property
    def Sample(self) -> Any:  # noqa: N802 - Slime's class
        return self.types.Sample


def slime_code() -> SlimeCode:
    """Slime's rollout modules, imported from its own source (the test is skipped where it is absent)."""
    use_trainer_source("slime")
    names = {
        "rollout": "slime.rollout.sglang_rollout",
        "data_source": "slime.rollout.data_source",
        "fully_async": "slime.rollout.fully_async_rollout",
        "filters": "slime.rollout.filter_hub.dynamic_sampling_filters",
        "filter_types": "slime.rollout.filter_hub.base_types",
        "types": "slime.utils.types",
        "eval_config": "slime.utils.eval_config",
        "async_utils": "slime.utils.async_utils",
        "http_utils": "slime.utils.http_utils",
        "misc": "slime.utils.misc",
    }
    return SlimeCode(**{key: importlib.import_module(name) for key, name in names.items()})


def checkpoint_dir() -> str:
    return str(offline_tokenizer_dir(CHECKPOINT))


def write_rows(path: Path, tasks: list[TaskRef]) -> str:
    """The prompt file `openreward-rl prepare` writes (one `task_row` a line), for Slime's `Dataset`."""
    path.write_text("".join(json.dumps(task_row(task)) + "\n" for task in tasks))
    return str(path)


def slime_args(server: SGLangTestServer, prompt_data: str, **overrides: Any) -> Namespace:
    """What Slime's `parse_args` gives for a run of the hooks (the flags of docs/training.md) on the double,
    two prompts a step, two samples a prompt; `overrides` set other flags (`group_rm=True`, ...)."""
    values: dict[str, Any] = dict(
        **HOOKS,
        hf_checkpoint=checkpoint_dir(),
        sglang_router_ip="127.0.0.1",
        sglang_router_port=server.port,
        rollout_num_engines=1,
        sglang_server_concurrency=16,
        sglang_dp_size=None,
        use_distributed_post=False,
        router_policy=None,
        use_rollout_routing_replay=False,
        sglang_enable_deterministic_inference=False,
        rollout_max_context_len=2048,
        eval_max_context_len=None,
        rollout_max_response_len=256,
        eval_max_response_len=None,
        rollout_temperature=1.0,
        rollout_top_p=1.0,
        rollout_top_k=-1,
        rollout_stop=None,
        rollout_stop_token_ids=None,
        rollout_skip_special_tokens=False,
        rollout_seed=42,
        rollout_shuffle=False,
        rollout_global_dataset=True,
        prompt_data=prompt_data,
        input_key="prompt",
        label_key="label",
        metadata_key="metadata",
        tool_key=None,
        multimodal_keys=None,
        apply_chat_template=False,
        apply_chat_template_kwargs=None,
        rollout_max_prompt_len=None,
        dump_details=None,
        buffer_filter_path=None,
        save=None,
        load=None,
        rollout_function_path="slime.rollout.sglang_rollout.generate_rollout",
        rollout_batch_size=2,
        n_samples_per_prompt=2,
        over_sampling_batch_size=2,
        dynamic_sampling_filter_path=None,
        rollout_sample_filter_path=None,
        rollout_all_samples_process_path=None,
        rollout_sample_hook_path=None,
        partial_rollout=False,
        mask_offpolicy_in_partial_rollout=False,
        group_rm=False,
        ci_test=False,
        reward_key=None,
        eval_reward_key=None,
        eval_datasets=[],
        eval_max_prompt_len=None,
        eval_min_new_tokens=None,
        eval_input_key=None,
        eval_label_key=None,
        eval_tool_key=None,
        eval_metadata_key=None,
        n_samples_per_eval_prompt=1,
        eval_temperature=None,
        eval_top_p=None,
        eval_top_k=None,
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        load_debug_rollout_data=None,
        custom_reward_post_process_path=None,
        custom_convert_samples_to_train_data_path=None,
    )
    values.update(overrides)
    return Namespace(**values)


def serve_sglang(slime: SlimeCode, script: Any, kv_cache: KVCacheModel | None = None) -> Iterator[SGLangTestServer]:
    """The SGLang double (the real Qwen3 tokenizer) on Slime's loop thread, for a fixture to yield; at the end
    Slime's generate state is cleared and the hooks' process state (suspended episodes, backend states) closed,
    as a new trainer process starts clean. `kv_cache`: the double plays that KV-cache pool and SGLang's scheduler."""
    from openreward_rl.assets import load_tokenizer

    server = SGLangTestServer(load_tokenizer("offline:qwen3"), script=script, kv_cache=kv_cache)
    slime.run(server.start())
    slime.rollout.GenerateState.clear_instances()
    try:
        yield server
    finally:
        slime.rollout.GenerateState.clear_instances()
        store = reset_store()  # episodes a partial-rollout step left suspended, with their environment sessions
        if store is not None:
            slime.run(store.aclose())
        close_other_loops_states(slime)
        slime.run(close_states())
        slime.run(server.close())


def close_other_loops_states(slime: SlimeCode) -> None:
    """Close the hooks' states built on loops other than Slime's main one that still run: the fully-async
    worker's (Slime keeps that worker, and its loop, for the life of the process)."""
    main = slime.async_utils.get_async_loop().loop
    for state in list(_state._STATES.values()):
        if state.loop is not None and state.loop is not main and state.loop.is_running():
            asyncio.run_coroutine_threadsafe(state.aclose(), state.loop).result(timeout=30)


def start_step(slime: SlimeCode, args: Namespace) -> None:
    """What `RolloutManager.__init__` does before a step that the rollout code relies on: Slime's HTTP client."""
    slime.http_utils.init_http_client(args)


def _rollout_manager_class() -> Any:
    missing = [name for name in _SGLANG_NAMES if name not in sys.modules]
    for name in missing:
        module = types.ModuleType(name)
        for key, value in _SGLANG_NAMES[name].items():
            setattr(module, key, value)
        sys.modules[name] = module
    try:
        manager = importlib.import_module("slime.ray.rollout").RolloutManager
    finally:
        for name in missing:
            sys.modules.pop(name, None)
    return manager.__ray_actor_class__  # `@ray.remote` keeps the class it wraps there


def train_data(
    slime: SlimeCode, args: Namespace, data_source: Any, rollout_id: int, metrics: dict[str, Any] | None = None
) -> tuple[list[Any], dict[str, Any]]:
    """One training step's rollout as `RolloutManager.generate` makes it: the rollout function's groups
    (`_get_rollout_data`: called, checked for fan-out `rollout_id`s, flattened) and the train data
    (`_convert_samples_to_train_data`); returns (the flattened samples, the train data). `metrics` gets the
    rollout function's metrics (the dynamic filter's drop counts)."""
    manager = object.__new__(_rollout_manager_class())
    manager.args = args
    manager.data_source = data_source
    manager.generate_rollout = slime.misc.load_function(args.rollout_function_path)
    for name in ("custom_reward_post_process", "custom_convert_samples_to_train_data"):  # as its constructor loads them
        path = getattr(args, f"{name}_path", None)
        setattr(manager, f"{name}_func", slime.misc.load_function(path) if path is not None else None)
    samples, step_metrics = manager._get_rollout_data(rollout_id)
    if metrics is not None:
        metrics.update(step_metrics or {})
    return samples, manager._convert_samples_to_train_data(samples)


def finite_data_source(slime: SlimeCode, args: Namespace, groups: int) -> Any:
    """Slime's `RolloutDataSourceWithBuffer` that hands out `groups` fresh prompt groups in all (its buffer as
    always): Slime's fully-async worker lives as long as the process and keeps drawing prompts; this one then
    runs dry and the worker idles once a test has what it needs."""

    class Finite(slime.data_source.RolloutDataSourceWithBuffer):
        fresh = groups

        def get_samples(self, num_samples: int) -> list[list[Any]]:
            take = min(num_samples, len(self.buffer) + self.fresh)
            self.fresh -= max(0, take - len(self.buffer))
            return super().get_samples(take) if take else []

    return Finite(args)


class Player(CorridorAgent):
    """The Corridor agent of tests/test_context_policy.py (it walks, carries the key in its own words and in
    its summaries, and leaves with it: reward 1.0) with a role per episode, told apart by routing key (Slime's
    `session_id`): in a corridor of 7 rooms every second episode to start quits at once with a wrong key
    (reward 0.0, one turn), in one of 8 rooms every episode does. So a group of a 7-room task is informative,
    of a 6- or 8-room task not. For a test whose step must end while walks are in flight: a quitter answers
    `quit_latency_s` late, and a walker's request number `hold_at` stays in flight until it is aborted."""

    def __init__(self, tokenizer: Any, *, quit_latency_s: float = 0.0, hold_at: int | None = None) -> None:
        super().__init__(tokenizer)
        self.quit_latency_s, self.hold_at = quit_latency_s, hold_at
        self.requests: collections.Counter[str] = collections.Counter()  # routing key -> requests so far
        self.roles: dict[str, bool] = {}  # routing key -> quits
        self.seven_room_episodes = 0

    def quits(self, request: RecordedRequest) -> bool:
        key = request.routing_key or request.rid or ""
        if key not in self.roles:
            prompt = self.tokenizer.decode(request.input_ids)
            seven = "corridor of 7 rooms" in prompt
            self.roles[key] = "corridor of 8 rooms" in prompt or (seven and self.seven_room_episodes % 2 == 1)
            self.seven_room_episodes += seven
        return self.roles[key]

    def __call__(self, request: RecordedRequest) -> ScriptedCompletion:
        if self.quits(request):
            return ScriptedCompletion(text=call("leave", key="none-0000"), latency_s=self.quit_latency_s)
        self.requests[request.routing_key or ""] += 1
        if self.requests[request.routing_key or ""] == self.hold_at:
            return ScriptedCompletion(ids=(), hold=True)
        return super().__call__(request)


# Corridor train tasks: 6 + index % 3 rooms (examples/environments/corridor.py)
SIX_ROOMS, SEVEN_ROOMS, EIGHT_ROOMS = 0, 1, 2
UNCOMPACTED = (
    6144  # --rollout-max-context-len that holds a whole walk (about 520 tokens a room); 2048 (slime_args) does not
)


@pytest.fixture(scope="module")
def slime() -> SlimeCode:
    return slime_code()


@pytest.fixture
def sglang(slime: SlimeCode) -> Iterator[SGLangTestServer]:
    """The SGLang double playing the Corridor (`Player`)."""
    from openreward_rl.assets import load_tokenizer

    yield from serve_sglang(slime, Player(load_tokenizer("offline:qwen3")))


@pytest.fixture
def corridor_config(served_config) -> Callable[..., Path]:
    """The default config for the Corridor, written: no context_policy. `corridor_config(policy)` names one."""

    def write(policy: Any = None) -> Path:
        return served_config({"Corridor": {"max_turns": 20, **({} if policy is None else {"context_policy": policy})}})

    write()
    return write


def corridor_rows(path: Path, tasks: list[int]) -> str:
    return write_rows(path, [TaskRef("Corridor", "train", index=i) for i in tasks])


@pytest.fixture
def prompts(tmp_path, env_server) -> str:
    """The Corridor's train tasks 1, 2, 0 (7, 8 and 6 rooms) as `openreward-rl prepare` writes them."""
    return corridor_rows(tmp_path / "corridor.jsonl", [SEVEN_ROOMS, EIGHT_ROOMS, SIX_ROOMS])


def corridor_sample(slime: SlimeCode, index: int, *, task: int = SEVEN_ROOMS) -> Any:
    """A Slime `Sample` of Corridor train task `task` as Slime's data source makes it from the row."""
    row = task_row(TaskRef("Corridor", "train", index=task))
    return slime.Sample(
        prompt=row["prompt"], label=row["label"], metadata=row["metadata"], index=index, group_index=index // 2
    )

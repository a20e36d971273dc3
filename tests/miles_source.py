"""Miles' own rollout code (radixark/miles at 31f1ca9, from `tests/trainer_source.py`) made importable on a CPU,
and the few stand-ins it needs for what cannot run here.

`load_miles()` puts Miles on `sys.path` (or skips the calling test with the reason) and imports the modules the
tests drive: the legacy rollout (`miles.rollout.sglang_rollout`), the class-based one
(`miles.rollout.inference_rollout`), fully-async rollout, the RM hub, the agentic generate, the data source and the
train-data conversion. Stand-ins, each only what Miles' import or call needs:

- `sglang` (the inference server's package, GPU-only, not installable here): the names Miles imports at module
  level, `ChatCompletionRequest` (Miles reads only its `model_fields`, to filter request keys; the fields here are
  SGLang 0.5.23's sampling fields of the chat request), `Tool`, and the dumper's names (used only when
  `--dumper-*` flags are set);
- `sglang_router` (the Rust router's package): `__version__`, which Miles reads to pick the router's worker-list
  endpoint;
- `setproctitle` (a C extension that only renames the session server's process);
- `RouterStandIn`: the SGLang router in front of the library's SGLang double: `GET /workers` (what Miles' abort
  asks for) and every other request forwarded to the worker, headers included.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import aiohttp
import pydantic
from aiohttp import web

from trainer_source import use_trainer_source

__all__ = ["load_miles", "miles_args", "RouterStandIn", "write_rows"]

SGLANG_ROUTER_VERSION = "0.3.2"  # newer than 0.2.1: Miles asks `GET /workers`

# SGLang 0.5.23's ChatCompletionRequest fields that build_chat_request_kwargs may let through.
_CHAT_REQUEST_FIELDS = (
    "model",
    "messages",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "stop",
    "stop_token_ids",
    "seed",
    "n",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "skip_special_tokens",
    "no_stop_trim",
    "spaces_between_special_tokens",
    "ignore_eos",
    "logprobs",
    "top_logprobs",
    "tools",
    "tool_choice",
    "continue_final_message",
    "separate_reasoning",
    "stream_reasoning",
    "chat_template_kwargs",
    "return_hidden_states",
)

MODULES = {
    "types": "miles.utils.types",
    "base_types": "miles.rollout.base_types",
    "legacy": "miles.rollout.sglang_rollout",
    "common": "miles.rollout.inference_rollout.inference_rollout_common",
    "train": "miles.rollout.inference_rollout.inference_rollout_train",
    "compatibility": "miles.rollout.inference_rollout.compatibility",
    "fully_async": "miles.rollout.fully_async_rollout",
    "rm_hub": "miles.rollout.rm_hub",
    "filters": "miles.rollout.filter_hub.base_types",
    "data_source": "miles.rollout.data_source",
    "agentic": "miles.rollout.generate_hub.agentic_tool_call",
    "train_data": "miles.ray.rollout.train_data_conversion",
    "rollout_data": "miles.ray.rollout.rollout_data_conversion",
    "async_utils": "miles.utils.async_utils",
    "http_utils": "miles.utils.http_utils",
}


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # a package: its submodules are stand-ins too
    module.__dict__.update(attributes)
    return module


class _DumperConfig:
    """SGLang's dumper settings: Miles reads `--dumper-<phase>` "key=value" pairs through this to see the dumper is off."""

    @staticmethod
    def _kv_pairs_to_dict(pairs: list[str] | None) -> dict[str, str]:
        return dict(pair.split("=", 1) for pair in pairs or [])


def _stand_in(name: str, **attributes: Any) -> None:
    """`name` in `sys.modules` with `attributes`: a new package module, or names added to one already there (another
    test module's stand-in for the same package), never replacing what is set."""
    module = sys.modules.get(name)
    if module is None:
        module = sys.modules[name] = _module(name)
        parent, _, leaf = name.rpartition(".")
        if parent:
            _stand_in(parent, **{leaf: module})
    for key, value in attributes.items():
        if not hasattr(module, key):
            setattr(module, key, value)


def _installed(name: str) -> bool:
    """Whether the real package `name` is importable (a stand-in registered before does not count)."""
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__file__", None) is not None
    return importlib.util.find_spec(name) is not None


def _install_standins() -> None:
    """Register the stand-ins under their real names, each only where the real package is not installed."""
    if not _installed("sglang"):
        chat_request = pydantic.create_model(
            "ChatCompletionRequest", **{name: (Any, None) for name in _CHAT_REQUEST_FIELDS}
        )
        tool = pydantic.create_model("Tool", type=(str, "function"), function=(dict, {}))
        _stand_in("sglang.srt.entrypoints.openai.protocol", ChatCompletionRequest=chat_request, Tool=tool)
        _stand_in("sglang.srt.entrypoints.openai.encoding_dsv4")
        _stand_in("sglang.srt.debug_utils.dumper", DumperConfig=_DumperConfig, _get_rank=lambda: 0, dumper=None)
    if not _installed("sglang_router"):
        _stand_in("sglang_router", __version__=SGLANG_ROUTER_VERSION)
    if not _installed("setproctitle"):
        _stand_in("setproctitle", setproctitle=lambda title: None)


def load_miles() -> types.SimpleNamespace:
    """Miles' rollout modules by short name (see MODULES); skips the calling test where Miles' source is absent."""
    use_trainer_source("miles")
    _install_standins()
    return types.SimpleNamespace(**{short: importlib.import_module(name) for short, name in MODULES.items()})


def miles_args(
    router_port: int, checkpoint: str, prompt_data: Path | None = None, **overrides: Any
) -> argparse.Namespace:
    """Miles' rollout arguments at their defaults (miles/utils/arguments.py at 31f1ca9) for a CPU run: one rollout
    GPU, the router at 127.0.0.1:`router_port`, the library's hooks, the rows of `prompt_data`."""
    values: dict[str, Any] = dict(
        # the library's hooks and the rows `openreward-rl prepare` writes
        custom_generate_function_path="openreward_rl.backends.miles.generate",
        custom_rm_path="openreward_rl.backends.miles.reward",
        dynamic_sampling_filter_path=None,
        prompt_data=str(prompt_data) if prompt_data else None,
        input_key="prompt",
        label_key=None,
        metadata_key="metadata",
        tool_key=None,
        multimodal_keys=None,
        apply_chat_template=False,
        apply_chat_template_kwargs=None,
        chat_template_path=None,
        hf_checkpoint=checkpoint,
        rollout_global_dataset=True,
        rollout_shuffle=False,
        rollout_seed=42,
        rollout_max_prompt_len=None,
        buffer_filter_path=None,
        dump_details=None,
        data_source_path="miles.rollout.data_source.RolloutDataSourceWithBuffer",
        # the step
        rollout_batch_size=2,
        n_samples_per_prompt=2,
        over_sampling_batch_size=2,
        rollout_submission_granularity=None,
        group_rm=False,
        partial_rollout=False,
        mask_offpolicy_in_partial_rollout=False,
        rollout_sample_filter_path=None,
        rollout_all_samples_process_path=None,
        reward_key=None,
        eval_reward_key=None,
        rm_type=None,
        rm_url=None,
        # sampling
        rollout_temperature=1.0,
        rollout_top_p=1.0,
        rollout_top_k=-1,
        rollout_max_response_len=256,
        rollout_max_context_len=2048,
        rollout_stop=None,
        rollout_stop_token_ids=None,
        rollout_skip_special_tokens=False,
        sglang_enable_deterministic_inference=False,
        # the rollout engines: one, behind the router
        sglang_router_ip="127.0.0.1",
        sglang_router_port=router_port,
        sglang_router_policy=None,
        router_policy=None,
        use_miles_router=False,
        sglang_server_concurrency=16,
        rollout_num_gpus=1,
        rollout_num_gpus_per_engine=1,
        eval_num_gpus=0,
        use_distributed_post=False,
        sglang_dp_size=None,
        ci_test=False,
        use_rollout_routing_replay=False,
        use_rollout_indexer_replay=False,
        use_opd=False,
        multi_lora=False,
        lora_rank=0,
        recompute_rollout_logprobs_via_prefill=False,
        custom_agent_function_path=None,
        dumper_enable=False,
        dumper_inference=[],
        dumper_fwd_only=[],
        dumper_fwd_bwd=[],
        # fully-async rollout
        fully_async=False,
        async_unused_samples_handler="drop",
        async_max_concurrent_samples=None,
        custom_async_data_buffer_path=None,
        max_weight_staleness=None,
        async_data_buffer_capacity_factor=2.0,
        # train-data conversion (GRPO)
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        custom_reward_post_process_path=None,
        custom_convert_samples_to_train_data_path=None,
        disable_rollout_trim_samples=True,
        balance_data=False,
        use_dynamic_global_batch_size=False,
        eval_datasets=[],
    )
    values.update(overrides)
    return argparse.Namespace(**values)


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    """`rows` (as `openreward-rl prepare` writes them) as the JSONL file Miles' data source reads."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


class RouterStandIn:
    """The SGLang router (Rust, launched by Miles on the rollout node) in front of one worker: `GET /workers`
    lists it, and every other request is forwarded to it with its headers (the routing key among them)."""

    def __init__(self, worker_url: str) -> None:
        self.worker_url = worker_url
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> RouterStandIn:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_get("/workers", self._workers)
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._http = aiohttp.ClientSession()
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._runner is not None and self._http is not None
        await self._runner.cleanup()
        await self._http.close()

    async def _workers(self, request: web.Request) -> web.Response:
        return web.json_response({"workers": [{"url": self.worker_url}]})

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._http is not None
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length", "transfer-encoding")
        }
        async with self._http.request(
            request.method,
            f"{self.worker_url}/{request.match_info['path']}",
            data=await request.read(),
            headers=headers,
        ) as answer:
            return web.Response(status=answer.status, body=await answer.read(), content_type=answer.content_type)

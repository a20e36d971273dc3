"""`WaveEngine`: an in-process model sampled in waves, each a left-padded batch of every request waiting.

What TRL's own generation does for a step (`model.generate` over the left-padded prompts), made
an `Engine`: requests from concurrent episodes gather while the model is busy; when it is free they
run together as one wave (a prefill of the padded prompts, then one forward per token), each row
stopping at its own stop ids and `max_new_tokens`. As in `model.generate`, a finished row rides
along (its draws are not kept) until the wave's last row finishes. On CUDA the decode step is a CUDA
graph captured once a wave and replayed per token (`decode`, engines/_decode.py).
One thread runs the waves; a finished wave resolves all of its callers' futures in one event-loop
callback, so the episodes it wakes send their next requests back to back.

**When a wave starts.** As soon as the model is free and requests are waiting, after a short gather:
the wave starts when every episode that declared itself (`episode()`) is waiting on the model, or
when `max_rows` are waiting, or when no new request came for a while: `gather_s`, or, while declared
episodes are still missing, half the last wave's time (0.25 s before the first wave; leaving a straggler out costs it a whole wave
of its own; waiting for it costs the others part of one). A trainer's step declares its episodes, so
a step's turns run in lockstep waves as TRL's run; an episode slow in a tool call holds a wave back
at most that long past the last arrival.

**What comes back** is what the model sampled, as `TransformersEngine` returns it: the ids (the eos or
stop id included), the log-prob of each under the distribution it was drawn from (`sampling.draw`),
`stop` when the last id is a stop id and `length` when `max_new_tokens` ran out; `meta["wave_rows"]`
says how many requests the wave held. The sampler is fixed
per engine (`SamplingConfig`); `max_new_tokens` and `stop_token_ids` are per request.

Against continuous batching (`TransformersEngine`): a wave does not take new rows while it decodes,
so a request that arrives mid-wave waits for the wave's end; in return each decode step is one plain
forward over a dense batch (a graph replay on CUDA), which on a GPU runs several times faster than
transformers' continuous batching and than `model.generate` for small models (docs/benchmarks.md).

>>> import asyncio, torch
>>> from transformers import Qwen3Config, Qwen3ForCausalLM
>>> from openreward_rl.assets import load_tokenizer
>>> from openreward_rl.engines import GenerationRequest
>>> tokenizer = load_tokenizer("offline:qwen3")
>>> _ = torch.manual_seed(0)
>>> model = Qwen3ForCausalLM(Qwen3Config(vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
...     num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512)).eval()
>>> async def demo():
...     engine = WaveEngine(model, tokenizer, sampling=SamplingConfig(temperature=0.0))
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
import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import attrs

from openreward_rl.engines._decode import EagerDecoder, StaticDecoder, forward_keywords
from openreward_rl.engines._handoff import reject_from_thread, resolve_from_thread
from openreward_rl.engines.base import EngineError, FinishReason, Generation, GenerationRequest
from openreward_rl.engines.sampling import SamplingConfig, admit, check_sampling_params, draw, eos_ids
from openreward_rl.errors import ConfigError

__all__ = ["WaveEngine"]

logger = logging.getLogger(__name__)

DECODES = ("auto", "eager", "static")  # `WaveEngine.decode`; see engines/_decode.py
_FIRST_PATIENCE_S = 0.25  # before any wave has run, for declared episodes still missing


@attrs.define(eq=False)
class _Waiting:
    input_ids: list[int]
    max_new_tokens: int
    stop_ids: frozenset[int]
    future: asyncio.Future[Generation]


@attrs.define(eq=False)
class WaveEngine:
    """An `Engine` sampling `model` in this process in waves (see the module docstring). Its thread starts on
    the first `generate`; `aclose()` (or `stop()`) ends it.

    - `sampling`: the engine's one sampler.
    - `default_max_new_tokens`: used when a request gives no `max_new_tokens`.
    - `context_length`: prompt + max_new_tokens limit; defaults to the model's `max_position_embeddings`.
    - `gather_s`: how long a wave waits for one more request once requests are waiting.
    - `max_rows`: the most requests in one wave (None: every one waiting).
    - `decode`: how a wave's forwards run (engines/_decode.py): `auto` replays each wave's decode step as a CUDA
      graph over a static cache where the model is on CUDA and `StaticDecoder.serves` it, else decodes eagerly;
      `eager` always decodes over a growing cache; `static` always over a static cache (graphs on CUDA only).
      A wave whose static decode fails is sampled again eagerly, and the engine decodes eagerly from then on.
    """

    reads_images: ClassVar[bool] = False
    images_refused: ClassVar[str] = (
        "it runs the model on token ids alone, with no image processor and no pixel values for the vision tower"
    )

    model: Any
    tokenizer: Any = None
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    default_max_new_tokens: int = 128
    context_length: int | None = None
    gather_s: float = 0.02
    max_rows: int | None = None
    decode: str = attrs.field(default="auto", validator=attrs.validators.in_(DECODES))
    _eos: tuple[int, ...] = attrs.field(init=False, default=())
    _waiting: list[_Waiting] = attrs.field(init=False, factory=list)
    _episodes: int = attrs.field(init=False, default=0)
    _last_arrival: float = attrs.field(init=False, default=0.0)
    _changed: threading.Condition = attrs.field(init=False, factory=threading.Condition)
    _thread: threading.Thread | None = attrs.field(init=False, default=None)
    _closing: bool = attrs.field(init=False, default=False)
    _failure: str | None = attrs.field(init=False, default=None)
    _keywords: tuple[str, dict[str, Any]] | None = attrs.field(init=False, default=None)
    _serves_static: bool | None = attrs.field(init=False, default=None)
    _static_failure: str | None = attrs.field(init=False, default=None)
    _autocast_dtype: Any = attrs.field(init=False, default=None)  # the forward's autocast dtype, or False: none
    last_wave_s: float = attrs.field(init=False, default=0.0)

    def __attrs_post_init__(self) -> None:
        self._eos = eos_ids(self.model, self.tokenizer)
        if not self._eos:
            raise ConfigError("WaveEngine: neither the tokenizer nor the model config names an eos token id")
        if self.context_length is None:
            self.context_length = getattr(self.model.config.get_text_config(), "max_position_embeddings", None)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos

    def check_sampling_params(self, params: Mapping[str, Any]) -> None:
        """Raise `UnsupportedSamplingError` unless every key can be honoured as given."""
        check_sampling_params(self.sampling, params, "WaveEngine", "a wave samples all of its rows alike")

    @contextlib.contextmanager
    def episode(self) -> Iterator[None]:
        """Declare one episode for as long as it runs: a wave waits for every declared episode to wait on the
        model (within the patience the module docstring gives)."""
        with self._changed:
            self._episodes += 1
        try:
            yield
        finally:
            with self._changed:
                self._episodes -= 1
                self._changed.notify_all()

    async def generate(self, request: GenerationRequest) -> Generation:
        input_ids, max_new_tokens, stop_ids = admit(
            request,
            self.check_sampling_params,
            engine="WaveEngine",
            default_max_new_tokens=self.default_max_new_tokens,
            context_length=self.context_length,
            eos=self._eos,
        )
        waiting = _Waiting(input_ids, max_new_tokens, stop_ids, asyncio.get_running_loop().create_future())
        with self._changed:
            self._check_open()
            self._waiting.append(waiting)
            self._last_arrival = time.monotonic()
            self._changed.notify_all()
        try:
            return await waiting.future
        except asyncio.CancelledError:
            with self._changed:
                if waiting in self._waiting:  # not yet in a wave; one in a wave runs on, its result dropped
                    self._waiting.remove(waiting)
            raise

    def _check_open(self) -> None:
        if self._failure is not None:
            raise EngineError(f"WaveEngine: the sampling thread failed: {self._failure}")
        if self._closing:
            raise EngineError("WaveEngine is closed")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="wave-engine", daemon=True)
            self._thread.start()

    # -- the sampling thread ---------------------------------------------------------------------

    def _next_wave(self) -> list[_Waiting] | None:
        with self._changed:
            while not self._closing:
                if self._waiting:
                    full = self.max_rows is not None and len(self._waiting) >= self.max_rows
                    quiet = time.monotonic() - self._last_arrival
                    patience = self._patience()
                    if full or (self._episodes and len(self._waiting) >= self._episodes) or quiet >= patience:
                        wave = self._waiting[: self.max_rows]
                        del self._waiting[: len(wave)]
                        return wave
                    self._changed.wait(patience - quiet)
                else:
                    self._changed.wait()
            return None

    def _patience(self) -> float:
        """How long after the last arrival a wave waits for more: `gather_s`; while declared episodes are still
        missing, up to half the last wave's time (a straggler left out costs a whole wave of its own)."""
        if self._episodes and len(self._waiting) < self._episodes:
            return max(self.gather_s, self.last_wave_s / 2 if self.last_wave_s else _FIRST_PATIENCE_S)
        return self.gather_s

    def _run(self) -> None:
        import torch

        wave: list[_Waiting] | None = None
        try:
            if (
                self.model.device.type == "cuda"
            ):  # a thread's current GPU is cuda:0 until set; its streams and CUDA graphs go there
                torch.cuda.set_device(self.model.device)
            while (wave := self._next_wave()) is not None:
                started = time.monotonic()
                with torch.no_grad(), self._weights_cast_once():
                    generations = self._sample_wave(wave)
                self.last_wave_s = time.monotonic() - started
                logger.debug(
                    "wave of %d requests: %d tokens in %.3f s",
                    len(wave),
                    sum(len(g.output_ids) for g in generations),
                    self.last_wave_s,
                )
                resolve_from_thread(zip((w.future for w in wave), generations, strict=True))
        except BaseException as error:  # the thread must not die silently: its callers would wait forever
            logger.exception("WaveEngine: the sampling thread failed")
            with self._changed:
                self._failure = f"{type(error).__name__}: {error}"
                stranded, self._waiting = list(self._waiting), []
            reject_from_thread(
                (w.future for w in stranded + (wave or [])),
                EngineError(f"WaveEngine: the sampling thread failed: {self._failure}"),
            )

    def _weights_cast_once(self) -> contextlib.AbstractContextManager[Any]:
        """Around a wave, for a model whose forward runs under autocast (a trainer's mixed precision over float32
        weights): the same autocast, so that autocast's own cast cache, which lives until the outermost autocast
        exits, outlasts each forward. The weights are then cast to the low precision once a wave instead of at every
        forward (a captured decode step reads the cast copies instead of casting all weights per token), at the
        cost of holding those copies while the wave runs; the casts, and so every sampled token, are the same."""
        import torch

        if self._autocast_dtype is None:
            from openreward_rl.engines.transformers import forward_dtype

            self._autocast_dtype = False
            if getattr(self.model, "dtype", None) == torch.float32:
                computes = forward_dtype(self.model)
                self._autocast_dtype = computes if computes != torch.float32 else False
        if self._autocast_dtype is False:
            return contextlib.nullcontext()
        return torch.autocast(self.model.device.type, dtype=self._autocast_dtype)

    def _sample_wave(self, wave: list[_Waiting]) -> list[Generation]:
        import torch

        device = self.model.device
        rows = len(wave)
        width = max(len(w.input_ids) for w in wave)
        ids = torch.full((rows, width), self._eos[0], dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.long)
        stops = torch.full((rows, max(len(w.stop_ids) for w in wave)), -1, dtype=torch.long)
        for row, waiting in enumerate(wave):
            ids[row, width - len(waiting.input_ids) :] = torch.tensor(waiting.input_ids)
            mask[row, width - len(waiting.input_ids) :] = 1
            stops[row, : len(waiting.stop_ids)] = torch.tensor(sorted(waiting.stop_ids))
        limits = torch.tensor([w.max_new_tokens for w in wave])
        ids, mask, stops, limits = (t.to(device) for t in (ids, mask, stops, limits))
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        steps = max(w.max_new_tokens for w in wave)
        decoder = self._decoder(mask, steps)
        try:
            return self._decode(wave, decoder, ids, positions, stops, limits, steps)
        except Exception as error:
            if not isinstance(decoder, StaticDecoder):
                raise
            # a forward that cannot be captured (a host sync, an unsupported op) or a static cache too large for the
            # device: this engine decodes eagerly from now on
            self._static_failure = f"{type(error).__name__}: {error}"
            logger.warning(
                "WaveEngine: the static-cache decode failed (%s); decoding eagerly from now on", self._static_failure
            )
        del decoder  # its cache and graph go before the eager retry (the traceback that held them is gone)
        return self._decode(wave, self._decoder(mask, steps), ids, positions, stops, limits, steps)

    def _decoder(self, mask: Any, steps: int) -> EagerDecoder | StaticDecoder:
        if self._keywords is None:
            self._keywords = forward_keywords(self.model.forward)
        cuda = mask.device.type == "cuda"
        if self._static_failure is None and (
            self.decode == "static" or (self.decode == "auto" and cuda and self._static_serves())
        ):
            return StaticDecoder(self.model, self._keywords, mask, steps, graphs=cuda)
        return EagerDecoder(self.model, self._keywords, mask, steps)

    def _static_serves(self) -> bool:
        if self._serves_static is None:
            self._serves_static = StaticDecoder.serves(self.model)
        return self._serves_static

    def _decode(
        self,
        wave: list[_Waiting],
        decoder: EagerDecoder | StaticDecoder,
        ids: Any,
        positions: Any,
        stops: Any,
        limits: Any,
        steps: int,
    ) -> list[Generation]:
        import torch

        rows = len(wave)
        logits = decoder.prefill(ids, positions)
        alive = torch.ones(rows, dtype=torch.bool, device=ids.device)  # rows still sampling
        sampled: list[tuple[Any, Any, Any]] = []  # per step: (tokens, log-probs, which rows they count for)
        lengths = torch.zeros(rows, dtype=torch.long, device=ids.device)
        position = positions[:, -1:]
        for step in range(steps):
            tokens, logprobs = draw(logits, self.sampling)
            sampled.append((tokens, logprobs, alive))
            lengths += alive.long()
            alive = alive & ~((tokens[:, None] == stops).any(-1) | (lengths >= limits))
            if not bool(alive.any()):
                break
            # finished rows stay in the batch, as in `model.generate`: dropping them changes the batch's shape, and
            # doing so whenever a row finished made a wave 2.5x slower than `generate` on an H100
            position = position + 1
            logits = decoder.step(step, tokens, position)
        return self._generations(wave, sampled)

    def _generations(self, wave: list[_Waiting], sampled: list[tuple[Any, Any, Any]]) -> list[Generation]:
        import torch

        tokens, logprobs, alive = (
            torch.stack(column, dim=1).tolist() for column in zip(*sampled)
        )  # rows x steps, one copy each
        outputs = [
            (
                [t for t, counts in zip(row_tokens, row_alive) if counts],
                [p for p, counts in zip(row_logprobs, row_alive) if counts],
            )
            for row_tokens, row_logprobs, row_alive in zip(tokens, logprobs, alive, strict=True)
        ]
        generations, meta = [], {"wave_rows": len(wave)}
        for waiting, (ids, logprobs) in zip(wave, outputs, strict=True):
            if ids[-1] in waiting.stop_ids:
                generations.append(
                    Generation(tuple(ids), tuple(logprobs), FinishReason.STOP, matched_stop=ids[-1], meta=meta)
                )
            else:
                generations.append(Generation(tuple(ids), tuple(logprobs), FinishReason.LENGTH, meta=meta))
        return generations

    # -- stopping --------------------------------------------------------------------------------

    def suspend(self) -> None:
        """Nothing to hand back between uses: a wave holds no cache after it ends (for the adapter's protocol)."""

    def stop(self) -> None:
        """End the sampling thread after its current wave (blocking); callers still waiting get `EngineError`."""
        with self._changed:
            self._closing = True
            stranded, self._waiting = list(self._waiting), []
            self._changed.notify_all()
            thread, self._thread = self._thread, None
        reject_from_thread((w.future for w in stranded), EngineError("WaveEngine was closed"))
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.stop)

"""The embedded engines' sampler: `SamplingConfig` (one per engine), the request keys they honour, and the
draw itself (`draw`): a token per row and its log-prob under the distribution it was drawn from.

Both embedded engines (`TransformersEngine`, `WaveEngine`) fix temperature, top_p and top_k per engine;
a request may restate them but not change them. `max_new_tokens` and `stop_token_ids` are per request.
Text-only SGLang options (`skip_special_tokens`, `spaces_between_special_tokens`, `no_stop_trim`) are
accepted and have no effect (ids are returned, not text). Anything else is refused.

>>> check_sampling_params(SamplingConfig(temperature=0.7), {"temperature": 0.7, "max_new_tokens": 8}, "E", "why")
>>> try:
...     check_sampling_params(SamplingConfig(), {"temperature": 0.5}, "E", "one sampler per engine")
... except UnsupportedSamplingError as error:
...     print(error)
E samples with temperature=1.0 for every request (one sampler per engine); got temperature=0.5. Create the engine with sampling=SamplingConfig(temperature=0.5)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.engines.base import ContextLengthError, EngineError, GenerationRequest
from openreward_rl.errors import ConfigError

__all__ = ["SamplingConfig", "UnsupportedSamplingError", "admit", "check_sampling_params", "draw", "eos_ids"]

TEXT_ONLY_KEYS = frozenset({"skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim"})
ENGINE_KEYS = ("temperature", "top_p", "top_k")
PER_REQUEST_KEYS = frozenset({"max_new_tokens", "stop_token_ids"})


class UnsupportedSamplingError(ConfigError):
    """A sampling parameter this engine cannot honour (unknown, or per-request where it is per-engine)."""


def _check_temperature(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"temperature must be a finite number >= 0, got {value!r}")


def _check_top_p(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0 < value <= 1:
        raise ConfigError(f"top_p must be in (0, 1], got {value!r}")


def _check_top_k(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if value != -1 and value < 1:
        raise ConfigError(f"top_k must be -1 (whole vocabulary) or >= 1, got {value!r}")


@attrs.frozen
class SamplingConfig:
    """The engine's sampler. `temperature` 0 (below 1e-6) is greedy; `top_k` -1 is the whole vocabulary.

    >>> SamplingConfig(temperature=0).greedy, SamplingConfig().greedy
    (True, False)
    """

    temperature: float = attrs.field(default=1.0, converter=float, validator=_check_temperature)
    top_p: float = attrs.field(default=1.0, converter=float, validator=_check_top_p)
    top_k: int = attrs.field(default=-1, validator=_check_top_k)

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-6

    def matches(self, key: str, value: Any) -> bool:
        if key == "temperature" and self.greedy:
            return float(value) < 1e-6
        return float(value) == float(getattr(self, key))

    def generation_config(self, eos_token_ids: Sequence[int], max_new_tokens: int) -> Any:
        from transformers import GenerationConfig

        if self.greedy:
            return GenerationConfig(do_sample=False, eos_token_id=list(eos_token_ids), max_new_tokens=max_new_tokens)
        return GenerationConfig(
            do_sample=True,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=None if self.top_k == -1 else self.top_k,
            eos_token_id=list(eos_token_ids),
            max_new_tokens=max_new_tokens,
        )


def eos_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    """The end-of-sequence ids the tokenizer, the generation config and the model config name, in that order."""
    ids: list[int] = []
    for source in (
        getattr(tokenizer, "eos_token_id", None),
        getattr(model.generation_config, "eos_token_id", None),
        model.config.eos_token_id,
    ):
        for token in source if isinstance(source, (list, tuple)) else [source]:
            if isinstance(token, int) and token >= 0 and token not in ids:
                ids.append(token)
    return tuple(ids)


def check_sampling_params(sampling: SamplingConfig, params: Mapping[str, Any], engine: str, fixed_because: str) -> None:
    """Raise `UnsupportedSamplingError` unless `engine` (a name for the message), sampling with `sampling` for every
    request (`fixed_because` says why), can honour every key of `params` as given."""
    for key, value in params.items():
        if value is None or key in TEXT_ONLY_KEYS:
            continue
        if key in ENGINE_KEYS:
            if not sampling.matches(key, value):
                raise UnsupportedSamplingError(
                    f"{engine} samples with {key}={getattr(sampling, key)!r} for every request ({fixed_because}); "
                    f"got {key}={value!r}. Create the engine with sampling=SamplingConfig({key}={value!r})"
                )
        elif key == "max_new_tokens":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UnsupportedSamplingError(f"max_new_tokens must be a positive integer, got {value!r}")
        elif key == "stop_token_ids":
            if not isinstance(value, (list, tuple)) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in value
            ):
                raise UnsupportedSamplingError(f"stop_token_ids must be a list of token ids, got {value!r}")
        else:
            supported = ", ".join(sorted({*ENGINE_KEYS, *PER_REQUEST_KEYS}))
            raise UnsupportedSamplingError(
                f"{engine} does not support the sampling parameter {key!r} (supported: {supported}; "
                f"ignored as text-only: {', '.join(sorted(TEXT_ONLY_KEYS))})"
            )


def admit(
    request: GenerationRequest,
    check: Callable[[Mapping[str, Any]], None],
    *,
    engine: str,
    default_max_new_tokens: int,
    context_length: int | None,
    eos: Sequence[int],
) -> tuple[list[int], int, frozenset[int]]:
    """(input ids, max_new_tokens, stop ids: the eos ids and the request's) for an embedded engine's request, after
    `check` (the engine's `check_sampling_params`); `EngineError` for no ids, `ContextLengthError` past the context."""
    params = request.sampling_params
    check(params)
    input_ids = [int(t) for t in request.input_ids]
    if not input_ids:
        raise EngineError(f"{engine}: a request needs at least one input id")
    max_new_tokens = int(params.get("max_new_tokens") or default_max_new_tokens)
    if context_length is not None and len(input_ids) + max_new_tokens > context_length:
        raise ContextLengthError(
            f"{len(input_ids)} prompt tokens + max_new_tokens={max_new_tokens} exceed the model's context length {context_length}"
        )
    return input_ids, max_new_tokens, frozenset(eos) | frozenset(params.get("stop_token_ids") or ())


def draw(logits: Any, sampling: SamplingConfig) -> tuple[Any, Any]:
    """(token ids, their log-probs) for a batch of next-token `logits` (rows x vocabulary), drawn with `sampling`.

    The log-prob is under the distribution the token was drawn from: after temperature, top-k and top-p
    (tokens they remove have probability 0); under the plain model distribution when greedy. Random draws
    use torch's global generator, as `model.generate` does.
    """
    import torch

    logits = logits.float()
    if sampling.greedy:
        tokens = logits.argmax(dim=-1)
        return tokens, torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    if sampling.temperature != 1.0:
        logits = logits / sampling.temperature
    if sampling.top_k != -1 and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        before = torch.softmax(ordered, dim=-1).cumsum(dim=-1) - torch.softmax(ordered, dim=-1)
        # a token stays while the tokens more likely than it hold less than top_p (the most likely always stays)
        removed = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, order, before >= sampling.top_p)
        logits = logits.masked_fill(removed, float("-inf"))
    logprobs = torch.log_softmax(logits, dim=-1)
    tokens = torch.multinomial(logprobs.exp(), num_samples=1).squeeze(-1)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)

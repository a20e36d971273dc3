"""The `Engine` protocol: token ids in; sampled ids, their log-probs and a finish reason out."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from openreward_rl.errors import EngineError
from openreward_rl.parsers.base import ParsedTurn

__all__ = [
    "FinishReason",
    "EncodedIds",
    "GenerationRequest",
    "Generation",
    "Engine",
    "EngineError",
    "ContextLengthError",
    "EngineRequestError",
    "AttachesEpisode",
]


class FinishReason(str, enum.Enum):
    STOP = "stop"  # end-of-turn token, stop token id or stop string
    LENGTH = "length"  # hit max_new_tokens
    ABORT = "abort"  # the server aborted the request (weight update, over-sampling, shutdown)


class EncodedIds(list):
    """Token ids together with their JSON array text (`json_text`), for engines that send ids as JSON.

    `TokenLedger.encoded_context` (openreward_rl.loop.trajectory) builds the text incrementally, so sending an 8k-token context does
    not re-encode every id on every turn. The text describes the list as created: do not mutate it.

    >>> ids = EncodedIds([1, 2, 3], json_text="[1,2,3]")
    >>> ids == [1, 2, 3], ids.json_text
    (True, '[1,2,3]')
    """

    __slots__ = ("json_text",)

    def __init__(self, ids: Sequence[int], *, json_text: str) -> None:
        super().__init__(ids)
        self.json_text = json_text


@attrs.frozen
class GenerationRequest:
    """One model call. Token engines read `input_ids`; chat engines read `messages` and `tools`."""

    input_ids: Sequence[int]  # an `EncodedIds` carries its JSON text for engines that send JSON
    sampling_params: Mapping[str, Any]
    messages: Sequence[Mapping[str, Any]] | None = None
    tools: Sequence[Mapping[str, Any]] | None = None
    request_id: str | None = None
    routing_key: str | None = None
    # a vision-language model's images, as data URLs, in the order of their placeholder runs in
    # `input_ids` (which hold each image's pads expanded, exactly as the model sees them), and the pad's id
    image_data: Sequence[str] = ()
    image_token_id: int | None = None


@attrs.frozen
class Generation:
    """What the model sampled. `logprobs[i]` is the log-prob of `output_ids[i]` under the sampler.

    `token_exact` is False when the engine could not return the sampled ids (a hosted chat API):
    the ids were then re-tokenized from text and the trajectory must not be trained on.
    `parsed` carries tool calls a chat engine already parsed server-side.
    """

    output_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    matched_stop: int | str | None = None
    abort_message: str | None = None
    weight_version: str | None = None
    text: str | None = None
    token_exact: bool = True
    parsed: ParsedTurn | None = None
    meta: Mapping[str, Any] = attrs.field(factory=dict, repr=False)

    def __attrs_post_init__(self) -> None:
        if len(self.logprobs) != len(self.output_ids):
            raise ValueError(f"{len(self.logprobs)} log-probs for {len(self.output_ids)} output ids")


class ContextLengthError(EngineError):
    """The engine refused the request because prompt + max_new_tokens exceed its context length."""


class EngineRequestError(EngineError):
    """The engine rejected the request itself (HTTP 4xx other than context length, e.g. an unknown
    sampling parameter). Retrying the same request cannot succeed; fix the request or the config."""


@runtime_checkable
class Engine(Protocol):
    async def generate(self, request: GenerationRequest) -> Generation: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class AttachesEpisode(Protocol):
    """An engine that follows the episode it samples for (the partial-rollout engines): the episode
    attaches itself as each attempt starts, with its deadline (the engine stops the clock while a
    turn is parked) and a snapshot of the trajectory so far (taken while parked)."""

    def attach_episode(self, deadline: Any, snapshot: Callable[[], Any]) -> None: ...

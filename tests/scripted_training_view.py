"""What a scripted episode's training view must be, computed from what the SGLang double saw.

Every token between two model calls is context (mask 0, log-prob 0.0); a sampled token is trained
(mask 1, the double's `scripted_logprob` at its position) unless its turn's `trained` mask says it is
not (reasoning kept out of the loss: mask 0, log-prob 0.0).
"""

from __future__ import annotations

from collections.abc import Sequence

from openreward_rl.testing.sglang_server import RecordedRequest, scripted_logprob


def expected_mask_and_logprobs(
    requests: Sequence[RecordedRequest],
    sampled: Sequence[Sequence[int]],
    trained: Sequence[Sequence[bool]] | None = None,
) -> tuple[list[int], list[float]]:
    """(loss mask, rollout log-probs) over the response of a run whose turns extend each other."""
    mask: list[int] = []
    logprobs: list[float] = []
    position = len(requests[0].input_ids)
    for i, request in enumerate(requests):
        gap = len(request.input_ids) - position
        mask += [0] * gap
        logprobs += [0.0] * gap
        keep = trained[i] if trained is not None else [True] * len(sampled[i])
        mask += [1 if k else 0 for k in keep]
        logprobs += [
            scripted_logprob(token, len(request.input_ids) + k) if kept else 0.0
            for k, (token, kept) in enumerate(zip(sampled[i], keep))
        ]
        position = len(request.input_ids) + len(sampled[i])
    return mask, logprobs

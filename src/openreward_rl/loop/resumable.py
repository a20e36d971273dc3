"""Resumable episodes: an episode that the trainer aborts is parked, not lost.

Partial rollout (Slime/Miles `--partial-rollout`) aborts every in-flight request at the end of a
rollout step and hands the unfinished samples back to the data buffer; the next step calls the
generate hook again on the same samples. A multi-turn episode holds an environment session, so it
cannot be re-created from the sample: it has to keep running. Here the episode's task stays alive,
parked at its engine call with its session open:

- `ParkingEngine` sits between the episode and the real engine. When a model call comes back
  aborted (or the trainer is aborting before the call is sent), it keeps the tokens sampled so far,
  tells the `LiveEpisode` "suspended", and waits. On resume it continues the same turn from those
  tokens (`input_ids` + partial output, `max_new_tokens` less what was already sampled) and returns
  one merged `Generation` to the episode, which therefore never sees the interruption: finished
  turns are not re-run and tool calls are never executed twice.
- `ContinuingEngine` (and `ParkingEngine`, which extends it) continues in place a call cut by an
  abort the trainer did not order, such as a weight update's `/pause_generation` under fully-async
  rollout: no parking, the same environment session, at most `max_continuations` times per call.
- `LiveEpisode` owns the episode's task and reports each outcome: `Suspended` (a snapshot
  trajectory, ABORTED, with every token produced so far) or `Finished` (the final trajectory).
- Off-policy bookkeeping: each resume records the boundary up to which tokens were sampled in
  earlier rollout steps (`mask_offpolicy` zeroes their loss mask and log-probs, as Slime's
  `--mask-offpolicy-in-partial-rollout` does for a sample's existing response), and `spans` says
  which weight version sampled how many tokens of which request.

Sampling parameters are the episode's own from its first step: a continuation uses the interrupted
request's parameters with the remaining `max_new_tokens`. Known limits: a stop *string* split across
the interruption is not matched (SGLang checks stop strings on the new output only); stop tokens are.
Frequency and presence penalties and `min_new_tokens` likewise count the continuation's own output only.

Example: a turn interrupted after two tokens and resumed gives the uninterrupted turn's ids.

>>> import asyncio
>>> from openreward_rl.engines.base import FinishReason, Generation, GenerationRequest
>>> class Model:  # continues "1 2 3 4" from wherever the context ends, aborting once after two tokens
...     aborted = False
...     async def generate(self, request):
...         done = len(request.input_ids) - 1
...         if not self.aborted:
...             self.aborted = True
...             return Generation((1, 2), (-0.1, -0.2), FinishReason.ABORT, weight_version="1")
...         rest = (1, 2, 3, 4)[done:]
...         return Generation(rest, tuple(-0.1 * (done + i + 1) for i in range(len(rest))), FinishReason.STOP, weight_version="2")
>>> async def demo():
...     engine = ParkingEngine(Model())  # no trainer signal: every abort parks
...     engine.attach_episode(None, lambda: None)
...     call = asyncio.ensure_future(engine.generate(GenerationRequest([0], {"max_new_tokens": 8}, request_id="r_t0")))
...     parked = await engine.next_event()
...     engine.resume(abort_signal=None)
...     merged = await call
...     return parked.partial_ids, merged.output_ids, merged.finish_reason.value, [s["weight_version"] for s in engine.spans]
>>> asyncio.run(demo())
((1, 2), (1, 2, 3, 4), 'stop', ['1', '2'])

The same turn cut by an abort the trainer did not order (its flag reads false) is continued at once:

>>> async def in_place():
...     engine = ContinuingEngine(Model(), abort_signal=lambda: False, max_continuations=2)
...     merged = await engine.generate(GenerationRequest([0], {"max_new_tokens": 8}, request_id="r_t0"))
...     return merged.output_ids, [(s["request"], s["tokens"], s["weight_version"]) for s in engine.spans]
>>> asyncio.run(in_place())
((1, 2, 3, 4), [('r_t0', 2, '1'), ('r_t0_p1', 2, '2')])
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from openreward_rl.engines.base import Engine, FinishReason, Generation, GenerationRequest
from openreward_rl.loop.trajectory import StopReason, TokenSegment, Trajectory

__all__ = [
    "AbortSignal",
    "ContinuingEngine",
    "ParkingEngine",
    "Parked",
    "LiveEpisode",
    "Suspended",
    "Finished",
    "mask_before",
]

AbortSignal = Callable[[], bool]
"""True while the trainer is aborting its rollout step (Slime/Miles `GenerateState.aborted`)."""


def _never() -> bool:
    return False


@attrs.frozen
class Parked:
    """What the engine hands over when it parks: the interrupted request and the tokens of its turn so far."""

    request: GenerationRequest
    partial_ids: tuple[int, ...]
    partial_logprobs: tuple[float, ...]
    reason: str


@attrs.frozen
class Suspended:
    """The episode is parked; `trajectory` is its snapshot (stop reason ABORTED, every token so far)."""

    trajectory: Trajectory


@attrs.frozen
class Finished:
    trajectory: Trajectory


Outcome = Suspended | Finished


@attrs.define(eq=False)
class ContinuingEngine:
    """Wraps the episode's engine; continues in place a model call that an abort the trainer did not order cut short.

    Slime's weight updaters call SGLang's `/pause_generation` in its default mode "abort": every
    request in flight answers at once with finish "abort" and the tokens sampled so far, and SGLang
    holds new requests until `/continue_generation`, after the update. Such a call is continued from
    its tokens (`input_ids` + partial output, `max_new_tokens` less what was sampled), so the rest
    of the turn is sampled by the new weights, in the same environment session, and the episode
    gets one merged `Generation`. Only when `abort_signal` says the trainer is not aborting its
    rollout step; at most `max_continuations` times per model call, after which the call ends
    aborted as before. With no signal (`None`) nothing is continued: the abort may be the trainer's.
    `spans` records every engine call (request id, tokens, weight version), so a turn's tokens say
    which weights sampled which part.
    """

    engine: Engine
    abort_signal: AbortSignal | None = None
    max_continuations: int = 0
    spans: list[dict[str, Any]] = attrs.Factory(list)  # one per engine call: request id, tokens, weight version
    continuations: int = 0  # in-place continuations over the episode

    def attach_episode(self, deadline: Any, snapshot: Callable[[], Trajectory | None]) -> None:
        """Called by the episode as each attempt starts: a fresh attempt has sampled nothing yet."""
        self.spans.clear()

    async def aclose(self) -> None:
        """Nothing to close: the wrapped engine is its owner's (an `Engine`, as the episode sees it)."""

    def _aborting(self) -> bool:
        return (self.abort_signal or _never)()

    def _continues_in_place(self, continued: int) -> bool:
        """An abort the trainer did not order (its signal is readable and false), within the bound."""
        return self.abort_signal is not None and not self._aborting() and continued < self.max_continuations

    async def generate(self, request: GenerationRequest) -> Generation:
        pieces: list[Generation] = []
        current, continued = request, 0
        while True:
            if await self._hold_before_call(request, pieces):
                current = _continuation(request, pieces)
            generation = await self.engine.generate(current)
            self._record(current, generation)
            pieces.append(generation)
            if generation.finish_reason is not FinishReason.ABORT:
                return _merge(pieces)
            if self._continues_in_place(continued):
                continued += 1
                self.continuations += 1
            elif not await self._hold_after_abort(request, pieces, generation):
                return _merge(pieces)  # the turn ends aborted
            current = _continuation(request, pieces)
            if current.sampling_params.get("max_new_tokens") == 0:
                return _merge(pieces, finish=FinishReason.LENGTH)

    async def _hold_before_call(self, request: GenerationRequest, pieces: Sequence[Generation]) -> bool:
        """Wait before sending the next call; True when it waited (the call is then rebuilt from `pieces`)."""
        return False

    async def _hold_after_abort(
        self, request: GenerationRequest, pieces: Sequence[Generation], generation: Generation
    ) -> bool:
        """What a cut call that is not continued in place does instead; False ends the turn aborted."""
        return False

    def _record(self, request: GenerationRequest, generation: Generation) -> None:
        self.spans.append(
            {
                "request": request.request_id,
                "tokens": len(generation.output_ids),
                "weight_version": generation.weight_version,
            }
        )


@attrs.define(eq=False)
class ParkingEngine(ContinuingEngine):
    """Wraps the episode's engine; parks the episode instead of returning an aborted turn.

    `abort_signal` says whether the trainer is aborting: a call is not sent while it is true (the
    episode parks between turns), and an aborted answer parks the episode only while it is true.
    An abort the trainer did not order (e.g. a weight update's `/pause_generation`) is continued in
    place, as `ContinuingEngine` does, at most `max_continuations` times, and then ends the episode
    ABORTED as before. With no signal available (`abort_signal=None`) every aborted answer parks.
    The episode attaches itself (`attach_episode`) so that a snapshot can be taken while parked and
    its own time limit stops while it waits.
    """

    offpolicy_boundary: tuple[int, int] | None = (
        None  # (segment index, context position) sampled before the last resume
    )
    suspensions: int = 0
    parked_seconds: float = 0.0  # time spent parked, all of it inside `generate` calls
    _events: asyncio.Queue[Parked] = attrs.field(init=False, factory=asyncio.Queue)
    _resume: asyncio.Future[None] | None = attrs.field(init=False, default=None)
    _snapshot: Callable[[], Trajectory | None] | None = attrs.field(init=False, default=None)
    _deadline: Any = attrs.field(init=False, default=None)
    _parked: Parked | None = attrs.field(init=False, default=None)

    def attach_episode(self, deadline: Any, snapshot: Callable[[], Trajectory | None]) -> None:
        """Called by the episode as each attempt starts: its `asyncio.timeout` context (or None) and a snapshot callable."""
        super().attach_episode(deadline, snapshot)
        self.offpolicy_boundary = None  # a fresh attempt (after an infrastructure retry) has nothing from older steps
        self._deadline, self._snapshot = deadline, snapshot

    @property
    def parked(self) -> Parked | None:
        return self._parked

    async def _hold_before_call(self, request: GenerationRequest, pieces: Sequence[Generation]) -> bool:
        if self._snapshot is None or not self._aborting():
            return False
        await self._park(request, pieces, "the trainer aborted the rollout step before this call")
        return True

    async def _hold_after_abort(
        self, request: GenerationRequest, pieces: Sequence[Generation], generation: Generation
    ) -> bool:
        """Parks on the trainer's abort (or any abort when there is no signal); past the bound of in-place
        continuations, or with no episode attached, the turn ends aborted, as without partial rollout."""
        if (self.abort_signal is not None and not self._aborting()) or self._snapshot is None:
            return False
        await self._park(request, pieces, generation.abort_message or "aborted")
        return True

    async def _park(self, request: GenerationRequest, pieces: Sequence[Generation], reason: str) -> None:
        ids = tuple(i for p in pieces for i in p.output_ids)
        logprobs = tuple(lp for p in pieces for lp in p.logprobs)
        self._parked = Parked(request, ids, logprobs, reason)
        self._resume = asyncio.get_running_loop().create_future()
        parked_at = time.monotonic()
        self.suspensions += 1
        await self._events.put(self._parked)
        try:
            await self._resume
        finally:
            self._parked, self._resume = None, None
        waited = time.monotonic() - parked_at
        self.parked_seconds += waited
        deadline = self._deadline
        if deadline is not None and deadline.when() is not None:
            deadline.reschedule(deadline.when() + waited)  # time parked does not count against the episode's limit
        snapshot = self._snapshot() if self._snapshot is not None else None
        segment = len(snapshot.segments) - 1 if snapshot is not None and snapshot.segments else 0
        self.offpolicy_boundary = (segment, len(request.input_ids) + len(ids))

    async def next_event(self) -> Parked:
        """The next time the episode parks."""
        return await self._events.get()

    def resume(self, *, abort_signal: AbortSignal | None) -> None:
        """Let the parked episode continue; `abort_signal` is the new rollout step's."""
        if self._resume is None or self._resume.done():
            raise RuntimeError("the episode is not parked")
        self.abort_signal = abort_signal
        self._resume.set_result(None)

    def snapshot(self) -> Trajectory:
        """The parked episode's trajectory: the episode's record plus the partial turn's tokens, ABORTED."""
        parked = self._parked
        if parked is None or self._snapshot is None:
            raise RuntimeError("the episode is not parked")
        trajectory = self._snapshot()
        if trajectory is None:
            raise RuntimeError("the episode has no record yet")
        segments = [
            attrs.evolve(
                s,
                response_ids=list(s.response_ids),
                loss_mask=list(s.loss_mask),
                rollout_logprobs=list(s.rollout_logprobs),
            )
            for s in trajectory.segments
        ]
        if segments and parked.partial_ids:
            last = segments[-1]
            last.response_ids.extend(parked.partial_ids)
            last.loss_mask.extend([1] * len(parked.partial_ids))
            last.rollout_logprobs.extend(parked.partial_logprobs)
        detail = f"suspended by partial rollout ({parked.reason}); {len(parked.partial_ids)} tokens of turn {len(trajectory.turns) + 1} kept"
        return attrs.evolve(
            trajectory, segments=segments, stop_reason=StopReason.ABORTED, stop_detail=detail, reward=None
        )


def _continuation(request: GenerationRequest, pieces: Sequence[Generation]) -> GenerationRequest:
    """The interrupted request continued from the tokens it produced: same params, the remaining budget."""
    produced = [i for p in pieces for i in p.output_ids]
    if not pieces:
        return request
    params = dict(request.sampling_params)
    if params.get("max_new_tokens") is not None:
        params["max_new_tokens"] = max(0, int(params["max_new_tokens"]) - len(produced))
    request_id = None if request.request_id is None else f"{request.request_id}_p{len(pieces)}"
    return attrs.evolve(
        request, input_ids=[*request.input_ids, *produced], sampling_params=params, request_id=request_id
    )


def _merge(pieces: Sequence[Generation], *, finish: FinishReason | None = None) -> Generation:
    """One `Generation` for a turn sampled in pieces; the last piece says how it ended."""
    last = pieces[-1]
    if len(pieces) == 1 and finish is None:
        return last
    texts = [p.text for p in pieces]
    return Generation(
        output_ids=tuple(i for p in pieces for i in p.output_ids),
        logprobs=tuple(lp for p in pieces for lp in p.logprobs),
        finish_reason=finish or last.finish_reason,
        matched_stop=last.matched_stop,
        abort_message=last.abort_message,
        weight_version=last.weight_version,
        text=None if None in texts else "".join(t for t in texts if t is not None),
        token_exact=all(p.token_exact for p in pieces),
        parsed=None,  # parsed again from the whole turn
        meta={
            **last.meta,
            "weight_versions": [p.weight_version for p in pieces],
            "piece_tokens": [len(p.output_ids) for p in pieces],
        },
    )


def mask_before(trajectory: Trajectory, boundary: tuple[int, int]) -> None:
    """Zero the loss mask and log-probs of every response token before `boundary` (segment, context position), in place."""
    segment_index, position = boundary
    for index, segment in enumerate(trajectory.segments[: segment_index + 1]):
        end = (
            len(segment.response_ids)
            if index < segment_index
            else max(0, min(len(segment.response_ids), position - len(segment.prompt_ids)))
        )
        _zero(segment, end)


def _zero(segment: TokenSegment, end: int) -> None:
    segment.loss_mask[:end] = [0] * end
    segment.rollout_logprobs[:end] = [0.0] * end


@attrs.define(eq=False)
class LiveEpisode:
    """An episode task together with its `ParkingEngine`: start it, read its outcomes, resume, close.

    `run` is the episode coroutine (it must use `engine`); the task lives on the loop that starts it.
    """

    engine: ParkingEngine
    task: asyncio.Task[Trajectory]
    loop: asyncio.AbstractEventLoop
    parked_at: float | None = None  # monotonic time of the last suspension

    @classmethod
    def start(cls, engine: ParkingEngine, run: Any) -> LiveEpisode:
        loop = asyncio.get_running_loop()
        return cls(engine=engine, task=loop.create_task(run), loop=loop)

    async def next_outcome(self) -> Outcome:
        """Wait until the episode finishes or parks. Cancelling the wait closes the episode."""
        getter = asyncio.ensure_future(self.engine.next_event())
        try:
            await asyncio.wait({getter, self.task}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            getter.cancel()
            await self.aclose()
            raise
        if getter.done():
            self.parked_at = time.monotonic()
            return Suspended(self.engine.snapshot())
        getter.cancel()
        return Finished(self.task.result())

    async def resume(self, abort_signal: AbortSignal | None) -> Outcome:
        self.engine.resume(abort_signal=abort_signal)
        self.parked_at = None
        return await self.next_outcome()

    async def aclose(self) -> None:
        """Cancel the episode (its session closes as the task unwinds) and wait for it."""
        if not self.task.done():
            self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

"""What an episode produced: per-turn records and the token-exact training view.

Invariants a `Trajectory` keeps (checked by `TokenLedger` as it is built):
- `prompt_ids + response_ids` is exactly the last context the model was given plus what it sampled last;
- `loss_mask[i] == 1` exactly where `response_ids[i]` was sampled by the model (thinking included
  unless the episode masks it), 0 on environment/template tokens;
- `rollout_logprobs[i]` is the sampler's log-prob of `response_ids[i]` where sampled, 0.0 elsewhere.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.engines.base import EncodedIds, FinishReason
from openreward_rl.parsers.base import ParsedTurn, ParseError, ParseErrorKind, ToolCall
from openreward_rl.task import TaskRef

__all__ = [
    "StopReason",
    "ToolResult",
    "Turn",
    "TokenSegment",
    "TokenLedger",
    "Trajectory",
    "Compaction",
    "recorded_task",
    "trained_reward",
]


class StopReason(str, enum.Enum):
    COMPLETED = "completed"  # the environment finished the episode
    NO_TOOL_CALL = "no_tool_call"  # the model answered without a tool call and the policy ends there
    MAX_TURNS = "max_turns"
    CONTEXT_OVERFLOW = "context_overflow"  # the context budget ran out
    TRUNCATED = "truncated"  # a model turn hit its per-call max_new_tokens
    ABORTED = "aborted"  # the engine aborted or failed
    ENV_ERROR = "env_error"  # the environment failed
    TIMEOUT = "timeout"  # the episode ran past its time limit

    @property
    def is_infrastructure_failure(self) -> bool:
        """A fault of the machinery, not the model: never turned into a reward."""
        return self in (StopReason.ABORTED, StopReason.ENV_ERROR, StopReason.TIMEOUT)


def trained_reward(reward: float | None, *, failed: bool) -> float | None:
    """The reward an episode is trained with, given its reward (None: none observed) and whether the
    machinery failed it: None for an infrastructure failure (never a reward), 0.0 for a scored episode
    that observed none (truncated, unanswered: the model's doing), else the reward. The one rule every
    trainer and every report applies (`Trajectory.trained_reward`).

    >>> trained_reward(0.5, failed=False), trained_reward(None, failed=False), trained_reward(0.5, failed=True)
    (0.5, 0.0, None)
    """
    if failed:
        return None
    return 0.0 if reward is None else float(reward)


@attrs.frozen
class ToolResult:
    call: ToolCall
    text: str
    reward: float | None = None
    finished: bool = False
    error: str | None = None  # the environment rejected the call (not_found, input_validation, ...)
    truncated: bool = False  # the text was cut to the tool-output token budget
    seconds: float = 0.0
    metadata: Mapping[str, Any] | None = None  # the environment's `ToolOutput.metadata` (the model does not see it)
    content: tuple[Mapping[str, Any], ...] | None = None  # text and image parts in order, where the model saw images


@attrs.frozen
class Turn:
    """One model turn and what the environment answered."""

    prompt_length: int  # tokens in the context the model sampled this turn from
    sampled_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    parsed: ParsedTurn
    tool_results: tuple[ToolResult, ...] = ()
    rewards: tuple[float, ...] = ()
    model_seconds: float = 0.0
    env_seconds: float = 0.0
    max_new_tokens: int = 0
    weight_version: str | None = None  # the engine's model weights that sampled this turn, where it reports them
    # position in `Trajectory.messages` of the assistant message this turn produced; the environment's
    # reply (tool results, feedback, nudge) follows it up to the next turn's message. None: not recorded
    # (older dumps, Episodes that leave it out), and readers align turns with the last assistant messages.
    message_index: int | None = None
    summary: bool = False  # a summary turn a context policy asked for (no tool ran); trained like any turn


@attrs.frozen
class Compaction:
    """One context boundary a `ContextPolicy` took: `segment` starts there.

    `turn`: model turns before it (summary turn included); `message_index`: where the new context's
    own messages start in `Trajectory.messages` (the messages after it are what the model wrote and
    was told in the new context); `tokens_before`: the context it replaced, the reply that triggered
    it included; `tokens_after`: the new context's rendered prompt.
    """

    kind: str
    segment: int
    turn: int
    message_index: int
    tokens_before: int
    tokens_after: int

    @property
    def tokens_saved(self) -> int:
        return self.tokens_before - self.tokens_after


@attrs.define
class TokenSegment:
    """One contiguous training sequence: a prompt and everything appended after it.

    `images`: the data URLs of the images in it, in the order of their placeholder runs in the ids (a
    vision-language family's, `families.vision`), and `vision` the name of the spec that expanded them."""

    prompt_ids: list[int]
    response_ids: list[int] = attrs.Factory(list)
    loss_mask: list[int] = attrs.Factory(list)
    rollout_logprobs: list[float] = attrs.Factory(list)
    images: list[str] = attrs.Factory(list)
    vision: str | None = None

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    def context(self) -> list[int]:
        return self.prompt_ids + self.response_ids


@attrs.define
class TokenLedger:
    """Builds segments from turns, merging while each turn's prompt extends the sequence exactly.

    A prompt that does not extend the current sequence (a custom loop that re-rendered history)
    closes the segment and starts a new one: a counted prefix break, never a silent rewrite.
    """

    segments: list[TokenSegment]
    prefix_breaks: int = 0
    # JSON text of the current segment's context, one chunk per append (see `encoded_context`).
    _json_segment: TokenSegment | None = attrs.field(default=None, init=False, repr=False, eq=False)
    _json_chunks: list[str] = attrs.field(factory=list, init=False, repr=False, eq=False)
    _json_count: int = attrs.field(default=0, init=False, repr=False, eq=False)

    @classmethod
    def start(cls, prompt_ids: Sequence[int], images: Sequence[str] = (), vision: str | None = None) -> TokenLedger:
        if not prompt_ids:
            raise ValueError("an episode's first prompt must have at least one token")
        return cls(segments=[TokenSegment(prompt_ids=list(prompt_ids), images=list(images), vision=vision)])

    @property
    def current(self) -> TokenSegment:
        return self.segments[-1]

    @property
    def context_length(self) -> int:
        return self.current.length

    def context(self) -> list[int]:
        return self.current.context()

    def encoded_context(self) -> EncodedIds:
        """The current context with its JSON array text; only ids appended since the last call are encoded.

        >>> ledger = TokenLedger.start([1, 2])
        >>> ledger.encoded_context().json_text
        '[1, 2]'
        >>> ledger.append_environment([3])
        >>> ids = ledger.encoded_context()
        >>> ids, ids.json_text
        ([1, 2, 3], '[1, 2, 3]')
        """
        segment = self.current
        ids = EncodedIds(segment.prompt_ids, json_text="")  # one copy of the context, then its text
        ids.extend(segment.response_ids)
        if self._json_segment is not segment or len(ids) < self._json_count:
            self._json_segment, self._json_chunks, self._json_count = segment, [], 0
        if len(ids) > self._json_count:
            self._json_chunks.append(json.dumps(ids[self._json_count :])[1:-1])
            self._json_count = len(ids)
        ids.json_text = "[" + ", ".join(self._json_chunks) + "]"
        return ids

    def append_environment(self, ids: Sequence[int], images: Sequence[str] = ()) -> None:
        """Tokens the model did not sample (tool results, template glue): mask 0, log-prob 0.0; `images`
        are the ones whose placeholders `ids` hold."""
        segment = self.current
        segment.images.extend(images)
        segment.response_ids.extend(ids)
        segment.loss_mask.extend([0] * len(ids))
        segment.rollout_logprobs.extend([0.0] * len(ids))

    def append_sampled(
        self, ids: Sequence[int], logprobs: Sequence[float], trained: Sequence[bool] | None = None
    ) -> None:
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(logprobs)} log-probs for {len(ids)} sampled ids")
        segment = self.current
        segment.response_ids.extend(ids)
        if trained is None:
            segment.loss_mask.extend([1] * len(ids))
            segment.rollout_logprobs.extend(logprobs)
        else:
            segment.loss_mask.extend(int(t) for t in trained)
            segment.rollout_logprobs.extend(lp if t else 0.0 for lp, t in zip(logprobs, trained))

    def compact(self, prompt_ids: Sequence[int], images: Sequence[str] = ()) -> None:
        """Start a new segment on a context a `ContextPolicy` rewrote: a boundary, not a prefix break."""
        if not prompt_ids:
            raise ValueError("a compacted context must have at least one token")
        self.segments.append(TokenSegment(prompt_ids=list(prompt_ids), images=list(images), vision=self.current.vision))

    def add_turn_prompt(self, prompt_ids: Sequence[int]) -> bool:
        """Record the full prompt of the next model call. Returns False on a prefix break."""
        context = self.context()
        if len(prompt_ids) >= len(context) and list(prompt_ids[: len(context)]) == context:
            self.append_environment(prompt_ids[len(context) :])
            return True
        self.prefix_breaks += 1
        self.segments.append(TokenSegment(prompt_ids=list(prompt_ids)))
        return False


def _call_to_dict(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _parsed_to_dict(parsed: ParsedTurn) -> dict[str, Any]:
    return {
        "content": parsed.content,
        "reasoning": parsed.reasoning,
        "tool_calls": [_call_to_dict(c) for c in parsed.tool_calls],
        "errors": [e.to_dict() for e in parsed.errors],
    }


def _parsed_from_dict(data: Mapping[str, Any]) -> ParsedTurn:
    return ParsedTurn(
        content=data["content"],
        reasoning=data.get("reasoning"),
        tool_calls=tuple(ToolCall(c["name"], c["arguments"], c["id"]) for c in data.get("tool_calls", ())),
        errors=tuple(
            ParseError(ParseErrorKind(e["kind"]), e["message"], e.get("raw", ""), e.get("tool_name"), e.get("call_id"))
            for e in data.get("errors", ())
        ),
    )


def recorded_task(task: TaskRef | Mapping[str, Any]) -> TaskRef:
    """`task` as a trajectory records it: without where it ran (`TaskRef.without_deployment`). A `describe()`
    dict, what custom episodes passed before the task was typed, is read as the task it names.

    >>> recorded_task(TaskRef("E", "test", index=2, base_url="http://127.0.0.1:8080")) == recorded_task({"environment": "E", "split": "test", "index": 2})
    True
    """
    if isinstance(task, TaskRef):
        return task.without_deployment()
    if not isinstance(task, Mapping):
        raise TypeError(f"a trajectory's task is a TaskRef, got {type(task).__name__}")
    named = TaskRef.from_description(task)
    if named is None:
        raise ValueError(
            f"a trajectory's task must name a task (an environment, split and index or task_spec): {dict(task)!r}"
        )
    return named


@attrs.define
class Trajectory:
    """One episode's record. Each segment is one context the model sampled in (token-exact on its own);
    there is one unless a `ContextPolicy` compacted the context (`compactions`) or a custom loop broke
    the prefix. `prompt_ids`/`response_ids`/... read the last segment. `segments` is empty when the
    environment failed before the first prompt. `task` names the task it ran, without where it ran
    (`recorded_task`)."""

    task: TaskRef = attrs.field(converter=recorded_task)
    segments: list[TokenSegment]
    turns: list[Turn]
    messages: list[dict[str, Any]]
    step_rewards: list[float]
    reward: float | None
    stop_reason: StopReason
    stop_detail: str = ""
    finished: bool = False  # the environment said the episode is over
    token_exact: bool = True  # False: ids were re-tokenized from text (hosted chat engine); not trainable
    prefix_breaks: int = 0
    metrics: dict[str, float] = attrs.Factory(dict)
    compactions: list[Compaction] = attrs.Factory(list)

    @property
    def prompt_ids(self) -> list[int]:
        return self.segments[-1].prompt_ids if self.segments else []

    @property
    def response_ids(self) -> list[int]:
        return self.segments[-1].response_ids if self.segments else []

    @property
    def loss_mask(self) -> list[int]:
        return self.segments[-1].loss_mask if self.segments else []

    @property
    def rollout_logprobs(self) -> list[float]:
        return self.segments[-1].rollout_logprobs if self.segments else []

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def trainable(self) -> bool:
        return self.token_exact and not self.stop_reason.is_infrastructure_failure

    @property
    def trained_reward(self) -> float | None:
        """The reward the trainer trains: `reward` (the reward policy's reduction, None when none was
        observed) as `trained_reward` counts it; None for an infrastructure failure."""
        return trained_reward(self.reward, failed=self.stop_reason.is_infrastructure_failure)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the dump format read by `Trajectory.from_dict` and `openreward-rl show`)."""
        return {
            "task": self.task.describe(),
            "reward": self.reward,
            "step_rewards": self.step_rewards,
            "stop_reason": self.stop_reason.value,
            "stop_detail": self.stop_detail,
            "finished": self.finished,
            "token_exact": self.token_exact,
            "prefix_breaks": self.prefix_breaks,
            "metrics": self.metrics,
            "messages": self.messages,
            "segments": [attrs.asdict(s) for s in self.segments],
            "compactions": [attrs.asdict(c) for c in self.compactions],
            "turns": [
                {
                    "prompt_length": t.prompt_length,
                    "sampled_ids": list(t.sampled_ids),
                    "logprobs": list(t.logprobs),
                    "finish_reason": t.finish_reason.value,
                    "parsed": _parsed_to_dict(t.parsed),
                    "tool_results": [
                        {
                            "call": _call_to_dict(r.call),
                            "text": r.text,
                            "reward": r.reward,
                            "finished": r.finished,
                            "error": r.error,
                            "truncated": r.truncated,
                            "seconds": r.seconds,
                            "metadata": r.metadata,
                            "content": None if r.content is None else [dict(p) for p in r.content],
                        }
                        for r in t.tool_results
                    ],
                    "rewards": list(t.rewards),
                    "model_seconds": t.model_seconds,
                    "env_seconds": t.env_seconds,
                    "max_new_tokens": t.max_new_tokens,
                    "weight_version": t.weight_version,
                    "message_index": t.message_index,
                    "summary": t.summary,
                }
                for t in self.turns
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trajectory:
        """The trajectory `to_dict` wrote. KeyError, TypeError or ValueError when `data` is not one."""
        turns = []
        for t in data["turns"]:
            results = tuple(
                ToolResult(
                    call=ToolCall(r["call"]["name"], r["call"]["arguments"], r["call"]["id"]),
                    text=r["text"],
                    reward=r["reward"],
                    finished=r["finished"],
                    error=r["error"],
                    truncated=r.get("truncated", False),
                    seconds=r.get("seconds", 0.0),
                    metadata=r.get("metadata"),
                    content=None if r.get("content") is None else tuple(r["content"]),
                )
                for r in t["tool_results"]
            )
            turns.append(
                Turn(
                    prompt_length=t["prompt_length"],
                    sampled_ids=tuple(t["sampled_ids"]),
                    logprobs=tuple(t["logprobs"]),
                    finish_reason=FinishReason(t["finish_reason"]),
                    parsed=_parsed_from_dict(t["parsed"]),
                    tool_results=results,
                    rewards=tuple(t["rewards"]),
                    model_seconds=t["model_seconds"],
                    env_seconds=t["env_seconds"],
                    max_new_tokens=t.get("max_new_tokens", 0),
                    weight_version=t.get("weight_version"),
                    message_index=t.get("message_index"),
                    summary=t.get("summary", False),
                )
            )
        return cls(
            task=data["task"],
            segments=[TokenSegment(**s) for s in data["segments"]],
            turns=turns,
            messages=list(data["messages"]),
            step_rewards=list(data["step_rewards"]),
            reward=data["reward"],
            stop_reason=StopReason(data["stop_reason"]),
            stop_detail=data.get("stop_detail", ""),
            finished=data.get("finished", False),
            token_exact=data.get("token_exact", True),
            prefix_breaks=data.get("prefix_breaks", 0),
            metrics=dict(data.get("metrics", {})),
            compactions=[Compaction(**c) for c in data.get("compactions", ())],
        )

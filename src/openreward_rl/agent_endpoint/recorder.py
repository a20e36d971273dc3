"""`EpisodeRecorder`: one agent episode's model calls, sampled token-in/token-out and recorded token-exact.

Each request's messages are placed against what the episode recorded so far:

- the first request renders its messages (and tools) with the model's chat template: the segment's prompt;
- a request that repeats the recorded conversation, then one of the answers it was given (an assistant
  message as it was returned), then new messages (tool results, a user message) *continues* the segment:
  the chosen answer's sampled ids join the ledger verbatim and only the bridge the template puts after that
  turn is appended (`ChatRenderer.bridge`, as `ToolEpisode` does); sampled history is never re-rendered;
- a request that repeats the recorded conversation and nothing more samples again from the same context;
- anything else (the agent truncated, summarised or edited its history, or changed its tools) opens a new
  segment on the template's render of the messages, a `Compaction` of kind "rewrite", as a context policy's
  boundary does. A wrong token is never recorded: where the history does not extend exactly, a new
  segment starts.

Of several answers (`n` > 1), the one the agent continues is recorded; the others are counted
(`unchosen_samples`), not trained. An answer the agent never continued stays at the end of its segment
when it was the only one.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.agent_endpoint.openai_shape import BadRequest, ChatRequest, Choice, finish_reason, openai_message
from openreward_rl.engines.base import (
    ContextLengthError,
    EncodedIds,
    Engine,
    EngineError,
    EngineRequestError,
    FinishReason,
    Generation,
    GenerationRequest,
)
from openreward_rl.errors import ConfigError
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.vision import images_in
from openreward_rl.loop.episode import EpisodeSettings
from openreward_rl.loop.trajectory import Compaction, StopReason, TokenLedger, ToolResult, Trajectory, Turn
from openreward_rl.parsers.base import ParsedTurn, ToolParser
from openreward_rl.task import TaskRef

__all__ = ["EndpointFault", "EpisodeRecorder", "RecorderSettings"]


class EndpointFault(Exception):
    """The engine failed or aborted the request: the agent gets HTTP 503 and the episode is an infrastructure failure."""


@attrs.frozen
class RecorderSettings:
    """`max_new_tokens`: a request's cap when it sets none; `max_context_len`: the episode's token budget
    (a request's cap is clamped to what is left); `sampling_params`: sent with every request (the
    request's own temperature and top_p replace theirs); `train_thinking`: keep reasoning tokens in the loss;
    `tool_preamble`: where the chat template drops `tools` (SmolLM2's plain ChatML), the preamble that teaches
    the parser's calls follows the agent's system prompt, with one worked call when `tool_call_example`
    (as `ToolEpisode` does)."""

    max_new_tokens: int = 4096
    max_context_len: int | None = None
    sampling_params: Mapping[str, Any] = attrs.field(factory=dict)
    train_thinking: bool = True
    tool_preamble: bool = True
    tool_call_example: bool = False

    @classmethod
    def from_episode(cls, settings: EpisodeSettings) -> RecorderSettings:
        """The limits an environment's `EpisodeSettings` (the config's) set for the model calls."""
        return cls(
            max_new_tokens=settings.max_new_tokens,
            max_context_len=settings.max_context_len,
            sampling_params=dict(settings.sampling_params),
            train_thinking=settings.train_thinking,
            tool_preamble=settings.tool_preamble,
            tool_call_example=settings.tool_call_example,
        )


@attrs.frozen
class _Answer:
    """One sampled answer, not yet continued by the agent."""

    generation: Generation
    parsed: ParsedTurn
    message: dict[str, Any]
    prefill: tuple[int, ...]  # ids put before the sample (tool_choice "required"): in context, not trained
    context_length: int
    budget: int
    model_seconds: float


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return str(content)


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def comparable(message: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a message decides whether it is the one recorded (the fields the API may drop or add aside)."""
    calls = tuple(
        (
            c.get("id"),
            (c.get("function") or {}).get("name"),
            json.dumps(_arguments((c.get("function") or {}).get("arguments")), sort_keys=True),
        )
        for c in message.get("tool_calls") or ()
    )
    images = tuple(images_in([message]))
    return message.get("role"), _text(message.get("content")).strip(), calls, message.get("tool_call_id"), images


@attrs.define(eq=False)
class EpisodeRecorder:
    """One episode's samples (see the module docstring). Requests are served one at a time."""

    key: str
    engine: Engine
    renderer: ChatRenderer
    parser: ToolParser
    settings: RecorderSettings = attrs.field(factory=RecorderSettings)
    ledger: TokenLedger | None = None
    tools: list[dict[str, Any]] = attrs.field(factory=list)
    context: list[dict[str, Any]] = attrs.field(factory=list)  # the current segment's conversation
    # the same as the chat template reads it (the tool preamble in, call arguments as objects): what the engine gets
    template_context: list[dict[str, Any]] = attrs.field(factory=list)
    messages: list[dict[str, Any]] = attrs.field(factory=list)  # every segment's
    turns: list[Turn] = attrs.field(factory=list)
    compactions: list[Compaction] = attrs.field(factory=list)
    step_rewards: list[float] = attrs.field(factory=list)
    token_exact: bool = True
    fault: tuple[StopReason, str] | None = None  # the engine failed a request: the episode is an infrastructure failure
    overflow: str | None = None  # the last request found the context budget spent
    requests: int = 0
    unchosen: int = 0
    closed: bool = False
    _pending: list[_Answer] = attrs.field(factory=list)
    _results: list[ToolResult] = attrs.field(factory=list)  # tool results since the last answer
    _lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    _run_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)

    async def complete(self, request: ChatRequest) -> list[Choice]:
        """Place the request's messages, sample its `n` answers and keep them pending; BadRequest for what
        cannot be honoured, EndpointFault when the engine fails."""
        async with self._lock:
            if self.closed:
                raise BadRequest(f"episode {self.key!r} is over", code="episode_closed")
            self.requests += 1
            self._place(request.messages, request.tools)
            answers = await self._sample(request)
            self.unchosen += len(self._pending)  # answers of the previous request the agent did not continue
            self._pending = answers
            return [
                Choice(
                    a.message,
                    finish_reason(a.generation.finish_reason, a.message),
                    a.context_length + len(a.prefill),
                    len(a.generation.output_ids),
                )
                for a in answers
            ]

    @property
    def last_answer_truncated(self) -> bool:
        """Whether the last answer the program was given hit its token cap (it is then no final answer)."""
        last = self._pending[-1].generation if self._pending else (self.turns[-1] if self.turns else None)
        return last is not None and last.finish_reason is FinishReason.LENGTH

    def record_tool_result(self, result: ToolResult) -> None:
        """A tool call the agent ran on the session: it belongs to the answer it followed."""
        self._results.append(result)
        if result.reward is not None:
            self.step_rewards.append(result.reward)

    # ---------------------------------------------------------------- placing a request

    def _place(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        if self.ledger is None:
            self._open_segment(messages, tools)
            return
        recorded = len(self.context)
        if tools == self.tools and [comparable(m) for m in messages[:recorded]] == [
            comparable(m) for m in self.context
        ]:
            rest = messages[recorded:]
            if not rest:
                return  # the same context again: sample again from it
            answer = self._chosen(rest[0])
            new_messages = rest[1:]
            if answer is not None and new_messages and all(m["role"] != "assistant" for m in new_messages):
                self._continue(answer, new_messages)
                return
        self._keep_lone_answer()
        self._open_segment(messages, tools)

    def _chosen(self, message: Mapping[str, Any]) -> _Answer | None:
        if message.get("role") != "assistant":
            return None
        wanted = comparable(message)
        return next((a for a in self._pending if comparable(a.message) == wanted), None)

    def _continue(self, answer: _Answer, new_messages: list[dict[str, Any]]) -> None:
        assert self.ledger is not None
        self._pending.remove(answer)
        context_ids = self._append_answer(answer)
        self.context.extend(new_messages)
        self.template_context.extend(self._as_template_reads(m) for m in new_messages)
        self.messages.extend(new_messages)
        hand_written = self.renderer.bridge_needs_ids
        bridge = self.renderer.bridge(
            sampled_tail=_sampled_tail(self.renderer, answer.generation),
            assistant_tool_calls=[c.to_openai() for c in answer.parsed.tool_calls],
            new_messages=new_messages,
            tools=self.tools,
            context_ids=context_ids if hand_written else None,
            sampled_ids=answer.generation.output_ids if hand_written else None,
        )
        self.ledger.append_environment(bridge, images_in(new_messages))

    def _append_answer(self, answer: _Answer) -> list[int]:
        """The answer's ids join the ledger and its turn is recorded; returns the context it was sampled from."""
        assert self.ledger is not None
        context_ids = self.ledger.context()[: answer.context_length] + list(answer.prefill)
        generation = answer.generation
        self.ledger.append_environment(answer.prefill)
        trained = None if self.settings.train_thinking else self.renderer.thinking_mask(generation.output_ids)
        self.ledger.append_sampled(generation.output_ids, generation.logprobs, trained)
        self.token_exact &= generation.token_exact
        self.messages.append(answer.message)
        self.context.append(answer.message)
        self.template_context.append(self._as_template_reads(answer.message))
        results, self._results = tuple(self._results), []
        self.turns.append(
            Turn(
                prompt_length=answer.context_length + len(answer.prefill),
                sampled_ids=generation.output_ids,
                logprobs=generation.logprobs,
                finish_reason=generation.finish_reason,
                parsed=answer.parsed,
                tool_results=results,
                rewards=tuple(r.reward for r in results if r.reward is not None),
                model_seconds=answer.model_seconds,
                env_seconds=sum(r.seconds for r in results),
                max_new_tokens=answer.budget,
                weight_version=generation.weight_version,
                message_index=len(self.messages) - 1,
            )
        )
        return context_ids

    def _keep_lone_answer(self) -> None:
        """Where the agent leaves the recorded history, the one answer it was given stays at the end of its segment."""
        if len(self._pending) == 1:
            self._append_answer(self._pending.pop())

    def _open_segment(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        rendered = self._as_rendered(messages, tools)
        prompt = self.renderer.render_prompt(rendered, tools)
        images = images_in(messages)
        if self.ledger is None:
            vision = self.renderer.vision
            self.ledger = TokenLedger.start(prompt, images, vision.name if vision else None)
        else:
            self.compactions.append(
                Compaction(
                    kind="rewrite",
                    segment=len(self.ledger.segments),
                    turn=len(self.turns),
                    message_index=len(self.messages),
                    tokens_before=self.ledger.context_length,
                    tokens_after=len(prompt),
                )
            )
            self.ledger.compact(prompt, images)
        self.tools = list(tools)
        self.context = list(messages)
        self.template_context = rendered
        self.messages.extend(messages)

    def _as_rendered(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages as the template renders them: call arguments as it reads them, and the tool preamble
        after the system prompt where the template drops the tools."""
        rendered = [self._as_template_reads(m) for m in messages]
        settings = self.settings
        preamble = (
            self.renderer.tool_preamble(tools, parser=self.parser, example=settings.tool_call_example)
            if settings.tool_preamble
            else None
        )
        if preamble:
            first = rendered[0]
            if first["role"] in ("system", "developer") and isinstance(first.get("content"), str) and first["content"]:
                rendered[0] = {**first, "content": f"{first['content']}\n\n{preamble}"}
            else:
                rendered.insert(0, {"role": "system", "content": preamble})
        return rendered

    def _as_template_reads(self, message: dict[str, Any]) -> dict[str, Any]:
        return _as_template_reads(message, bool(getattr(self.renderer.family, "string_arguments", False)))

    # ---------------------------------------------------------------- sampling

    def _prefill(self, request: ChatRequest) -> tuple[int, ...]:
        """tool_choice "required": the answer starts with the parser's call opener, put in context before sampling."""
        if request.tool_choice != "required":
            return ()
        opener = getattr(self.parser, "open_tag", None)
        if not isinstance(opener, str) or not opener:
            raise BadRequest(
                f"tool_choice 'required' is not supported with the {getattr(self.parser, 'name', 'configured')} parser (it names no call opener)",
                param="tool_choice",
            )
        return tuple(self.renderer.encode(opener))

    async def _sample(self, request: ChatRequest) -> list[_Answer]:
        assert self.ledger is not None
        prefill = self._prefill(request)
        context_length = self.ledger.context_length
        budget = request.max_tokens or int(
            self.settings.sampling_params.get("max_new_tokens") or self.settings.max_new_tokens
        )
        limit = self.settings.max_context_len
        if limit is not None:
            budget = min(budget, limit - context_length - len(prefill))
            if budget <= 0:
                self.overflow = f"{context_length} context tokens leave no room under max_context_len={limit}"
                raise BadRequest(self.overflow, param="messages", code="context_length_exceeded")
        params: dict[str, Any] = {**self.settings.sampling_params, "max_new_tokens": budget}
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.top_p is not None:
            params["top_p"] = request.top_p
        if request.stop:
            params["stop"] = list(request.stop)
        closers = list(self.renderer.engine_stop_token_ids)
        if closers:
            params["stop_token_ids"] = list(dict.fromkeys([*closers, *(params.get("stop_token_ids") or ())]))
        ids = [*self.ledger.context(), *prefill]
        input_ids = EncodedIds(ids, json_text=json.dumps(ids))
        label = f"{self._run_id}_t{self.requests - 1}"  # as ToolEpisode names its turns
        generate_request = lambda i: GenerationRequest(  # noqa: E731
            input_ids=input_ids,
            sampling_params=params,
            messages=self.template_context,  # what the context ids render, as ToolEpisode gives its context
            tools=request.tools,
            request_id=label if request.n == 1 else f"{label}n{i}",
            routing_key=self.key,
            image_data=tuple(self.ledger.current.images),
            image_token_id=self.renderer.image_token_id if self.ledger.current.images else None,
        )
        started = time.perf_counter()
        try:
            generations = await asyncio.gather(*(self.engine.generate(generate_request(i)) for i in range(request.n)))
        except ContextLengthError as error:
            self.overflow = str(error)
            raise BadRequest(str(error), param="messages", code="context_length_exceeded") from error
        except (EngineRequestError, ConfigError) as error:
            raise BadRequest(f"the engine refused the request: {error}") from error
        except EngineError as error:
            self.fault = (StopReason.ABORTED, f"engine: {error}")
            raise EndpointFault(self.fault[1]) from error
        seconds = time.perf_counter() - started
        aborted = next((g for g in generations if g.finish_reason is FinishReason.ABORT), None)
        if aborted is not None:
            self.fault = (StopReason.ABORTED, aborted.abort_message or "the engine aborted the request")
            raise EndpointFault(self.fault[1])
        self.overflow = None
        answers = []
        for generation in generations:
            parsed = self._parse(generation, request, prefill)
            message = openai_message(parsed)
            answers.append(_Answer(generation, parsed, message, prefill, context_length, budget, seconds))
        return answers

    def _parse(self, generation: Generation, request: ChatRequest, prefill: Sequence[int]) -> ParsedTurn:
        if generation.parsed is not None:
            return generation.parsed
        ids = list(prefill) + list(generation.output_ids)
        if generation.finish_reason is FinishReason.STOP and ids and ids[-1] in self.renderer.end_of_turn_ids:
            ids = ids[:-1]
        text = self.renderer.decode(ids)
        stop = generation.matched_stop
        if isinstance(stop, str) and stop in text:  # the API leaves the stop string out; the ids keep it
            text = text[: text.rfind(stop)]
        if request.tool_choice == "none":
            return ParsedTurn(content=text)
        return self.parser.parse(
            text,
            tools=request.tools,
            generation_prompt=self.renderer.generation_prompt,
            finish_reason=generation.finish_reason.value,
        )

    # ---------------------------------------------------------------- the record

    def close(self) -> None:
        """No request is served after this; a lone answer the agent never continued joins its segment."""
        self.closed = True
        self._keep_lone_answer()
        self.unchosen += len(self._pending)
        self._pending = []
        if self._results and self.turns:  # tool calls after the last answer was recorded: they followed it
            last = self.turns[-1]
            results = (*last.tool_results, *self._results)
            self.turns[-1] = attrs.evolve(
                last, tool_results=results, rewards=tuple(r.reward for r in results if r.reward is not None)
            )
            self._results = []

    def trajectory(
        self, task: TaskRef, *, stop_reason: StopReason, stop_detail: str, finished: bool, seconds: float
    ) -> Trajectory:
        self.close()
        segments = self.ledger.segments if self.ledger else []
        return Trajectory(
            task=task,
            segments=segments,
            turns=self.turns,
            messages=self.messages,
            step_rewards=self.step_rewards,
            reward=None,
            stop_reason=stop_reason,
            stop_detail=stop_detail,
            finished=finished,
            token_exact=self.token_exact,
            prefix_breaks=self.ledger.prefix_breaks if self.ledger else 0,
            metrics=self._metrics(seconds),
            compactions=list(self.compactions),
        )

    def _metrics(self, seconds: float) -> dict[str, float]:
        results = [r for t in self.turns for r in t.tool_results]
        segment = self.ledger.current if self.ledger else None
        return {
            "turns": float(len(self.turns)),
            "tool_calls": float(len(results)),
            "tool_errors": float(sum(1 for r in results if r.error)),
            "requests": float(self.requests),
            "unchosen_samples": float(self.unchosen),
            "prompt_tokens": float(len(segment.prompt_ids) if segment else 0),
            "response_tokens": float(len(segment.response_ids) if segment else 0),
            "sampled_tokens": float(sum(len(t.sampled_ids) for t in self.turns)),
            "model_seconds": sum(t.model_seconds for t in self.turns),
            "env_seconds": sum(r.seconds for r in results),
            "episode_seconds": seconds,
            "num_compactions": float(len(self.compactions)),
            "segments": float(len(self.ledger.segments) if self.ledger else 0),
            "prefix_breaks": 0.0,
        }


def _as_template_reads(message: dict[str, Any], string_arguments: bool) -> dict[str, Any]:
    """The API writes call arguments as JSON text, chat templates read them as objects (DeepSeek's as text); the
    API lets an assistant message with calls leave its content out or null, templates read it as text."""
    if message.get("role") == "assistant" and message.get("content") is None:
        message = {**message, "content": ""}
    calls = message.get("tool_calls")
    if not calls or string_arguments:
        return message
    objects = [
        {**c, "function": {**c["function"], "arguments": _arguments(c["function"].get("arguments"))}} for c in calls
    ]
    return {**message, "tool_calls": objects}


def _sampled_tail(renderer: ChatRenderer, generation: Generation) -> str:
    if isinstance(generation.matched_stop, str):
        return generation.matched_stop
    return renderer.decode(generation.output_ids[-1:]) if generation.output_ids else ""

"""`ToolEpisode`: the default multi-turn tool-use loop, token-in/token-out."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs

from openreward_rl.engines.base import (
    AttachesEpisode,
    ContextLengthError,
    Engine,
    EngineError,
    FinishReason,
    Generation,
    GenerationRequest,
)
from openreward_rl.env.environment import EnvSession, ToolOutcome
from openreward_rl.env.tool_output import clean_tool_text
from openreward_rl.errors import ConfigError, EnvError, ModelFamilyError
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.vision import images_in
from openreward_rl.loop.context import ContextView, Rewrite, Summarize
from openreward_rl.loop.episode import EpisodeSettings, fault_stop, first_system_prompt
from openreward_rl.loop.trajectory import Compaction, StopReason, TokenLedger, ToolResult, Trajectory, Turn
from openreward_rl.parsers.base import ParsedTurn, ToolCall, ToolParser

__all__ = ["ToolEpisode"]

# Uncapped compaction (`max_compactions` None) stops an episode whose next boundary would free less than
# this share of the room its first boundary freed (the compacted context no longer shrinks), or less than
# MIN_FREED_FRACTION of the context budget (what must stay, the prompt and the kept turns, fills it).
STALL_FRACTION = 0.25
MIN_FREED_FRACTION = 0.05


@attrs.define
class _Run:
    """The mutable state of one run; becomes a `Trajectory` however the run ends."""

    session: EnvSession
    messages: list[dict[str, Any]] = attrs.Factory(list)  # the whole conversation, every context's
    context: list[dict[str, Any]] = attrs.Factory(list)  # the conversation the model sees now
    prompt_messages: int = 0  # leading messages of `context` that are the system prompt and the task's prompt
    compactions: list[Compaction] = attrs.Factory(list)
    tools: list[dict[str, Any]] = attrs.Factory(list)
    ledger: TokenLedger | None = None
    turns: list[Turn] = attrs.Factory(list)
    step_rewards: list[float] = attrs.Factory(list)
    finished: bool = False
    token_exact: bool = True
    stop_reason: StopReason | None = None
    stop_detail: str = ""
    has_terminal_tool: bool = False
    run_id: str = ""
    per_call_cap: int = 0
    rendered: tuple[Any, list[int]] | None = None  # the last conversation a policy measured, and its prompt ids

    def stop(self, reason: StopReason, detail: str = "") -> None:
        self.stop_reason, self.stop_detail = reason, detail


@attrs.frozen
class _TurnDraft:
    """A sampled turn before its tools ran."""

    generation: Generation
    parsed: ParsedTurn
    context_length: int
    budget: int
    model_seconds: float
    message_index: int  # where its assistant message sits in the conversation
    summary: bool = False  # a summary turn a context policy asked for


@attrs.define
class ToolEpisode:
    """Runs the model against an environment until the environment finishes or a limit is hit.

    Each turn: send the exact context ids, keep the sampled ids verbatim (end-of-turn token and
    thinking included), parse tool calls, execute them, and append only the bridge tokens the chat
    template puts after the sampled turn. Sampled history is never re-rendered.
    """

    engine: Engine
    renderer: ChatRenderer
    parser: ToolParser
    settings: EpisodeSettings = attrs.field(factory=EpisodeSettings)
    routing_key: str | None = None

    def __attrs_post_init__(self) -> None:
        if not self.settings.train_thinking:
            try:
                self.renderer.thinking_mask([])
            except ValueError as error:
                raise ConfigError(f"train_thinking=False: {error}") from None

    async def run(self, session: EnvSession) -> Trajectory:
        state = _Run(session=session)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.episode_timeout) as deadline:
                if isinstance(self.engine, AttachesEpisode):
                    self.engine.attach_episode(
                        deadline,
                        lambda: self._trajectory(state, time.perf_counter() - started) if state.ledger else None,
                    )
                await self._loop(state)
        except (TimeoutError, EnvError, ModelFamilyError) as error:
            state.stop(
                *fault_stop(error, timeout_detail=lambda: f"the episode ran past {self.settings.episode_timeout:g}s")
            )
        return self._trajectory(state, time.perf_counter() - started)

    async def _loop(self, state: _Run) -> None:
        await self._start(state)
        for turn_index in range(self.settings.max_turns):
            draft = await self._sample_turn(state, f"t{turn_index}")
            if draft is None:
                return
            new_messages = await self._act_on_tools(state, draft)
            if new_messages is None or self._stops_after(state, draft, new_messages, turn_index):
                return
            if not await self._continue(state, draft, new_messages):
                return

    async def _start(self, state: _Run) -> None:
        """Tools, the system prompt and the task's prompt: the first context."""
        session = state.session
        session.shown.reads_images = (
            self.renderer.reads_images
        )  # a VLM sees the environment's images, a text model a counted placeholder
        state.tools = await session.tools()
        settings = self.settings
        system_prompt = first_system_prompt(
            settings.system_prompt,
            state.tools,
            self.renderer,
            parser=self.parser,
            tool_preamble=settings.tool_preamble,
            example=settings.tool_call_example,
        )
        if system_prompt:
            state.messages.append({"role": "system", "content": system_prompt})
        state.messages.extend(await session.prompt_messages())
        state.context, state.prompt_messages = list(state.messages), len(state.messages)
        state.has_terminal_tool = await session.terminal_tool() is not None
        vision = self.renderer.vision
        state.ledger = TokenLedger.start(
            self.renderer.render_prompt(state.messages, state.tools),
            images_in(state.messages),
            vision.name if vision else None,
        )
        state.run_id = uuid.uuid4().hex
        state.per_call_cap = int(self.settings.sampling_params.get("max_new_tokens") or self.settings.max_new_tokens)

    async def _sample_turn(self, state: _Run, label: str, summary_cap: int | None = None) -> _TurnDraft | None:
        """One model call on the exact context; the sampled ids join the ledger verbatim. None when the run stopped.

        `summary_cap`: this is a summary turn, capped at that many tokens."""
        settings = self.settings
        assert state.ledger is not None
        context_length = state.ledger.context_length
        budget = state.per_call_cap if summary_cap is None else min(state.per_call_cap, summary_cap)
        if settings.max_context_len is not None:
            budget = min(budget, settings.max_context_len - context_length)
            if budget <= 0:
                state.stop(
                    StopReason.CONTEXT_OVERFLOW,
                    f"{context_length} context tokens leave no room under {settings.max_context_len}",
                )
                return None
        request = GenerationRequest(
            input_ids=state.ledger.encoded_context(),
            sampling_params={**settings.sampling_params, **self._stop_params(), "max_new_tokens": budget},
            messages=state.context,
            tools=state.tools,
            request_id=f"{state.run_id}_{label}",
            routing_key=self.routing_key,
            image_data=tuple(state.ledger.current.images),
            image_token_id=self.renderer.image_token_id if state.ledger.current.images else None,
        )
        model_started = time.perf_counter()
        try:
            generation = await self.engine.generate(request)
        except ContextLengthError as error:
            state.stop(StopReason.CONTEXT_OVERFLOW, str(error))
            return None
        except EngineError as error:
            state.stop(StopReason.ABORTED, f"engine: {error}")
            return None
        model_seconds = time.perf_counter() - model_started
        state.token_exact &= generation.token_exact
        state.ledger.append_sampled(
            generation.output_ids, generation.logprobs, self._trained_mask(generation.output_ids)
        )
        parsed = generation.parsed or self._parse(generation, state.tools)
        message = _assistant_message(parsed)
        state.messages.append(message)
        state.context.append(message)
        draft = _TurnDraft(
            generation,
            parsed,
            context_length,
            budget,
            model_seconds,
            len(state.messages) - 1,
            summary=summary_cap is not None,
        )
        if generation.finish_reason is FinishReason.ABORT:
            self._record(state, draft)
            state.stop(StopReason.ABORTED, generation.abort_message or "the engine aborted the request")
            return None
        if generation.finish_reason is FinishReason.LENGTH:
            self._record(state, draft)
            if summary_cap is not None and budget == summary_cap:
                state.stop(StopReason.TRUNCATED, f"the summary turn hit its cap of {budget} tokens")
            elif budget < state.per_call_cap:
                state.stop(StopReason.CONTEXT_OVERFLOW, f"the turn used the last {budget} tokens of the context budget")
            else:
                state.stop(StopReason.TRUNCATED, f"the turn hit max_new_tokens={budget}")
            return None
        return draft

    async def _act_on_tools(self, state: _Run, draft: _TurnDraft) -> list[dict[str, Any]] | None:
        """Run the turn's tool calls (or hand a plain answer to the terminal tool) and record the turn.

        Returns the messages the environment's reply adds; None when the environment finished the episode.
        """
        parsed = draft.parsed
        env_started = time.perf_counter()
        new_messages: list[dict[str, Any]] = []
        results: list[ToolResult] = []
        try:
            if parsed.has_tool_activity:
                results = await self._execute(state.session, parsed.tool_calls)
            elif state.has_terminal_tool:
                outcome = await state.session.call_terminal_tool(parsed.content)
                results = [
                    self._result(ToolCall("__terminal__", {"message": parsed.content}, "terminal"), outcome, 0.0)
                ]
        except BaseException:  # environment fault, or the episode timeout cancelling the call
            self._record(
                state, draft, env_seconds=time.perf_counter() - env_started
            )  # the sampled turn stays on record
            raise
        if parsed.has_tool_activity:
            new_messages.extend(_tool_message(r) for r in results)
            feedback = _error_feedback(parsed)
            if feedback:
                new_messages.append({"role": "user", "content": feedback})
        elif not state.has_terminal_tool and self.settings.on_no_tool_call == "nudge":
            new_messages.append({"role": "user", "content": self.settings.nudge_message})
        env_seconds = time.perf_counter() - env_started
        rewards = [r.reward for r in results if r.reward is not None]
        state.step_rewards.extend(rewards)
        self._record(state, draft, results, rewards, env_seconds)
        state.messages.extend(new_messages)
        state.context.extend(new_messages)
        if any(r.finished for r in results):
            state.finished = True
            state.stop(StopReason.COMPLETED)
            return None
        return new_messages

    def _stops_after(self, state: _Run, draft: _TurnDraft, new_messages: list[dict[str, Any]], turn_index: int) -> bool:
        """Whether the run ends after this (unfinished) turn, and why."""
        if state.has_terminal_tool and not draft.parsed.has_tool_activity:
            state.stop(StopReason.COMPLETED, "the terminal tool took the answer without finishing")
        elif not new_messages:
            state.stop(StopReason.NO_TOOL_CALL)
        elif turn_index + 1 == self.settings.max_turns:
            state.stop(StopReason.MAX_TURNS, f"{self.settings.max_turns} turns")
        return state.stop_reason is not None

    async def _continue(self, state: _Run, draft: _TurnDraft, new_messages: list[dict[str, Any]]) -> bool:
        """Go on to the next turn: compact the context where the context policy says so, else append the
        bridge. False when the run stopped."""
        assert state.ledger is not None
        bridge = self._bridge_ids(state, draft, new_messages)
        policy = self.settings.context_policy
        cap = self.settings.max_compactions
        if policy is not None and (cap is None or len(state.compactions) < cap):
            before = state.ledger.context_length + len(bridge)
            view = self._view(state, len(bridge))
            action = policy.plan(view)
            max_context_len = self.settings.max_context_len
            if action is None and max_context_len is not None and before >= max_context_len:
                action = policy.fallback(view)  # the reply overflows below the policy's threshold
            if isinstance(action, Summarize):
                summarized = await self._summarize(state, draft, new_messages, action)
                if summarized is not None:
                    return summarized
                action = policy.fallback(view)
            if isinstance(action, Rewrite) and self._rewrite(state, action, before):
                return True
            if state.stop_reason is not None:  # the stall guard ended it
                return False
        return self._bridge(state, bridge, images_in(new_messages))

    def _stalled(self, state: _Run, kind: str, before: int, after: int) -> str | None:
        """Why a boundary is futile under uncapped compaction (`max_compactions` None): it would free less than
        `MIN_FREED_FRACTION` of the budget (what the new context must keep fills it), or less than
        `STALL_FRACTION` of the room the episode's first boundary freed (the compacted context no longer
        shrinks: its kept turns or its summaries have grown). None when it still frees room."""
        if self.settings.max_compactions is not None:
            return None
        freed, budget = before - after, self.settings.max_context_len
        if budget is not None and freed < MIN_FREED_FRACTION * budget:
            return (
                f"compaction stalled: a {kind} boundary would free {freed} tokens ({before} -> {after}), less than "
                f"{MIN_FREED_FRACTION:.0%} of the {budget}-token budget; what the new context must keep (the prompt, "
                "the summary, the kept turns) leaves no room for the episode to go on"
            )
        if not state.compactions or freed >= STALL_FRACTION * state.compactions[0].tokens_saved:
            return None
        return (
            f"compaction stalled: a {kind} boundary would free {freed} tokens ({before} -> {after}), "
            f"less than {STALL_FRACTION:.0%} of the {state.compactions[0].tokens_saved} the first one freed"
        )

    def _view(self, state: _Run, incoming: int) -> ContextView:
        assert state.ledger is not None
        return ContextView(
            messages=tuple(state.context),
            prompt_messages=state.prompt_messages,
            context_length=state.ledger.context_length,
            incoming=incoming,
            max_context_len=self.settings.max_context_len,
            compactions=len(state.compactions),
            measure=lambda messages: len(self._render(state, messages)),
        )

    def _render(self, state: _Run, messages: Any) -> list[int]:
        """The prompt ids of `messages` as a new context; the last conversation a policy measured is kept,
        so the boundary it then asks for is not rendered twice."""
        if state.rendered is not None and state.rendered[0] is messages:
            return state.rendered[1]
        prompt = self.renderer.render_prompt([dict(m) for m in messages], state.tools)
        state.rendered = (messages, prompt)
        return prompt

    async def _summarize(
        self, state: _Run, draft: _TurnDraft, new_messages: list[dict[str, Any]], action: Summarize
    ) -> bool | None:
        """The summary turn, then the policy's next context. None when it does not fit (the caller falls
        back); False when the run stopped (the usual rules: an abort is ABORTED, never a reward)."""
        assert state.ledger is not None and self.settings.context_policy is not None
        request = {"role": "user", "content": action.request}
        ids = self._bridge_ids(state, draft, [*new_messages, request])
        cap = min(action.max_tokens, state.per_call_cap)
        max_context_len = self.settings.max_context_len
        if max_context_len is not None and state.ledger.context_length + len(ids) + cap > max_context_len:
            return None
        state.ledger.append_environment(ids, images_in(new_messages))
        state.messages.append(request)
        state.context.append(request)
        summary_turn = await self._sample_turn(state, f"s{len(state.compactions)}", summary_cap=cap)
        if summary_turn is None:
            return False
        self._record(state, summary_turn)
        parsed = summary_turn.parsed
        text = parsed.content or self.renderer.decode(summary_turn.generation.output_ids)
        rewrite = self.settings.context_policy.after_summary(self._view(state, 0), text)
        if not self._rewrite(state, rewrite, state.ledger.context_length):
            if state.stop_reason is None:
                state.stop(
                    StopReason.CONTEXT_OVERFLOW,
                    f"the context after the summary ({rewrite.kind}) does not fit in {max_context_len} tokens or saves none",
                )
            return False
        return True

    def _rewrite(self, state: _Run, rewrite: Rewrite, before: int) -> bool:
        """Start a new segment on the context `rewrite` gives, rendered by the template; False (nothing
        changed) when it would save no tokens or leave no room."""
        assert state.ledger is not None
        messages = [dict(m) for m in rewrite.messages]
        prompt = self._render(state, rewrite.messages)
        state.rendered = None
        max_context_len = self.settings.max_context_len
        if len(prompt) >= before or (max_context_len is not None and len(prompt) >= max_context_len):
            return False
        stalled = self._stalled(state, rewrite.kind, before, len(prompt))
        if stalled:
            state.stop(StopReason.CONTEXT_OVERFLOW, stalled)
            return False
        state.compactions.append(
            Compaction(
                kind=rewrite.kind,
                segment=len(state.ledger.segments),
                turn=len(state.turns),
                message_index=len(state.messages),
                tokens_before=before,
                tokens_after=len(prompt),
            )
        )
        state.ledger.compact(prompt, images_in(messages))
        state.context = messages
        return True

    def _bridge_ids(self, state: _Run, draft: _TurnDraft, new_messages: list[dict[str, Any]]) -> list[int]:
        """The tokens the chat template puts after the sampled turn, up to the next generation prompt."""
        assert state.ledger is not None
        hand_written = self.renderer.bridge_needs_ids
        context = state.ledger.context()[: draft.context_length] if hand_written else None
        return self.renderer.bridge(
            sampled_tail=self._sampled_tail(draft.generation),
            assistant_tool_calls=[c.to_openai() for c in draft.parsed.tool_calls],
            new_messages=new_messages,
            tools=state.tools,
            context_ids=context,
            sampled_ids=draft.generation.output_ids if hand_written else None,
        )

    def _bridge(self, state: _Run, bridge: list[int], images: Sequence[str] = ()) -> bool:
        """Append the bridge; False when it overflows the budget."""
        assert state.ledger is not None
        max_context_len = self.settings.max_context_len
        if max_context_len is not None and state.ledger.context_length + len(bridge) >= max_context_len:
            state.stop(
                StopReason.CONTEXT_OVERFLOW,
                f"the environment's reply ({len(bridge)} tokens) leaves no room under {max_context_len}",
            )
            return False
        state.ledger.append_environment(bridge, images)
        return True

    def _record(
        self,
        state: _Run,
        draft: _TurnDraft,
        results: Sequence[ToolResult] = (),
        rewards: Sequence[float] = (),
        env_seconds: float = 0.0,
    ) -> None:
        generation = draft.generation
        state.turns.append(
            Turn(
                prompt_length=draft.context_length,
                sampled_ids=generation.output_ids,
                logprobs=generation.logprobs,
                finish_reason=generation.finish_reason,
                parsed=draft.parsed,
                tool_results=tuple(results),
                rewards=tuple(rewards),
                model_seconds=draft.model_seconds,
                env_seconds=env_seconds,
                max_new_tokens=draft.budget,
                weight_version=generation.weight_version,
                message_index=draft.message_index,
                summary=draft.summary,
            )
        )

    def _parse(self, generation: Generation, tools: list[dict[str, Any]]) -> ParsedTurn:
        ids = generation.output_ids
        if generation.finish_reason is FinishReason.STOP and ids and ids[-1] in self.renderer.end_of_turn_ids:
            ids = ids[:-1]
        return self.parser.parse(
            self.renderer.decode(ids),
            tools=tools,
            generation_prompt=self.renderer.generation_prompt,
            finish_reason=generation.finish_reason.value,
        )

    def _sampled_tail(self, generation: Generation) -> str:
        if isinstance(generation.matched_stop, str):
            return generation.matched_stop
        return self.renderer.decode(generation.output_ids[-1:]) if generation.output_ids else ""

    def _trained_mask(self, ids: Sequence[int]) -> list[bool] | None:
        return None if self.settings.train_thinking else self.renderer.thinking_mask(ids)

    def _stop_params(self) -> dict[str, Any]:
        """The renderer's turn closers as `stop_token_ids` (with any the caller set), so the engine stops
        where the template ends a turn."""
        closers = self.renderer.engine_stop_token_ids
        if not closers:
            return {}
        own = list(self.settings.sampling_params.get("stop_token_ids") or ())
        return {"stop_token_ids": list(dict.fromkeys([*closers, *own]))}

    async def _execute(self, session: EnvSession, calls: Sequence[ToolCall]) -> list[ToolResult]:
        async def one(call: ToolCall) -> ToolResult:
            started = time.perf_counter()
            outcome = await session.call_tool(call.name, call.arguments)
            return self._result(call, outcome, time.perf_counter() - started)

        if self.settings.tool_execution == "parallel" and len(calls) > 1:
            return list(await asyncio.gather(*(one(c) for c in calls)))
        results = []
        for call in calls:
            results.append(await one(call))
            if results[-1].finished:
                break  # the environment refuses further calls once finished
        return results

    def _result(self, call: ToolCall, outcome: ToolOutcome, seconds: float) -> ToolResult:
        limit = self.settings.max_tool_output_tokens
        text, truncated = clean_tool_text(outcome.text, self.renderer, limit)
        content = None
        if outcome.content is not None:  # a VLM's text and images: each text part cleaned and held to the budget
            cleaned = [
                clean_tool_text(p["text"], self.renderer, limit) if p.get("type") == "text" else (None, False)
                for p in outcome.content
            ]
            content = tuple(
                {"type": "text", "text": c} if c is not None else dict(p) for p, (c, _) in zip(outcome.content, cleaned)
            )
            truncated = any(cut for _, cut in cleaned)
        return ToolResult(
            call=call,
            text=text,
            reward=outcome.reward,
            finished=outcome.finished,
            error=outcome.error,
            truncated=truncated,
            seconds=seconds,
            metadata=outcome.metadata,
            content=content,
        )

    def _trajectory(self, state: _Run, seconds: float) -> Trajectory:
        stop_reason = state.stop_reason or StopReason.ABORTED
        segments = state.ledger.segments if state.ledger else []
        return Trajectory(
            task=state.session.task,
            segments=segments,
            turns=state.turns,
            messages=state.messages,
            step_rewards=state.step_rewards,
            reward=None,  # the runner reduces the step rewards (run_episode's reward_policy)
            stop_reason=stop_reason,
            stop_detail=state.stop_detail,
            finished=state.finished,
            token_exact=state.token_exact,
            prefix_breaks=state.ledger.prefix_breaks if state.ledger else 0,
            metrics=_metrics(state, seconds),
            compactions=list(state.compactions),
        )


def _assistant_message(parsed: ParsedTurn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning:
        message["reasoning_content"] = parsed.reasoning
    if parsed.tool_calls:
        message["tool_calls"] = [c.to_openai() for c in parsed.tool_calls]
    return message


def _tool_message(result: ToolResult) -> dict[str, Any]:
    content: Any = [dict(p) for p in result.content] if result.content is not None else result.text
    return {"role": "tool", "tool_call_id": result.call.id, "name": result.call.name, "content": content}


def _error_feedback(parsed: ParsedTurn) -> str | None:
    """What to tell the model about calls that were not executed. Problems attached to a call that
    did run (e.g. a value kept raw because it did not fit the schema) are counted, not reported."""
    executed = {c.id for c in parsed.tool_calls}
    lines = [f"- {e.kind.value}: {e.message}" for e in parsed.errors if e.call_id is None or e.call_id not in executed]
    if not lines:
        return None
    return "Some of your tool calls could not be executed:\n" + "\n".join(lines)


def _metrics(state: _Run, seconds: float) -> dict[str, float]:
    parse_errors = Counter(e.kind.value for t in state.turns for e in t.parsed.errors)
    tool_errors = Counter(r.error for t in state.turns for r in t.tool_results if r.error)
    segment = state.ledger.current if state.ledger else None
    actions = [t for t in state.turns if not t.summary]
    metrics = {
        "turns": float(len(actions)),
        "tool_calls": float(sum(len(t.parsed.tool_calls) for t in actions)),
        "tool_errors": float(sum(1 for t in state.turns for r in t.tool_results if r.error)),
        "tool_outputs_truncated": float(sum(1 for t in state.turns for r in t.tool_results if r.truncated)),
        "parse_errors": float(sum(parse_errors.values())),
        "prefix_breaks": float(state.ledger.prefix_breaks if state.ledger else 0),
        "prompt_tokens": float(len(segment.prompt_ids) if segment else 0),
        "response_tokens": float(len(segment.response_ids) if segment else 0),
        "sampled_tokens": float(sum(len(t.sampled_ids) for t in state.turns)),
        "model_seconds": sum(t.model_seconds for t in state.turns),
        "env_seconds": sum(t.env_seconds for t in state.turns),
        "episode_seconds": seconds,
        "num_compactions": float(len(state.compactions)),
        "summary_turns": float(len(state.turns) - len(actions)),
        "context_tokens_saved": float(sum(c.tokens_saved for c in state.compactions)),
        "segments": float(len(state.ledger.segments) if state.ledger else 0),
        # what the environment showed that the model could not be shown as is (env.shown_text)
        "images_dropped": float(state.session.shown.images_dropped),
        "images_shown": float(state.session.shown.images_shown),
        "redacted_values": float(state.session.shown.redacted_values),
    }
    metrics.update({f"parse_errors/{kind}": float(n) for kind, n in parse_errors.items()})
    metrics.update({f"tool_errors/{kind}": float(n) for kind, n in tool_errors.items()})
    return metrics

"""A scripted multi-turn MathEnv episode per model family, checked against the official chat template.

The "model" is `SGLangTestServer` (a faithful double of SGLang's /generate; SGLang cannot run here).
Each scripted turn is what the official template writes for that assistant message (rendered by the
template itself, then cut after the family's closer), so a model that follows its template emits
exactly these ids. The episode runs through `ToolEpisode` against the real MathEnv on the SDK's own
`Server`, with the real tokenizer, and the checks are:

- each request's input_ids = previous input + sampled + bridge (no prefix break);
- each request's input_ids == the official template's render of the conversation so far (the
  assistant turns as the model wrote them, the environment's messages as the episode sent them),
  token for token; the final context too, modulo a rule the family states (`final_rule`);
- loss mask 1 exactly on sampled ids, log-probs aligned with them;
- the parser recovered every call; the stop token ids sent are the family's closers, and every
  sampled turn ends on the closer the template ends that turn with.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
from openreward import AsyncOpenReward

from openreward_rl import EpisodeSettings, StopReason, TaskRef, ToolEpisode, Trajectory, run_episode
from openreward_rl.assets import load_tokenizer
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.env.local_server import LocalEnvServer, load_environment_class
from openreward_rl.families import ModelFamily, family_for
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.probe import assistant_message as probe_assistant_message
from openreward_rl.families.probe import describe_difference, template_turn
from openreward_rl.parsers import get_parser
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from scripted_training_view import expected_mask_and_logprobs

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 512}
UNKNOWN_TOOL = "web_search"


@attrs.frozen
class PlannedTurn:
    """One assistant turn as the model writes it: reasoning, content, calls (name, arguments)."""

    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    reasoning: str | None = None
    content: str = ""

    @property
    def final(self) -> bool:
        return not self.calls


@attrs.frozen
class FamilyCase:
    """How to run and check one family's episode."""

    tokenizer: str
    reasoning_key: str = "reasoning_content"  # gpt-oss's template reads `thinking`
    arguments_as_strings: bool = False  # templates that concatenate the arguments (DeepSeek)
    # (ours, template's) final context -> the two sides made comparable, by a rule the family states
    final_rule: Callable[[str, str], tuple[str, str]] | None = None
    # the error turn's call: an unknown tool, or (where the parser reads a bare call to an unknown tool
    # as plain content, Llama 3) a call the environment answers with an error
    error_call: tuple[str, dict[str, Any]] = (UNKNOWN_TOOL, {"query": "formula"})
    template_kwargs: dict[str, Any] = attrs.field(factory=dict)
    thinks: bool = True  # False where the family has reasoning markers but this template renders none (Qwen2.5)
    # the model ends tool-call turns with this closer instead of the template's (Llama 3.1's <|eom_id|>)
    sampled_tool_closer: str | None = None
    # our ids -> the template's, by a rule the family states (applied before each per-turn comparison)
    history_rule: Callable[[Any, list[int]], list[int]] | None = None
    always_reasons: bool = False  # the template opens reasoning in every generation prompt (MiniMax M2)
    # the tokenizer under another name (a fine-tune whose name no family knows: its chat template decides)
    renamed: str | None = None
    call_id_format: str = "call_{index}_{n}"  # the call ids the scripted model writes (Mistral: 9 letters or digits)
    # a tokenizer built by the test instead of `tokenizer` (Llama 4's, converted from llama-models' tokenizer.model)
    load: Callable[[], Any] | None = None
    # the family to run instead of the catalog's, e.g. the catalog's with an official encoder in the place of the
    # user's chat template (Llama 4: Meta's ChatFormat); the reference renders through it too
    family: ModelFamily | None = None
    # a family whose template knows no tools (chatml): the model writes its calls as text in this format
    calls_as_text: Any = None


def case_tokenizer(case: FamilyCase) -> Any:
    """The case's real tokenizer; with `renamed`, a shallow copy whose name_or_path is that name (the
    files, vocabulary and chat template are the packaged ones, unchanged)."""
    tokenizer = case.load() if case.load is not None else load_tokenizer(case.tokenizer)
    if case.renamed is None:
        return tokenizer
    renamed = copy.copy(tokenizer)
    renamed.name_or_path = case.renamed
    return renamed


def plan(family: ModelFamily, answer: str, case: FamilyCase) -> list[PlannedTurn]:
    """≥3 turns: an unknown tool (with a good call beside it where calls may be parallel), two calls in one
    turn where allowed, a thinking turn where the family thinks, then the final answer."""
    thinking = "I should add the two numbers first." if family.thinking and case.thinks else None
    other = "Let me use the calculator." if case.always_reasons else None
    turns = []
    if family.parallel_calls:
        turns.append(PlannedTurn(calls=(("calculator", {"expression": "1 + 1"}), case.error_call), reasoning=other))
        turns.append(
            PlannedTurn(
                calls=(("calculator", {"expression": "2 * 3"}), ("calculator", {"expression": "10 - 4"})),
                reasoning=other,
            )
        )
    else:
        turns.append(PlannedTurn(calls=(case.error_call,), reasoning=other))
        turns.append(PlannedTurn(calls=(("calculator", {"expression": "2 * 3"}),), reasoning=other))
    turns.append(PlannedTurn(calls=(("calculator", {"expression": f"{answer} + 0"}),), reasoning=thinking))
    turns.append(PlannedTurn(content=f"The answer is {answer}.", reasoning=other))
    return turns


def assistant_message(turn: PlannedTurn, index: int, case: FamilyCase) -> dict[str, Any]:
    return probe_assistant_message(
        turn.content,
        reasoning=turn.reasoning,
        calls=turn.calls,
        index=index,
        reasoning_key=case.reasoning_key,
        string_arguments=case.arguments_as_strings,
        call_id_format=case.call_id_format,
        calls_as_text=case.calls_as_text,
    )


def render(
    tokenizer: Any, messages: Sequence[dict[str, Any]], tools: Any, case: FamilyCase, *, generation_prompt: bool
) -> str:
    family = case.family or family_for(tokenizer)
    if family.encoder_factory is not None:  # the official encoder (DeepSeek-V4's encoding_dsv4.py) is its template
        return family.encoder_factory(tokenizer).render(
            list(messages), tools, add_generation_prompt=generation_prompt, **case.template_kwargs
        )
    return tokenizer.apply_chat_template(
        list(messages), tools=tools, add_generation_prompt=generation_prompt, tokenize=False, **case.template_kwargs
    )


def sampled_text(
    tokenizer: Any,
    family: ModelFamily,
    case: FamilyCase,
    before: list[dict[str, Any]],
    turn: PlannedTurn,
    index: int,
    tools: Any,
) -> str:
    """What the template writes for `turn` after the generation prompt, up to and including its closer
    (the library's `template_turn`, which the start-up check scripts its turns with too)."""
    closers = family.tool_turn_stops if turn.calls else family.final_turn_stops
    renderer = ChatRenderer(tokenizer, dict(case.template_kwargs), family=family)
    text = template_turn(renderer, before, assistant_message(turn, index, case), closers, tools)
    if turn.calls and case.sampled_tool_closer:
        closer = next(c for c in closers if text.endswith(c))
        return text[: -len(closer)] + case.sampled_tool_closer
    return text


@attrs.define
class RecordingRenderer(ChatRenderer):
    """The family's renderer, keeping the tools the episode rendered the first prompt with."""

    seen_tools: list[Any] = attrs.field(factory=list)

    hand_written_bridges: int = 0
    declined_bridges: int = 0

    def render_prompt(self, messages: Any, tools: Any = None) -> list[int]:
        self.seen_tools.append(tools)
        return super().render_prompt(messages, tools)

    def bridge(self, **kwargs: Any) -> list[int]:
        """Where the family has a hand-written bridge, it must answer and agree with the template-derived one."""
        ids = super().bridge(**kwargs)
        if self.bridge_needs_ids:
            own = self._family_bridge.bridge(
                context_ids=kwargs["context_ids"],
                sampled_ids=kwargs["sampled_ids"],
                new_messages=kwargs["new_messages"],
                tools=kwargs["tools"],
            )
            user_turn = any(m["role"] == "user" for m in kwargs["new_messages"])
            if own is None and user_turn and self.family.thinking is not None:
                # renderers declines by design here (the template would rewrite earlier reasoning after a
                # new user message); the template-derived bridge continues without re-rendering
                self.declined_bridges += 1
            else:
                assert own == ids, (
                    f"the hand-written bridge declined or disagreed: {own and self.decode(own)!r} != {self.decode(ids)!r}"
                )
            derived = super().bridge(**{**kwargs, "context_ids": None, "sampled_ids": None})
            assert derived == ids, "the template-derived bridge disagrees with the hand-written one"
            self.hand_written_bridges += 1
        return ids


@attrs.frozen
class FamilyRun:
    trajectory: Trajectory
    server: SGLangTestServer
    tokenizer: Any
    family: ModelFamily
    case: FamilyCase
    turns: list[PlannedTurn]
    tools: Any
    settings: EpisodeSettings
    hand_written_bridges: int
    declined_bridges: int


async def run_family_episode(
    env_server: LocalEnvServer, client: AsyncOpenReward, case: FamilyCase, *, settings: EpisodeSettings | None = None
) -> FamilyRun:
    tokenizer = case_tokenizer(case)
    family = case.family or family_for(tokenizer)
    cls = load_environment_class(next(s for s in env_server.specs if s.endswith(":MathEnv")))
    answer = cls.list_tasks("train")[3]["answer"]
    turns = plan(family, answer, case)
    renderer = RecordingRenderer(tokenizer, dict(case.template_kwargs), family=family)
    settings = settings or EpisodeSettings(sampling_params=SAMPLING)
    scripted: list[str] = []

    def next_completion(request: Any) -> ScriptedCompletion:
        # Scripted from the conversation the episode has so far (the template needs the real tool replies).
        index = len(scripted)
        before = conversation_before(episode_messages(request), turns, index, case)
        text = sampled_text(tokenizer, family, case, before, turns[index], index, renderer.seen_tools[0])
        scripted.append(text)
        return ScriptedCompletion(text=text)

    live: dict[str, Any] = {}

    def episode_messages(request: Any) -> list[dict[str, Any]]:
        return live["episode"].messages_so_far()

    async with SGLangTestServer(tokenizer, next_completion) as server:
        engine = SGLangEngine(server.url, max_attempts=1)
        task = TaskRef(
            "MathEnv", "train", index=3, base_url=env_server.base_url, variant=env_server.variant_for("MathEnv")
        )

        def make() -> ToolEpisode:
            episode = _ObservedEpisode(engine, renderer, get_parser(family.parser), settings, routing_key="s")
            live["episode"] = episode
            return episode

        try:
            trajectory = await run_episode(make, client, task, attempts=1)
        finally:
            await engine.aclose()
    return FamilyRun(
        trajectory,
        server,
        tokenizer,
        family,
        case,
        turns,
        renderer.seen_tools[0],
        settings,
        renderer.hand_written_bridges,
        renderer.declined_bridges,
    )


@attrs.define
class _ObservedEpisode(ToolEpisode):
    """ToolEpisode that lets the script read the messages of the run in progress."""

    _messages: list[dict[str, Any]] = attrs.field(factory=list, init=False)

    async def _sample_turn(self, state: Any, turn_index: int) -> Any:
        self._messages = state.messages
        return await super()._sample_turn(state, turn_index)

    def messages_so_far(self) -> list[dict[str, Any]]:
        return list(self._messages)


def conversation_before(
    episode_messages: list[dict[str, Any]], turns: list[PlannedTurn], index: int, case: FamilyCase
) -> list[dict[str, Any]]:
    """The episode's messages with each assistant message replaced by the turn as the model wrote it."""
    out: list[dict[str, Any]] = []
    seen = 0
    for message in episode_messages:
        if message["role"] == "assistant":
            out.append(assistant_message(turns[seen], seen, case))
            seen += 1
        else:
            out.append(message)
    assert seen == index
    return out


def check_family_run(run: FamilyRun) -> None:
    """Every property the module docstring lists."""
    trajectory, server, tokenizer, family, case = run.trajectory, run.server, run.tokenizer, run.family, run.case
    assert trajectory.stop_reason is StopReason.COMPLETED, trajectory.stop_detail
    assert trajectory.finished and trajectory.reward == 1.0, describe(run)
    requests = [r for r in server.requests if r.path == "/generate"]
    assert len(requests) == len(trajectory.turns) == len(run.turns) >= 3
    sampled = [list(t.sampled_ids) for t in trajectory.turns]

    # the stop tokens sent are the family's closers, and each turn ended on the one its template writes
    closer_ids = family.stop_token_ids(tokenizer)
    for request, turn, planned in zip(requests, trajectory.turns, run.turns):
        assert list(request.sampling_params["stop_token_ids"])[: len(closer_ids)] == list(closer_ids)
        expected = family.final_turn_stops if planned.final else family.tool_turn_stops
        assert tokenizer.convert_ids_to_tokens(turn.sampled_ids[-1]) in expected
        assert turn.finish_reason.value == "stop"

    # prefix-exact extension, and parity with the official template at every turn
    messages = trajectory.messages
    for i, request in enumerate(requests):
        if i:
            previous = requests[i - 1].input_ids + sampled[i - 1]
            assert request.input_ids[: len(previous)] == previous, f"turn {i} does not extend turn {i - 1}"
        before = conversation_before(_messages_before_turn(messages, i), run.turns, i, case)
        expected = tokenizer.encode(
            render(tokenizer, before, run.tools, case, generation_prompt=True), add_special_tokens=False
        )
        ours = case.history_rule(tokenizer, request.input_ids) if case.history_rule else request.input_ids
        assert ours == expected, _first_difference(tokenizer, ours, expected, f"turn {i}")
    everything = conversation_before(messages, run.turns, len(run.turns), case)
    ours_text = tokenizer.decode(
        case.history_rule(tokenizer, trajectory.tokens) if case.history_rule else trajectory.tokens
    )
    template_text = render(tokenizer, everything, run.tools, case, generation_prompt=False)
    if case.final_rule is not None:
        ours_text, template_text = case.final_rule(ours_text, template_text)
    assert template_text.startswith(ours_text) and template_text[len(ours_text) :].strip() == "", (
        ours_text[-200:],
        template_text[-200:],
    )

    # loss mask and log-probs
    trained = (
        None
        if run.settings.train_thinking
        else [ChatRenderer(tokenizer, family=family).thinking_mask(ids) for ids in sampled]
    )
    expected_mask, expected_logprobs = expected_mask_and_logprobs(requests, sampled, trained)
    assert trajectory.loss_mask == expected_mask
    assert trajectory.rollout_logprobs == pytest.approx(expected_logprobs)
    assert trajectory.prefix_breaks == 0
    if family.bridge_factory is not None:
        assert run.hand_written_bridges == len(requests) - 1
        assert run.declined_bridges <= 1  # at most the error turn's feedback message

    # the parser recovered every call (the unknown one as an error, never executed)
    for turn, planned in zip(trajectory.turns, run.turns):
        known = [(n, a) for n, a in planned.calls if n != UNKNOWN_TOOL]
        assert [(c.name, c.arguments) for c in turn.parsed.tool_calls] == known
        unknown = [e for e in turn.parsed.errors if e.kind.value == "unknown_tool"]
        assert len(unknown) == sum(1 for n, _ in planned.calls if n == UNKNOWN_TOOL)
        if planned.reasoning:
            assert turn.parsed.reasoning == planned.reasoning
    assert trajectory.turns[-1].parsed.content.strip() == run.turns[-1].content


def describe(run: FamilyRun) -> str:
    lines = [f"{run.trajectory.stop_reason} {run.trajectory.stop_detail}"]
    for turn in run.trajectory.turns:
        lines.append(
            f"sampled {run.tokenizer.decode(turn.sampled_ids)!r} -> {turn.parsed} -> {[r.text for r in turn.tool_results]}"
        )
    return "\n".join(lines)


def _messages_before_turn(messages: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    seen = 0
    for position, message in enumerate(messages):
        if message["role"] == "assistant":
            if seen == index:
                return messages[:position]
            seen += 1
    return list(messages)


def _first_difference(tokenizer: Any, ours: list[int], theirs: list[int], label: str) -> str:
    return describe_difference(ChatRenderer(tokenizer), ours, theirs, label)

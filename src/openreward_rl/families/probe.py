"""The start-up proof: a model family renders token-exact on *this* tokenizer and chat template, or the run stops.

Before the first episode, `check_model` runs a probe conversation through the same path the episode
loop uses, and through the tokenizer's own chat template (or the family's official encoder), and
compares the two token for token:

- the first prompt: system prompt, tools, the user's question (`ChatRenderer.render_prompt`);
- each assistant turn as the template writes it (what a model that follows its template samples),
  ended on the family's closer, parsed by the family's parser (every call recovered);
- after each turn, the family's bridge (`ChatRenderer.bridge`, with the ids where the bridge is
  hand-written) appended after the sampled ids, exactly as `ToolEpisode` does;
- each next prompt must equal the template's render of the conversation so far.

The conversation: two calls in one turn (one where the family allows one per turn), a call the tool
answers with an error followed by a user message (the feedback `ToolEpisode` sends on a call to an
unknown tool, after the executed calls' results), a turn with reasoning where the family's template
renders reasoning (every turn reasons where the generation prompt opens reasoning), then a final
answer. Where a template rewrites earlier turns once a user message comes (drops the reasoning before
it), the comparison holds only through the family's declared history rule. Not covered here: a nudge
(`on_no_tool_call: nudge`: a user message after an answer without a call, so after a final-answer
closer; gpt-oss writes that closer back as `<|end|>`), a turn whose calls all fail (feedback with no
tool result before it), and the context after the final answer; the
episode tests (`tests/test_families_episode.py`) prove the families marked `proven_here` further.

Exact: the verdict is cached per process and on disk (`cache_dir()/model_checks`), keyed by the
tokenizer, template, family and template kwargs. Not exact: `ModelFamilyError` naming the first
differing token, with context, and how to override.

>>> from openreward_rl.assets import load_tokenizer
>>> from openreward_rl.families import get_family
>>> check_model(load_tokenizer("offline:qwen3"), get_family("qwen3"), disk_cache=False).exact
True
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from openreward_rl.errors import ModelFamilyError
from openreward_rl.families.base import ModelFamily
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.tool_preamble import ToolPreamble
from openreward_rl.families.training_format import official_family, opt_in_hint

logger = logging.getLogger(__name__)

__all__ = [
    "ModelCheck",
    "ModelCheckError",
    "assistant_message",
    "check_model",
    "describe_difference",
    "probe_family",
    "template_turn",
]

PROBE_VERSION = 5  # part of the cache key: a changed probe proves again
OVERRIDE = (
    "override: set model_family (config) or --family to the right family; check_model: false (config) or "
    "--skip-check-model skips this check, at your own risk"
)
SYSTEM = "You are a careful assistant. Use the calculator for arithmetic."
QUESTION = "What is (1 + 1) * 3?"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
RESULTS = {"1 + 1": "2", "2 * 3": "6", "1 / 0": "Error: division by zero", "(1 + 1) * 3": "6"}
FEEDBACK = "Tool web_search is not available. Available tools: calculator."  # a mid-episode user message
REASONING = "I should check the product with the calculator."
ANSWER = "The answer is 6."
_TURN_MARK = "ORRL_TURN_7f3a"


class ModelCheckError(ModelFamilyError):
    """The family's bridge does not reproduce this tokenizer's chat template token for token."""


@attrs.frozen
class ModelCheck:
    """The verdict of one probe: `exact`, or the first difference (`difference`, readable)."""

    family: str
    exact: bool
    turns: int = 0
    tokens: int = 0
    reasoning: str = "none"  # how many of the probe's turns reasoned ("1 of 4 turns"), or "none"
    bridge: str = "template-derived"
    difference: str = ""
    rule: str = ""  # the family's history rule, where the comparison needed it
    not_compared: str = ""  # a step of the probe the template cannot render, so nothing compared it
    departs: str = ""  # a stated training format: where it departs from this tokenizer's own chat template
    key: str = ""
    cached: bool = False

    def summary(self) -> str:
        if not self.exact:
            return f"{self.family}: NOT token-exact\n{self.difference}"
        source = " (cached)" if self.cached else ""
        rule = f"\n  exact after the family's history rule: {self.rule}" if self.rule else ""
        skipped = f"\n  not compared: {self.not_compared}" if self.not_compared else ""
        departs = f"\n  a stated training format, departing from {self.departs}" if self.departs else ""
        return f"{self.family}: token-exact over {self.turns} turns, {self.tokens} tokens; reasoning: {self.reasoning}; bridge: {self.bridge}{source}{rule}{skipped}{departs}"


@attrs.frozen
class _Turn:
    calls: tuple[str, ...] = ()  # calculator expressions
    reasoning: str | None = None
    content: str = ""
    user: str | None = None  # a user message the episode sends after this turn's tool results


_VERDICTS: dict[str, ModelCheck] = {}


def check_model(
    tokenizer: Any, family: ModelFamily, template_kwargs: Mapping[str, Any] | None = None, *, disk_cache: bool = True
) -> ModelCheck:
    """`probe_family`, cached; ModelCheckError (a ModelFamilyError) when not exact."""
    kwargs = dict(template_kwargs or {})
    key = cache_key(tokenizer, family, kwargs)
    verdict = _VERDICTS.get(key)
    if verdict is None and disk_cache:
        verdict = _read_disk(key)
    if verdict is None:
        verdict = probe_family(tokenizer, family, kwargs)
        if verdict.exact and disk_cache:
            _write_disk(key, verdict)
    _VERDICTS[key] = verdict
    if not verdict.exact:
        name = getattr(tokenizer, "name_or_path", "") or "this tokenizer"
        hint = opt_in_hint(family.name)
        raise ModelCheckError(
            f"the {family.name} model family is not token-exact on {name}: {verdict.difference}\n{hint + '; ' if hint else ''}{OVERRIDE}"
        )
    if verdict.departs:
        logger.warning(
            "the %s model family runs its stated training format, departing from %s", family.name, verdict.departs
        )
    return verdict


def cache_key(tokenizer: Any, family: ModelFamily, template_kwargs: Mapping[str, Any]) -> str:
    """sha256 of what the verdict depends on: the tokenizer (name, size, special tokens, chat template or
    encoder), the family's declared behaviour, the template kwargs and the probe's version."""
    encoder = ""
    if family.encoder_factory is not None:
        directory = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
        files = sorted(
            [*directory.glob("encoding_*.py"), *directory.glob("encoding/encoding_*.py")]
        )  # where encoders.py looks
        encoder = ";".join(p.read_text() for p in files if p.is_file())
    template = getattr(tokenizer, "chat_template", None)
    parts = {
        "probe": PROBE_VERSION,
        "tokenizer": [
            str(getattr(tokenizer, "name_or_path", "")),
            len(tokenizer),
            str(getattr(tokenizer, "all_special_tokens", "")),
        ],
        "template": template if isinstance(template, str) else json.dumps(template, sort_keys=True, default=str),
        "encoder": encoder,
        "family": [
            family.name,
            family.parser,
            family.tool_turn_stops,
            family.final_turn_stops,
            family.parallel_calls,
            attrs.asdict(family.thinking) if family.thinking else None,
            dict(family.rewritten_closers),
            family.reasoning_key,
            family.string_arguments,
            _qualname(family.bridge_factory),
            _qualname(family.encoder_factory),
            repr(family.history_rule),
            *([family.call_id_format] if family.call_id_format != "call_{index}_{n}" else []),
        ],
        "kwargs": dict(template_kwargs),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _qualname(factory: Any) -> str | None:
    if factory is None:
        return None
    closure = [getattr(c, "cell_contents", None) for c in getattr(factory, "__closure__", None) or ()]
    return f"{getattr(factory, '__module__', '')}.{getattr(factory, '__qualname__', type(factory).__name__)}{closure!r}"


def _disk_path(key: str) -> Path:
    from openreward_rl.assets import cache_dir

    return cache_dir() / "model_checks" / f"{key}.json"


def _read_disk(key: str) -> ModelCheck | None:
    try:
        data = json.loads(_disk_path(key).read_text())
        return ModelCheck(**{**data, "cached": True})
    except (OSError, ValueError, TypeError):
        return None


def _write_disk(key: str, verdict: ModelCheck) -> None:
    path = _disk_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(f".tmp{id(verdict)}")
        staging.write_text(json.dumps(attrs.asdict(verdict)))
        staging.replace(path)
    except OSError:
        pass  # a read-only cache only costs the probe again next time


def probe_family(tokenizer: Any, family: ModelFamily, template_kwargs: Mapping[str, Any] | None = None) -> ModelCheck:
    """Run the probe conversation (module docstring) and compare. A difference, a template that cannot
    render the probe, or a bridge or parser that fails on it is a verdict that is not exact; only a
    refused family raises (UnsupportedModelError)."""
    from openreward_rl.parsers import get_parser

    renderer = family.renderer(tokenizer, template_kwargs)
    key = cache_key(tokenizer, family, dict(template_kwargs or {}))
    bridge_kind = "hand-written" if renderer.bridge_needs_ids else "template-derived"
    fail = lambda text: ModelCheck(family.name, False, difference=text, key=key, bridge=bridge_kind)  # noqa: E731
    try:
        closers_tool, closers_final = _closers(renderer, family)
        reasoning = _reasoning_mode(renderer, family)
    except Exception as error:  # a stop token the tokenizer lacks, a template that cannot render
        return fail(f"{type(error).__name__}: {error}")
    parser = get_parser(family.parser)
    user_after_tools = _renders_user_after_tools(renderer, family)
    turns = _plan(family, reasoning, feedback=user_after_tools)
    not_compared = (
        ""
        if user_after_tools
        else (
            "a user message after tool results (the feedback on an unknown tool): the chat template refuses to render one, "
            "so the probe leaves it out; the episode appends it in the family's own format"
        )
    )
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    ruled = False
    reasoned = declined = 0
    try:
        context = renderer.render_prompt(messages, TOOLS)
        for index, turn in enumerate(turns):
            expected = renderer.encode(renderer.render_text(messages, TOOLS, add_generation_prompt=True))
            ours = context
            if ours != expected and family.history_rule is not None:  # the template rewrote history: the rule maps ours
                ours = family.history_rule(tokenizer, context)
            if ours != expected:
                rule = (
                    f" (after the family's rule: {family.history_rule})"
                    if family.history_rule is not None and ours != context
                    else ""
                )
                return fail(describe_difference(renderer, ours, expected, f"the prompt of turn {index}{rule}"))
            ruled = ruled or ours != context
            if family.thinking is not None and turn.reasoning is None and _opens_reasoning(renderer, family, messages):
                turn = attrs.evolve(
                    turn, reasoning=REASONING
                )  # this prompt opens reasoning (Gemma 4 after tool replies)
            reasoned += bool(turn.reasoning)
            message = _assistant(turn, index, family)
            sampled = renderer.encode(
                template_turn(renderer, messages, message, closers_tool if turn.calls else closers_final)
            )
            problem = _parse_problem(renderer, parser, sampled, turn)
            if problem:
                return fail(f"turn {index}: {problem}")
            if not turn.calls:
                break
            parsed = parser.parse(
                renderer.decode(_without_closer(renderer, sampled)),
                tools=TOOLS,
                generation_prompt=renderer.generation_prompt,
                finish_reason="stop",
            )
            replies = [
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "name": call.name,
                    "content": RESULTS[call.arguments["expression"]],
                }
                for call in parsed.tool_calls
            ]
            if turn.user:
                replies.append({"role": "user", "content": turn.user})
            hand_written = renderer.bridge_needs_ids
            if (
                hand_written
                and renderer._family_bridge.bridge(
                    context_ids=context, sampled_ids=sampled, new_messages=replies, tools=TOOLS
                )
                is None
            ):
                declined += (
                    1  # the hand-written bridge declined: ChatRenderer.bridge falls back to the template-derived one
                )
            bridge = renderer.bridge(
                sampled_tail=renderer.decode(sampled[-1:]),
                assistant_tool_calls=[c.to_openai() for c in parsed.tool_calls],
                new_messages=replies,
                tools=TOOLS,
                context_ids=context if hand_written else None,
                sampled_ids=sampled if hand_written else None,
            )
            context = context + sampled + bridge
            # the reference answers the calls as the template wrote them (templates that look results up by the
            # call's id, as Command R7B's numbers them, need the id the assistant message holds)
            written = iter(c["id"] for c in message.get("tool_calls", []))
            messages = [
                *messages,
                message,
                *(
                    {**r, "tool_call_id": next(written, r["tool_call_id"])} if r["role"] == "tool" else r
                    for r in replies
                ),
            ]
    except ModelFamilyError as error:
        return fail(str(error))
    except Exception as error:  # a bridge or parser that fails on this tokenizer cannot be proven on it
        return fail(f"{type(error).__name__} while probing: {error}")
    return ModelCheck(
        family.name,
        True,
        turns=len(turns),
        tokens=len(context) + len(sampled),
        key=key,
        reasoning=f"{reasoned} of {len(turns)} turns" if reasoned else "none",
        bridge=f"hand-written, declined {declined} of {len(turns) - 1} (template-derived then)"
        if declined
        else bridge_kind,
        rule=str(family.history_rule) if ruled else "",
        not_compared=not_compared,
        departs=departure(tokenizer, family.name, template_kwargs),
    )


def departure(tokenizer: Any, format_family: str, template_kwargs: Mapping[str, Any] | None = None) -> str:
    """Where the stated training format `format_family` (`families.training_format`) departs from `tokenizer`'s
    own chat template: the official family's verdict on it ("" where the template writes the same, where the
    tokenizer has none, or where `format_family` is no training format)."""
    from openreward_rl.families.catalog import get_family

    official = official_family(format_family)
    if official is None or not isinstance(getattr(tokenizer, "chat_template", None), str):
        return ""
    verdict = probe_family(tokenizer, get_family(official), template_kwargs)
    return "" if verdict.exact else f"the official template ({official} family): {verdict.difference}"


def _closers(renderer: ChatRenderer, family: ModelFamily) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The family's closers (checked to be single tokens), or the tokenizer's eos where it names none."""
    family.stop_token_ids(renderer.tokenizer)
    eos = renderer.tokenizer.eos_token
    fallback = (eos,) if eos else ()
    return family.tool_turn_stops or fallback, family.final_turn_stops or fallback


def _reasoning_mode(renderer: ChatRenderer, family: ModelFamily) -> str:
    """ "every turn" where the generation prompt opens reasoning; "one turn" where the template renders a
    tool-call turn's reasoning; else "none"."""
    if family.thinking is None:
        return "none"
    opener, closer = ("".join(family.thinking.opener), "".join(family.thinking.closer))
    prompt = renderer.generation_prompt
    if opener in prompt and prompt.rfind(opener) > prompt.rfind(closer):
        return "every turn"
    if closer in prompt:
        return "none"  # the generation prompt closes reasoning (thinking off)
    mark = "ORRL_PROBE_REASONING_7f3a"
    try:
        text = renderer.render_text(_one_call(family, reasoning=mark), TOOLS, add_generation_prompt=True)
    except ModelFamilyError:
        return "none"
    return "one turn" if mark in text else "none"


def _opens_reasoning(renderer: ChatRenderer, family: ModelFamily, messages: list[dict[str, Any]]) -> bool:
    """Whether the generation prompt after `messages` leaves the family's reasoning open."""
    assert family.thinking is not None
    with_prompt = renderer.render_text(messages, TOOLS, add_generation_prompt=True)
    without = renderer.render_text(messages, TOOLS, add_generation_prompt=False)
    tail = with_prompt[len(without) :] if with_prompt.startswith(without) else ""
    opener, closer = "".join(family.thinking.opener), "".join(family.thinking.closer)
    return opener in tail and tail.rfind(opener) > tail.rfind(closer)


def _one_call(family: ModelFamily, reasoning: str | None = None) -> list[dict[str, Any]]:
    """A question, one calculator call (with `reasoning`) and its result: the probe's smallest exchange."""
    turn = _assistant(_Turn(calls=("1 + 1",), reasoning=reasoning), 0, family)
    call_id = turn["tool_calls"][0]["id"] if turn.get("tool_calls") else "call_0_0"
    reply = {"role": "tool", "tool_call_id": call_id, "name": "calculator", "content": "2"}
    return [{"role": "user", "content": QUESTION}, turn, reply]


def _renders_user_after_tools(renderer: ChatRenderer, family: ModelFamily) -> bool:
    """Whether the template renders a user message right after tool results (Mistral-Nemo's raises: it
    demands user/assistant alternation)."""
    try:
        renderer.render_text(
            [*_one_call(family), {"role": "user", "content": FEEDBACK}], TOOLS, add_generation_prompt=True
        )
    except ModelFamilyError:
        return False
    return True


def _plan(family: ModelFamily, reasoning: str, *, feedback: bool = True) -> list[_Turn]:
    every = REASONING if reasoning == "every turn" else None
    first = ("1 + 1", "2 * 3") if family.parallel_calls else ("1 + 1",)
    return [
        _Turn(calls=first, reasoning=every),
        _Turn(calls=("1 / 0",), reasoning=every, user=FEEDBACK if feedback else None),
        _Turn(calls=("(1 + 1) * 3",), reasoning=REASONING if reasoning != "none" else None),
        _Turn(content=ANSWER, reasoning=every),
    ]


def assistant_message(
    content: str,
    *,
    reasoning: str | None = None,
    calls: Sequence[tuple[str, Mapping[str, Any]]] = (),
    index: int = 0,
    reasoning_key: str = "reasoning_content",
    string_arguments: bool = False,
    call_id_format: str = "call_{index}_{n}",
    calls_as_text: ToolPreamble | None = None,
) -> dict[str, Any]:
    r"""An assistant message in the chat-template shape: `content`, reasoning under `reasoning_key`, and
    `calls` (name, arguments) as tool calls `call_<index>_<n>` (or `call_id_format`, where the template
    wants another shape), their arguments a JSON string where the template concatenates them (`string_arguments`).
    With `calls_as_text` (a family's tool preamble: its template knows no calls), the calls are written
    after the content, as the model writes them, and the message has no `tool_calls`.

    >>> assistant_message("", calls=[("calculator", {"expression": "1 + 1"})], index=2)["tool_calls"][0]["id"]
    'call_2_0'
    >>> from openreward_rl.families.tool_preamble import HERMES_PREAMBLE
    >>> assistant_message("", calls=[("calculator", {"expression": "1"})], calls_as_text=HERMES_PREAMBLE)["content"]
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1"}}\n</tool_call>'
    """
    if calls and calls_as_text is not None:
        written = [calls_as_text.call_text(name, arguments) for name, arguments in calls]
        content, calls = "\n".join([content, *written] if content else written), ()
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message[reasoning_key] = reasoning
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id_format.format(index=index, n=n),
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments) if string_arguments else arguments},
            }
            for n, (name, arguments) in enumerate(calls)
        ]
    return message


def _assistant(turn: _Turn, index: int, family: ModelFamily) -> dict[str, Any]:
    calls = [("calculator", {"expression": e}) for e in turn.calls]
    return assistant_message(
        turn.content,
        reasoning=turn.reasoning,
        calls=calls,
        index=index,
        reasoning_key=family.reasoning_key,
        string_arguments=family.string_arguments,
        call_id_format=family.call_id_format,
        calls_as_text=family.tool_preamble,
    )


def template_turn(
    renderer: ChatRenderer,
    before: Sequence[Mapping[str, Any]],
    message: Mapping[str, Any],
    closers: Sequence[str],
    tools: Sequence[Mapping[str, Any]] | None = TOOLS,
) -> str:
    """What the template writes for the assistant `message` after the generation prompt that follows
    `before`, up to and including the first of `closers`: what a model that follows its template samples.
    (The episode tests script their model with it too.)"""
    before = list(before)
    prompt = renderer.render_text(before, tools, add_generation_prompt=True)
    after: list[dict[str, Any]] = []
    if message.get("tool_calls"):  # a tool reply follows a call: the template then writes the call turn's closer
        after = [
            {"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"], "content": "0"}
            for c in message["tool_calls"]
        ]
    full = renderer.render_text([*before, message, *after], tools, add_generation_prompt=False)
    base = renderer.render_text(before, tools, add_generation_prompt=False)
    opener = prompt[len(base) :]
    if full.startswith(prompt):
        text = full[len(prompt) :]
    elif full.startswith(base) and _kept_part(renderer, opener, full[len(base) :]):
        # the template writes this turn without the end of its generation prompt (Qwen3 with thinking off
        # drops the empty reasoning block): the model answered after the whole prompt
        text = full[len(base) + len(_kept_part(renderer, opener, full[len(base) :])) :]
    elif opener:  # the template rewrote earlier turns once this one came (gpt-oss drops analysis before a final answer)
        if opener not in full:
            raise ModelCheckError("the template's generation prompt does not open the assistant turn it renders")
        text = full[full.rfind(opener) + len(opener) :]
    else:  # no generation prompt, and earlier turns rewritten (Mistral-Nemo drops the system prompt once the assistant
        # answers): the turn starts where the template starts an assistant message after `before` in that rewritten form
        marked = renderer.render_text(
            [*before, {"role": "assistant", "content": _TURN_MARK}], tools, add_generation_prompt=False
        )
        head = marked[: marked.find(_TURN_MARK)]
        if _TURN_MARK not in marked or not full.startswith(head):
            raise ModelCheckError(
                "the template rewrites the conversation, and no generation prompt shows where the assistant turn starts"
            )
        text = full[len(head) :]
    ends = [(text.find(c), c) for c in closers if c in text]
    if not ends:  # the template leaves the final closer to the next message (GLM's <|user|>)
        return text + closers[0]
    at, closer = min(ends)
    return text[: at + len(closer)]


def _kept_part(renderer: ChatRenderer, opener: str, rest: str) -> str:
    """The longest start of `opener`, cut between its tokens, that `rest` starts with ("" when none)."""
    ids = renderer.encode(opener)
    for end in range(len(ids) - 1, 0, -1):
        head = renderer.decode(ids[:end])
        if rest.startswith(head):
            return head
    return ""


def _without_closer(renderer: ChatRenderer, sampled: list[int]) -> list[int]:
    return sampled[:-1] if sampled and sampled[-1] in renderer.end_of_turn_ids else sampled


def _parse_problem(renderer: ChatRenderer, parser: Any, sampled: list[int], turn: _Turn) -> str:
    """What the family's parser gets wrong about the sampled turn, as `ToolEpisode` parses it; "" when nothing."""
    if not sampled or sampled[-1] not in renderer.end_of_turn_ids:
        return f"the turn does not end on one of the family's closers: {renderer.decode(sampled[-3:])!r}"
    parsed = parser.parse(
        renderer.decode(_without_closer(renderer, sampled)),
        tools=TOOLS,
        generation_prompt=renderer.generation_prompt,
        finish_reason="stop",
    )
    calls = [(c.name, c.arguments) for c in parsed.tool_calls]
    expected = [("calculator", {"expression": e}) for e in turn.calls]
    if calls != expected or parsed.errors:
        return f"the {parser.name} parser read {calls} (errors: {[e.message for e in parsed.errors]}) where the template wrote {expected}"
    if turn.reasoning and (parsed.reasoning or "").strip() != turn.reasoning:
        return f"the {parser.name} parser read the reasoning as {parsed.reasoning!r}"
    if not turn.calls and parsed.content.strip() != turn.content:
        return f"the {parser.name} parser read the answer as {parsed.content!r}"
    return ""


def describe_difference(
    renderer: ChatRenderer, ours: Sequence[int], theirs: Sequence[int], label: str, width: int = 6
) -> str:
    """Where two id sequences first differ, as tokens with `width` tokens of context on each side."""
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))

    def show(ids: Sequence[int]) -> str:
        pieces = [repr(renderer.decode([t])) for t in ids[max(0, at - width) : at + width]]
        mark = at - max(0, at - width)
        if mark < len(pieces):
            pieces[mark] = f"[{pieces[mark]}]"
        else:
            pieces.append("[end]")
        return " ".join(pieces)

    return (
        f"{label} differs at token {at} (ours {len(ours)} tokens, the chat template's {len(theirs)})\n"
        f"  bridge:   {show(ours)}\n  template: {show(theirs)}"
    )

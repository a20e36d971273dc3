"""Rendering with the model's own chat template, and the bridge tokens between turns.

The first prompt is rendered once. After that, sampled ids are never re-rendered: each turn appends
only the tokens the template puts *after* the model's sampled output (end-of-turn glue, the new tool
results or user messages, the next generation prompt). Those bridge tokens are derived from the chat
template by rendering a small stand-in conversation, so any model family with a template works;
a `ModelFamily` (openreward_rl.families) may supply a hand-written bridge proven against its
official template, its stop tokens and its reasoning markers.

The template-derived bridge copes with templates that drop an assistant's content beside tool calls
(Llama 3), refuse content and reasoning together (gpt-oss), want tool arguments as JSON strings
(DeepSeek), allow one call per turn, and write the turn's stop token as the start of the next
message (GLM's `<|observation|>`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import attrs

from openreward_rl.errors import ModelFamilyError
from openreward_rl.families.thinking import THINK_TAGS, ThinkingMarkers
from openreward_rl.families.token_text import decode_ids
from openreward_rl.families.tool_preamble import ToolPreamble, parser_preamble
from openreward_rl.families.vision import VisionSpec, images_in

__all__ = ["ChatRenderer", "RenderedFamily", "TemplateBridgeError"]

_USER_MARK = "ORRL_USER_7f3a"
_ASSISTANT_MARK = "ORRL_ASSISTANT_7f3a"
_REASONING_MARK = "ORRL_REASONING_7f3a"
_PLACEHOLDER_CALL: dict[str, Any] = {
    "id": "orrl_call_7f3a",
    "type": "function",
    "function": {"name": "orrl_tool_7f3a", "arguments": {}},
}
_PLACEHOLDER_TOOL = {
    "type": "function",
    "function": {"name": "orrl_tool_7f3a", "description": "", "parameters": {"type": "object", "properties": {}}},
}


class RenderedFamily(Protocol):
    """What a `ChatRenderer` reads of its model family (`families.base.ModelFamily` is one; this module
    names the shape so that it need not import the module that imports it)."""

    @property
    def name(self) -> str: ...
    @property
    def parser(self) -> str: ...
    @property
    def reasoning_key(self) -> str: ...
    @property
    def string_arguments(self) -> bool: ...
    @property
    def call_id_format(self) -> str: ...
    @property
    def tool_preamble(self) -> ToolPreamble | None: ...
    @property
    def tool_turn_stops(self) -> tuple[str, ...]: ...
    @property
    def final_turn_stops(self) -> tuple[str, ...]: ...
    @property
    def rewritten_closers(self) -> Mapping[str, str]: ...
    @property
    def thinking(self) -> ThinkingMarkers | None: ...
    @property
    def bridge_factory(self) -> Callable[[Any, Mapping[str, Any]], Any] | None: ...
    @property
    def encoder_factory(self) -> Callable[[Any], Any] | None: ...
    @property
    def vision(self) -> VisionSpec | None: ...
    def stop_token_ids(self, tokenizer: Any) -> tuple[int, ...]: ...


_PROMPTS_REMEMBERED = 64  # first prompts kept per renderer (a group of episodes starts together); starts over when full


class TemplateBridgeError(ModelFamilyError):
    """The chat template renders the stand-in conversation in a way the bridge cannot be cut from."""


@attrs.define(eq=False)
class ChatRenderer:
    """Renders prompts and bridges for one tokenizer (transformers) and its chat template.

    `template_kwargs` go to `apply_chat_template` (e.g. `{"enable_thinking": False}`).

    >>> from openreward_rl.assets import load_tokenizer
    >>> renderer = ChatRenderer(load_tokenizer("offline:qwen3"))
    >>> renderer.decode(renderer.render_prompt([{"role": "user", "content": "Hi"}]))
    '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
    """

    tokenizer: Any
    template_kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    family: RenderedFamily | None = None
    # first-prompt text -> its ids: a group of episodes on one task (GRPO's n samples) opens with the same prompt
    _prompt_ids: dict[str, tuple[int, ...]] = attrs.field(factory=dict, init=False, repr=False)

    @functools.cached_property
    def _encoder(self) -> Any:
        if self.family is None or self.family.encoder_factory is None:
            return None
        return self.family.encoder_factory(self.tokenizer)

    def _render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        add_generation_prompt: bool,
    ) -> str:
        if self._encoder is not None:  # the family's official encoder instead of a chat template
            try:
                return self._encoder.render(
                    list(messages),
                    list(tools) if tools else None,
                    add_generation_prompt=add_generation_prompt,
                    **self.template_kwargs,
                )
            except Exception as error:
                assert self.family is not None  # the encoder is the family's
                raise TemplateBridgeError(
                    f"the {self.family.name} encoder failed to render: {type(error).__name__}: {error}"
                ) from error
        try:
            return self.tokenizer.apply_chat_template(
                list(messages),
                tools=list(tools) if tools else None,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **self.template_kwargs,
            )
        except Exception as error:  # jinja raises many kinds; name the template problem
            raise TemplateBridgeError(f"the chat template failed to render: {type(error).__name__}: {error}") from error

    def render_text(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        add_generation_prompt: bool,
    ) -> str:
        """The model's own rendering of `messages` (its chat template, or its family's official encoder)."""
        return self._render(messages, tools, add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return decode_ids(self.tokenizer, ids)

    def render_prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
    ) -> list[int]:
        """The first prompt: messages (system prompt included) + tools in the model's native format; each
        image's placeholder expanded as the family's processor expands it (`families.vision`)."""
        text = self._render(messages, tools, add_generation_prompt=True)
        ids = self._prompt_ids.get(text)
        if ids is None:
            if len(self._prompt_ids) >= _PROMPTS_REMEMBERED:
                self._prompt_ids.clear()
            ids = self._prompt_ids[text] = tuple(self.encode(text))
        return self._with_images(list(ids), messages)

    @property
    def vision(self) -> VisionSpec | None:
        """The family's vision spec; None for a model that reads text only."""
        return self.family.vision if self.family is not None else None

    @property
    def reads_images(self) -> bool:
        return self.vision is not None

    @functools.cached_property
    def image_token_id(self) -> int | None:
        """The id of the image placeholder the processor repeats; None for a text model."""
        return self.vision.pad_id(self.tokenizer) if self.vision is not None else None

    def _with_images(self, ids: list[int], messages: Sequence[Mapping[str, Any]]) -> list[int]:
        if self.vision is None:
            return ids
        assert self.image_token_id is not None
        return self.vision.expand(ids, images_in(messages), self.image_token_id)

    @functools.cached_property
    def renders_tools(self) -> bool:
        """Whether the template (or encoder) writes the `tools` it is given into the prompt."""
        messages = [{"role": "user", "content": _USER_MARK}]
        return _PLACEHOLDER_CALL["function"]["name"] in self._render(
            messages, [_PLACEHOLDER_TOOL], add_generation_prompt=True
        )

    def tool_preamble(self, tools: Sequence[Mapping[str, Any]], *, parser: Any, example: bool = False) -> str | None:
        """The tool preamble that teaches `parser`'s calls (`families.tool_preamble.parser_preamble`:
        the parser's own, else the family's for the family's own parser) for `tools`, where the template
        drops `tools`; None otherwise (the template shows the tools itself, or no preamble teaches this parser's calls)."""
        preamble = parser_preamble(parser, self.family)
        if preamble is None or not tools or self.renders_tools:
            return None
        return preamble.render(tools, example=example)

    @functools.cached_property
    def generation_prompt(self) -> str:
        """The text the template appends to open the assistant's turn (may hold a `<think>` opener)."""
        messages = [{"role": "user", "content": _USER_MARK}]
        with_prompt = self._render(messages, None, add_generation_prompt=True)
        without = self._render(messages, None, add_generation_prompt=False)
        if not with_prompt.startswith(without):
            raise TemplateBridgeError("the generation prompt does not extend the rendered conversation")
        return with_prompt[len(without) :]

    @functools.cached_property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The ids the engine must stop on: the family's tool-call and final-turn closers, then eos."""
        ids = list(self.family.stop_token_ids(self.tokenizer)) if self.family else []
        eos = self.tokenizer.eos_token_id
        ids.extend([eos] if isinstance(eos, int) else list(eos) if isinstance(eos, (list, tuple)) else [])
        return tuple(dict.fromkeys(ids))

    @property
    def engine_stop_token_ids(self) -> tuple[int, ...]:
        """Stop ids the engine must be sent: the family's closers; none for the generic renderer (eos only)."""
        return self.stop_token_ids if self.family is not None else ()

    @property
    def bridge_needs_ids(self) -> bool:
        """Whether `bridge` wants `context_ids` and `sampled_ids` (a family's hand-written bridge)."""
        return self.family is not None and self.family.bridge_factory is not None

    @functools.cached_property
    def end_of_turn_ids(self) -> frozenset[int]:
        """Token ids that end an assistant turn: the eos token(s) and the family's closers."""
        return frozenset(self.stop_token_ids)

    @functools.cached_property
    def _thinking_markers(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        markers = self.family.thinking if self.family else THINK_TAGS
        if markers is None:
            raise ValueError(
                f"the {self.family.name if self.family else 'generic'} model family has no reasoning markers to mask"
            )
        return markers.ids(self.tokenizer)

    def thinking_mask(self, sampled_ids: Sequence[int]) -> list[bool]:
        """True on each sampled id outside the model's reasoning (markers included in the reasoning).

        Reasoning the generation prompt opened (e.g. a `<think>` it ends with) counts from the first id.
        ValueError when the family has no reasoning markers in this tokenizer.
        """
        opener, closer = self._thinking_markers
        prompt_ids = self.encode(self.generation_prompt)
        inside = _ends_open(prompt_ids, opener, closer)
        mask: list[bool] = []
        ids = list(sampled_ids)
        index = 0
        while index < len(ids):
            if not inside and ids[index : index + len(opener)] == list(opener):
                mask.extend([False] * len(opener))
                index += len(opener)
                inside = True
                continue
            if inside and ids[index : index + len(closer)] == list(closer):
                mask.extend([False] * len(closer))
                index += len(closer)
                inside = False
                continue
            mask.append(not inside)
            index += 1
        return mask[: len(ids)]

    @functools.cached_property
    def _family_bridge(self) -> Any:
        if self.family is None or self.family.bridge_factory is None:
            return None
        return self.family.bridge_factory(self.tokenizer, self.template_kwargs)

    def bridge(
        self,
        *,
        sampled_tail: str,
        assistant_tool_calls: Sequence[Mapping[str, Any]],
        new_messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        context_ids: Sequence[int] | None = None,
        sampled_ids: Sequence[int] | None = None,
    ) -> list[int]:
        """Tokens to append after the model's sampled ids so the context reads as the template renders
        `new_messages` after that assistant turn, ending with the next generation prompt.

        `sampled_tail` is the decoded end of the model's output (its last token, or the matched stop
        string): the template text up to and including it is what the model already produced.
        A family's hand-written bridge needs `context_ids` and `sampled_ids`; where it cannot prove
        its answer, the template-derived bridge is used.
        """
        if self._family_bridge is not None and context_ids is not None and sampled_ids is not None:
            ids = self._family_bridge.bridge(
                context_ids=context_ids, sampled_ids=sampled_ids, new_messages=new_messages, tools=tools
            )
            if ids is not None:
                return self._with_images(ids, new_messages)
        text = self.bridge_text(
            sampled_tail=sampled_tail, assistant_tool_calls=assistant_tool_calls, new_messages=new_messages, tools=tools
        )
        return self._with_images(self.encode(text), new_messages)

    def bridge_text(
        self,
        *,
        sampled_tail: str,
        assistant_tool_calls: Sequence[Mapping[str, Any]],
        new_messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> str:
        """The template-derived bridge, as text (see `bridge`)."""
        tail = sampled_tail
        calls = list(assistant_tool_calls)
        if self.family is not None:
            tail = self.family.rewritten_closers.get(sampled_tail, sampled_tail)
            if (
                not calls
                and sampled_tail in self.family.tool_turn_stops
                and sampled_tail not in self.family.final_turn_stops
            ):
                calls = [
                    _PLACEHOLDER_CALL
                ]  # a call turn none of whose calls ran (e.g. unknown tools): render it as one
        problems = []
        for base_after, full_after in self._stand_in_renders(calls, new_messages, tools):
            try:
                return self._cut_bridge(base_after, full_after, tail, sampled_tail)
            except TemplateBridgeError as error:  # the next stand-in may put its marker where the turn can be cut
                problems.append(str(error))
        raise TemplateBridgeError("; ".join(dict.fromkeys(problems)))

    def _cut_bridge(self, base_after: str, full_after: str, tail: str, sampled_tail: str) -> str:
        """The bridge from one stand-in's renders (after its marker), without and with the new messages."""
        if full_after.startswith(base_after):
            # The assistant turn renders the same either way: the model produced it up to `tail`.
            cut = base_after.rfind(tail) if tail else -1
            if cut >= 0:
                return full_after[cut + len(tail) :]
            following = full_after[len(base_after) :]
            if tail and following.startswith(tail):  # the stop token opens the next message (GLM <|observation|>)
                return following[len(tail) :]
            return self._closing_after_stop(base_after) + following
        cut = full_after.find(tail) if tail else -1
        if cut < 0:
            raise TemplateBridgeError(
                f"cannot find the end of the sampled turn {sampled_tail!r} in the template's rendering"
            )
        return full_after[cut + len(tail) :]

    def _stand_in_renders(
        self,
        assistant_tool_calls: Sequence[Mapping[str, Any]],
        new_messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> Iterator[tuple[str, str]]:
        """The template's text after the stand-in assistant's marker, without and with `new_messages`.

        Stand-ins are tried in turn, each the template renders with its marker: content with reasoning;
        content alone (templates that refuse both beside tool calls); the marker inside the last call's
        arguments (templates that drop content beside calls, or write it after the tool responses, as
        Gemma 4 does); each with arguments as objects, then as JSON strings (templates that concatenate
        them). The caller takes the first one it can cut the bridge from.
        """
        problems = []
        for assistant in _stand_ins(assistant_tool_calls):
            stand_in = [{"role": "user", "content": _USER_MARK}, assistant]
            try:
                base = self._render(stand_in, tools, add_generation_prompt=False)
                full = self._render([*stand_in, *new_messages], tools, add_generation_prompt=True)
                renders = _after_mark(base), _after_mark(full)
            except TemplateBridgeError as error:
                problems.append(str(error))
                continue
            yield renders
        if problems:
            raise TemplateBridgeError("; ".join(dict.fromkeys(problems)))

    def _closing_after_stop(self, base_after: str) -> str:
        """The model stopped on a stop string without its end-of-turn token: append the template's closer."""
        eos = self.tokenizer.eos_token or ""
        cut = base_after.rfind(eos) if eos else -1
        if cut < 0:
            raise TemplateBridgeError(
                "the template's assistant turn has no end-of-turn token to close a stopped turn with"
            )
        return base_after[cut:]


def _stand_ins(tool_calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    calls = [dict(c) for c in tool_calls]
    shapes: list[dict[str, Any]] = [
        {"role": "assistant", "content": _ASSISTANT_MARK, "reasoning_content": _REASONING_MARK},
        {"role": "assistant", "content": _ASSISTANT_MARK},
    ]
    if not calls:
        return shapes
    marked = [*calls[:-1], {**calls[-1], "function": {**calls[-1]["function"], "arguments": {"orrl": _ASSISTANT_MARK}}}]
    variants = []
    for with_calls in (calls, marked):
        for as_strings in (False, True):
            listed = [_arguments_as_string(c) if as_strings else c for c in with_calls]
            for shape in shapes if with_calls is calls else [{"role": "assistant", "content": ""}]:
                variants.append({**shape, "tool_calls": listed})
    return variants


def _arguments_as_string(call: Mapping[str, Any]) -> dict[str, Any]:
    function = dict(call["function"])
    if not isinstance(function.get("arguments"), str):
        function["arguments"] = json.dumps(function.get("arguments", {}), ensure_ascii=False)
    return {**call, "function": function}


def _ends_open(ids: Sequence[int], opener: Sequence[int], closer: Sequence[int]) -> bool:
    """Whether `ids` leave reasoning open: the last opener comes after the last closer."""

    def last(marker: Sequence[int]) -> int:
        width = len(marker)
        for start in range(len(ids) - width, -1, -1):
            if list(ids[start : start + width]) == list(marker):
                return start
        return -1

    return last(opener) > last(closer)


def _after_mark(rendered: str) -> str:
    cut = rendered.rfind(_ASSISTANT_MARK)
    if cut < 0:
        raise TemplateBridgeError("the chat template dropped the assistant message's content")
    return rendered[cut + len(_ASSISTANT_MARK) :]

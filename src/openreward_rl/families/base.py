"""`ModelFamily`: everything the episode loop must know about one family of models, in one object.

A family names its tool-call parser, the special tokens that end its tool-call and final turns (sent
to the engine as stop token ids, so a real server stops where the template expects), how its
reasoning is marked (so `train_thinking=False` can mask it), whether one turn may hold several calls,
and how its bridge is computed: from the chat template itself (the generic path in `chat.py`), or by
a hand-written bridge (`bridge_factory`) proven against the official template in the tests.

>>> from openreward_rl.families import get_family
>>> llama = get_family("llama3")
>>> llama.parser, llama.tool_turn_stops, llama.parallel_calls
('llama3_json', ('<|eom_id|>', '<|eot_id|>'), False)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from openreward_rl.errors import ModelFamilyError
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.history import HistoryRule
from openreward_rl.families.thinking import THINK_TAGS, ThinkingMarkers
from openreward_rl.families.tool_preamble import ToolPreamble
from openreward_rl.families.vision import VisionSpec

__all__ = ["ModelFamily", "THINK_TAGS", "ThinkingMarkers", "TurnBridge", "UnsupportedModelError"]


class UnsupportedModelError(ModelFamilyError):
    """The model's family is unknown, or known and refused (it cannot be made token-exact)."""


class TurnBridge(Protocol):
    """A hand-written bridge: the ids to append after a sampled turn, or None when it cannot prove them."""

    def bridge(
        self,
        *,
        context_ids: Sequence[int],
        sampled_ids: Sequence[int],
        new_messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int] | None: ...


@attrs.frozen
class ModelFamily:
    """One family of models: its parser, stop tokens, reasoning markers and bridge.

    `tool_turn_stops` / `final_turn_stops`: the special tokens that end a tool-call turn / a final
    answer in the family's template (the engine is asked to stop on all of them; the sampled stop
    token stays in the context, as the model produced it). `rewritten_closers` maps a closer the model
    samples to the one the template writes when it renders that turn as history (gpt-oss writes a
    sampled `<|return|>` back as `<|end|>`, Llama 3.1 a sampled `<|eom_id|>` as `<|eot_id|>`): the
    bridge continues after the sampled one. `refused` holds the reason when the family is known but
    cannot be token-exact; selecting it raises. Empty stops: the tokenizer's eos ends every turn.
    """

    name: str
    parser: str
    tool_turn_stops: tuple[str, ...]
    final_turn_stops: tuple[str, ...]
    parallel_calls: bool
    thinking: ThinkingMarkers | None = None
    reasoning_in_history: str = "kept verbatim as sampled"
    rewritten_closers: Mapping[str, str] = attrs.field(factory=dict)
    name_patterns: tuple[str, ...] = ()
    template_markers: tuple[tuple[str, ...], ...] = ()
    bridge_factory: Callable[[Any, Mapping[str, Any]], TurnBridge] | None = None
    # for models whose official rendering is code, not a Jinja template (DeepSeek-V4): tokenizer -> an
    # object whose `render(messages, tools, *, add_generation_prompt, **template_kwargs)` replaces
    # `tokenizer.apply_chat_template(..., tokenize=False)` in `ChatRenderer`
    encoder_factory: Callable[[Any], Any] | None = None
    template_source: str = ""
    refused: str | None = None
    # True where tests/test_families_episode.py proves an episode token-exact against the official
    # template named in `template_source`; every family is also proven on the user's own tokenizer at
    # start-up (`families.probe`), and for a family with False that probe is the only proof
    proven_here: bool = False
    # how the template reads an assistant message: the reasoning key (gpt-oss: `thinking`), and
    # whether call arguments must be JSON strings (DeepSeek). The start-up probe writes its messages so
    reasoning_key: str = "reasoning_content"
    string_arguments: bool = False
    # the call ids the probe writes (`str.format` with `index`, the turn, and `n`, the call): Mistral's
    # templates want exactly 9 letters or digits
    call_id_format: str = "call_{index}_{n}"
    # how the template rewrites history the episode keeps as sampled (`families.history`): the start-up
    # check compares the episode's ids mapped by it with the template's
    history_rule: HistoryRule | None = None
    # for a family whose chat template renders no tools and no tool calls (SmolLM2's plain ChatML): how
    # the tools are written into the system prompt (`families.tool_preamble`); the model then writes its
    # calls as text in its turn's content, which the template renders verbatim
    tool_preamble: ToolPreamble | None = None
    # for a vision-language family: its image placeholder and image processor (`families.vision`). The
    # renderer expands each image's placeholder as the processor does; None: the model reads text only,
    # and an image the environment sends becomes a counted placeholder text (`env.shown_text`)
    vision: VisionSpec | None = None

    @property
    def stops(self) -> tuple[str, ...]:
        """Every token that ends one of the family's assistant turns, tool-call turns first."""
        return tuple(dict.fromkeys([*self.tool_turn_stops, *self.final_turn_stops]))

    def stop_token_ids(self, tokenizer: Any) -> tuple[int, ...]:
        """The stop tokens as ids of `tokenizer`; ModelFamilyError naming a stop token it lacks."""
        ids = []
        for token in self.stops:
            token_id = tokenizer.convert_tokens_to_ids(token)
            if not isinstance(token_id, int) or token_id == tokenizer.unk_token_id:
                raise ModelFamilyError(
                    f"the {self.name} family stops on {token!r}, which this tokenizer does not have as one token"
                )
            ids.append(token_id)
        return tuple(ids)

    def check_supported(self) -> None:
        if self.refused:
            raise UnsupportedModelError(f"the {self.name} model family is not supported: {self.refused}")

    def renderer(self, tokenizer: Any, template_kwargs: Mapping[str, Any] | None = None) -> ChatRenderer:
        """A `ChatRenderer` for this family over `tokenizer` (its chat template renders the first prompt)."""
        self.check_supported()
        return ChatRenderer(tokenizer, dict(template_kwargs or {}), family=self)

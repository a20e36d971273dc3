"""Mistral's training format: the sampled turn kept verbatim, Mistral's next-turn format appended.

Mistral's chat templates (and its official encoder, mistral-common) render a whole conversation, not an
append-only one: the tool list goes before the *last* user message, the system prompt into the last
user message (Mistral-Nemo's template: only while that message is the conversation's last; v7+
templates write it once, as `[SYSTEM_PROMPT]`), and mistral-common's v2 encoder drops tool calls and
results before the last user message. An episode cannot follow that, so the `mistral` family states a
**training format** (as renderers and tinker-cookbook do for their families):

1. the first prompt is the template's render of the system prompt, the tools and the user message;
2. every sampled turn stays in the context as sampled, its closer (`</s>`) included;
3. after it, each new message is appended in the format the template writes it in where nothing
   moves (a conversation without a system prompt or tools): a tool result as the template writes it
   after a call (Nemo: `[TOOL_RESULTS]{"content": …, "call_id": …}[/TOOL_RESULTS]`), a user message as
   `[INST]…[/INST]`; the tool list and the system prompt stay where the first prompt put them;
4. Mistral has no generation prompt: the model answers right after `[/INST]` or `[/TOOL_RESULTS]`.

Where the template agrees and where it departs is tested against the official artefacts
(tests/test_families_mistral.py): mistral-common's v3 encoder (the official Nemo tokenizer,
tekken_240718) agrees token for token while the episode has one user message; Nemo's own template
drops the system prompt once the assistant answers (`MISTRAL_SYSTEM_PROMPT`, the rule the start-up
check applies); after a second user message mistral-common moves the tool list and the system prompt
to it (Nemo's template cannot render a user message after tool results at all), which the format does
not follow; and a tool result that is not JSON Nemo's template writes raw, mistral-common JSON-quoted:
the format follows the template, which the serving engine renders with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = ["MISTRAL_SYSTEM_PROMPT", "MistralBridge", "SystemPromptDropped", "mistral_bridge"]

_USER = "ORRL_USER_7f3a"
_ASSISTANT = "ORRL_ASSISTANT_7f3a"
_STAND_IN_ID = "orrl7f3a0"  # Mistral templates want 9-character alphanumeric call ids


@attrs.define(eq=False)
class MistralBridge:
    """The training format's bridge (module docstring): each new message in the tokenizer's own
    template format, as that template writes it where nothing moves; never None."""

    tokenizer: Any
    template_kwargs: Mapping[str, Any] = attrs.field(factory=dict)

    def bridge(
        self,
        *,
        context_ids: Sequence[int],
        sampled_ids: Sequence[int],
        new_messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int] | None:
        text = "".join(self.message_text(m) for m in new_messages)
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    def message_text(self, message: Mapping[str, Any]) -> str:
        """One new message as the template writes it after an assistant turn, with no system prompt or tools."""
        if message["role"] == "user":
            # after a stand-in exchange, so that what a template writes once at the start (a default system prompt) stays put
            before: list[dict[str, Any]] = [
                {"role": "user", "content": _USER},
                {"role": "assistant", "content": _ASSISTANT},
            ]
            return self._after(self._render(before), [*before, {"role": "user", "content": message["content"]}])
        if message["role"] == "tool":
            call_id = str(message.get("tool_call_id") or _STAND_IN_ID)
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": message.get("name") or "tool", "arguments": {}},
            }
            before = [{"role": "user", "content": _USER}, {"role": "assistant", "content": "", "tool_calls": [call]}]
            return self._after(self._render(before), [*before, dict(message)])
        raise ValueError(
            f"the mistral training format appends tool results and user messages, not {message['role']!r} messages"
        )

    def _render(self, messages: list[dict[str, Any]]) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=None, tokenize=False, add_generation_prompt=False, **self.template_kwargs
        )

    def _after(self, base: str, messages: list[dict[str, Any]]) -> str:
        full = self._render(messages)
        if not full.startswith(base):
            raise ValueError(
                f"the chat template rewrites the conversation it is appending {messages[-1]['role']!r} to; no training format can be taken from it"
            )
        return full[len(base) :]


def mistral_bridge(tokenizer: Any, template_kwargs: Mapping[str, Any]) -> MistralBridge:
    """The `mistral` family's `bridge_factory`."""
    return MistralBridge(tokenizer, dict(template_kwargs))


@attrs.frozen
class SystemPromptDropped:
    """A `HistoryRule`: the template writes the system prompt (`system + separator` at the start of the
    first user message, between `opener` and `closer`) only while that message is the conversation's last;
    once anything follows it, its render has the user message alone. The episode keeps the system prompt
    where the model saw it. The system prompt is taken to end at the first `separator` in that message,
    so a system prompt holding the separator (a blank line) is not recognised (the check then fails)."""

    opener: str
    closer: str
    separator: str
    why: str

    def __call__(self, tokenizer: Any, ids: list[int]) -> list[int]:
        text = tokenizer.decode(ids, skip_special_tokens=False)
        start = text.find(self.opener)
        end = text.find(self.closer, start + len(self.opener)) if start >= 0 else -1
        if end < 0 or not text[end + len(self.closer) :]:
            return list(ids)  # nothing follows the first user message yet: the template writes the system prompt
        body = text[start + len(self.opener) : end]
        cut = body.find(self.separator)
        if cut < 0:
            return list(ids)  # no system prompt in the first user message (v7+ templates write it apart)
        kept = text[: start + len(self.opener)] + body[cut + len(self.separator) :] + text[end:]
        return list(tokenizer.encode(kept, add_special_tokens=False))

    def __str__(self) -> str:
        return self.why


MISTRAL_SYSTEM_PROMPT = SystemPromptDropped(
    "[INST]",
    "[/INST]",
    "\n\n",
    "Mistral-Nemo's template writes the system prompt into the last user message only while it is the conversation's "
    "last message; the episode keeps it where the first prompt put it, as the model saw it (mistral-common's v3 "
    "encoder keeps it there too)",
)

"""Cohere Command R7B / Command A: tool results numbered by the call's running index in the conversation.

Their template writes each call's `tool_call_id` as the call's index among all calls of the conversation,
in the `<|START_ACTION|>` list and in the `<|START_TOOL_RESULT|>` entries that answer it. The
template-derived bridge renders the new messages after a stand-in turn alone, so its calls would be
numbered from 0. `CohereBridge` renders them after stand-ins for every call the context already holds:
the results get the indices the template gives them in the whole conversation. Everything else is the
template's own text (the bridge cuts it from the template's render, as the template-derived one does).
No Command tokenizer or tool template ships in a package reachable here: the start-up check proves this
bridge on the user's tokenizer and template.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.families.token_text import decode_ids

__all__ = ["CohereBridge", "cohere_bridge"]

ACTION_OPEN, ACTION_CLOSE = "<|START_ACTION|>", "<|END_ACTION|>"
_USER = "ORRL_USER_7f3a"


def count_calls(text: str) -> int:
    """How many calls the `<|START_ACTION|>` lists in `text` hold (lists that are not JSON count as none).

    >>> count_calls('<|START_ACTION|>[{"tool_call_id": "0"}, {"tool_call_id": "1"}]<|END_ACTION|> x <|START_ACTION|>[{}]<|END_ACTION|>')
    3
    """
    total = 0
    for chunk in text.split(ACTION_OPEN)[1:]:
        body = chunk.split(ACTION_CLOSE, 1)[0]
        try:
            items = json.loads(body)
        except ValueError:
            continue
        total += len(items) if isinstance(items, list) else 0
    return total


@attrs.define(eq=False)
class CohereBridge:
    """Renders the new messages after stand-ins for the calls already in the context (module docstring)."""

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
        earlier = count_calls(decode_ids(self.tokenizer, list(context_ids)))
        answered = [m for m in new_messages if m["role"] == "tool"]
        stand_in: list[dict[str, Any]] = [{"role": "user", "content": _USER}]
        if earlier:
            prior = [_call(f"orrl_prior_{n}", "orrl_tool") for n in range(earlier)]
            stand_in += [{"role": "assistant", "content": "", "tool_calls": prior}]
            stand_in += [{"role": "tool", "tool_call_id": c["id"], "content": "0"} for c in prior]
        turn_calls = [
            _call(str(m.get("tool_call_id") or f"orrl_call_{n}"), str(m.get("name") or "orrl_tool"))
            for n, m in enumerate(answered)
        ]
        stand_in.append(
            {"role": "assistant", "content": "", "tool_calls": turn_calls}
            if turn_calls
            else {"role": "assistant", "content": "0"}
        )
        try:
            base = self._render(stand_in, tools, generation=False)
            full = self._render([*stand_in, *new_messages], tools, generation=True)
        except Exception:  # a template that cannot render the stand-in: the template-derived bridge answers
            return None
        closer = self.tokenizer.eos_token or ""
        cut = base.rfind(closer) + len(closer) if closer and closer in base else -1
        if cut < len(closer) or not full.startswith(base[:cut]):
            return None
        return list(self.tokenizer.encode(full[cut:], add_special_tokens=False))

    def _render(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, *, generation: bool
    ) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=generation,
            **self.template_kwargs,
        )


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": {}}}


def cohere_bridge(tokenizer: Any, template_kwargs: Mapping[str, Any]) -> CohereBridge:
    """The `cohere` family's `bridge_factory`."""
    return CohereBridge(tokenizer, dict(template_kwargs))

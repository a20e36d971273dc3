"""Phi-4-mini's training format: Microsoft's message format, with the tool calls its template never writes.

Phi-4-mini-instruct's template (`microsoft/Phi-4-mini-instruct` tokenizer_config) writes every message as
`<|role|>content<|end|>`, the tool definitions only as a system message's `tools` string
(`<|system|>…<|tool|>TOOLS<|/tool|><|end|>`), and no assistant message's `tool_calls`: a call turn as the
model samples it can never equal the template's history. `Phi4MiniFormat` (the `phi-4-mini-format`
family, opt-in) states the format:

- `<|system|>SYSTEM<|tool|>TOOLS<|/tool|><|end|>` where TOOLS is the JSON list of the tools' `function`
  objects (the template's `tools` string), `<|user|>…<|end|>`, and the generation prompt `<|assistant|>`;
- an assistant turn as sampled: `<|assistant|>CONTENT<|tool_call|>[{"name": …, "arguments": …}, …]<|/tool_call|><|end|>`
  (the call markers are Phi-4-mini's own special tokens; the list is the model card's call shape);
- a tool result as the template writes a `tool` message, `<|tool|>CONTENT<|end|>`;
- no `<|endoftext|>` after the last message (the template appends one when it writes no generation prompt).

No Phi-4-mini tokenizer ships in a package reachable here: the start-up check proves the format on the
user's tokenizer (its special tokens single tokens, the parser reading its calls, the bridge appending
exactly what the format writes) and names where it departs from the user's template.

>>> Phi4MiniFormat().render([{"role": "user", "content": "Hi"}], None, add_generation_prompt=True)
'<|user|>Hi<|end|><|assistant|>'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = ["Phi4MiniFormat", "phi4_mini_format"]

END = "<|end|>"


@attrs.frozen
class Phi4MiniFormat:
    """Renders the format (module docstring)."""

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        add_generation_prompt: bool,
        **template_kwargs: Any,
    ) -> str:
        parts = []
        system = [str(m.get("content") or "") for m in messages if m["role"] == "system"]
        if system or tools:
            listed = (
                f"<|tool|>{json.dumps([t.get('function', t) for t in tools], ensure_ascii=False)}<|/tool|>"
                if tools
                else ""
            )
            parts.append(f"<|system|>{chr(10).join(system)}{listed}{END}")
        for message in messages:
            role = message["role"]
            if role == "system":
                continue
            if role not in ("user", "assistant", "tool"):
                raise ValueError(f"the Phi-4-mini training format has no {role!r} messages")
            calls = message.get("tool_calls") or [] if role == "assistant" else []
            listed_calls = [
                {"name": c["function"]["name"], "arguments": _arguments(c["function"].get("arguments"))} for c in calls
            ]
            body = f"<|tool_call|>{json.dumps(listed_calls, ensure_ascii=False)}<|/tool_call|>" if listed_calls else ""
            parts.append(f"<|{role}|>{message.get('content') or ''}{body}{END}")
        if add_generation_prompt:
            parts.append("<|assistant|>")
        return "".join(parts)


def _arguments(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else (value or {})


def phi4_mini_format(tokenizer: Any) -> Phi4MiniFormat:
    """The `phi-4-mini-format` family's `encoder_factory`."""
    return Phi4MiniFormat()

"""DeepSeek-V3 / R1's training format: DeepSeek's own R1-0528 tool format, every turn kept as sampled.

DeepSeek-V3, V3-0324, R1 and the R1 distills share one tool format (`<｜tool▁calls▁begin｜>` …, results in
`<｜tool▁outputs▁begin｜>` …), but their templates cannot hold a multi-turn tool episode append-only:
V3's and the distills' write a call only for an assistant message whose content is None (which
transformers never passes), R1's (trl `deepseekv3.jinja`) writes the `<｜tool▁calls▁begin｜>` opener only
for the first call turn of a conversation and drops `<｜tool▁outputs▁end｜>` before a later call.
R1-0528's template fixes both (every call turn opened and closed, every result run opened, closed
before the next assistant turn): the `deepseek-v3` family runs it as it is, proven exact here.

`DeepSeekV3Format` writes that R1-0528 format for the others (`deepseek-v3-format`, opt-in):

- `<｜begin▁of▁sentence｜>`, the system prompts joined by a blank line; no tool list (no DeepSeek V3/R1
  template writes one: describe the tools in the system prompt, `system_prompt_template` with `{tools}`);
- a user message `<｜User｜>…<｜Assistant｜>`, then the generation prompt the model's own template writes
  after `<｜Assistant｜>` (R1 and the distills: `<think>\\n`; V3, V3-0324, R1-0528: nothing);
- an assistant turn as sampled: its reasoning as `<think>\\n…\\n</think>\\n\\n` (the part the generation
  prompt opened is not repeated), its content, its calls
  (`<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>`,
  joined by `\\n`, then `<｜tool▁calls▁end｜>`), `<｜end▁of▁sentence｜>`;
- a run of tool results `<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>…<｜tool▁output▁end｜>`, the next
  ones after `\\n`, closed by `<｜tool▁outputs▁end｜>` unless a user message follows (R1-0528 writes none
  there); the model answers right after it, after the same generation prompt as after a user message
  without `<｜Assistant｜>` (R1's template writes none there, so an R1 model would reason in a turn its
  generation prompt did not open, and the parser, which reads one generation prompt, would misread it).

Where it departs from R1-0528's template: reasoning stays in history as sampled (the template keeps only
the text after `</think>` of every assistant turn); with no reasoning, they are the same text.

>>> fmt = DeepSeekV3Format(prefill="<think>\\n")
>>> fmt.render([{"role": "user", "content": "Hi"}], None, add_generation_prompt=True)
'<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>\\n'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = ["DeepSeekV3Format", "deepseek_v3_format"]

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"
CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
OUTPUTS_BEGIN, OUTPUTS_END = "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>"
OUTPUT_BEGIN, OUTPUT_END = "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"
_MARK = "ORRL_USER_7f3a"


@attrs.frozen
class DeepSeekV3Format:
    """Renders the format (module docstring); `prefill` is what the generation prompt writes after `<｜Assistant｜>`."""

    prefill: str = ""

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        add_generation_prompt: bool,
        **template_kwargs: Any,
    ) -> str:
        system = "\n\n".join(str(m.get("content") or "") for m in messages if m["role"] == "system")
        parts = [BOS, system]
        previous = None
        for index, message in enumerate(messages):
            role = message["role"]
            following = messages[index + 1]["role"] if index + 1 < len(messages) else None
            if role == "user":
                parts.append(f"{USER}{message.get('content') or ''}{ASSISTANT}")
            elif role == "assistant":
                parts.append(self._assistant(message, prompted=previous in ("user", "tool")))
            elif role == "tool":
                parts.append(
                    (OUTPUTS_BEGIN if previous != "tool" else "\n")
                    + f"{OUTPUT_BEGIN}{message.get('content') or ''}{OUTPUT_END}"
                )
                if following not in ("tool", "user"):
                    parts.append(OUTPUTS_END)
            elif role != "system":
                raise ValueError(f"the DeepSeek-V3 training format has no {role!r} messages")
            previous = role
        if add_generation_prompt:
            if previous in ("user", "tool"):
                parts.append(self.prefill)
            elif previous == "assistant":
                parts.append(ASSISTANT + self.prefill)
        return "".join(parts)

    def _assistant(self, message: Mapping[str, Any], *, prompted: bool) -> str:
        opened = prompted and self.prefill.rstrip("\n").endswith("<think>")
        reasoning = message.get("reasoning_content")
        think = ""
        if opened:
            think = self.prefill + f"{reasoning or ''}\n</think>\n\n"
        elif reasoning:
            think = f"<think>\n{reasoning}\n</think>\n\n"
        elif prompted:
            think = self.prefill
        calls = [_call(c) for c in message.get("tool_calls") or []]
        body = f"{CALLS_BEGIN}{chr(10).join(calls)}{CALLS_END}" if calls else ""
        return f"{think}{message.get('content') or ''}{body}{EOS}"


def _call(call: Mapping[str, Any]) -> str:
    function = call["function"]
    arguments = function.get("arguments")
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)
    return f"{CALL_BEGIN}{call.get('type') or 'function'}{SEP}{function['name']}\n```json\n{text}\n```{CALL_END}"


def deepseek_v3_format(tokenizer: Any) -> DeepSeekV3Format:
    """The `deepseek-v3-format` family's `encoder_factory`: the format, with the generation prompt the
    tokenizer's own template writes after a user message (nothing when it has no template)."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        return DeepSeekV3Format()
    messages = [{"role": "user", "content": _MARK}]
    with_prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    without = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    tail = with_prompt[len(without) :] if with_prompt.startswith(without) else ""
    return DeepSeekV3Format(prefill=tail.removeprefix(ASSISTANT))

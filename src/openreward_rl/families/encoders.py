"""DeepSeek-V3.2 and V4 render through their official encoders (Python), not Jinja chat templates.

DeepSeek ships each encoder beside the tokenizer (`encoding_dsv32.py` / `encoding_dsv4.py`, or under
`encoding/` in a checkpoint directory). `DeepSeekEncoder` loads it from the tokenizer's directory and
answers the `apply_chat_template` questions `ChatRenderer` asks, with these adaptations, the same for
every render (the parity tests render their reference through the same adapter):

- the OpenAI `tools` list goes on the system message (the encoders read `tools` from a message; an
  empty system message is added when there is none);
- tool-call arguments are passed as JSON strings (the encoders `json.loads` them);
- `thinking_mode` is "thinking" when `enable_thinking` (or `thinking`) is true, else "chat";
- the encoders always open the assistant turn after a user message (V3.2 also after tool results);
  without `add_generation_prompt` that opener is cut off.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

__all__ = ["DeepSeekEncoder", "dsv4_encoder", "dsv32_encoder", "encoder_from_checkpoint"]


@attrs.define(eq=False)
class DeepSeekEncoder:
    """`render(messages, tools, *, add_generation_prompt, **template_kwargs) -> str` by an official encoder module."""

    module: ModuleType
    openers: tuple[str, ...]  # what the encoder writes to open the assistant turn (cut without a generation prompt)
    passes_effort: bool = False  # V4's encode_messages takes reasoning_effort

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        add_generation_prompt: bool,
        **template_kwargs: Any,
    ) -> str:
        prepared = [_with_string_arguments(m) for m in messages]
        if tools:
            if prepared and prepared[0].get("role") == "system":
                prepared[0] = {**prepared[0], "tools": list(tools)}
            else:
                prepared.insert(0, {"role": "system", "content": "", "tools": list(tools)})
        thinking = bool(template_kwargs.get("enable_thinking", template_kwargs.get("thinking", False)))
        options: dict[str, Any] = {"thinking_mode": "thinking" if thinking else "chat"}
        if self.passes_effort:
            options["reasoning_effort"] = template_kwargs.get("reasoning_effort")
        text = self.module.encode_messages(prepared, **options)
        if not add_generation_prompt and prepared and prepared[-1].get("role") != "assistant":
            for opener in self.openers:
                if text.endswith(opener):
                    return text[: -len(opener)]
        return text


def _with_string_arguments(message: Mapping[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if not calls:
        return dict(message)
    fixed = []
    for call in calls:
        function = dict(call["function"])
        if not isinstance(function.get("arguments"), str):
            function["arguments"] = json.dumps(function.get("arguments") or {}, ensure_ascii=False)
        fixed.append({**call, "function": function})
    return {**message, "tool_calls": fixed}


def encoder_from_checkpoint(file_name: str, **options: Any) -> Callable[[Any], DeepSeekEncoder]:
    """An `encoder_factory`: the encoder `file_name` beside the tokenizer (its `name_or_path` directory, or
    `encoding/` under it); FileNotFoundError naming where it looked."""

    def build(tokenizer: Any) -> DeepSeekEncoder:
        directory = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
        candidates = [directory / file_name, directory / "encoding" / file_name]
        for path in candidates:
            if path.is_file():
                spec = importlib.util.spec_from_file_location(
                    f"_openreward_rl_{path.stem}_{abs(hash(str(path)))}", path
                )
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                return DeepSeekEncoder(module, **options)
        raise FileNotFoundError(
            f"this model renders with its official encoder {file_name}, which is not beside the tokenizer: looked for {', '.join(map(str, candidates))}"
        )

    return build


dsv4_encoder = encoder_from_checkpoint(
    "encoding_dsv4.py", openers=("<｜Assistant｜><think>", "<｜Assistant｜></think>"), passes_effort=True
)
dsv32_encoder = encoder_from_checkpoint(
    "encoding_dsv32.py", openers=("<｜Assistant｜><think>", "<｜Assistant｜></think>", "\n\n<think>", "\n\n</think>")
)

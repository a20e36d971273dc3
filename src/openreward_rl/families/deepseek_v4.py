"""DeepSeek-V4 renders through its official encoder, `encoding_dsv4.py`, not a Jinja chat template.

DeepSeek ships the encoder as Python beside the tokenizer (`encoding_dsv4.py`, or `encoding/encoding_dsv4.py`
in a checkpoint directory). `DSV4Encoder` loads it from the tokenizer's directory and answers the
`apply_chat_template` questions the renderer asks, with these adaptations, the same for every render:

- the OpenAI `tools` list goes on the system message (the encoder reads `tools` from a message; an
  empty system message is added when there is none);
- tool-call arguments are passed as JSON strings (the encoder `json.loads` them);
- `thinking_mode` is "thinking" when `enable_thinking` (or `thinking`) is true, else "chat";
- the encoder always opens the assistant turn after a final user message; without
  `add_generation_prompt` that opener (`<｜Assistant｜>` + `<think>` or `</think>`) is cut off.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

__all__ = ["DSV4Encoder", "dsv4_encoder"]

ENCODER_FILES = ("encoding_dsv4.py", "encoding/encoding_dsv4.py")


@attrs.define(eq=False)
class DSV4Encoder:
    """`render(messages, tools, add_generation_prompt, **template_kwargs) -> str` by the official encoder."""

    module: ModuleType

    def render(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, *, add_generation_prompt: bool, **template_kwargs: Any
    ) -> str:
        prepared = [_with_string_arguments(m) for m in messages]
        if tools:
            if prepared and prepared[0].get("role") == "system":
                prepared[0] = {**prepared[0], "tools": list(tools)}
            else:
                prepared.insert(0, {"role": "system", "content": "", "tools": list(tools)})
        thinking = bool(template_kwargs.get("enable_thinking", template_kwargs.get("thinking", False)))
        mode = "thinking" if thinking else "chat"
        text = self.module.encode_messages(prepared, thinking_mode=mode, reasoning_effort=template_kwargs.get("reasoning_effort"))
        if not add_generation_prompt and prepared and prepared[-1].get("role") in ("user", "tool", "developer"):
            for opener in (self.module.thinking_start_token, self.module.thinking_end_token):
                suffix = self.module.ASSISTANT_SP_TOKEN + opener
                if text.endswith(suffix):
                    return text[: -len(suffix)]
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


def dsv4_encoder(tokenizer: Any) -> DSV4Encoder:
    """The encoder shipped beside `tokenizer` (its `name_or_path` directory); FileNotFoundError naming
    where it was looked for."""
    directory = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
    for relative in ENCODER_FILES:
        path = directory / relative
        if path.is_file():
            spec = importlib.util.spec_from_file_location(f"_openreward_rl_encoding_dsv4_{abs(hash(str(path)))}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return DSV4Encoder(module)
    raise FileNotFoundError(
        f"DeepSeek-V4 renders with its official encoder, which is not beside the tokenizer: looked for "
        f"{', '.join(str(directory / r) for r in ENCODER_FILES)}"
    )

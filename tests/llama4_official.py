"""Meta's official Llama 4 chat format (PyPI llama-models 0.3.0), as a test reference for the `llama4` family.

llama-models ships Llama 4's tokenizer (`llama_models/llama4/tokenizer.model`, tiktoken BPE ranks with
the special tokens its `tokenizer.py` lists) and its chat format (`llama_models/llama4/chat_format.py`,
`ChatFormat.encode_dialog_prompt`, calls written by `llama3/tool_utils.py`). No Llama 4 HF chat template
ships in a package reachable here, so these are the official artefacts the family is checked against:

- `llama4_tokenizer()`: a transformers tokenizer converted from that tokenizer.model (transformers'
  `TikTokenConverter`, the special tokens at the ids llama-models gives them); `same_ids` is the guard
  that it encodes as llama-models' own tiktoken Tokenizer does;
- `OfficialLlama4Encoder`: `render(messages, tools, *, add_generation_prompt)` (the `encoder_factory`
  shape `ChatRenderer` takes) over `ChatFormat.encode_dialog_prompt` with the pythonic call format
  (`ToolPromptFormat.python_list`). Adaptations: ChatFormat has no tool-definition format, so the tools'
  JSON goes at the end of the system message (the first prompt only); call arguments are passed as
  dicts; a message with calls stops with `end_of_message` (ChatFormat then ends it with `<|eom|>`, as
  it ends tool results); without a generation prompt the assistant header ChatFormat always appends is
  cut off. The text is the decode of ChatFormat's ids (checked to encode back to the same ids).

chat_format.py imports its image transforms (`llama4/preprocess.py`, which needs torchvision) at module
level; they only serve images, which these conversations have none of. Where torchvision is missing (it
pins its own torch), `_chat_format` puts a stand-in for that one module that raises if an image is ever
transformed: the text path, all this reference uses, is llama-models' code unchanged.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs


def _model_path() -> Path:
    import llama_models

    return Path(llama_models.__file__).parent / "llama4" / "tokenizer.model"


@functools.cache
def official_tokenizer() -> Any:
    from llama_models.llama4.tokenizer import Tokenizer

    return Tokenizer(_model_path())


@functools.cache
def llama4_tokenizer() -> Any:
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    official = official_tokenizer()
    specials = sorted(official.special_tokens, key=official.special_tokens.get)
    converted = TikTokenConverter(vocab_file=str(_model_path()), pattern=official.O200K_PATTERN).converted()
    converted.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=converted, bos_token="<|begin_of_text|>", eos_token="<|eot|>")
    tokenizer.name_or_path = (
        "meta-llama/Llama-4-Scout-17B-16E-Instruct"  # the name selects the family; no chat template
    )
    return tokenizer


def same_ids(text: str) -> bool:
    ours = llama4_tokenizer().encode(text, add_special_tokens=False)
    return ours == official_tokenizer().encode(text, bos=False, eos=False, allowed_special="all")


@attrs.define(eq=False)
class OfficialLlama4Encoder:
    """`render` over llama-models' `ChatFormat` (module docstring)."""

    last_ids: list[int] = attrs.field(factory=list)  # ChatFormat's own ids of the last render

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        add_generation_prompt: bool,
        **template_kwargs: Any,
    ) -> str:
        from llama_models.datatypes import RawMessage, StopReason, ToolCall, ToolPromptFormat

        ChatFormat = _chat_format()

        raw = []
        listed = list(messages)
        if tools and not (listed and listed[0]["role"] == "system"):
            listed.insert(0, {"role": "system", "content": ""})
        for index, message in enumerate(listed):
            content = message.get("content") or ""
            if message["role"] == "system" and tools and index == 0:
                content = (content + "\n\n" if content else "") + "Tools: " + json.dumps(list(tools))
            calls = [
                ToolCall(
                    call_id=c["id"],
                    tool_name=c["function"]["name"],
                    arguments=_arguments(c),
                    arguments_json=json.dumps(_arguments(c)),
                )
                for c in message.get("tool_calls") or []
            ]
            stop = StopReason.end_of_message if calls else StopReason.end_of_turn
            raw.append(RawMessage(role=message["role"], content=content, tool_calls=calls, stop_reason=stop))
        chat = ChatFormat(official_tokenizer())
        ids = list(chat.encode_dialog_prompt(raw, tool_prompt_format=ToolPromptFormat.python_list).tokens)
        if not add_generation_prompt:
            header = chat._encode_header("assistant")
            assert ids[-len(header) :] == header
            ids = ids[: -len(header)]
        self.last_ids = ids
        return official_tokenizer().decode(ids)


def _chat_format() -> Any:
    import importlib
    import sys
    import types

    try:
        importlib.import_module("llama_models.llama4.preprocess")
    except ModuleNotFoundError as error:
        if error.name != "torchvision":
            raise

        class _ImagesOnly:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                raise RuntimeError("image transforms are not available without torchvision (text-only reference)")

        stand_in = types.ModuleType("llama_models.llama4.preprocess")
        stand_in.ResizeNormalizeImageTransform = stand_in.VariableSizeImageTransform = _ImagesOnly  # type: ignore[attr-defined]
        sys.modules["llama_models.llama4.preprocess"] = stand_in
    return importlib.import_module("llama_models.llama4.chat_format").ChatFormat


def _arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    arguments = call["function"].get("arguments") or {}
    return json.loads(arguments) if isinstance(arguments, str) else dict(arguments)

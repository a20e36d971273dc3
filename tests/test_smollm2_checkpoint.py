"""The packaged SmolLM2 (`offline:smollm2`) is read from its GGUF once and kept as an ordinary checkpoint folder
(`engines.transformers.smollm2_model_dir`): that folder must be the GGUF's model and tokenizer exactly, so every
test and run that loads `offline:smollm2` from it loads what the GGUF holds."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from openreward_rl.assets import load_tokenizer, smollm2_converted_dir, smollm2_gguf
from openreward_rl.engines.transformers import load_model, smollm2_model_dir, trainable_gguf


def test_the_converted_smollm2_is_the_ggufs_weights_and_tokenizer_exactly() -> None:
    directory, gguf_file = smollm2_gguf()
    from_gguf = AutoModelForCausalLM.from_pretrained(str(directory), gguf_file=gguf_file, dtype=torch.float32)
    gguf_tokenizer = AutoTokenizer.from_pretrained(str(directory), gguf_file=gguf_file)
    assert from_gguf.is_quantized  # transformers marks a dequantized GGUF model quantized: the Trainer refuses it
    assert trainable_gguf(from_gguf) is from_gguf and not from_gguf.is_quantized and from_gguf.hf_quantizer is None
    assert not hasattr(from_gguf.config, "quantization_config")

    model, tokenizer = load_model("offline:smollm2", device="cpu")
    assert smollm2_model_dir() == smollm2_converted_dir("model") and model.name_or_path == "offline:smollm2"
    assert not getattr(model, "is_quantized", False)
    expected, loaded = from_gguf.state_dict(), model.state_dict()
    assert expected.keys() == loaded.keys()
    assert all(torch.equal(expected[name], loaded[name]) for name in expected)  # float32 both: bit for bit
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied as in the GGUF
    assert model.generation_config.to_dict() == from_gguf.generation_config.to_dict()

    text = 'Hi <|im_start|>user\nWhat  is 2+2?<|im_end|> ü 中文 <tool_call>{"a": 1}</tool_call>\n\n  x'
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    for converted in (tokenizer, load_tokenizer("offline:smollm2")):
        assert converted.get_vocab() == gguf_tokenizer.get_vocab()
        assert converted.added_tokens_decoder == gguf_tokenizer.added_tokens_decoder
        assert (converted.bos_token, converted.eos_token, converted.pad_token) == (
            gguf_tokenizer.bos_token,
            gguf_tokenizer.eos_token,
            gguf_tokenizer.pad_token,
        )
        assert converted.chat_template == gguf_tokenizer.chat_template
        assert converted(text).input_ids == gguf_tokenizer(text).input_ids
        assert converted.apply_chat_template(
            messages, add_generation_prompt=True
        ) == gguf_tokenizer.apply_chat_template(messages, add_generation_prompt=True)

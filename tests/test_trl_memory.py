"""The training pass's memory on the TRL backend: gradient checkpointing is on unless turned off, sft releases its
optimizer once trained, and a GRPO step's memory stays within a bound over the model's weights.

Without checkpointing, a step keeps every layer's activations for the whole batch until its backward pass (the
CPU quickstart's `train` process was reported at 15.6 GB resident, killed for memory). The slow test runs one
real GRPO step of SmolLM2-135M's shape (TRL's `GRPOTrainer` under `grpo_config`'s defaults) in a process of its
own (tests/_grpo_step_memory.py) and bounds how far the process's peak resident memory rose; fast ones check that a
step trained in micro-batches (`micro_batch`) or in smaller LM-head tiles makes the same update, and that the
quickstart trains with the optimizer it is meant to (Adafactor).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_gradient_checkpointing_is_on_by_default_and_can_be_turned_off() -> None:
    from openreward_rl.backends.trl.run import TrlOptions, grpo_config
    from openreward_rl.cli import build_parser
    from openreward_rl.cli.train_trl import options_from_args

    parser = build_parser()
    train = ["train", "--framework", "trl", "--model", "offline:smollm2", "--device", "cpu"]
    assert options_from_args(parser.parse_args(train)).gradient_checkpointing is True
    assert options_from_args(parser.parse_args([*train, "--no-gradient-checkpointing"])).gradient_checkpointing is False
    assert grpo_config(TrlOptions(model="offline:smollm2", device="cpu")).gradient_checkpointing is True
    assert (
        grpo_config(
            TrlOptions(model="offline:smollm2", device="cpu", gradient_checkpointing=False)
        ).gradient_checkpointing
        is False
    )
    sft = ["sft", "--config", "c.yaml", "--model", "offline:smollm2", "--teacher", "t.py:teacher"]
    assert parser.parse_args(sft).gradient_checkpointing is True
    assert parser.parse_args([*sft, "--no-gradient-checkpointing"]).gradient_checkpointing is False


def test_sft_trains_with_gradient_checkpointing_unless_told_not_to_and_releases_its_optimizer(tmp_path: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from openreward_rl.assets import load_tokenizer
    from openreward_rl.backends.trl import train_sft
    from openreward_rl.engines.transformers import smollm2_model_dir

    checkpoint = smollm2_model_dir()
    config = AutoConfig.from_pretrained(checkpoint, num_hidden_layers=2)  # SmolLM2's shape, two layers
    rows = [{"input_ids": [1, 5, 6, 7, 2], "assistant_masks": [0, 0, 1, 1, 1]}] * 2
    for setting in (True, False):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        trainer = train_sft(
            model,
            load_tokenizer("offline:smollm2"),
            rows,
            output_dir=str(tmp_path / str(setting)),
            epochs=1,
            lr=1e-5,
            batch_size=2,
            seed=0,
            gradient_checkpointing=setting,
        )
        assert trainer.args.gradient_checkpointing is setting and model.is_gradient_checkpointing is setting
        assert model.config.use_cache  # the saved model samples with its KV cache
        assert trainer.optimizer is None and all(
            p.grad is None for p in model.parameters()
        )  # released for sampling after


def test_a_step_in_micro_batches_makes_the_same_update_as_one_pass(tmp_path: Path) -> None:
    """`micro_batch` splits a step's episodes into forward and backward passes whose gradients add up to the whole
    batch's: one optimizer step, with the same loss and gradients (to float rounding) as all the episodes in one pass.
    (Gradients, not weights: AdamW's first update is nearly the gradient's sign, blind to a wrong scale.)"""
    import torch
    from datasets import Dataset
    from transformers import AutoConfig, AutoModelForCausalLM, TrainerCallback, set_seed
    from trl import GRPOTrainer

    from openreward_rl.assets import load_tokenizer
    from openreward_rl.backends.trl.run import TrlOptions, grpo_config, quiet_trainer
    from openreward_rl.engines.transformers import smollm2_model_dir

    checkpoint = smollm2_model_dir()
    config = AutoConfig.from_pretrained(checkpoint, num_hidden_layers=2)  # SmolLM2's shape, two layers
    lengths = [9, 3, 6, 1, 8, 4, 2, 7]  # episodes of different lengths: each pass is padded to the step's longest

    def rollout(prompts: list, trainer: object) -> dict:
        return {
            "prompt_ids": [[5 + i, 6, 7, 8] for i in range(len(prompts))],
            "completion_ids": [[10 + i + j for j in range(n)] for i, n in enumerate(lengths)],
            "logprobs": [[-1.0] * n for n in lengths],
            "env_mask": [[1] * n for n in lengths],
            "reward": [float(i % 3) for i in range(len(prompts))],
        }

    class Gradients(TrainerCallback):
        def on_pre_optimizer_step(
            self, args: object, state: object, control: object, model: object = None, **_: object
        ) -> None:
            self.seen = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}

    trained = {}
    for micro_batch in (0, 2):
        set_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        options = TrlOptions(
            model="offline:smollm2",
            device="cpu",
            output_dir=str(tmp_path / str(micro_batch)),
            max_steps=1,
            prompts_per_step=2,
            n_samples=4,
            max_new_tokens=9,
            save_interval=0,
            lr=1e-3,
            micro_batch=micro_batch,
        )
        args = grpo_config(options)
        assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (
            (8, 1) if micro_batch == 0 else (2, 4)
        )
        trainer = GRPOTrainer(
            model=model,
            processing_class=load_tokenizer("offline:smollm2"),
            args=args,
            rollout_func=rollout,
            reward_funcs=[lambda prompts, completions, reward, **_: reward],
            train_dataset=Dataset.from_list([{"prompt": f"task {i}"} for i in range(8)]),
            callbacks=[gradients := Gradients()],
        )
        quiet_trainer(trainer).train()
        assert trainer.state.global_step == 1
        trained[micro_batch] = (trainer.state.log_history[0]["loss"], gradients.seen)
    (whole_loss, whole), (passes_loss, passes) = trained[0], trained[2]
    assert passes_loss == pytest.approx(whole_loss, rel=1e-4, abs=1e-6)
    assert whole.keys() == passes.keys() and any(gradient.abs().max() > 0 for gradient in whole.values())
    for name in whole:
        torch.testing.assert_close(passes[name], whole[name], rtol=1e-4, atol=1e-4 * float(whole[name].abs().max()))


def _quickstart_commands(tmp_path: Path) -> dict[str, list[str]]:
    """scripts/quickstart.sh run for real with an `openreward-rl` (and a `python`) that record their arguments: each
    `openreward-rl` command's arguments, by command."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "commands.log"
    for tool in ("python", "openreward-rl"):
        (venv / "bin" / tool).write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
        (venv / "bin" / tool).chmod(0o755)
    subprocess.run(
        ["bash", str(REPO / "scripts" / "quickstart.sh")],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "VENV": str(venv)},
        check=True,
        capture_output=True,
        timeout=60,
    )
    return {line.split()[0]: line.split() for line in log.read_text().splitlines() if line.split()}


def test_the_quickstart_trains_and_fine_tunes_with_adafactor_and_the_default_is_trls(tmp_path: Path) -> None:
    """The quickstart's `train` and `sft`, parsed as the CLI parses them, make TRL train with Adafactor (a factored
    second moment, no first moment: ~1 GiB less than AdamW's two moments for SmolLM2-135M); without `--optim`, TRL's
    own default; a name transformers does not know is refused before anything loads."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, TrainerCallback
    from transformers.optimization import Adafactor
    from trl import GRPOConfig

    from openreward_rl.assets import load_tokenizer
    from openreward_rl.backends.trl import train_sft
    from openreward_rl.backends.trl.run import TrlOptions, grpo_config
    from openreward_rl.cli import build_parser
    from openreward_rl.cli.train_trl import options_from_args
    from openreward_rl.engines.transformers import smollm2_model_dir
    from openreward_rl.errors import ConfigError

    commands = _quickstart_commands(tmp_path)
    parser = build_parser()
    train = parser.parse_args(commands["train"])
    assert grpo_config(options_from_args(train)).optim == "adafactor"
    default = [arg for arg in commands["train"] if arg not in ("--optim", "adafactor")]
    assert (
        grpo_config(options_from_args(parser.parse_args(default))).optim
        == GRPOConfig(output_dir=str(tmp_path), use_cpu=True).optim
    )
    with pytest.raises(ConfigError, match="optim 'adam' is not an optimizer transformers knows"):
        options_from_args(parser.parse_args([*commands["train"], "--optim", "adam"]))

    sft = parser.parse_args(commands["sft"])
    assert sft.optim == "adafactor"
    config = AutoConfig.from_pretrained(smollm2_model_dir(), num_hidden_layers=2)  # two layers of SmolLM2

    class Optimizer(TrainerCallback):
        def on_pre_optimizer_step(self, *_: object, optimizer: object = None, **__: object) -> None:
            self.seen = getattr(optimizer, "optimizer", optimizer)  # within accelerate's wrapper

    seen = Optimizer()
    train_sft(
        AutoModelForCausalLM.from_config(config, dtype=torch.float32),
        load_tokenizer("offline:smollm2"),
        [{"input_ids": [1, 5, 6, 7, 2], "assistant_masks": [0, 0, 1, 1, 1]}] * 2,
        output_dir=str(tmp_path / "sft"),
        epochs=1,
        lr=1e-5,
        batch_size=2,
        seed=0,
        optim=sft.optim,
        callbacks=[seen],
    )
    assert isinstance(seen.seen, Adafactor)
    assert TrlOptions(model="offline:smollm2", device="cpu", optim="adafactor").optim == "adafactor"


def test_on_the_cpu_trls_lm_head_runs_in_small_tiles_while_training_with_the_same_numbers(tmp_path: Path) -> None:
    """`training_callbacks("cpu")` has TRL's fused LM head project `CPU_LM_HEAD_TILE` tokens per tile while the
    trainer trains (TRL's 4,096 tokens x 32,768 columns left a 1.5 GiB transient per pass on the CPU) and restores
    TRL's setting after; a step in tiles of a few tokens makes the same loss and gradients as one in TRL's tiles."""
    import torch
    from datasets import Dataset
    from transformers import AutoConfig, AutoModelForCausalLM, TrainerCallback, set_seed
    from trl import GRPOTrainer
    from trl.kernels import chunked_logprob

    from openreward_rl._compat import trl as compat_trl
    from openreward_rl.assets import load_tokenizer
    from openreward_rl.backends.trl.run import (
        CPU_LM_HEAD_TILE,
        TrlOptions,
        grpo_config,
        quiet_trainer,
        training_callbacks,
    )
    from openreward_rl.engines.transformers import smollm2_model_dir

    trls = chunked_logprob.TOKEN_CHUNK_SIZE
    assert training_callbacks("cuda:0") == [] and len(training_callbacks("cpu")) == 1
    config = AutoConfig.from_pretrained(smollm2_model_dir(), num_hidden_layers=2)  # two layers of SmolLM2
    lengths = [9, 3, 6, 1]

    def rollout(prompts: list, trainer: object) -> dict:
        return {
            "prompt_ids": [[5 + i, 6, 7, 8] for i in range(len(prompts))],
            "completion_ids": [[10 + i + j for j in range(n)] for i, n in enumerate(lengths)],
            "logprobs": [[-1.0] * n for n in lengths],
            "env_mask": [[1] * n for n in lengths],
            "reward": [float(i % 2) for i in range(len(prompts))],
        }

    class Seen(TrainerCallback):
        def on_pre_optimizer_step(self, *_: object, model: object = None, **__: object) -> None:
            self.tile = chunked_logprob.TOKEN_CHUNK_SIZE
            self.gradients = {
                name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None
            }

    trained = {}
    for name, callbacks in (("trl", []), ("cpu", training_callbacks("cpu")), ("tiny", [compat_trl.lm_head_tiles(5)])):
        set_seed(0)
        options = TrlOptions(
            model="offline:smollm2",
            device="cpu",
            output_dir=str(tmp_path / name),
            max_steps=1,
            prompts_per_step=1,
            n_samples=4,
            max_new_tokens=9,
            save_interval=0,
            lr=1e-3,
        )
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_config(config, dtype=torch.float32),
            processing_class=load_tokenizer("offline:smollm2"),
            args=grpo_config(options),
            rollout_func=rollout,
            reward_funcs=[lambda prompts, completions, reward, **_: reward],
            train_dataset=Dataset.from_list([{"prompt": f"task {i}"} for i in range(4)]),
            callbacks=[*callbacks, seen := Seen()],
        )
        quiet_trainer(trainer).train()
        assert chunked_logprob.TOKEN_CHUNK_SIZE == trls  # restored when training ends
        trained[name] = (seen.tile, trainer.state.log_history[0]["loss"], seen.gradients)
    assert [trained[name][0] for name in ("trl", "cpu", "tiny")] == [trls, CPU_LM_HEAD_TILE, 5]
    (_, whole_loss, whole), (_, tiles_loss, tiles) = trained["trl"], trained["tiny"]
    assert tiles_loss == pytest.approx(whole_loss, rel=1e-5, abs=1e-7)
    assert whole.keys() == tiles.keys() and any(gradient.abs().max() > 0 for gradient in whole.values())
    for name in whole:
        torch.testing.assert_close(tiles[name], whole[name], rtol=1e-4, atol=1e-4 * float(whole[name].abs().max()))


def _step_memory(**settings: object) -> dict[str, float]:
    from openreward_rl.engines.transformers import smollm2_model_dir

    smollm2_model_dir()  # converted here if it is not yet: a conversion in the measured process would raise its peak
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
        "TRL_EXPERIMENTAL_SILENCE": "1",
    }
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "_grpo_step_memory.py"), json.dumps(settings)],
        capture_output=True,
        text=True,
        env=env,
        timeout=850,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(900)  # one GRPO step of 1,840 tokens on the CPU, ~2 CPU-minutes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss is in KiB on Linux (bytes on macOS)")
def test_the_quickstarts_grpo_pass_rises_by_little_more_than_the_gradients_and_adafactor_adds_little() -> None:
    """One step of the quickstart's pass (4 episodes x 460 tokens) as `train` runs it on the CPU (checkpointing, TRL's
    fused LM head in tiles of `CPU_LM_HEAD_TILE` tokens, the allocator setting) with the quickstart's optimizer, in
    MiB over the process's peak before the step: measured 525 by the end of the backward pass (1.02x the 513 MiB of
    float32 weights: their gradients) and 630 after Adafactor's step (1.23x). In TRL's tiles of 4,096 tokens the
    backward pass rose 2,030 (3.96x: a 1.5 GiB transient), and AdamW's step took the rise to 1,438 (2.8x: its two
    moments); each bound refuses the old setting."""
    measured = _step_memory(rows=4, prompt=300, completion=160, optim="adafactor")
    parameters = measured["parameters_mib"]
    assert measured["gradient_checkpointing"] is True and measured["loss"] is not None
    assert measured["optimizer"] == "Adafactor"
    assert measured["backward_mib"] - measured["before_mib"] <= 1.5 * parameters, measured  # forward + backward pass
    assert measured["after_mib"] - measured["before_mib"] <= 1.6 * parameters, measured  # + the optimizer's step

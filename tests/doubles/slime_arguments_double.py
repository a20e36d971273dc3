"""A test double of the part of Slime's command-line contract that `openreward-rl train` relies on.

Written for these tests from reading THUDM/slime at 624b824a898ab0ec1fcb4d373004c7f3852bf515 and the
Megatron-LM code it calls; it is not their code, and it only holds what the printed command touches:

- slime/utils/arguments.py `_pre_parse_mode`: `--train-backend` is pre-parsed with choices ["megatron"]
  (the FSDP backend was removed) before the main parse;
- `parse_args` phase 2 hands slime's flags to Megatron's parser with `ignore_unknown_args=True`, so a flag
  neither defines is dropped silently (here returned as `unknown` for the test to refuse);
- the slime flags the launcher prints, with their types/actions, and `--rollout-batch-size` required=True;
- Megatron's flags the launcher prints (`--lr`, `--global-batch-size`, `--load`, `--save`, `--save-interval`;
  slime resets `--load/--save/--save-interval` to default None) and the architecture flags of a
  `scripts/models/*.sh` MODEL_ARGS array (types as in megatron/training/arguments.py);
- `slime_validate_args`: temperature > 0; `--save` required when `--save-interval` is set; dynamic batch
  size needs `--max-tokens-per-gpu`; over-sampling >= rollout batch; without a Megatron checkpoint in
  `--load` training starts from `--ref-load` (`args.load = args.ref_load`);
- `_set_default_megatron_args` fills `max_position_embeddings` from `seq_length` (default 4096);
- Megatron's `validate_args`: `num_layers`, `hidden_size`, `num_attention_heads`, `max_position_embeddings`
  must not be None;
- slime/backends/megatron_utils/model.py `setup_model_and_optimizer`: `assert args.load is not None or
  args.pretrained_checkpoint is not None`.
"""

from __future__ import annotations

import argparse

__all__ = ["SlimeArgumentError", "parse_train_args"]


class SlimeArgumentError(AssertionError):
    """Where the real parser would exit or a validation assert would fire."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits; the double raises so a test can read why
        raise SlimeArgumentError(message)


def _pre_parse(argv: list[str]) -> argparse.Namespace:
    parser = _Parser(add_help=False, allow_abbrev=False)
    parser.add_argument("--train-backend", type=str, choices=["megatron"], default="megatron")
    return parser.parse_known_args(argv)[0]


def _megatron_flags(parser: argparse.ArgumentParser) -> None:
    for flag, kind in (
        ("--num-layers", int),
        ("--hidden-size", int),
        ("--ffn-hidden-size", int),
        ("--num-attention-heads", int),
        ("--num-query-groups", int),
        ("--kv-channels", int),
        ("--vocab-size", int),
        ("--rotary-base", int),
        ("--norm-epsilon", float),
        ("--rotary-percent", float),
        ("--lr", float),
        ("--global-batch-size", int),
        ("--seq-length", int),
        ("--max-position-embeddings", int),
        ("--save-interval", int),
        ("--load", str),
        ("--save", str),
        ("--pretrained-checkpoint", str),
        ("--position-embedding-type", str),
    ):
        parser.add_argument(flag, type=kind, default=None)
    parser.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"], default="LayerNorm")
    for flag in (
        "--swiglu",
        "--group-query-attention",
        "--use-rotary-position-embeddings",
        "--disable-bias-linear",
        "--qk-layernorm",
        "--untie-embeddings-and-output-weights",
    ):
        parser.add_argument(flag, action="store_true")


def _slime_flags(parser: argparse.ArgumentParser) -> None:
    for flag, kind, default in (
        ("--actor-num-nodes", int, 1),
        ("--actor-num-gpus-per-node", int, 8),
        ("--rollout-num-gpus", int, None),
        ("--rollout-num-gpus-per-engine", int, 1),
        ("--hf-checkpoint", str, None),
        ("--ref-load", str, None),
        ("--prompt-data", str, None),
        ("--input-key", str, "input"),
        ("--label-key", str, None),
        ("--metadata-key", str, "metadata"),
        ("--custom-generate-function-path", str, None),
        ("--custom-rm-path", str, None),
        ("--custom-rollout-log-function-path", str, None),
        ("--custom-eval-rollout-log-function-path", str, None),
        ("--num-rollout", int, None),
        ("--n-samples-per-prompt", int, 1),
        ("--rollout-max-response-len", int, None),
        ("--rollout-max-context-len", int, None),
        ("--rollout-temperature", float, 1.0),
        ("--max-tokens-per-gpu", int, None),
        ("--wandb-project", str, None),
        ("--wandb-group", str, None),
        ("--dynamic-sampling-filter-path", str, None),
        ("--over-sampling-batch-size", int, None),
        ("--rollout-function-path", str, "slime.rollout.sglang_rollout.generate_rollout"),
        ("--custom-reward-post-process-path", str, None),
        ("--custom-advantage-function-path", str, None),  # arguments.py:1371, :968
        ("--data-source-path", str, "slime.rollout.data_source.RolloutDataSourceWithBuffer"),  # arguments.py:639
    ):
        parser.add_argument(flag, type=kind, default=default)
    parser.add_argument("--rollout-batch-size", type=int, required=True)
    parser.add_argument(
        "--advantage-estimator",
        choices=["grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo"],
        default="grpo",
    )
    for flag in (
        "--colocate",
        "--rollout-shuffle",
        "--use-dynamic-batch-size",
        "--use-wandb",
        "--partial-rollout",
        "--mask-offpolicy-in-partial-rollout",
    ):
        parser.add_argument(flag, action="store_true")


def _validate(args: argparse.Namespace) -> None:
    def check(condition: bool, message: str) -> None:
        if not condition:
            raise SlimeArgumentError(message)

    check(args.rollout_temperature > 0, "--rollout-temperature must be > 0")
    check(args.save_interval is None or args.save is not None, "'--save' is required when save_interval is set.")
    check(
        not args.use_dynamic_batch_size or args.max_tokens_per_gpu is not None,
        "max_tokens_per_gpu must be set when use_dynamic_batch_size is set",
    )
    over = args.over_sampling_batch_size or args.rollout_batch_size
    check(
        over >= args.rollout_batch_size,
        f"over_sampling_batch_size {over} should be greater than or equal to rollout_batch_size",
    )
    if args.load is None:  # not a Megatron (or HF) checkpoint: slime starts from the reference checkpoint
        args.load = args.ref_load
    if args.max_position_embeddings is None:
        args.max_position_embeddings = args.seq_length or 4096
    for name in ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"):
        check(getattr(args, name) is not None, f"{name} argument is None")  # Megatron's _check_arg_is_not_none
    check(
        args.load is not None or args.pretrained_checkpoint is not None,
        "assert args.load is not None or args.pretrained_checkpoint is not None",
    )


def parse_train_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(args, flags neither slime nor Megatron defines) for `python3 train.py <argv>` on the Megatron backend."""
    pre = _pre_parse(argv)
    parser = _Parser(allow_abbrev=False)
    _megatron_flags(parser)
    _slime_flags(parser)
    parser.add_argument("--train-backend")  # pre-parsed above; the main parse passes over it
    args, unknown = parser.parse_known_args(argv)
    args.train_backend = pre.train_backend
    _validate(args)
    return args, unknown

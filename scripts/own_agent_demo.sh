#!/usr/bin/env bash
# Train an agent program not written for this library (docs/own_agent.md): the `openai` client's tool loop in
# examples/own_agent/openai_tool_loop.py, changed only by its base URL, on PaintOrder (served on 127.0.0.1), with
# the packaged SmolLM2-135M-Instruct on the CPU:
#   1. warm start (`openreward-rl sft`): the scripted teacher plays 8 training tasks *through the agent program*
#      (the config's `episode:` runs it), so its turns answer the program's own requests: the same system prompt,
#      tool preamble and tool results the model is trained in; evaluated on 10 held-out test tasks x 2 before and after;
#   2. GRPO (`openreward-rl train --framework trl`): 4 steps of 4 tasks x 4 episodes of the program, evaluated before
#      and after; the training and evaluation episodes are written (own_agent_run/);
#   3. each recorded model call checked token-exact (scripts/check_agent_episodes.py), and the HTML reports of the
#      training episodes (own_agent_train_report.html) and of the trained model's (own_agent_report.html).
# Needs Python 3.11+ and pip (PyPI); no model hub.
#
#   scripts/own_agent_demo.sh                         # extra arguments go to `openreward-rl train` (later ones win)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
VENV="$VENV" bash scripts/setup.sh quickstart

export OPENREWARD_DISABLE_UPDATE_CHECK=1 TRL_EXPERIMENTAL_SILENCE=1 HF_HUB_OFFLINE=1
export NO_PROXY="127.0.0.1,localhost${NO_PROXY:+,$NO_PROXY}"
export OPENREWARD_LOG_LEVEL="${OPENREWARD_LOG_LEVEL:-WARNING}"
export TRANSFORMERS_VERBOSITY="${TRANSFORMERS_VERBOSITY:-error}"

CONFIG=examples/own_agent/train_config.yaml
SERVE=examples/environments/paint_order.py:PaintOrder
RUN="${RUN:-own_agent_run}"
"$VENV/bin/openreward-rl" sft --config "$CONFIG" --serve "$SERVE" --model offline:smollm2 --device cpu \
  --teacher examples/paint_order_teacher.py:teacher --max-tasks 8 --epochs 1 \
  --eval-split test --eval-n 2 --eval-max-tasks 10 --max-response-len 40 --temperature 0.7 --seed 0 \
  --output-dir "$RUN/warm"
"$VENV/bin/openreward-rl" train --framework trl --config "$CONFIG" --serve "$SERVE" \
  --model "$RUN/warm" --device cpu --sampler continuous \
  --max-steps 4 --rollout-batch-size 4 --n-samples 4 \
  --max-response-len 40 --temperature 0.7 --lr 2e-5 --seed 0 \
  --eval-split test --eval-n 2 --eval-max-tasks 10 --eval-output "$RUN/eval.jsonl" --train-output "$RUN/train.jsonl" \
  --save-interval 0 --output-dir "$RUN/model" \
  "$@"
"$VENV/bin/python" scripts/check_agent_episodes.py "$RUN/eval.before.jsonl" "$RUN/train.jsonl" "$RUN/eval.jsonl" \
  --config "$CONFIG" --model "$RUN/warm" --serve "$SERVE"
"$VENV/bin/openreward-rl" show "$RUN/train.jsonl" --html own_agent_train_report.html
"$VENV/bin/openreward-rl" show "$RUN/eval.jsonl" --html own_agent_report.html

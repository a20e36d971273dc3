#!/usr/bin/env bash
# The tool-using agent's curves on one GPU (docs/training.md, "The tool agent"): a warm start by
# `openreward-rl sft` on PaintOrder's scripted teacher, then, side by side on the GPU from that warm
# start: GRPO with `train --framework trl`'s machinery (benchmarks/learning_curve.py) for each
# advantage estimator and seed, and TRL's own multi-turn tool loop (`environment_factory`,
# benchmarks/trl_side_by_side.py --sides trl-tools) on the same model, batch, learning rate and seeds.
#
#   bash benchmarks/tool_agent_curves.sh OUT_DIR [STEPS] [ESTIMATOR_STEPS] [TRL_STEPS]
#
# The warm start is deliberately light (one SFT step on 8 of the teacher's episodes, WARM_TASKS): it gets the
# first calls (about half the test episodes call read_order) and leaves GRPO the rest to learn.
#
# Every run writes OUT_DIR/<name>.json as it goes (a run cut short keeps its points) and OUT_DIR/<name>.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: tool_agent_curves.sh OUT_DIR [STEPS] [ESTIMATOR_STEPS]}"
STEPS="${2:-100}"
ESTIMATOR_STEPS="${3:-40}"
TRL_STEPS="${4:-$STEPS}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 OPENREWARD_DISABLE_UPDATE_CHECK=1 OPENREWARD_LOG_LEVEL=WARNING TRL_EXPERIMENTAL_SILENCE=1 \
    TRANSFORMERS_VERBOSITY=error WANDB_MODE=disabled NO_PROXY=127.0.0.1,localhost
CONFIG=examples/train_tool_agent_config.yaml
SERVE=examples/environments/paint_order.py:PaintOrder
WARM="$OUT/warm"

if [ ! -f "$WARM/config.json" ]; then  # the warm start, once
    "$PYTHON" -m openreward_rl.cli sft --config "$CONFIG" --serve "$SERVE" --model offline:smollm2 --device cuda \
        --teacher examples/paint_order_teacher.py:teacher --max-tasks "${WARM_TASKS:-8}" --epochs 1 --max-response-len 48 --temperature 0.7 \
        --output-dir "$WARM" 2>&1 | grep -v "it/s\]" | tee "$OUT/sft.log" || exit 1
fi
[ -n "${SFT_ONLY:-}" ] && exit 0

curve() {  # name, then learning_curve.py arguments
    local name="$1"; shift
    "$PYTHON" benchmarks/learning_curve.py --config "$CONFIG" --serve "$SERVE" --model "$WARM" --device cuda \
        --rollout-batch-size 4 --n-samples 8 --max-response-len 48 --temperature 0.7 --lr 2e-5 \
        --eval-n 2 --sampler-memory 0.04 --out "$OUT/$name" "$@" >"$OUT/$name.log" 2>&1
}
for seed in 0 1; do
    curve "episode_$seed" --estimator episode --seed "$seed" --steps "$STEPS" --eval-every 10 &
    [ "${TRL_TOOLS:-1}" = 0 ] || "$PYTHON" benchmarks/trl_side_by_side.py --config "$CONFIG" --serve "$SERVE" --model "$WARM" --sides trl-tools \
        --tasks 4 --n 8 --max-new-tokens 48 --temperature 0.7 --lr 2e-5 --seed "$seed" --warmup 1 --steps "$TRL_STEPS" \
        --json "$OUT/trl_tools_$seed.json" >"$OUT/trl_tools_$seed.log" 2>&1 &
done
for estimator in ${ESTIMATORS:-turn turn_index mix}; do
    for seed in ${ESTIMATOR_SEEDS:-0 1 2}; do
        curve "${estimator}_$seed" --estimator "$estimator" --seed "$seed" --steps "$ESTIMATOR_STEPS" --eval-every 10 &
    done
done
curve episode_2 --estimator episode --seed 2 --steps "$ESTIMATOR_STEPS" --eval-every 10 &
wait
tail -n 3 "$OUT"/*.log

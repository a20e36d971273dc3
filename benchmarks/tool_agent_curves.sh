#!/usr/bin/env bash
# The tool-using agent's curves on one GPU (docs/training.md, "The tool agent"): a warm start by
# `openreward-rl sft` on PaintOrder's scripted teacher, then GRPO from that warm start.
#
#   bash benchmarks/tool_agent_curves.sh OUT_DIR tools       # ours beside TRL's own tool loop
#   bash benchmarks/tool_agent_curves.sh OUT_DIR estimators  # advantage estimators and seeds
#
# `tools`: first, alone on the GPU, seconds per step of TRL's own multi-turn tool loop
# (`environment_factory`, benchmarks/trl_side_by_side.py --sides trl-tools) and of ours, same model, batch,
# learning rate and seed (TIMED_STEPS after one untimed step: OUT_DIR/timing.json); then, for each seed in
# SEEDS ("0 1") in turn, STEPS (100) GRPO steps of ours and of TRL's tool loop side by side on the GPU (each
# holding at most GPU_SHARE, 0.4, of its memory): ours evaluated on the test split every 10 steps
# (benchmarks/learning_curve.py), both recording the training reward of every step.
# `estimators`: ESTIMATOR_STEPS (20) steps, evaluated every 5, for each estimator in ESTIMATORS
# ("episode turn turn_index mix") and seed in ESTIMATOR_SEEDS ("0 1 2"), plus `episode` with RESAMPLE rounds
# of zero-spread resampling (--resample-zero-spread) for the same seeds when RESAMPLE is set; one seed's runs
# share the GPU at a time (gradient checkpointing, a 0.02 KV share and at most GPU_SHARE, 0.11, each).
#
# The warm start is deliberately light (one SFT step on 8 of the teacher's episodes, WARM_TASKS): it gets the
# first calls (about half the test episodes call read_order) and leaves GRPO the rest to learn. It is made once
# per OUT_DIR.
#
# Every run writes OUT_DIR/<name>.json as it goes (a run cut short keeps its points) and OUT_DIR/<name>.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: tool_agent_curves.sh OUT_DIR tools|estimators}"
PHASE="${2:-tools}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 OPENREWARD_DISABLE_UPDATE_CHECK=1 OPENREWARD_LOG_LEVEL=WARNING TRL_EXPERIMENTAL_SILENCE=1 \
    TRANSFORMERS_VERBOSITY=error WANDB_MODE=disabled NO_PROXY=127.0.0.1,localhost OMP_NUM_THREADS=1
CONFIG=examples/train_tool_agent_config.yaml
SERVE=examples/environments/paint_order.py:PaintOrder
WARM="$OUT/warm"
SHAPE=(--config "$CONFIG" --serve "$SERVE" --model "$WARM")

if [ ! -f "$WARM/config.json" ]; then  # the warm start, once
    "$PYTHON" -m openreward_rl.cli sft --config "$CONFIG" --serve "$SERVE" --model offline:smollm2 --device cuda \
        --teacher examples/paint_order_teacher.py:teacher --max-tasks "${WARM_TASKS:-8}" --epochs 1 --max-response-len 48 --temperature 0.7 \
        --output-dir "$WARM" 2>&1 | grep -v "it/s\]" | tee "$OUT/sft.log" || exit 1
fi

curve() {  # name, GPU share, then learning_curve.py arguments
    local name="$1" share="$2"; shift 2
    "$PYTHON" benchmarks/learning_curve.py "${SHAPE[@]}" --device cuda \
        --rollout-batch-size 4 --n-samples 8 --max-response-len 48 --temperature 0.7 --lr 2e-5 \
        --eval-n 2 --gpu-memory-fraction "$share" --out "$OUT/$name" "$@" >"$OUT/$name.log" 2>&1
}
trl_tools() {  # seed, steps, json name, then trl_side_by_side.py arguments
    local seed="$1" steps="$2" name="$3"; shift 3
    "$PYTHON" benchmarks/trl_side_by_side.py "${SHAPE[@]}" --tasks 4 --n 8 --max-new-tokens 48 --temperature 0.7 --lr 2e-5 \
        --seed "$seed" --warmup 1 --steps "$steps" --json "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1
}

case "$PHASE" in
tools)
    trl_tools 0 "${TIMED_STEPS:-5}" timing --sides trl-tools,ours
    tail -n 4 "$OUT/timing.log"
    share="${GPU_SHARE:-0.4}"
    for seed in ${SEEDS:-0 1}; do
        curve "episode_$seed" "$share" --sampler-memory 0.04 --estimator episode --seed "$seed" --steps "${STEPS:-100}" --eval-every 10 &
        trl_tools "$seed" "$(( ${STEPS:-100} - 1 ))" "trl_tools_$seed" --sides trl-tools --gpu-memory-fraction "$share" &
        wait
    done
    ;;
estimators)
    share="${GPU_SHARE:-0.11}"
    each=(--sampler-memory 0.02 --gradient-checkpointing --steps "${ESTIMATOR_STEPS:-20}" --eval-every 5)
    for seed in ${ESTIMATOR_SEEDS:-0 1 2}; do  # one seed's runs at a time share the GPU
        for estimator in ${ESTIMATORS:-episode turn turn_index mix}; do
            curve "${estimator}_$seed" "$share" "${each[@]}" --estimator "$estimator" --seed "$seed" &
        done
        [ -z "${RESAMPLE:-}" ] || curve "resample_$seed" "$share" "${each[@]}" --estimator episode --resample-zero-spread "$RESAMPLE" --seed "$seed" &
        wait
    done
    ;;
*)
    echo "unknown phase $PHASE (tools or estimators)" >&2
    exit 2
    ;;
esac
wait
tail -n 3 "$OUT"/*.log

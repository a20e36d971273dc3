#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint and check the formatting (ruff), type-check src/ (mypy; both configured in pyproject.toml) and
# run the whole test suite, doctests and fault-injection tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The report tests (marker `browser`) open pages in a real headless Chromium and are skipped without
# one. Under CI, as root, install Debian's chromium first (best effort; no recommends, ~2 minutes).
if [ "${CI:-}" = "true" ] && [ "$(id -u)" = "0" ] && ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) >/dev/null 2>&1 \
        || echo "scripts/test.sh: could not install chromium; the browser tests will be skipped" >&2
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m mypy
export HF_HUB_OFFLINE=1 OPENREWARD_DISABLE_UPDATE_CHECK=1 WANDB_MODE=offline NO_PROXY=127.0.0.1,localhost
exec .venv/bin/python -m pytest --doctest-modules src/openreward_rl tests "$@"

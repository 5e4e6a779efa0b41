#!/usr/bin/env bash
# Set up (idempotent) and run the test suite: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}
.venv/bin/ruff check --quiet . || { echo "ruff: fix the lines above (config: ruff.toml)" >&2; exit 1; }
exec .venv/bin/python -m pytest -q -p no:cacheprovider tests "$@"

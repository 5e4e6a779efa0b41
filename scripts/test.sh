#!/usr/bin/env bash
# Set up (idempotent) and run the test suite: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}
.venv/bin/ruff check --quiet . || { echo "ruff: fix the lines above (config: ruff.toml)" >&2; exit 1; }
# pytest-xdist: one worker per core (at most 4), a test file's tests on one worker (they share its fixtures);
# SIPE_TEST_WORKERS=0 runs in this process. CLI runs are forks of the worker (tests/launcher.py;
# SIPE_TEST_SUBPROCESS=1 makes them real subprocesses).
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "${SIPE_TEST_WORKERS:-auto}" --maxprocesses 4 --dist loadfile tests "$@"

#!/usr/bin/env bash
# Set up (idempotent) and run the demo: bash scripts/demo.sh [scripts/demo.py args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"

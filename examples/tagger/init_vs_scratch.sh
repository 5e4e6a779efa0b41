#!/usr/bin/env bash
# Tagger encoder pre-trained (hexatag_mlm, --init-encoder) vs from scratch (--encoder-arch), same
# architecture and the same tagger budget, on UD English EWT gold trees; prints test UAS of both.
# Usage: bash examples/tagger/init_vs_scratch.sh EWT_DIR [WORKDIR]
#   ARCH (default sipe_deberta_tiny), MLM_UPDATES (default 1000), TAG_UPDATES (default 600), THREADS (2)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: bash examples/tagger/init_vs_scratch.sh EWT_DIR [WORKDIR]  (EWT_DIR: the folder with en_ewt-ud-{train,dev,test}.conllu)" >&2; exit 2; }
EWT=$1
WORK=${2:-runs/tagger_init}
ARCH=${ARCH:-sipe_deberta_tiny}
MLM_UPDATES=${MLM_UPDATES:-1000}
TAG_UPDATES=${TAG_UPDATES:-600}
export OMP_NUM_THREADS=${THREADS:-2}
BIN=.venv/bin
COMMON=(--optimizer adam --adam-betas '(0.9,0.98)' --lr-scheduler inverse_sqrt --clip-norm 1.0 --seed 1
        --num-workers 0 --no-epoch-checkpoints --log-format simple --log-interval 100)
mkdir -p "$WORK"
[ -f "$WORK/data-bin/dict.txt" ] || $BIN/sipe-preprocess --train "$EWT/en_ewt-ud-train.conllu" \
    --valid "$EWT/en_ewt-ud-dev.conllu" --test "$EWT/en_ewt-ud-test.conllu" --destdir "$WORK/data-bin" \
    --spm-vocab-size 4000 > "$WORK/preprocess.log" 2>&1

start=$(date +%s)
[ -f "$WORK/ck-mlm/checkpoint_best.pt" ] || $BIN/fairseq-train "$WORK/data-bin" --user-dir sipe_fairseq \
    --task hexatag_mlm --criterion hexatag_mlm --arch "$ARCH" --sipe-injection none --tokens-per-sample 128 \
    --sample-break-mode complete --skip-invalid-size-inputs-valid-test "${COMMON[@]}" --lr 1e-3 \
    --warmup-updates 100 --max-tokens 4096 --max-update "$MLM_UPDATES" --save-dir "$WORK/ck-mlm" \
    > "$WORK/train-mlm.log" 2>&1
echo "pre-training ($MLM_UPDATES updates): $(( $(date +%s) - start )) s"

tagger() {  # $1 = name, rest = encoder options
  local name=$1; shift
  local t0=$(date +%s)
  [ -f "$WORK/ck-$name/checkpoint_best.pt" ] || $BIN/fairseq-train "$WORK/data-bin" --user-dir sipe_fairseq \
      --task hexatag_tagging --criterion hexatag_tagging --arch sipe_tagger "$@" "${COMMON[@]}" --lr 1e-3 \
      --warmup-updates 100 --max-tokens 2048 --max-update "$TAG_UPDATES" --save-dir "$WORK/ck-$name" \
      > "$WORK/train-$name.log" 2>&1
  echo "tagger $name ($TAG_UPDATES updates): $(( $(date +%s) - t0 )) s"
  $BIN/sipe-eval tagger --data "$WORK/data-bin" --path "$WORK/ck-$name/checkpoint_best.pt" \
      --split test --json "$WORK/eval-$name.json" > "$WORK/eval-$name.log" 2>&1
}
tagger pretrained --init-encoder "$WORK/ck-mlm/checkpoint_best.pt"
tagger scratch --encoder-arch "$ARCH"
$BIN/python - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
print("| tagger encoder | test UAS | exact match |\n|---|---:|---:|")
for name in ("pretrained", "scratch"):
    r = json.load(open(f"{work}/eval-{name}.json"))
    print(f"| {name} | {r['uas']:.2f} | {r['exact_match']:.2f} |")
PY

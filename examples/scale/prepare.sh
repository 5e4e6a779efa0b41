#!/usr/bin/env bash
# Issue 38, item 4 (a scaling curve): the data of examples/scale. Training = EWT train + GUM train (one
# concatenated CoNLL-U file, since sipe-preprocess --train takes one file); valid = EWT dev; test = EWT test, the
# walkthrough's test split (examples/ewt), so per-word perplexities compare with it (per-token ones do not: the
# sentencepiece model (4,000 pieces, as the walkthrough) and dict.txt come from the combined training file). sipe-preprocess writes {split}.arcs too
# (--arcs tree, the default), so the same data-bin serves the GiLT run (gilt_lm), as in examples/ewt.
# Usage: EWT_DIR=dir-with-en_ewt-ud-*.conllu GUM_DIR=dir-with-en_gum-ud-train.conllu bash examples/scale/prepare.sh
#   WORK=runs/scale (output: $WORK/data-bin, $WORK/preprocess.log, $WORK/train.conllu)
#   GUM_DEV=1: also score GUM dev/test (valid1 = GUM dev, test1 = GUM test; needs en_gum-ud-dev/test.conllu)
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${EWT_DIR:?EWT_DIR: folder with en_ewt-ud-train/dev/test.conllu}"
: "${GUM_DIR:?GUM_DIR: folder with the GUM CoNLL-U files (en_gum-ud-train.conllu)}"
WORK=${WORK:-runs/scale}
BIN=.venv/bin
mkdir -p "$WORK"
if [ -f "$WORK/data-bin/dict.txt" ]; then echo "$WORK/data-bin exists: delete it to prepare again" >&2; exit 0; fi
# one file: EWT train, then GUM train (both end with a blank line; make sure of it between them)
{ cat "$EWT_DIR/en_ewt-ud-train.conllu"; echo; cat "$GUM_DIR/en_gum-ud-train.conllu"; } | cat -s > "$WORK/train.conllu"
valid="$EWT_DIR/en_ewt-ud-dev.conllu"; test="$EWT_DIR/en_ewt-ud-test.conllu"
if [ "${GUM_DEV:-0}" = 1 ]; then valid="$valid,$GUM_DIR/en_gum-ud-dev.conllu"; test="$test,$GUM_DIR/en_gum-ud-test.conllu"; fi
for f in "$EWT_DIR/en_ewt-ud-train.conllu" "$GUM_DIR/en_gum-ud-train.conllu" "$WORK/train.conllu"; do
  echo "$f: $(grep -c '^$' "$f") sentences, $(grep -cP '^\d+\t' "$f") words"
done
start=$(date +%s)
OMP_NUM_THREADS=1 $BIN/sipe-preprocess --train "$WORK/train.conllu" --valid "$valid" --test "$test" \
  --destdir "$WORK/data-bin" --spm-vocab-size 4000 --no-progress > "$WORK/preprocess.log" 2>&1
echo "sipe-preprocess: $(( $(date +%s) - start )) s (log: $WORK/preprocess.log)"

#!/usr/bin/env bash
# UD English EWT walkthrough: gold trees -> sipe-preprocess -> train none vs position -> evaluate.
# Usage: bash examples/ewt/run.sh EWT_DIR [WORKDIR]   (EWT_DIR: the folder with en_ewt-ud-{train,dev,test}.conllu)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: bash examples/ewt/run.sh EWT_DIR [WORKDIR]  (EWT_DIR: the folder with en_ewt-ud-{train,dev,test}.conllu)" >&2; exit 2; }
EWT=$1
WORK=${2:-runs/ewt}
UPDATES=${UPDATES:-600}
ARCH_ARGS=${ARCH_ARGS:-"--arch sipe_txl_tiny --decoder-embed-dim 128 --decoder-ffn-embed-dim 512 --decoder-layers 3 --decoder-attention-heads 4"}
BIN=.venv/bin
mkdir -p "$WORK"
[ -f "$WORK/data-bin/dict.txt" ] || $BIN/sipe-preprocess --train "$EWT/en_ewt-ud-train.conllu" \
    --valid "$EWT/en_ewt-ud-dev.conllu" --test "$EWT/en_ewt-ud-test.conllu" --destdir "$WORK/data-bin" \
    --spm-vocab-size 4000 > "$WORK/preprocess.log" 2>&1
train() {  # $1 = injection
  OMP_NUM_THREADS=1 $BIN/fairseq-train "$WORK/data-bin" --user-dir sipe_fairseq --task hexatag_lm \
    --criterion hexatag_lm $ARCH_ARGS --sipe-injection "$1" --tokens-per-sample 256 --sample-break-mode complete \
    --skip-invalid-size-inputs-valid-test --optimizer adam --lr 0.002 --lr-scheduler inverse_sqrt --warmup-updates 100 --clip-norm 1.0 --dropout 0.2 \
    --max-tokens 4096 --max-update "$UPDATES" --seed 1 --save-dir "$WORK/checkpoints-$1" --no-epoch-checkpoints \
    --num-workers 0 --log-format simple --log-interval 100 > "$WORK/train-$1.log" 2>&1
}
start=$(date +%s)
train none & p1=$!; train position & p2=$!
wait $p1; wait $p2
echo "training wall time (both in parallel, 1 thread each): $(( $(date +%s) - start )) s"
for inj in none position; do
  $BIN/fairseq-eval-lm "$WORK/data-bin" --user-dir sipe_fairseq --task hexatag_lm --tokens-per-sample 256 \
    --sample-break-mode complete --path "$WORK/checkpoints-$inj/checkpoint_best.pt" --gen-subset test \
    --max-tokens 4096 2>&1 | grep -E "Perplexity" | sed "s/^/[$inj] /"
done
$BIN/sipe-eval-lm "$WORK/data-bin" --gen-subset test --path none="$WORK/checkpoints-none/checkpoint_best.pt" \
  --path position="$WORK/checkpoints-position/checkpoint_best.pt" --json "$WORK/scores.json"

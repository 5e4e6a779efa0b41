#!/usr/bin/env bash
# One EWT walkthrough training run, the settings of run.sh (d 128 x 3 layers, 600 updates of 4,096 tokens).
# Usage: bash examples/ewt/train_one.sh NAME SEED [fairseq-train arguments ...]
#   e.g. bash examples/ewt/train_one.sh position-s2 2 --sipe-injection position
#        bash examples/ewt/train_one.sh position-last-s1 1 --sipe-injection position --tag-head-placement last_subword
#        bash examples/ewt/train_one.sh gilt-s1 1 --task gilt_lm --criterion gilt_lm --arch gilt_txl_tiny
# Writes $WORK/checkpoints-NAME/ and $WORK/train-NAME.log (WORK default runs/ewt, data from run.sh).
# A run stopped part way (checkpoint_last.pt saved, no "done training" in its log) resumes from its last checkpoint
# (fairseq reads checkpoint_last.pt of --save-dir: weights, optimizer, scheduler and data position) and its log
# goes on; a run started afresh starts a new log. The callers skip a run whose log says "done training".
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=$1; SEED=$2; shift 2
WORK=${WORK:-runs/ewt}
UPDATES=${UPDATES:-600}
BIN=.venv/bin
LOG="$WORK/train-$NAME.log"
[ -f "$WORK/checkpoints-$NAME/checkpoint_last.pt" ] || : > "$LOG"
# later arguments win: a run may override --task/--criterion/--arch and the size (argparse keeps the last value)
OMP_NUM_THREADS=1 $BIN/fairseq-train "$WORK/data-bin" --user-dir sipe_fairseq --task hexatag_lm --criterion hexatag_lm \
  --arch sipe_txl_tiny --tokens-per-sample 256 --sample-break-mode complete \
  --skip-invalid-size-inputs-valid-test --optimizer adam --lr 0.002 --lr-scheduler inverse_sqrt --warmup-updates 100 \
  --clip-norm 1.0 --dropout 0.2 --max-tokens 4096 --max-update "$UPDATES" --seed "$SEED" \
  --save-dir "$WORK/checkpoints-$NAME" --no-epoch-checkpoints --num-workers 0 --log-format simple --log-interval 100 \
  --decoder-embed-dim 128 --decoder-ffn-embed-dim 512 --decoder-layers 3 --decoder-attention-heads 4 \
  "$@" >> "$LOG" 2>&1

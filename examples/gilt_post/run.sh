#!/usr/bin/env bash
# GiLT-GPT2-style post-training (docs/gilt-reference.md section 6) of a fairseq transformer_lm, end to end on toy data:
#   base transformer_lm -> stage 1 (gilt_transformer_lm, LM only, new key projections at LR_SCALE x lr)
#   -> stage 2 (gilt_post: 5/7 LM + 2/7 arc BCE + count CE, arc scorer at LR_SCALE x lr, the rest at lr)
#   control: the base trained on for as many updates without graphs (the paper's Post-GPT2)
#   -> fairseq-eval-lm (stage 2: gold-graph conditional perplexity) and sipe-eval-lm (all four side by side;
#   then nograph vs stage 2 sentence by sentence with structure sources given, self and beam:$BEAM, default 4).
# Usage: bash examples/gilt_post/run.sh [DATA_DIR] [WORKDIR]
#   DATA_DIR: a sipe-preprocess directory with {split}.arcs.bin/.idx (default: runs/demo/data-bin, the demo's;
#             if that does not exist, a toy-grammar corpus of TRAIN_SENTENCES sentences is made and preprocessed
#             under WORKDIR/data-bin, as scripts/demo.py does). WORKDIR default: runs/gilt_post.
# Sizes and lengths are variables, e.g. BASE_UPDATES=100 STAGE1_UPDATES=30 STAGE2_UPDATES=60 bash examples/gilt_post/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
WORK=${2:-runs/gilt_post}
DATA=${1:-}
# base model (fairseq's transformer_lm; GiLT blocks are the upper half: layers LAYERS/2+1..LAYERS)
LAYERS=${LAYERS:-4}; DIM=${DIM:-64}; FFN=${FFN:-256}; HEADS=${HEADS:-4}
BASE_UPDATES=${BASE_UPDATES:-300}; BASE_LR=${BASE_LR:-0.002}
# post-training (paper: 3 epochs of BLLIP-LG in all, stage 1 = 5k updates; 3e-5 pre-trained, 1.5e-4 = 5x for the new
# key projections in stage 1 and the arc scorer in stage 2; the authors' code: docs/gilt-reference.md)
STAGE1_UPDATES=${STAGE1_UPDATES:-100}; STAGE2_UPDATES=${STAGE2_UPDATES:-200}
POST_LR=${POST_LR:-0.0005}; LR_SCALE=${LR_SCALE:-5}; WD=${WD:-${STAGE2_WD:-0.0001}}
STAGE2_GILT_SCALE=${STAGE2_GILT_SCALE:-1}   # key projections in stage 2 (the authors: 1; this script before: 5)
TOKENS=${TOKENS:-128}; MAX_TOKENS=${MAX_TOKENS:-2048}; SEED=${SEED:-1}
TRAIN_SENTENCES=${TRAIN_SENTENCES:-5000}   # only when the toy data is made here
BIN=.venv/bin
mkdir -p "$WORK"
if [ -z "$DATA" ]; then
  DATA=runs/demo/data-bin
  if [ ! -f "$DATA/dict.txt" ]; then
    DATA=$WORK/data-bin
    if [ ! -f "$DATA/dict.txt" ]; then
      echo "[data] toy grammar, $TRAIN_SENTENCES training sentences -> $DATA"
      $BIN/python -c "import sys; from sipe_fairseq.data import toy_grammar
toy_grammar.make_corpus(sys.argv[1], n_train=int(sys.argv[2]), n_valid=300, n_test=300, seed=int(sys.argv[3]))" \
        "$WORK/toy" "$TRAIN_SENTENCES" "$SEED"
      $BIN/sipe-preprocess --train "$WORK/toy/train.conllu" --valid "$WORK/toy/valid.conllu" \
        --test "$WORK/toy/test.conllu" --destdir "$DATA" --spm-vocab-size 300 > "$WORK/preprocess.log" 2>&1
    fi
  fi
fi
for split in train valid test; do
  [ -f "$DATA/$split.arcs.idx" ] || { echo "$DATA/$split.arcs.idx missing: re-run sipe-preprocess (it writes arcs)" >&2; exit 1; }
done
echo "[data] $DATA"
COMMON=(--user-dir sipe_fairseq --tokens-per-sample "$TOKENS" --sample-break-mode complete --max-tokens "$MAX_TOKENS"
        --seed "$SEED" --no-epoch-checkpoints --num-workers 0 --log-format simple --log-interval 50)
GILT=(--task gilt_lm --arch gilt_transformer_lm --optimizer grouped_adam --lr "$POST_LR" --lr-scheduler fixed
      --warmup-updates 20 --clip-norm 1.0)
step() {  # $1 = name; the rest: fairseq-train arguments. Skipped when its checkpoint exists (delete WORK/NAME to redo;
          # a retrained base or stage 1 needs the later steps deleted too)
  local name=$1; shift
  if [ -f "$WORK/$name/checkpoint_best.pt" ]; then echo "[$name] $WORK/$name/checkpoint_best.pt exists, skipped"; return; fi
  local t=$(date +%s)
  $BIN/fairseq-train "$DATA" "${COMMON[@]}" --save-dir "$WORK/$name" "$@" > "$WORK/train-$name.log" 2>&1 \
    || { echo "[$name] fairseq-train failed; the end of $WORK/train-$name.log:" >&2; tail -5 "$WORK/train-$name.log" >&2; exit 1; }
  echo "[$name] $(( $(date +%s) - t )) s; last valid: $(grep "valid on 'valid'" "$WORK/train-$name.log" | tail -1 | sed 's/.*subset | //')"
}
start=$(date +%s)
BASE_ARCH=(--task language_modeling --arch transformer_lm --decoder-layers "$LAYERS" --decoder-embed-dim "$DIM"
           --decoder-ffn-embed-dim "$FFN" --decoder-attention-heads "$HEADS" --share-decoder-input-output-embed --dropout 0.1)
step base "${BASE_ARCH[@]}" --optimizer adam --lr "$BASE_LR" --lr-scheduler inverse_sqrt --warmup-updates 50 --clip-norm 1.0 \
  --max-update "$BASE_UPDATES"
# stage 1: every base weight copied, new graph key projections (trunc-normal 0.02) at LR_SCALE x (the shared feature
# tables at lr, with the pre-trained weights), LM loss only
step stage1 "${GILT[@]}" --criterion gilt_lm --lm-only --lr-scales "gilt=$LR_SCALE" --weight-decay "$WD" \
  --gilt-init-from "$WORK/base/checkpoint_best.pt" --max-update "$STAGE1_UPDATES"
# stage 2: 5/7 LM + 2/7 (arc BCE + count CE); arc scorer at LR_SCALE x, key projections at STAGE2_GILT_SCALE x
step stage2 "${GILT[@]}" --criterion gilt_post --lr-scales "gilt=$STAGE2_GILT_SCALE,arc=$LR_SCALE" --weight-decay "$WD" \
  --gilt-init-from "$WORK/stage1/checkpoint_best.pt" --max-update "$STAGE2_UPDATES"
# control (the paper's Post-GPT2): the base trained on for the same STAGE1+STAGE2 updates at POST_LR, no graphs
step nograph "${BASE_ARCH[@]}" --finetune-from-model "$WORK/base/checkpoint_best.pt" \
  --optimizer adam --lr "$POST_LR" --lr-scheduler fixed --warmup-updates 20 --clip-norm 1.0 \
  --max-update $(( STAGE1_UPDATES + STAGE2_UPDATES ))
echo "training wall time: $(( $(date +%s) - start )) s"
EVAL=(--user-dir sipe_fairseq --tokens-per-sample "$TOKENS" --sample-break-mode complete --gen-subset test
      --max-tokens "$MAX_TOKENS" --num-workers 0)
for name in base nograph stage2; do
  task=language_modeling; [ "$name" = stage2 ] && task=gilt_lm
  $BIN/fairseq-eval-lm "$DATA" "${EVAL[@]}" --task $task --path "$WORK/$name/checkpoint_best.pt" 2>&1 \
    | grep -E "Perplexity" | sed "s/^.*eval_lm[:|] */[$name, fairseq-eval-lm --task $task, test] /"
done
# Side by side on one hexatag_lm view of the test split (same blocks and tokens for every model).
t=$(date +%s)
$BIN/sipe-eval-lm "$DATA" --gen-subset test --path base="$WORK/base/checkpoint_best.pt" \
  --path nograph="$WORK/nograph/checkpoint_best.pt" --path stage1="$WORK/stage1/checkpoint_best.pt" --path stage2="$WORK/stage2/checkpoint_best.pt" \
  --json "$WORK/scores.json" 2> "$WORK/sipe-eval-lm.log"
# Every sentence alone with the structure from the prefix: stage 2's exact self q(x) and its beam over graphs
# (docs/gilt-reference.md section 4) beside the no-graph models' per-sentence perplexity, the numbers comparable with them.
$BIN/sipe-eval-lm "$DATA" --gen-subset test --path nograph="$WORK/nograph/checkpoint_best.pt" \
  --path stage2="$WORK/stage2/checkpoint_best.pt" --tags given,self,beam:${BEAM:-4} \
  --json "$WORK/scores-sources.json" > "$WORK/scores-sources.md" 2>> "$WORK/sipe-eval-lm.log"
echo "sipe-eval-lm: $(( $(date +%s) - t )) s; total $(( $(date +%s) - start )) s (log: $WORK/sipe-eval-lm.log)"

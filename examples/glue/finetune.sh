#!/usr/bin/env bash
# Fine-tune a pre-trained checkpoint on one GLUE task (sipe-glue-preprocess directory): a hexatag_lm
# decoder (sipe_txl, sipe_rope), a hexatag_mlm encoder (sipe_roberta, sipe_deberta, sipe_modernbert)
# or a fairseq masked_lm roberta without tags.
#
#   bash examples/glue/finetune.sh TASK GLUE_BIN CKPT SAVE_DIR [extra fairseq-train args...]
#
# The body is rebuilt with the checkpoint's own settings (`sipe-eval glue
# --model-flags`: architecture, SiPE injection, encoders' --max-positions) and loaded with
# --finetune-from-model (= --restore-file with --reset-optimizer/-dataloader/-meters, but a rerun
# resumes from SAVE_DIR/checkpoint_last.pt); only the classification head is new.
# Optimizer, weight decay, learning rate and epochs follow the SiPE paper, appendix D, Table 11:
# AdamW with (beta1, beta2) = (0.9, 0.999), eps 1e-6, 20 epochs; LR/WD per backbone (and per task
# for ModernBERT) from hparams.tsv. Table 11 has no Transformer-XL row: BACKBONE=txl (decoders)
# uses the RoBERTa/DeBERTa row (LR 1e-5, WD 0.1), an assumption. Not in the paper, taken from
# fairseq's RoBERTa GLUE recipe: batch size (16: CoLA, MRPC, RTE, STS-B, WNLI; 32: the others),
# polynomial decay with 6% linear warm-up. Extra arguments come last, so they override anything.
#
# Environment: BACKBONE (txl|roberta|deberta|modernbert; default from the checkpoint's --arch),
# BSZ, EPOCHS (20), WARMUP_RATIO (0.06), INIT_TOKEN (decoders 2 = </s> before the first sentence,
# as in LM pre-training; encoders 0 = <s>, as in MLM blocks; empty for none), SEP_TOKEN (encoders 2:
# <s> s1 </s> </s> s2 </s> as RoBERTa; decoders none: s1 </s> s2 </s>), PYTHON (.venv/bin/python).
set -euo pipefail
if [ $# -lt 4 ]; then sed -n '2,23p' "$0"; exit 2; fi
TASK=$(echo "$1" | tr '[:upper:]' '[:lower:]'); DATA=$2; CKPT=$3; SAVE=$4; shift 4
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
BIN=$(dirname "$PYTHON")
# the pre-trained body, exactly as saved (architecture and SiPE settings)
read -r -a BODY <<< "$("$BIN/sipe-eval" glue --model-flags --path "$CKPT")"
[ "${#BODY[@]}" -ge 2 ] || { echo "could not read the model settings of $CKPT" >&2; exit 1; }
ARCH=${BODY[1]}
case "$ARCH" in
  sipe_roberta*|roberta*) KIND=encoder; DEFAULT_BACKBONE=roberta ;;
  sipe_deberta*)          KIND=encoder; DEFAULT_BACKBONE=deberta ;;
  sipe_modernbert*)       KIND=encoder; DEFAULT_BACKBONE=modernbert ;;
  *)                      KIND=decoder; DEFAULT_BACKBONE=txl ;;
esac
BACKBONE=${BACKBONE:-$DEFAULT_BACKBONE}
EPOCHS=${EPOCHS:-20}
WARMUP_RATIO=${WARMUP_RATIO:-0.06}
if [ "$KIND" = encoder ]; then INIT_TOKEN=${INIT_TOKEN-0}; SEP_TOKEN=${SEP_TOKEN-2}
else INIT_TOKEN=${INIT_TOKEN-2}; SEP_TOKEN=${SEP_TOKEN-}; fi

case "$TASK" in
  cola)            METRIC=mcc;                  BSZ=${BSZ:-16} ;;
  mrpc)            METRIC=acc_and_f1;           BSZ=${BSZ:-16} ;;
  qqp)             METRIC=acc_and_f1;           BSZ=${BSZ:-32} ;;
  sts-b|stsb)      METRIC=pearson_and_spearman; BSZ=${BSZ:-16}; TASK=sts-b ;;
  rte|wnli)        METRIC=accuracy;             BSZ=${BSZ:-16} ;;
  sst-2|sst2|mnli|qnli) METRIC=accuracy;        BSZ=${BSZ:-32}; [ "$TASK" = sst2 ] && TASK=sst-2 ;;
  *) echo "unknown GLUE task $TASK" >&2; exit 2 ;;
esac
ROW=$(awk -F'\t' -v b="$BACKBONE" -v t="$TASK" '$1==b && ($2==t || $2=="all") {print $3, $4; exit}' "$HERE/hparams.tsv")
if [ -z "$ROW" ]; then
  [ "$BACKBONE" = txl ] && ROW=$(awk -F'\t' '$1=="roberta" {print $3, $4; exit}' "$HERE/hparams.tsv")
fi
[ -n "$ROW" ] || { echo "no LR/WD for backbone $BACKBONE, task $TASK in hparams.tsv" >&2; exit 2; }
read -r LR WD <<< "$ROW"

N_TRAIN=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['splits']['train']['examples'])" "$DATA/glue.json")
TOTAL=$(( (N_TRAIN + BSZ - 1) / BSZ * EPOCHS ))
WARMUP=$("$PYTHON" -c "print(int($TOTAL * $WARMUP_RATIO))")
TASK_ARGS=()
[ "$TASK" = sts-b ] && TASK_ARGS+=(--regression-target)
[ "$TASK" = mnli ] && TASK_ARGS+=(--valid-subset valid,valid1)
[ -n "$INIT_TOKEN" ] && TASK_ARGS+=(--init-token "$INIT_TOKEN")
[ -n "$SEP_TOKEN" ] && TASK_ARGS+=(--separator-token "$SEP_TOKEN")
# encoders: the masked LM's dictionary (dict.txt + <mask>); inputs longer than the pre-training
# length (--max-positions from the checkpoint) are cut, tokens and tags alike
[ "$KIND" = encoder ] && TASK_ARGS+=(--add-mask-symbol --shorten-method truncate)
# SiPE models drop the pre-training tag heads (unused by the classifier); the LM head stays
[[ "$ARCH" == sipe_* ]] && BODY+=(--sipe-tag-heads off)

echo "[finetune] $TASK $ARCH ($KIND) backbone=$BACKBONE lr=$LR wd=$WD bsz=$BSZ epochs=$EPOCHS updates=$TOTAL warmup=$WARMUP extra: $*" >&2
set -x
exec "$BIN/fairseq-train" "$DATA" --user-dir "$ROOT/sipe_fairseq" \
  --task hexatag_sentence_prediction --criterion sentence_prediction "${TASK_ARGS[@]}" \
  "${BODY[@]}" \
  --finetune-from-model "$CKPT" \
  --optimizer adam --adam-betas '(0.9,0.999)' --adam-eps 1e-6 --weight-decay "$WD" --clip-norm 0.0 \
  --lr "$LR" --lr-scheduler polynomial_decay --total-num-update "$TOTAL" --warmup-updates "$WARMUP" \
  --batch-size "$BSZ" --required-batch-size-multiple 1 --max-epoch "$EPOCHS" --max-update "$TOTAL" \
  --best-checkpoint-metric "$METRIC" --maximize-best-checkpoint-metric \
  --save-dir "$SAVE" --no-epoch-checkpoints --num-workers 0 --log-format simple --log-interval 50 \
  "$@"

"""``sipe-eval glue``: the GLUE metric of a fine-tuned checkpoint (:mod:`sipe_fairseq.eval.glue`), or
(``--model-flags``) the fairseq-train flags that rebuild a pre-trained checkpoint's model
(:mod:`sipe_fairseq.checkpoints.model_flags`)."""
import argparse
import json
import shlex

from sipe_fairseq.checkpoints.model_flags import model_flags
from sipe_fairseq.eval import glue
from sipe_fairseq.eval.glue import evaluate_glue

HELP = "GLUE metric of a fine-tuned hexatag_sentence_prediction checkpoint (or --model-flags of a pre-trained one)"
DESCRIPTION = glue.__doc__


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", help="sipe-glue-preprocess directory (default: the checkpoint's)")
    p.add_argument("--path", required=True, help="fine-tuned checkpoint")
    p.add_argument("--task-name", help="GLUE task (default: from the data's glue.json)")
    p.add_argument("--split", default="valid", help="split to score (default: valid)")
    p.add_argument("--max-tokens", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print the result row as JSON")
    p.add_argument("--model-flags", action="store_true",
                   help="only print the fairseq-train flags that rebuild --path's model (e.g. a pre-trained LM) and exit")


def run(args: argparse.Namespace) -> int:
    if args.model_flags:
        print(" ".join(shlex.quote(f) for f in model_flags(args.path)))
        return 0
    row = evaluate_glue(args.path, args.data, args.split, args.task_name, args.max_tokens, args.batch_size)
    if args.json:
        print(json.dumps(row, sort_keys=True))
    else:
        scores = " | ".join(f"{k} {v:.2f}" for k, v in row.items() if isinstance(v, float))
        print(f"{row['task']} {row['split']} (n={row['n']}): {scores}")
    return 0

"""``sipe-eval tagger``: UAS and exact match of a ``sipe_tagger`` checkpoint on a split
(:mod:`sipe_fairseq.eval.tagger`)."""
import argparse
import json
import os

import torch

from sipe_fairseq.checkpoints.load import load_tagger
from sipe_fairseq.eval import tagger
from sipe_fairseq.eval.tagger import evaluate_tagger

HELP = "UAS / exact match of a sipe_tagger"
DESCRIPTION = tagger.__doc__


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="sipe-preprocess directory")
    p.add_argument("--path", required=True, help="sipe_tagger checkpoint")
    p.add_argument("--split", default="test")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--json", help="also write the scores here")


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    model, task = load_tagger(args.path, args.data)
    scores = evaluate_tagger(model, task, args.split, args.batch_size)
    print(f"{args.split}: sentences {scores['sentences']}, words {scores['words']}, "
          f"UAS {scores['uas']:.2f}, exact match {scores['exact_match']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(scores, f, indent=1)
    return 0

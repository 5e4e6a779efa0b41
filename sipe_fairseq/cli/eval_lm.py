"""``sipe-eval-lm``: conditional perplexity, the joint bound and the position-type breakdown for
one or several checkpoints on the same ``sipe-preprocess`` directory, side by side.

    sipe-eval-lm DATA --path none=ckpt_none/checkpoint_best.pt --path position=ckpt_pos/checkpoint_best.pt

Works for ``hexatag_lm`` checkpoints and for stock ``language_modeling`` ones (no tags): every
model is scored through a ``hexatag_lm`` task built from its own task settings, so all see the
same blocks and the same position types.

Exit status: 0 ok, 2 usage error (a checkpoint name given twice), 3 a checkpoint is missing,
refused by torch's weights-only loading (untrusted content) or not a fairseq checkpoint.
"""
import argparse
import json
import logging
import sys

import torch

import sipe_fairseq
from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS, CheckpointError, checkpoint_specs, load_lm
from sipe_fairseq.eval.scoring import perplexity_markdown, score_split

logger = logging.getLogger(__name__)


def evaluate(path, data, split="valid", context_window=0, max_tokens=4096, batch_size=None):
    """:func:`~sipe_fairseq.eval.scoring.score_split` of one checkpoint (loaded by
    :func:`~sipe_fairseq.checkpoints.load.load_lm`)."""
    model, task = load_lm(path, data, context_window)
    return score_split(model, task, split, context_window, max_tokens, batch_size)


def main(argv=None):
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(prog="sipe-eval-lm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="a sipe-preprocess data directory")
    p.add_argument("--path", action="append", required=True, metavar="[NAME=]CKPT", help="checkpoint (repeatable)")
    p.add_argument("--gen-subset", default="valid", help="split to score (default: valid)")
    p.add_argument("--context-window", type=int, default=0, help="as fairseq-eval-lm --context-window")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--json", help="also write the scores as JSON here")
    p.add_argument("--threads", type=int, default=None, help="torch threads")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sipe_fairseq.register()
    try:
        results = {name: evaluate(path, args.data, args.gen_subset, args.context_window, args.max_tokens, args.batch_size)
                   for name, path in checkpoint_specs(args.path).items()}
    except CheckpointError as e:
        logger.error("%s", e)
        return CHECKPOINT_EXIT_STATUS
    except ValueError as e:  # a name given twice, --context-window with an encoder
        logger.error("%s", e)
        return 2
    print(perplexity_markdown(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

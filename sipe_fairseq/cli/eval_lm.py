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
from sipe_fairseq.eval.progress import add_progress_argument, configure
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
    p.add_argument("--tags", default=None, metavar="SOURCES",
                   help="also score every sentence alone under these tag sources, comma-separated: given, self, beam:K "
                        "(eval/prefix_tags.py), e.g. given,self,beam:4")
    p.add_argument("--tags-unconstrained", action="store_true", help="self/beam: any tag pair, not only valid prefixes")
    p.add_argument("--tags-max-sentences", type=int, default=None, help="score the first N sentences only with --tags")
    add_progress_argument(p)
    args = p.parse_args(argv)
    configure(args)
    if args.tags:
        from sipe_fairseq.eval.prefix_tags import parse_tag_source

        for source in args.tags.split(","):
            try:
                parse_tag_source(source)
            except ValueError as e:
                p.error(f"--tags: {e}")  # exit status 2
    if args.threads:
        torch.set_num_threads(args.threads)
    sipe_fairseq.register()
    try:
        results = {name: evaluate(path, args.data, args.gen_subset, args.context_window, args.max_tokens, args.batch_size)
                   for name, path in checkpoint_specs(args.path).items()}
        print(perplexity_markdown(results))
        if args.tags:  # issue 12: tags from the prefix only
            from sipe_fairseq.eval.prefix_tags import markdown_tag_sources, score_split_tag_sources

            sources = [x for x in args.tags.split(",") if x]
            by_tags = {name: score_split_tag_sources(*load_lm(path, args.data), args.gen_subset, sources,
                                                     not args.tags_unconstrained, args.tags_max_sentences)
                       for name, path in checkpoint_specs(args.path).items()}
            print(markdown_tag_sources(by_tags))
            results = {name: dict(results[name], tag_sources=by_tags[name]) for name in results}
    except CheckpointError as e:
        logger.error("%s", e)
        return CHECKPOINT_EXIT_STATUS
    except ValueError as e:  # a name given twice, --context-window with an encoder
        logger.error("%s", e)
        return 2
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

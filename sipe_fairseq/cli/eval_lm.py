"""``sipe-eval-lm``: conditional perplexity, the joint bound and the position-type breakdown for
one or several checkpoints on the same ``sipe-preprocess`` directory, side by side; with ``--tags
given,self,beam:K`` also every sentence scored alone under each tag source (conditional and joint
bound with the given tags, ``self`` exact, ``beam:K`` bound), per token and per word, each with its
position-type breakdown (:mod:`sipe_fairseq.structure`, :mod:`sipe_fairseq.eval.prefix_scores`). GiLT
checkpoints (``gilt_txl``, task ``gilt_lm``) take the same options: their structure is a graph (given: the
data's ``{split}.arcs``; self: the greedy graph; beam:K: the beam over graphs with ``--gilt-count-beam``
counts per hypothesis), with the arc F1 of their own graphs against the gold one.

    sipe-eval-lm DATA --path none=ckpt_none/checkpoint_best.pt --path position=ckpt_pos/checkpoint_best.pt

Works for ``hexatag_lm`` checkpoints and for stock ``language_modeling`` ones (no tags): every
model is scored through a ``hexatag_lm`` task built from its own task settings, so all see the
same blocks and the same position types.

Exit status: 0 ok, 1 nothing scored (no token of the split, or no sentence under a tag source), a score
that is not finite, sentences longer than a model's learned positions, 2 usage error (an option out of
range, ``--tags ""``, a checkpoint name given twice, an output path that cannot be written: checked before
anything is loaded; a tag source that cannot fit ``--max-memory`` even one sentence at a time), 3 a
checkpoint is missing, refused by torch's weights-only loading (untrusted content), not a fairseq
checkpoint, holds non-finite weights, or was trained on another data directory (its recorded ``dict.txt``
and ``spm.model`` sha256 and tag dictionaries; ``--allow-dictionary-mismatch``).
"""
import argparse
import logging
import os
import sys

import torch
from fairseq import utils
from fairseq.data import data_utils

import sipe_fairseq
from sipe_fairseq.cli import logs
from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS, CheckpointError, checkpoint_specs, load_lm
from sipe_fairseq.cli.options import (add_max_memory_argument, add_progress_argument, configure_progress, int_at_least,
                                      mass_fraction, output_path_problem, probability)
from sipe_fairseq.cli.output import write_json
from sipe_fairseq.eval.finite import first_non_finite
from sipe_fairseq.eval.report import layer_info
from sipe_fairseq.eval.prefix_scores import check_sources_fit, markdown_tag_sources, score_split_sources
from sipe_fairseq.eval.scoring import perplexity_markdown, score_split
from sipe_fairseq.structure.arcs import COUNT_RULES
from sipe_fairseq.structure.family import StructureOptions
from sipe_fairseq.structure.sources import parse_sources
from sipe_fairseq.tasks.sipe_data import EvaluationError

logger = logging.getLogger(__name__)


def evaluate_lm(path, data, split="valid", context_window=0, max_tokens=4096, batch_size=None, tags=None,
                options=None, max_sentences=None, batch_sentences=256, allow_dictionary_mismatch=False):
    """:func:`~sipe_fairseq.eval.scoring.score_split` of one checkpoint (loaded once by
    :func:`~sipe_fairseq.checkpoints.load.load_lm`); with ``tags`` (tag sources), also
    ``tag_sources``: every sentence scored alone under each
    (:func:`~sipe_fairseq.eval.prefix_scores.score_split_sources`: hexatags for SiPE checkpoints,
    graphs for GiLT ones; ``options``: :class:`~sipe_fairseq.structure.family.StructureOptions`)."""
    model, task = load_lm(path, data, context_window, allow_dictionary_mismatch)
    if tags:  # a tag source that cannot fit the memory budget: refused before anything is scored
        check_sources_fit(model, task, split, tags, options, max_sentences, batch_sentences)
    rows = score_split(model, task, split, context_window, max_tokens, batch_size)
    rows["run"] = run_record(model, task, data, split)  # what sipe-eval seeds checks before it averages
    if tags:
        if context_window:  # the tag sources score sentences alone: a task without the context-window shortening
            model, task = load_lm(path, data, allow_dictionary_mismatch=allow_dictionary_mismatch)
        rows["tag_sources"] = score_split_sources(model, task, split, tags, StructureOptions(**vars(options)) if options
                                                  else None, max_sentences, batch_sentences)
    return rows


def run_record(model, task, data: str, split: str) -> dict:
    """What a row was scored on: ``split``, its ``sentences``, the ``data`` directory, the checkpoint's ``arch``
    and ``injection`` (``sipe-eval seeds`` refuses to average rows that differ in any)."""
    info = layer_info(getattr(getattr(model, "decoder", model), "cfg", None))
    raw = data_utils.load_indexed_dataset(os.path.join(utils.split_paths(data)[0], split), task.source_dictionary)
    return {"split": split, "sentences": None if raw is None else len(raw), "data": os.path.abspath(data),
            "arch": info.get("arch") or type(model).__name__, "injection": info.get("injection") or "none"}


def main(argv=None):
    logs.configure("WARNING", logs.SHORT_FORMAT, plugin_level=logging.INFO)  # fairseq quiet, the plugin's counts shown
    p = argparse.ArgumentParser(prog="sipe-eval-lm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="a sipe-preprocess data directory")
    p.add_argument("--path", action="append", required=True, metavar="[NAME=]CKPT", help="checkpoint (repeatable)")
    p.add_argument("--gen-subset", default="valid", help="split to score (default: valid)")
    p.add_argument("--context-window", type=int_at_least(0), default=0, help="as fairseq-eval-lm --context-window (>= 0)")
    p.add_argument("--max-tokens", type=int_at_least(1), default=4096, help="tokens per batch (default: %(default)s)")
    p.add_argument("--batch-size", type=int_at_least(1), default=None, help="sentences per batch")
    p.add_argument("--json", help="also write the scores as JSON here (checked writable before anything runs)")
    p.add_argument("--allow-dictionary-mismatch", action="store_true",
                   help="score a checkpoint whose recorded data (dict.txt, spm.model, tag dictionaries) differs from "
                        "DATA's, with a warning (default: refused, exit status 3)")
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads")
    p.add_argument("--tags", default=None, metavar="SOURCES",
                   help="also score every sentence alone under these tag sources, comma-separated: given, self, beam:K, "
                        "mix:K (the beam read as a mixture: an exact, normalized perplexity), untagged (SiPE: every word "
                        "<notag>) (sipe_fairseq/structure), e.g. given,self,beam:4,mix:4")
    p.add_argument("--tags-unconstrained", action="store_true", help="self/beam/mix: any tag pair, not only valid prefixes")
    p.add_argument("--tags-max-sentences", type=int_at_least(1), default=None, metavar="N",
                   help="score the first N sentences only with --tags (N >= 1)")
    p.add_argument("--tags-top-pairs", type=int_at_least(0), default=0, metavar="M",
                   help="SiPE, beam:K, mix:K: expand each hypothesis with its tag heads' M best allowed pairs only (the "
                        "fast-track pruning of word-synchronous beams; default 0: every allowed pair)")
    p.add_argument("--tags-mass", type=mass_fraction, default=1.0, metavar="P",
                   help="beam:K, mix:K: at each word's ranking keep a sentence's best hypotheses until their share of "
                        "the prefix mass reaches P, at most K, at least one (an adaptive width; default 1: the K best)")
    p.add_argument("--tags-abstain", type=probability, default=0.0, metavar="P",
                   help="SiPE, self: leave a word <notag> when its best allowed pair has probability below P (default "
                        "0: never; for models trained with --tag-dropout)")
    p.add_argument("--tags-batch-sentences", type=int_at_least(1), default=256, metavar="N",
                   help="sentences scored together under a tag source: larger is faster and holds a KV cache of "
                        "N x (hypotheses) x (length) positions per layer; beam:K at most 1024/K (default 256)")
    add_max_memory_argument(p)
    p.add_argument("--gilt-count-beam", type=int_at_least(1), default=5, metavar="C",
                   help="GiLT checkpoints, beam:K: counts each hypothesis branches on (docs/gilt-reference.md section 4; "
                        "default 5)")
    p.add_argument("--gilt-count-rule", choices=COUNT_RULES, default=COUNT_RULES[0],
                   help="GiLT, beam:K: top-then-allowed (the authors': the counts among the top C of all 30 that a word "
                        "may take, c <= 2i - 1) or allowed-then-top (the top C among the allowed counts)")
    add_progress_argument(p)
    args = p.parse_args(argv)
    configure_progress(args)
    sources = None
    if args.tags is not None:
        try:
            sources = parse_sources(args.tags)
        except ValueError as e:
            p.error(f"--tags: {e}")  # exit status 2
    problem = output_path_problem(args, ("json",))
    if problem:
        logger.error("%s", problem)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    sipe_fairseq.register()
    try:
        options = StructureOptions(constrained=not args.tags_unconstrained, top_pairs=args.tags_top_pairs,
                                   abstain=args.tags_abstain, max_memory=args.max_memory, mass=args.tags_mass,
                                   count_beam=args.gilt_count_beam, count_rule=args.gilt_count_rule)
        results = {name: evaluate_lm(path, args.data, args.gen_subset, args.context_window, args.max_tokens,
                                     args.batch_size, sources, options, args.tags_max_sentences,
                                     args.tags_batch_sentences, args.allow_dictionary_mismatch)
                   for name, path in checkpoint_specs(args.path).items()}
        empty = [f"{name} [{source}]" for name, r in results.items() for source, row in (r.get("tag_sources") or {}).items()
                 if not row.get("tokens")]
        if empty:
            raise EvaluationError(f"split {args.gen_subset!r}: no token scored under --tags for {', '.join(empty)}, "
                                  "so no perplexity")
        bad = first_non_finite(results)
        if bad:  # never a NaN in the table or the JSON
            raise EvaluationError(f"split {args.gen_subset!r}: a score is not finite ({bad}): nothing reported")
        print(perplexity_markdown({name: {k: v for k, v in r.items() if k not in ("tag_sources", "run")}
                                   for name, r in results.items()}))
        if sources:  # tags from the prefix only, per checkpoint side by side
            print(markdown_tag_sources({name: r["tag_sources"] for name, r in results.items()}))
    except CheckpointError as e:
        logger.error("%s", e)
        return CHECKPOINT_EXIT_STATUS
    except EvaluationError as e:  # nothing scored (README: exit status 1, not a perplexity of 1.00 or NaN)
        logger.error("%s", e)
        return 1
    except ValueError as e:  # a name given twice, --context-window with an encoder
        logger.error("%s", e)
        return 2
    if args.json:
        write_json(args.json, results, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``sipe-eval blimp``: the options of the BLiMP evaluation (:mod:`sipe_fairseq.eval.blimp`), and the
run that loads the checkpoints, scores the pairs and writes the reports."""
import argparse
import logging
from typing import List, Optional

import torch

import sipe_fairseq
from sipe_fairseq.cli.output import write_json, write_text
from sipe_fairseq.checkpoints import CheckpointSpecs
from sipe_fairseq.cli.options import (SPLIT_ONLY, add_data_argument, add_device_argument,
                                      add_dictionary_mismatch_argument, add_shard_arguments, add_structure_arguments,
                                      int_at_least, shard_problem, structure_options, width_line, width_of)
from sipe_fairseq.data.encode import SentenceEncoder
from sipe_fairseq.eval import blimp
from sipe_fairseq.eval.blimp import (USAGE_ERROR, BlimpPair, add_metadata, blimp_markdown, evaluate_blimp, log_excluded,
                                     nothing_scored, prepare, read_blimp, score_columns, shard_records)
from sipe_fairseq.eval.shards import FORMAT, fingerprint, shard_block, shard_indices
from sipe_fairseq.hexatag.errors import NonFiniteScoreError
from sipe_fairseq.parsing import add_tree_arguments, release_workers, tree_source_from_args
from sipe_fairseq.data.lm_dataset import task_placement
from sipe_fairseq.structure.options import BATCH_SENTENCES, SUITE_WIDTH

logger = logging.getLogger(__name__)

HELP = "BLiMP minimal-pair accuracy (per paradigm, per field, overall)"
DESCRIPTION = blimp.__doc__


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_data_argument(p)
    add_dictionary_mismatch_argument(p)
    add_device_argument(p)
    p.add_argument("--path", action="append", required=True, metavar="[NAME=]CKPT",
                   help="checkpoint to score (repeatable): decoders (hexatag_lm, stock language_modeling) or "
                        "masked-LM encoders (hexatag_mlm, stock masked_lm: pseudo-log-likelihood)")
    p.add_argument("--blimp", nargs="+", action="extend", required=True, metavar="FILE_OR_DIR",
                   help="BLiMP JSONL file(s) or folder(s) of *.jsonl (repeatable)")
    p.add_argument("--every", type=int_at_least(1), default=1, metavar="N",
                   help="score the 1st, (N+1)-th, ... pair of each paradigm only (10: the fixed, documented 10%% sample "
                        "of the full BLiMP; the report counts the pairs kept) (default: %(default)s, every pair)")
    add_tree_arguments(p)
    p.add_argument("--score", choices=("lm", "joint"), default="lm",
                   help="lm: log p(x | tags), summed over tokens incl. </s> (default; encoders: the pseudo-log-"
                        "likelihood over the sentence's tokens, not </s>); joint: plus the tag heads' log p(tags), "
                        "i.e. log p(x, tags) (encoders: of each masked word's tags given the rest)")
    add_structure_arguments(p, "given (the tree source's tags), for GiLT checkpoints self", refuse=SPLIT_ONLY,
                            defaults=SUITE_WIDTH)
    p.add_argument("--batch-size", type=int_at_least(1), default=BATCH_SENTENCES,
                   help="sentences per forward pass for decoders, masked copies for encoders (one sentence's copies "
                        "are never split) (default: %(default)s)")
    p.add_argument("--json", metavar="OUT", help="write the full report (incl. every skipped pair) as JSON here")
    p.add_argument("--markdown", metavar="OUT", help="also write the markdown table here")
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads")
    p.add_argument("--show-skipped", type=int_at_least(0), default=20, metavar="N",
                   help="log at most N skipped pairs (all are in --json) (default: %(default)s)")
    add_shard_arguments(p)  # items: the pairs kept by --every, in file order


def run(args: argparse.Namespace) -> int:
    """Prints the markdown table; 2 on a usage or input error (one line, no traceback), 1 when a model
    scored no pair."""
    problem = shard_problem(args)
    if problem:
        logger.error("%s", problem)
        return USAGE_ERROR
    try:
        args.tag_sources = args.tags  # checked by argparse; None: each model's default
        checkpoints = CheckpointSpecs.parse(args.path, args.data, allow_dictionary_mismatch=args.allow_dictionary_mismatch,
                                            device=args.device)
        read = read_blimp(args.blimp)
        pairs = blimp.every_nth(read, args.every)
        args.sample = {"every": args.every, "read": len(read), "kept": len(pairs)}
    except (ValueError, FileNotFoundError) as e:
        logger.error("%s", e)
        return USAGE_ERROR
    return _run(args, checkpoints, pairs)


def _run(args: argparse.Namespace, checkpoints: CheckpointSpecs, pairs: List[BlimpPair]) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    sipe_fairseq.register()
    shard = None
    if args.num_shards is not None:  # this shard's pairs only; what they depend on, before any work
        indices = shard_indices(len(pairs), args.num_shards, args.shard_id)
        shard = (indices, len(pairs), fingerprint("blimp", args, checkpoints.paths(), args.data, blimp.blimp_files(args.blimp)))
        pairs = [pairs[i] for i in indices]
        logger.info("shard %d of %d: %d of %d pairs", args.shard_id, args.num_shards, len(pairs), shard[1])
    logger.info("%d pairs in %d paradigms", len(pairs), len({p.uid for p in pairs}))
    source = tree_source_from_args(args)
    encoder = SentenceEncoder(args.data, allow_dictionary_mismatch=args.allow_dictionary_mismatch)
    try:
        prepared = prepare(pairs, source, encoder)
    finally:
        release_workers(source)  # the parser's worker processes (--workers) end before any scoring
    src = prepared.tree_source
    logger.info("trees (%s) for %d distinct sentences in %.1fs%s%s", src["spec"], prepared.counts["sentences"], prepared.seconds,
                f" (cache {src['cache']}: {src.get('hits', 0)} hits, {src.get('misses', 0)} misses)" if "cache" in src else "",
                f"; {src['root_fixed_sentences']} sentences needed root fixing" if "root_fixed_sentences" in src else "")
    placements = {}

    def one_at_a_time():  # each checkpoint loaded when evaluate_blimp reaches it, released before the next
        for ck in checkpoints:
            placements[ck.name] = task_placement(ck.task)
            yield ck.name, ck.model

    try:
        options = structure_options(args)
        if shard is not None:
            columns = score_columns(one_at_a_time(), prepared, encoder.dictionary, args.batch_size,
                                    joint=args.score == "joint", placements=placements, tags=args.tag_sources, options=options)
            return _write_shard(args, checkpoints, prepared, pairs, shard, columns, options)
        report = evaluate_blimp(pairs, one_at_a_time(), prepared, encoder.dictionary, args.batch_size,
                                joint=args.score == "joint", placements=placements, tags=args.tag_sources, options=options)
    except NonFiniteScoreError:  # not an input error: exit status 1 (sipe-eval's main), nothing written
        raise
    except ValueError as e:  # e.g. --tags self with an encoder or a model without tag heads
        logger.error("%s", e)
        return USAGE_ERROR
    _settings(args, add_metadata(report, prepared, args.score, checkpoints.paths(), args.data, args.blimp), options)
    return publish_report(report, args.tag_sources, args.show_skipped, args.markdown, args.json)


def publish_report(report: dict, tags, show_skipped: int, markdown: Optional[str], json_path: Optional[str]) -> int:
    """A finished report out (a run's, or ``sipe-eval merge``'s of its shards): the skipped pairs logged, the table
    printed and written, the JSON written; the exit status (1 when a model scored no pair)."""
    log_excluded(report, show_skipped)
    table = blimp_markdown(report) + width_line(tags, report["tag_width"])
    print(table, end="")
    if markdown:
        write_text(markdown, table)
    if json_path:
        write_json(json_path, report, indent=2, ensure_ascii=False)
    return nothing_scored(report)


def _settings(args: argparse.Namespace, report: dict, options) -> dict:
    report["sample"] = args.sample
    report["tags"] = list(args.tag_sources) if args.tag_sources else "default (given; GiLT: self)"
    report["tag_width"] = width_of(options)
    return report


def _write_shard(args, checkpoints, prepared, pairs, shard, columns, options) -> int:
    """A shard's file (eval/shards.py): its pairs' records and the run's settings; no table (``sipe-eval merge``)."""
    indices, total, fp = shard
    meta = _settings(args, add_metadata({}, prepared, args.score, checkpoints.paths(), args.data, args.blimp), options)
    for key in ("sentences", "skipped_sentences"):  # the merge counts them over the run's distinct sentences
        meta.pop(key)
    write_json(args.json, {"format": FORMAT, "command": "blimp", "shard": shard_block(args.shard_id, args.num_shards,
                                                                                      len(indices), total, fp),
                           "settings": meta, "records": shard_records(indices, pairs, prepared, *columns)},
               ensure_ascii=False)
    logger.info("shard %d of %d: %d pairs written to %s (join the shards with sipe-eval merge)", args.shard_id,
                args.num_shards, len(indices), args.json)
    return 0

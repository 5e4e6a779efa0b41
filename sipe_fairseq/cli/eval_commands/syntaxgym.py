"""``sipe-eval syntaxgym``: the options of the SyntaxGym evaluation (:mod:`sipe_fairseq.eval.syntaxgym`),
and the run that loads the checkpoints, scores the suites and writes the reports."""
import argparse
import logging
from typing import Iterable, Optional

import torch

import sipe_fairseq
from sipe_fairseq.cli.output import write_json, write_text
from sipe_fairseq.checkpoints import CheckpointSpecs
from sipe_fairseq.cli.options import (SPLIT_ONLY, add_data_argument, add_device_argument,
                                      add_dictionary_mismatch_argument, add_shard_arguments, add_structure_arguments,
                                      float_at_least, int_at_least, shard_problem, structure_options, width_line,
                                      width_of)
from sipe_fairseq.data.encode import SentenceEncoder
from sipe_fairseq.eval import syntaxgym
from sipe_fairseq.eval.syntaxgym import (EQUALITY_ATOL, EQUALITY_RTOL, SyntaxGymError, evaluate_suites, merge_reports,
                                         prefix_tag_differences, read_suites, report_markdown, tag_source_columns,
                                         sentences_of, tree_and_encode)
from sipe_fairseq.eval.shards import FORMAT, fingerprint, shard_block, shard_indices
from sipe_fairseq.eval.syntaxgym.shards import item_count, shard_records, share_of
from sipe_fairseq.eval.syntaxgym.suites import find_suites
from sipe_fairseq.hexatag.errors import NonFiniteScoreError
from sipe_fairseq.parsing import add_tree_arguments, release_workers, tree_source_from_args, tree_source_stats
from sipe_fairseq.structure.options import BATCH_SENTENCES, SUITE_WIDTH

logger = logging.getLogger(__name__)

HELP = "SyntaxGym suites: region surprisals, prediction formulae, suite and overall scores"
DESCRIPTION = syntaxgym.__doc__


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``sipe-eval syntaxgym`` options (tree options shared with the other subcommands)."""
    add_data_argument(p)
    add_dictionary_mismatch_argument(p)
    add_device_argument(p)
    p.add_argument("--path", action="append", required=True, metavar="[NAME=]CKPT",
                   help="checkpoint to evaluate (repeatable, one report column each): hexatag_lm or stock language_modeling")
    p.add_argument("--suites", nargs="+", action="extend", required=True, metavar="FILE_OR_DIR",
                   help="SyntaxGym suite JSON file(s) or folder(s) of *.json (repeatable)")
    add_tree_arguments(p)
    add_structure_arguments(p, "given (the parser's tags; also counts the items whose prefix tags differ between "
                               "conditions), for GiLT checkpoints self; beam:K scores the running bound's per-token "
                               "increments", refuse=SPLIT_ONLY, defaults=SUITE_WIDTH)
    p.add_argument("--batch-size", type=int_at_least(1), default=BATCH_SENTENCES,
                   help="sentences scored together (default: %(default)s)")
    p.add_argument("--eq-atol", type=float_at_least(0.0), default=EQUALITY_ATOL,
                   help="'=' holds when |a-b| <= atol + rtol*|b|: absolute tolerance in bits "
                        "(default: %(default)g, as SyntaxGym)")
    p.add_argument("--eq-rtol", type=float_at_least(0.0), default=EQUALITY_RTOL,
                   help="relative tolerance of '=' (default: %(default)g, as SyntaxGym)")
    p.add_argument("--json", metavar="OUT", help="write the full report (items, predictions, region surprisals, "
                                                 "unscored sentences) as JSON here")
    p.add_argument("--markdown", metavar="OUT", help="also write the markdown tables here")
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads")
    add_shard_arguments(p)  # items: the suites' items, suite by suite in order


def _checkpoints(specs: Iterable[str], data: Optional[str], allow_dictionary_mismatch: bool = False,
                 device: str = "cpu") -> CheckpointSpecs:
    try:
        return CheckpointSpecs.parse(specs, data, allow_dictionary_mismatch=allow_dictionary_mismatch, device=device)
    except (ValueError, FileNotFoundError) as e:
        raise SyntaxGymError(str(e)) from e


def run(args: argparse.Namespace) -> int:
    """Prints the markdown tables; 2 on a suite or usage error, 1 when a model scored no suite."""
    problem = shard_problem(args)
    if problem:
        logger.error("%s", problem)
        return 2
    try:
        return _run(args)
    except SyntaxGymError as e:
        logger.error("%s", e)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    sipe_fairseq.register()
    sources = args.tags  # checked by argparse; None: each model's default
    options = structure_options(args)
    checkpoints = _checkpoints(args.path, args.data, args.allow_dictionary_mismatch, args.device)
    suites, sentences = read_suites(args.suites)  # fails fast on bad formulae and references
    shard = None
    if args.num_shards is not None:  # this shard's items only; what they depend on, before any work
        indices = shard_indices(item_count(suites), args.num_shards, args.shard_id)
        shard = (indices, item_count(suites), suites,
                 fingerprint("syntaxgym", args, checkpoints.paths(), args.data, find_suites(args.suites)))
        suites = share_of(suites, indices)
        sentences = sentences_of(suites)
        logger.info("shard %d of %d: %d of %d items", args.shard_id, args.num_shards, len(indices), shard[1])
    source = tree_source_from_args(args)
    encoder = SentenceEncoder(args.data, allow_dictionary_mismatch=args.allow_dictionary_mismatch)
    try:
        tree_and_encode(sentences, source, encoder)
    finally:
        release_workers(source)  # the parser's worker processes (--workers) end before any scoring
    d = encoder.dictionary

    reports = []
    for ck in checkpoints:  # one checkpoint loaded at a time (its dictionary checked), scored under every tag source
        try:
            reports.append(evaluate_suites(suites, sentences,
                                           tag_source_columns(ck.name, ck.model, ck.task, d, sources, options),
                                           args.batch_size, args.eq_atol, args.eq_rtol))
        except NonFiniteScoreError:  # not an input error: exit status 1 (sipe-eval's main), nothing written
            raise
        except ValueError as e:  # e.g. --tags self with a model without tag heads
            raise SyntaxGymError(f"{ck.path}: {e}") from e
    report = merge_reports(reports)
    report.update(parser=source.spec, tree_source=tree_source_stats(source), data=args.data, checkpoints=checkpoints.paths(),
                  tags=sources if sources else "default (given; GiLT: self)", tag_width=width_of(options))
    if sources is None or "given" in sources:
        report["prefix_tag_differences"] = prefix_tag_differences(suites, sentences)
    if shard is not None:
        return _write_shard(args, report, shard)
    return publish_report(report, sources, args.markdown, args.json)


def publish_report(report: dict, sources, markdown: Optional[str], json_path: Optional[str]) -> int:
    """A finished report out (a run's, or ``sipe-eval merge``'s of its shards): the table printed and written, the
    JSON written; the exit status (1 when a model scored no suite)."""
    table = report_markdown(report) + width_line(sources, report["tag_width"])
    print(table, end="")
    if markdown:
        write_text(markdown, table)
    if json_path:
        write_json(json_path, report, indent=1, ensure_ascii=False)
    empty = [n for n, row in report["overall"].items() if row.get("accuracy") is None]
    if empty:  # every suite unscored (e.g. all sentences longer than the model's positions)
        logger.error("no suite scored by %s (%d suites; the unscored items are listed in --json): no accuracy",
                     ", ".join(empty), len(report["suites"]))
        return 1
    return 0


def _write_shard(args: argparse.Namespace, report: dict, shard) -> int:
    """A shard's file (eval/shards.py): its items' rows and the run's settings; no table (``sipe-eval merge``)."""
    indices, total, suites, fp = shard
    write_json(args.json, {"format": FORMAT, "command": "syntaxgym",
                           "shard": shard_block(args.shard_id, args.num_shards, len(indices), total, fp),
                           "records": shard_records(suites, indices, report)}, ensure_ascii=False)
    logger.info("shard %d of %d: %d items written to %s (join the shards with sipe-eval merge)", args.shard_id,
                args.num_shards, len(indices), args.json)
    return 0

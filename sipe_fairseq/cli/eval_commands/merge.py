"""``sipe-eval merge``: the shards of one run (``--num-shards N --shard-id I`` of ``sipe-eval-lm --tags``,
``sipe-eval blimp`` or ``sipe-eval syntaxgym``, each written with ``--json``) joined into the report that one run
would have written: the same JSON keys and numbers, aggregated from the shards' per-item records by the commands'
own code (:mod:`sipe_fairseq.eval.shards`; docs/scaling.md). ``seconds`` are the shards' sums; a parser's cache
hits and misses are the shards' own, summed. Shards of ``sipe-surprisal`` (written to its ``--output``) join
into the TSV (or ``--json`` records) one run would have written, every sentence's rows in input order, written to
``--output`` (default: stdout).

    sipe-eval merge shards/blimp.*.json --json blimp.json --markdown blimp.md
    sipe-eval merge shards/surprisal.*.json --output surprisals.tsv

Refused (exit status 2, one line, nothing written): a file that is not a shard file or cannot be read; shards that
overlap (an id twice), leave items out (an id missing, item counts that do not add up), or come from different runs
(their fingerprints: the command, the checkpoints' sha256, the data directory, the inputs, the tag sources and every
other option). Exit status 1 as the command itself: a report with a model that scored nothing (written, as the
command writes it) or, for ``sipe-eval-lm``, a tag source with no token (nothing written).
"""
import argparse
import json
import logging
import sys

from sipe_fairseq.cli import surprisal
from sipe_fairseq.cli.eval_commands import blimp, syntaxgym
from sipe_fairseq.cli.eval_lm import report_results
from sipe_fairseq.cli.output import write_text
from sipe_fairseq.eval.blimp import USAGE_ERROR, merge_shard_records
from sipe_fairseq.eval.prefix_scores import merge_split_records, records_from_json, split_source_rows
from sipe_fairseq.eval.shards import ShardError, check_shards, in_order, sum_counts
from sipe_fairseq.eval.syntaxgym.shards import merge_shard_records as merge_syntaxgym

logger = logging.getLogger(__name__)

HELP = "join the shards of a run (--num-shards, --shard-id) into its report"
DESCRIPTION = __doc__


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shards", nargs="+", metavar="SHARD",
                   help="the shard files (--json of each --shard-id; sipe-surprisal: --output), any order")
    p.add_argument("--json", metavar="OUT", help="write the joined report here (needed, but for sipe-surprisal's shards)")
    p.add_argument("--markdown", metavar="OUT", help="also write the joined report's tables here")
    p.add_argument("--output", metavar="OUT",
                   help="sipe-surprisal's shards: write the joined TSV (or JSON records) here (default: stdout)")


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise ShardError(f"{path}: cannot read: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ShardError(f"{path}: not JSON ({e})") from None


def run(args: argparse.Namespace) -> int:
    try:
        shards = [_read(path) for path in args.shards]
        check_shards(shards, args.shards)
        commands = {s.get("command") for s in shards}  # one command: the fingerprints agree
        command = commands.pop()
        if command not in MERGERS:
            raise ShardError(f"{args.shards[0]}: shards of {command!r}, which sipe-eval merge does not join")
        problem = _outputs_problem(command, args)
        if problem:
            raise ShardError(problem)
        shards = in_order(shards)
        return MERGERS[command](shards, args)
    except ShardError as e:
        logger.error("%s", e)
        return USAGE_ERROR
    except (KeyError, TypeError, IndexError) as e:  # a shard file edited by hand or cut short
        logger.error("the shard files lack what a merge needs (%s: %s): written by another version?", type(e).__name__, e)
        return USAGE_ERROR


def _outputs_problem(command: str, args: argparse.Namespace):
    """One line if the output options do not fit the shards' command: ``--output`` for ``sipe-surprisal``'s (its
    TSV), ``--json`` (and ``--markdown``) for the others' (their report)."""
    if command == surprisal.SHARD_COMMAND:
        given = [f"--{o}" for o in ("json", "markdown") if getattr(args, o)]
        return f"{' and '.join(given)}: shards of sipe-surprisal join into its output: use --output OUT" if given else None
    if args.output:
        return f"--output: shards of {command!r} join into a report: use --json OUT"
    return None if args.json else f"--json OUT is needed: shards of {command!r} join into a JSON report"


def _blimp(shards, args) -> int:
    report = merge_shard_records([s["records"] for s in shards])
    settings = dict(shards[0]["settings"])
    settings["tree_source"] = sum_counts([s["settings"]["tree_source"] for s in shards])
    report.update(settings)
    tags = report.get("tags") if isinstance(report.get("tags"), list) else None
    return blimp.publish_report(report, tags, 20, args.markdown, args.json)


def _syntaxgym(shards, args) -> int:
    report = merge_syntaxgym([s["records"] for s in shards])
    tags = report.get("tags") if isinstance(report.get("tags"), list) else None
    return syntaxgym.publish_report(report, tags, args.markdown, args.json)


def _eval_lm(shards, args) -> int:
    num_shards = shards[0]["shard"]["of"]
    results = {}
    for name, rows in shards[0]["checkpoints"].items():
        rows = {k: v for k, v in rows.items() if k != "tag_records"}  # shard 0: the split's rows and the run
        parts = [records_from_json(s["checkpoints"][name]["tag_records"]) for s in shards]
        rows["tag_sources"] = split_source_rows(merge_split_records(parts, num_shards))
        results[name] = rows
    split = next(iter(results.values()))["run"]["split"]
    return report_results(results, split, args.json, args.markdown)


def _surprisal(shards, args) -> int:
    text = surprisal.merge_shards(shards)  # ShardError before anything is written
    if args.output:
        write_text(args.output, text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


MERGERS = {"blimp": _blimp, "syntaxgym": _syntaxgym, "eval-lm": _eval_lm, surprisal.SHARD_COMMAND: _surprisal}

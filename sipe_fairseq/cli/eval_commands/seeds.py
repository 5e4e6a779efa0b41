"""``sipe-eval seeds``: the options of the seed aggregation (:mod:`sipe_fairseq.eval.reports.seeds`), and the run
that reads the reports and writes the table."""
import argparse
import logging

from sipe_fairseq.cli.output import write_json, write_text
from sipe_fairseq.eval.reports import seeds
from sipe_fairseq.cli.options import int_at_least
from sipe_fairseq.eval.reports.paired import REPLICATES
from sipe_fairseq.eval.reports.seeds import (SEED_SUFFIX, SeedsError, aggregate, check_groups, compare, markdown_paired,
                                             read_reports, seeds_markdown)

logger = logging.getLogger(__name__)

HELP = "mean and spread over seeds of sipe-eval-lm --json reports"
DESCRIPTION = seeds.__doc__


def add_table_arguments(p: argparse.ArgumentParser) -> None:
    """The options ``sipe-eval seeds`` and ``sipe-eval scale`` share: what is averaged, how rows are grouped and
    checked, the bootstrap of the item interval, and the outputs."""
    p.add_argument("--per", choices=("token", "word"), default="token", help="perplexity per token or per word")
    p.add_argument("--seed-suffix", default=SEED_SUFFIX,
                   help="regex removed from a row name to find its group (default: %(default)s)")
    p.add_argument("--allow-mixed", action="store_true",
                   help="compare rows scored on different splits, sentence counts, data directories, architectures "
                        "or injections (default: refused, exit status 2)")
    p.add_argument("--bootstrap", type=int_at_least(100), default=REPLICATES, metavar="N",
                   help="bootstrap replicates of the 95%% interval over items (default: %(default)s)")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap draws (default: %(default)s)")
    p.add_argument("--markdown", help="also write the table here")
    p.add_argument("--json", help="also write every number here")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("reports", nargs="+", help="sipe-eval-lm --json files (rows named NAME-sSEED), and sipe-eval blimp / "
                                              "syntaxgym --json files (seed from the file name, NAME-sSEED.json)")
    p.add_argument("--baseline", metavar="NAME",
                   help="also compare every row with this one (e.g. none): the paired difference per seed, its mean "
                        "and a bootstrap 95%% interval over items, Student's t over seeds, the verdict and, without "
                        "one, the equivalence bound (the largest difference excluded at 95%%), from the per-sentence / "
                        "per-pair / per-item records of the reports")
    add_table_arguments(p)


def run(args: argparse.Namespace) -> int:
    try:
        rows = read_reports(args.reports, args.seed_suffix)
        check_groups(rows, args.seed_suffix, args.allow_mixed)
        table = aggregate(rows, args.per, args.seed_suffix)
        paired = compare(rows, args.baseline, args.per, args.seed_suffix, args.bootstrap, args.bootstrap_seed,
                         args.allow_mixed) if args.baseline else None
    except SeedsError as e:
        logger.error("%s", e)
        return 2
    text = seeds_markdown(table, args.per)
    if paired is not None:
        text += "\n\n" + markdown_paired(paired, args.baseline, args.per)
        table = {"groups": table, "paired": {"baseline": args.baseline, "rows": paired}}
    print(text)
    if args.markdown:
        write_text(args.markdown, text + "\n")
    if args.json:
        write_json(args.json, table, indent=2)
    return 0

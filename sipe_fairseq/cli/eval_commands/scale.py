"""``sipe-eval scale``: the options of the scaling table and figure (:mod:`sipe_fairseq.eval.reports.scale`), and the
run that reads the reports, writes the table and draws the figure."""
import argparse
import logging

from sipe_fairseq.cli.eval_commands.seeds import add_table_arguments
from sipe_fairseq.cli.output import write_json, write_text
from sipe_fairseq.eval.reports import scale
from sipe_fairseq.eval.reports.scale import ScaleOptions, plot_scale, scale_markdown, scale_table
from sipe_fairseq.eval.reports.seeds import SeedsError

logger = logging.getLogger(__name__)

HELP = "scaling table and figure: every run at every model size against its (parameter-matched) baseline"
DESCRIPTION = scale.__doc__


def _matched(text: str):
    run, sep, base = text.partition("=")
    if not (sep and run and base):
        raise argparse.ArgumentTypeError(f"{text!r}: expected RUN=BASE (e.g. gilt=nonegilt)")
    return run, base


def _sources(text: str):
    sources = [s.strip() for s in text.split(",") if s.strip()]
    if not sources:
        raise argparse.ArgumentTypeError("expected tag sources, comma-separated (e.g. given,self,mix:16)")
    return sources


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("reports", nargs="+", metavar="REPORT.json",
                   help="sipe-eval-lm --tags ... --json reports named SIZE-RUN-sSEED.json (one row each), or reports "
                        "whose rows are named so")
    p.add_argument("--baseline", default="none", metavar="RUN",
                   help="the run every other run is compared with at its size (default: %(default)s)")
    p.add_argument("--matched", action="append", type=_matched, default=[], metavar="RUN=BASE",
                   help="compare RUN with BASE instead at the sizes where BASE was scored (a parameter-matched "
                        "baseline, e.g. gilt=nonegilt; repeatable)")
    p.add_argument("--sources", type=_sources, metavar="S1,S2",
                   help="the tag sources to report, comma-separated (default: every source of the reports but "
                        "given-joint)")
    p.add_argument("--train-logs", metavar="DIR",
                   help="folder of the training logs train-SIZE-RUN-sSEED.log: adds the column train tokens/s (and "
                        "the parameter count of reports that do not record it)")
    add_table_arguments(p)
    p.add_argument("--plot", metavar="FIG.png", help="also draw the figure here (format from the suffix: png, pdf, svg)")


def run(args: argparse.Namespace) -> int:
    options = ScaleOptions(baseline=args.baseline, matched=dict(args.matched), per=args.per, sources=args.sources,
                           suffix=args.seed_suffix, train_logs=args.train_logs, replicates=args.bootstrap,
                           seed=args.bootstrap_seed, allow_mixed=args.allow_mixed)
    try:
        table = scale_table(args.reports, options)
        if args.plot:
            plot_scale(table, args.plot)
    except SeedsError as e:  # ScaleError too
        logger.error("%s", e)
        return 2
    text = scale_markdown(table, bool(args.train_logs))
    print(text + (f"\n\nwrote {args.plot}" if args.plot else ""))
    if args.markdown:
        write_text(args.markdown, text + "\n")
    if args.json:
        write_json(args.json, table, indent=2)
    return 0

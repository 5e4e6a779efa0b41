"""``sipe-eval sweep-plot``: the options of the layer-entry sweep plot (:mod:`sipe_fairseq.eval.reports.sweep_plot`),
and the run that gathers the rows, draws the figure and prints its points."""
import argparse
import logging

from sipe_fairseq.cli.eval_commands.report import add_input_arguments, report_inputs
from sipe_fairseq.eval.reports import sweep_plot
from sipe_fairseq.eval.reports.report import ReportError
from sipe_fairseq.eval.reports.sweep_plot import layer_specs, plot_sweep, sweep_markdown, sweep_points, sweep_report
from sipe_fairseq.eval.syntaxgym import SyntaxGymError

logger = logging.getLogger(__name__)

HELP = "plot of the layer-entry sweep (Figure 3): SyntaxGym and word-level PPL against the first injected layer"
DESCRIPTION = sweep_plot.__doc__


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sweep")
    g.add_argument("--report", "--json", dest="reports", nargs="+", action="extend", default=[], metavar="REPORT.json",
                   help="report(s) of `sipe-eval report --json` (their rows are merged)")
    g.add_argument("--layer", action="append", default=[], metavar="NAME=K",
                   help="first injected layer of a model (overrides the report / checkpoint config)")
    g.add_argument("--baseline", metavar="NAME",
                   help="the row drawn as dashed lines (default: a row named 'none' without k, else the report's baseline)")
    g.add_argument("--ppl", choices=("lm", "joint"), default="lm",
                   help="right axis: p(x|tags) per word (default, as Figure 3) or the joint bound per word")
    g.add_argument("--title", default="Syntax-injection depth sweep")
    g.add_argument("--out", required=True, metavar="FIG.png", help="the figure (format from the suffix: png, pdf, svg)")
    add_input_arguments(p, blimp_inputs=False)


def run(args: argparse.Namespace) -> int:
    try:
        merged = sweep_report(args.reports, report_inputs(args, blimp_inputs=False))
        points, base = sweep_points(merged, layer_specs(args.layer), args.baseline, args.ppl)
        label = "Word-level PPL" if args.ppl == "lm" else "Word-level joint PPL"
        plot_sweep(points, base, args.out, label, args.title)
    except (ReportError, SyntaxGymError) as e:
        logger.error("%s", e)
        return 2
    print(sweep_markdown(points, base, label) + f"\n\nwrote {args.out}")
    return 0

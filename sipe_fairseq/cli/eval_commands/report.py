"""``sipe-eval report``: the options of the Table 2 report (:mod:`sipe_fairseq.eval.reports.report`; checkpoints,
evaluation data and precomputed reports, shared with ``sipe-eval sweep-plot``), and the run that builds
the report and writes the table and the sub-reports."""
import argparse
import logging

from sipe_fairseq.cli.output import write_json, write_text
from sipe_fairseq.cli.options import (DICTIONARY_MISMATCH_HELP, add_device_argument, add_structure_arguments,
                                      float_at_least, int_at_least, structure_options)
from sipe_fairseq.eval.reports import report as report_engine
from sipe_fairseq.eval.reports.report import ReportError, ReportInputs, build_report, table2_markdown
from sipe_fairseq.eval.syntaxgym import EQUALITY_ATOL, EQUALITY_RTOL, SyntaxGymError
from sipe_fairseq.parsing import add_tree_arguments, tree_source_from_args
from sipe_fairseq.structure.options import BATCH_SENTENCES

logger = logging.getLogger(__name__)

HELP = "the paper's Table 2: BLiMP, PPL per word (and the joint bound), SyntaxGym, with Δ against a baseline row"
DESCRIPTION = report_engine.__doc__


def add_input_arguments(p: argparse.ArgumentParser, blimp_inputs: bool = True) -> None:
    """Checkpoints, evaluation data and precomputed reports (shared by ``report`` and ``sweep-plot``)."""
    g = p.add_argument_group("checkpoints to score")
    g.add_argument("--data", help="the sipe-preprocess data directory the checkpoints were trained on")
    g.add_argument("--allow-dictionary-mismatch", action="store_true", help=DICTIONARY_MISMATCH_HELP)
    add_device_argument(g)
    g.add_argument("--path", action="append", default=[], metavar="[NAME=]CKPT",
                   help="checkpoint (repeatable, one row each): hexatag_lm, gilt_lm or stock language_modeling; "
                        "loaded once")
    if blimp_inputs:
        g.add_argument("--blimp", nargs="+", action="extend", metavar="FILE_OR_DIR",
                       help="BLiMP JSONL file(s) or folder(s) of *.jsonl to score the checkpoints on")
    g.add_argument("--suites", nargs="+", action="extend", metavar="FILE_OR_DIR",
                   help="SyntaxGym suite JSON file(s) or folder(s) to score the checkpoints on")
    g.add_argument("--split", default="test", help="split of --data for the perplexities (default: %(default)s)")
    g.add_argument("--no-ppl", action="store_true", help="do not compute perplexities for --path checkpoints")
    add_tree_arguments(g)
    if blimp_inputs:
        g.add_argument("--blimp-score", choices=("lm", "joint"), default="lm",
                       help="BLiMP sentence score: log p(x | tags) (default) or log p(x, tags) (see sipe-eval blimp)")
    add_structure_arguments(g, "given (Table 2's columns, always shown; GiLT: the gold graphs, the data's arcs for PPL, "
                               "the tree source's trees as arcs for BLiMP/SyntaxGym); every other source adds a column "
                               "group (BLiMP, PPL per word and per token, SyntaxGym)")
    g.add_argument("--context-window", type=int_at_least(0), default=0, help="as sipe-eval-lm --context-window (>= 0)")
    g.add_argument("--max-tokens", type=int_at_least(1), default=4096, help="tokens per batch for the perplexities")
    g.add_argument("--batch-size", type=int_at_least(1), default=BATCH_SENTENCES,
                   help="sentences scored together (BLiMP, SyntaxGym; encoders: masked copies) (default: %(default)s)")
    g.add_argument("--eq-atol", type=float_at_least(0.0), default=EQUALITY_ATOL,
                   help="SyntaxGym '=' absolute tolerance (bits)")
    g.add_argument("--eq-rtol", type=float_at_least(0.0), default=EQUALITY_RTOL, help="SyntaxGym '=' relative tolerance")
    g.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads")
    g = p.add_argument_group("precomputed reports (not re-scored)")
    if blimp_inputs:
        g.add_argument("--blimp-json", nargs="+", action="extend", default=[], metavar="FILE",
                       help="report(s) of `sipe-eval blimp --json`")
    g.add_argument("--syntaxgym-json", nargs="+", action="extend", default=[], metavar="FILE",
                   help="report(s) of `sipe-eval syntaxgym --json`")
    g.add_argument("--ppl-json", nargs="+", action="extend", default=[], metavar="FILE",
                   help="output(s) of `sipe-eval-lm --json` (p(x|tags), joint, per word)")
    if blimp_inputs:
        g.add_argument("--blimp-average", choices=("pairs", "paradigms"), default="pairs",
                       help="BLiMP accuracy as the mean over pairs (default, as the paper) or over paradigms")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_input_arguments(p)
    g = p.add_argument_group("table")
    g.add_argument("--baseline", metavar="NAME", help="the row the Δ columns compare with (default: the first row)")
    g.add_argument("--rows", nargs="+", metavar="NAME", help="models to show, in this order (default: all)")
    g.add_argument("--json", metavar="OUT", help="write the report (rows, Δ, sources, settings) as JSON here")
    g.add_argument("--markdown", metavar="OUT", help="also write the markdown table here")
    g.add_argument("--blimp-out", metavar="OUT", help="save the BLiMP scores computed here (sipe-eval blimp --json format)")
    g.add_argument("--syntaxgym-out", metavar="OUT",
                   help="save the SyntaxGym scores computed here (sipe-eval syntaxgym --json format)")
    g.add_argument("--ppl-out", metavar="OUT", help="save the perplexities computed here (sipe-eval-lm --json format)")


def _write_json(path, obj, **kw) -> None:
    write_json(path, obj, ensure_ascii=False, **kw)


def report_inputs(args: argparse.Namespace, paths=None, baseline=None, rows=None, blimp_inputs: bool = True) -> ReportInputs:
    """The :class:`~sipe_fairseq.eval.reports.report.ReportInputs` of the options of :func:`add_input_arguments`
    (``paths``: instead of ``--path``; ``baseline``, ``rows``: the table's baseline row and rows)."""
    return ReportInputs(
        data=args.data, paths=list(args.path if paths is None else paths), split=args.split, no_ppl=args.no_ppl,
        suites=args.suites, tree_source=lambda: tree_source_from_args(args), tags=args.tags,
        structure=structure_options(args), context_window=args.context_window, max_tokens=args.max_tokens,
        batch_size=args.batch_size, eq_atol=args.eq_atol, eq_rtol=args.eq_rtol, threads=args.threads,
        allow_dictionary_mismatch=args.allow_dictionary_mismatch, device=args.device,
        syntaxgym_json=args.syntaxgym_json, ppl_json=args.ppl_json, baseline=baseline, rows=rows,
        **(dict(blimp=args.blimp, blimp_score=args.blimp_score, blimp_json=args.blimp_json,
                blimp_average=args.blimp_average) if blimp_inputs else {}))


def run(args: argparse.Namespace) -> int:
    try:
        report, details = build_report(report_inputs(args, baseline=args.baseline, rows=args.rows))
    except (ReportError, SyntaxGymError) as e:
        logger.error("%s", e)
        return 2
    table = table2_markdown(report)
    print(table, end="")
    if args.markdown:
        write_text(args.markdown, table)
    if args.json:
        _write_json(args.json, report, indent=2)
    for key, out, kw in (("blimp", args.blimp_out, {"indent": 2}), ("syntaxgym", args.syntaxgym_out, {"indent": 1}),
                         ("ppl", args.ppl_out, {"indent": 2, "sort_keys": True})):
        if out:
            if key in details:
                _write_json(out, details[key], **kw)
            else:
                logger.warning("--%s-out %s: nothing was scored for %s here; not written", key, out, key)
    return 0

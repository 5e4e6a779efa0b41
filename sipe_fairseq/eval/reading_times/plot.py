"""The "better LM, better fit" figure (Wilcox et al. 2020): each checkpoint and source's ΔLL of surprisal (with
its 95% interval) against its perplexity per word on the stories themselves (the same scores; log scale). One
colour per model (its seeds, ``NAME-sN``, share it), one marker per tag source, so that rows stay apart however
many there are."""
from typing import Sequence

from ...data.writers import save_figure
from .compare import group_of

MARKERS = {"self": "o", "given": "^"}  # a tag source's marker; mix:K, beam:K and others: MIXTURE; no structure: PLAIN
MIXTURE, PLAIN = "s", "D"


def plot_delta_ll(rows: Sequence[dict], out) -> str:
    """Draw ``rows`` (the report's) into ``out`` (Agg); a row without a ΔLL or a perplexity is left out, and a
    model without structure is drawn once.
    Returns the path written."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy (heavy): matplotlib, for the figure only
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    drawn, colours, markers, xs = set(), {}, {}, []
    palette = [f"C{i}" for i in range(10)]
    for r in rows:
        d = r["analysis"].get("delta_ll", {}).get("surprisal")
        ppl = r.get("perplexity_per_word")
        plain = not r.get("reads_structure", True)  # a model without structure: one point, its sources are the same
        if not d or not ppl or (plain and r["checkpoint"] in drawn):
            continue
        drawn.add(r["checkpoint"])
        y = 1000 * d["estimate"]
        ci = d.get("ci95")
        err = [[y - 1000 * ci[0]], [1000 * ci[1] - y]] if ci else None
        group = group_of(r["checkpoint"])[0]
        colour = colours.setdefault(group, palette[len(colours) % len(palette)])
        label = "no structure" if plain else r["source"]
        marker = markers.setdefault(label, PLAIN if plain else MARKERS.get(label, MIXTURE))
        xs.append(ppl)
        ax.errorbar([ppl], [y], yerr=err, marker=marker, color=colour, capsize=3, linestyle="none")
    ax.axhline(0.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xscale("log")
    if xs:  # plain numbers at a few round ticks: a span under a decade gets no labelled ticks of its own
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # lazy (heavy): matplotlib
        lo, hi = min(xs), max(xs)
        ticks = sorted({float(f"{lo * (hi / lo) ** (i / 4):.3g}") for i in range(5)})
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("perplexity per word on the stories (log scale)")
    ax.set_ylabel("ΔLL of surprisal over the baseline\n(nats per word ×10⁻³, 95% interval)")
    ax.set_title("Reading times (Natural Stories)")
    if colours:  # one entry per model (colour) and per source (marker), beside the axes
        from matplotlib.lines import Line2D  # lazy (heavy): matplotlib
        handles = [Line2D([], [], color=c, marker="o", linestyle="none", label=g) for g, c in colours.items()]
        handles += [Line2D([], [], color="black", marker=m, linestyle="none", label=s) for s, m in markers.items()]
        ax.legend(handles=handles, fontsize="small", frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, out, dpi=120, bbox_inches="tight")

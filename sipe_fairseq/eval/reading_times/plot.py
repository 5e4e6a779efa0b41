"""The "better LM, better fit" figure (Wilcox et al. 2020): each checkpoint and source's ΔLL of surprisal (with
its 95% interval) against its perplexity per word on the stories themselves (the same scores; log scale)."""
from typing import Sequence

from ...data.writers import save_figure


def plot_delta_ll(rows: Sequence[dict], out) -> str:
    """Draw ``rows`` (the report's) into ``out`` (Agg); a row without a ΔLL or a perplexity is left out, and a
    model without structure is drawn once.
    Returns the path written."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy (heavy): matplotlib, for the figure only
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    drawn = set()
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
        label = f"{r['checkpoint']} (no structure)" if plain else f"{r['checkpoint']} ({r['source']})"
        ax.errorbar([ppl], [y], yerr=err, marker="o", capsize=3, label=label)
    ax.axhline(0.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xscale("log")
    ax.set_xlabel("perplexity per word on the stories (log scale)")
    ax.set_ylabel("ΔLL of surprisal over the baseline\n(nats per word ×10⁻³, 95% interval)")
    ax.set_title("Reading times (Natural Stories)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", frameon=False)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, out, dpi=120, bbox_inches="tight")

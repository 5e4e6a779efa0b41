"""``sipe-eval attention``: attention mass along dependency arcs, checkpoints side by side (appendix C).

    sipe-eval attention --data DATA --conllu test.conllu --path none=ck_none/checkpoint_best.pt \\
        --path position=ck_pos/checkpoint_best.pt [--relation obj] [--direction head-dep] [--layers 2-3] \\
        [--plot map.png [--plot-sentence K]] [--json out.json]

Appendix C reads a model's attention averaged over heads and over a band of layers (all layers for
Transformer-XL, the middle band for encoders) and compares, between a model and its SiPE
counterpart, the attention from a verb to its object. Here, for every arc of ``--relation`` (its
DEPREL, subtypes included: ``obj`` also matches ``obj:lvc``) in a gold or parsed CoNLL-U corpus:

* each sentence is encoded as the checkpoints were trained (the data directory's ``spm.model`` and
  ``dict.txt``, tags on first subwords) and fed as the scorers feed it: ``</s> x_1 .. x_n`` for a
  decoder, ``<s> x_1 .. x_n </s>`` for an encoder (nothing masked);
* the map A is the attention probability averaged over the chosen layers (``--layers``, 1-based,
  default all) and over all heads;
* the mass of an arc is ``mean over the query word's subwords i of sum over the key word's subwords
  j of A[i, j]``, the query word being the head (``--direction head-dep``: verb -> object) or the
  dependent (``dep-head``).

A causal decoder cannot attend to a later word: arcs whose key word follows the query word are
counted as ``not visible`` and left out of its mean (use ``--direction dep-head`` for an object
after its verb). Sentences that cannot be encoded or that exceed a model's positions are counted by
reason. The report gives, per checkpoint, the arcs scored and the mean mass, and for each checkpoint
after the first the share of arcs (visible to both) where its mass is higher than the first's (the
paper's "higher under SiPE in 90% of cases"). ``--plot`` draws one sentence's averaged maps, one
panel per checkpoint, with the arcs of the relation outlined (matplotlib, Agg backend).

Exit status: 0, or 2 on a usage or input error (one line naming the file, line or checkpoint).
"""
import logging
from collections import Counter, OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..data.writers import save_figure
from ..data.tag_dictionary import NOTAG_ID
from ..hexatag import HexatagError
from ..structure.family import family_of, masked_lm, takes_tags
from ..structure.sentences import max_positions
from .progress import progress
from .reports.tables import table

logger = logging.getLogger(__name__)

DIRECTIONS = ("head-dep", "dep-head")


class AttentionAnalysisError(ValueError):
    """Bad input for the attention analysis; the message names the file, line or checkpoint."""


# ---------------------------------------------------------------------------- maps and masses
def average_attention(layer_maps: Sequence[torch.Tensor], layers: Optional[Sequence[int]] = None) -> torch.Tensor:
    """(B, T, T): the mean over the chosen layers (0-based indices, default all) and over the heads
    of per-layer attention probabilities (B, H, T, T) (a model's ``extra["attn_layers"]``)."""
    if not layer_maps or any(m is None for m in layer_maps):
        raise ValueError("no per-layer attention maps: run the model with need_attn=True")
    chosen = range(len(layer_maps)) if layers is None else layers
    bad = [i for i in chosen if not 0 <= i < len(layer_maps)]
    if bad or not chosen:
        raise ValueError(f"layers {[i + 1 for i in bad] or '(none)'} outside 1..{len(layer_maps)}")
    return torch.stack([layer_maps[i].float() for i in chosen]).mean(dim=(0, 2))


def word_spans(firsts: Sequence[int], n_pieces: int, offset: int = 0) -> List[range]:
    """Positions of each word's subwords in the model input, from the first-piece positions of
    :meth:`SentenceEncoder.encode` (``n_pieces``: pieces without ``</s>``; ``offset``: positions
    before ``x_1`` in the input, 1 for the leading ``</s>`` or ``<s>``)."""
    ends = list(firsts[1:]) + [n_pieces]
    return [range(offset + a, offset + b) for a, b in zip(firsts, ends)]


def arc_mass(attn: torch.Tensor, query: range, key: range) -> float:
    """Mean over the query word's positions of the attention summed over the key word's positions."""
    return attn[query.start:query.stop, key.start:key.stop].sum(-1).mean().item()


def relation_arcs(deprels: Sequence[str], heads: Sequence[int], relation: str) -> List[Tuple[int, int]]:
    """``(head word, dependent word)``, 0-based, for every arc labelled ``relation`` or a subtype of it."""
    return [(h - 1, d) for d, (rel, h) in enumerate(zip(deprels, heads))
            if h > 0 and (rel == relation or rel.startswith(relation + ":"))]


def parse_layers(spec: Optional[str]) -> Optional[List[int]]:
    """``"2-3,5"`` -> [1, 2, 4] (0-based); ``None`` -> all layers."""
    if not spec:
        return None
    out = []
    for part in spec.split(","):
        a, sep, b = part.strip().partition("-")
        try:
            lo, hi = int(a), int(b) if sep else int(a)
        except ValueError:
            raise AttentionAnalysisError(f"--layers {spec!r}: expected 1-based layers such as '2-3,5'") from None
        if lo < 1 or hi < lo:
            raise AttentionAnalysisError(f"--layers {spec!r}: expected 1-based layers such as '2-3,5'")
        out.extend(range(lo - 1, hi))
    return out


# ---------------------------------------------------------------------------- model input
@torch.no_grad()
def sentence_attention(model, tokens: torch.Tensor, terms: torch.Tensor, nts: torch.Tensor, dictionary,
                       layers: Optional[Sequence[int]] = None) -> torch.Tensor:
    """The (L, L) layer- and head-averaged attention of one encoded sentence (tokens ending in
    ``</s>``), fed as the scorers feed it; ``x_1`` sits at position 1 for either model kind."""
    model.eval()
    if masked_lm(model):  # <s> x_1 .. x_n </s>
        src = torch.cat([tokens.new_tensor([dictionary.bos()]), tokens])
        a = torch.cat([terms.new_tensor([NOTAG_ID]), terms])
        b = torch.cat([nts.new_tensor([NOTAG_ID]), nts])
        use_tags = family_of(model.encoder).reads_tags
    else:  # </s> x_1 .. x_n
        src = torch.cat([tokens.new_tensor([dictionary.eos()]), tokens[:-1]])
        a = torch.cat([terms.new_tensor([NOTAG_ID]), terms[:-1]])
        b = torch.cat([nts.new_tensor([NOTAG_ID]), nts[:-1]])
        use_tags = takes_tags(model)
    kwargs = {"src_terminals": a[None], "src_nonterminals": b[None]} if use_tags else {}
    _, extra = model(src[None], src_lengths=torch.tensor([len(src)]), need_attn=True, **kwargs)
    maps = extra.get("attn_layers") if isinstance(extra, dict) else None
    if not maps:
        raise AttentionAnalysisError(f"{type(model).__name__} returns no per-layer attention (need_attn): "
                                     "only sipe_txl, sipe_rope, sipe_roberta, sipe_deberta and sipe_modernbert do")
    return average_attention(maps, layers)[0]


# ---------------------------------------------------------------------------- corpus
def analyse(models: "OrderedDict[str, tuple]", sentences, encoder, relation: str, direction: str = "head-dep",
            layers: Optional[Sequence[int]] = None, max_sentences: int = 0) -> dict:
    """``models``: name -> (model, is_causal). Returns the report: per checkpoint the masses, counts
    of arcs scored and not visible, and per sentence its arcs (for plotting and the JSON)."""
    if direction not in DIRECTIONS:
        raise AttentionAnalysisError(f"--direction must be one of {DIRECTIONS}, got {direction!r}")
    skipped: Counter = Counter()
    per_model = {name: {"masses": [], "not_visible": 0} for name in models}
    arcs_out = []
    n_sent = n_with_arcs = 0
    n = len(sentences) if hasattr(sentences, "__len__") else None
    total = min(n, max_sentences) if max_sentences and n is not None else (max_sentences or n)
    for k, sent in enumerate(progress(sentences, desc="attention", unit=" sent", total=total)):
        if max_sentences and n_sent >= max_sentences:
            break
        n_sent += 1
        arcs = relation_arcs(sent.deprels, sent.heads, relation)
        if not arcs:
            continue
        try:
            tokens, terms, nts, firsts = encoder.encode(sent.words, sent.heads)
        except HexatagError as e:
            skipped["cannot be encoded"] += 1
            logger.warning("line %d: sentence skipped: %s", sent.line, e)
            continue
        too_long = [n for n, (m, _) in models.items() if (max_positions(m) or 10 ** 9) < len(tokens) + 1]
        if too_long:
            skipped["longer than a model's positions"] += 1
            logger.warning("line %d: sentence of %d tokens skipped: longer than %s's positions",
                           sent.line, len(tokens), too_long[0])
            continue
        n_with_arcs += 1
        spans = word_spans(firsts, len(tokens) - 1, offset=1)
        maps = {name: sentence_attention(m, tokens, terms, nts, encoder.dictionary, layers) for name, (m, _) in models.items()}
        for h, d in arcs:
            q, key = (h, d) if direction == "head-dep" else (d, h)
            row = {"line": sent.line, "sentence": k, "query": sent.words[q], "key": sent.words[key],
                   "query_word": q + 1, "key_word": key + 1, "mass": {}}
            for name, (_, causal) in models.items():
                if causal and key > q:
                    per_model[name]["not_visible"] += 1
                    row["mass"][name] = None
                else:
                    row["mass"][name] = arc_mass(maps[name], spans[q], spans[key])
                    per_model[name]["masses"].append(row["mass"][name])
            arcs_out.append(row)
    names = list(models)
    summary = OrderedDict()
    for name in names:
        m = per_model[name]["masses"]
        summary[name] = {"arcs": len(m), "not_visible": per_model[name]["not_visible"],
                         "mean_mass": sum(m) / len(m) if m else None}
        if name != names[0]:
            both = [(r["mass"][names[0]], r["mass"][name]) for r in arcs_out
                    if r["mass"][names[0]] is not None and r["mass"][name] is not None]
            summary[name]["higher_than_first"] = sum(b > a for a, b in both)
            summary[name]["compared"] = len(both)
    return {"relation": relation, "direction": direction, "layers": None if layers is None else [i + 1 for i in layers],
            "sentences_read": n_sent, "sentences_with_arcs": n_with_arcs, "skipped": dict(skipped),
            "summary": summary, "arcs": arcs_out}


def attention_markdown(report: dict) -> str:
    names = list(report["summary"])
    layers = "all" if report["layers"] is None else ",".join(map(str, report["layers"]))
    lines = [f"relation `{report['relation']}` ({report['direction']}), layers {layers}, heads averaged; "
             f"{report['sentences_read']} sentences read, {report['sentences_with_arcs']} with arcs scored, "
             f"skipped: {report['skipped'] or 'none'}", ""]
    s = report["summary"]
    fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
    rows = [["arcs scored", *(s[n]["arcs"] for n in names)],
            ["not visible (causal, key after query)", *(s[n]["not_visible"] for n in names)],
            ["mean attention mass", *(fmt(s[n]["mean_mass"]) for n in names)]]
    if len(names) > 1:
        rows.append([f"arcs with higher mass than `{names[0]}`", "-"] + [
            f"{s[n]['higher_than_first']}/{s[n]['compared']}"
            + (f" ({100.0 * s[n]['higher_than_first'] / s[n]['compared']:.1f}%)" if s[n]["compared"] else "")
            for n in names[1:]])
    lines += table(["", *names], rows)
    return "\n".join(lines) + "\n"


def plot_sentence(path: str, maps: Dict[str, torch.Tensor], labels: Dict[str, Sequence[str]],
                  boxes: Sequence[Tuple[range, range]], title: str = "") -> None:
    """One panel per checkpoint: the averaged map over its input positions (``labels[name]``, one
    per position), the arcs (query rows, key columns) outlined."""
    import matplotlib  # lazy (heavy): matplotlib, needed only for --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy (heavy), after the backend is chosen
    from matplotlib.patches import Rectangle

    n = len(maps)
    size = max(4.0, 0.35 * max(len(v) for v in labels.values()) + 2)
    fig, axes = plt.subplots(1, n, figsize=(size * n, size), squeeze=False)
    for ax, (name, attn) in zip(axes[0], maps.items()):
        im = ax.imshow(attn.numpy(), cmap="viridis", vmin=0.0)
        ax.set_title(name)
        ax.set_xticks(range(len(labels[name])), labels[name], rotation=90, fontsize=7)
        ax.set_yticks(range(len(labels[name])), labels[name], fontsize=7)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        for q, key in boxes:
            ax.add_patch(Rectangle((key.start - 0.5, q.start - 0.5), len(key), len(q), fill=False, edgecolor="red", lw=1.5))
        fig.colorbar(im, ax=ax, fraction=0.046)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)

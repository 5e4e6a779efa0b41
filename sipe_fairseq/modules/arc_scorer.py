"""GiLT's arc scorer and arc-count head (arXiv 2605.15562; docs/gilt-reference.md section 2).

Word w (arriving at its first subword x_k) is represented by o_w = [h^(L/2+1)_(k-1); h^(L-1)_(k-1);
emb(x_k)] (3d; GiLT-GPT2 swaps the two states, :func:`word_inputs`). Its candidate arcs are decided at
its arrival: v -> w for v in {root, earlier words}, w -> v for v an earlier word, and the self pair (a
negative): 2i pairs for the i-th word.

Each side (parent, child; separate weights) maps a node v in the pair decided at w as
MLP2(MLP1(o_v) + W_pos sin(|w - v|) + W_feat [e_deg; e_dep; e_dist](v)) with MLP1 = LN, Lin 3d->3d,
ReLU, Lin -> 2d, MLP2 = LN, Lin 2d->2d, ReLU, Lin -> d, W_pos, W_feat bias-free, the root a learned
3d vector, and the features those of the graph before w's arcs (the scorer's own three 151 x 256
tables; w itself does not exist yet: 0). Then (diagonal biaffine)::

    logit(v -> w) = sum_n par(w, v)_n B1_n chd(w, w)_n     logit(w -> v) = sum_n par(w, w)_n B1_n chd(w, v)_n
    count logits  = Linear_30( sum over the 2i pairs of par (.) B2 (.) chd / sqrt(2i) ),  counts 0..29

B1, B2 initialised U[0, 1) as in the released code; the three tables N(0, ``table_init_std``^2), 1 as the
authors' ``nn.Embedding`` tables (docs/gilt-reference.md).
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..data.gilt.graph_features import MAX_VALUE, N_FEATURES
from .graph_term import FEATURE_DIM
from .positional import sinusoid

MAX_COUNT = 29


def _mlp(d_in, d_hidden, d_out):
    return nn.Sequential(nn.LayerNorm(d_in), nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_out))


class ArcScorer(nn.Module):
    def __init__(self, d: int, table_init_std: float = 1.0):
        super().__init__()
        self.d = d
        self.root = nn.Parameter(torch.empty(3 * d))
        nn.init.normal_(self.root, std=(3 * d) ** -0.5)
        self.tables = nn.Parameter(torch.empty(N_FEATURES, MAX_VALUE + 1, FEATURE_DIM))
        nn.init.normal_(self.tables, std=table_init_std)
        self.mlp1 = nn.ModuleDict({s: _mlp(3 * d, 3 * d, 2 * d) for s in ("par", "chd")})
        self.pos = nn.ModuleDict({s: nn.Linear(d, 2 * d, bias=False) for s in ("par", "chd")})
        self.feat = nn.ModuleDict({s: nn.Linear(N_FEATURES * FEATURE_DIM, 2 * d, bias=False) for s in ("par", "chd")})
        self.mlp2 = nn.ModuleDict({s: _mlp(2 * d, 2 * d, d) for s in ("par", "chd")})
        self.b1 = nn.Parameter(torch.rand(d))
        self.b2 = nn.Parameter(torch.rand(d))
        self.count = nn.Linear(d, MAX_COUNT + 1)

    def _feature_terms(self, side: str, values: torch.Tensor) -> torch.Tensor:
        """W_feat [e_deg; e_dep; e_dist] for (..., 3) values: the tables are projected once (3 x 151 x 2d)
        and each feature's row gathered, instead of a 768-wide vector per pair."""
        w = self.feat[side].weight.view(-1, N_FEATURES, self.tables.size(-1))  # (2d, 3, 256)
        proj = torch.einsum("fvk,dfk->fvd", self.tables, w)  # (3, 151, 2d)
        return sum(proj[f][values[..., f].long()] for f in range(N_FEATURES))

    def _position_terms(self, side: str, distance: torch.Tensor) -> torch.Tensor:
        """W_pos sin(distance), projected once per distinct distance and gathered."""
        top = int(distance.max()) + 1 if distance.numel() else 1
        table = self.pos[side](sinusoid(torch.arange(top, device=distance.device), self.d).to(self.pos[side].weight.dtype))
        return table[distance]

    def sides(self, o: torch.Tensor, distance: torch.Tensor, feats: torch.Tensor, node: torch.Tensor,
              batch: Optional[torch.Tensor] = None):
        """Pair representations. ``o`` (B, N, 3d) node inputs (index 0: replaced by the root); for pairs
        (B, P) -- or, with ``batch``, P pairs of batch rows ``batch`` -- ``node`` the node index, ``distance``
        and ``feats`` (.., 3). Returns par, chd (B, P, d) (or (P, d))."""
        o = torch.cat([self.root.expand(o.size(0), 1, -1).to(o.dtype), o[:, 1:]], dim=1)
        out = []
        for s in ("par", "chd"):
            base = self.mlp1[s](o)  # (B, N, 2d): per node, before the pair terms
            if batch is None:
                picked = base.gather(1, node[..., None].expand(-1, -1, base.size(-1)))
            else:
                picked = base[batch, node]
            extra = self._position_terms(s, distance) + self._feature_terms(s, feats)
            out.append(self.mlp2[s](picked + extra.to(picked.dtype)))
        return out

    @staticmethod
    def masks(sent: torch.Tensor):
        """(head_mask, dep_mask, word mask) of a block: [w, v] valid candidates v -> w (root, earlier
        words of the sentence, self) and w -> v (earlier words)."""
        n = sent.size(1)
        idx = torch.arange(n, device=sent.device)
        word = sent >= 0
        same = (sent[:, :, None] == sent[:, None, :]) & word[:, :, None]
        earlier = same & (idx[None, None, :] < idx[None, :, None])
        head_mask = earlier.clone()
        head_mask[:, :, 0] = word
        head_mask |= torch.diag_embed(word)
        return head_mask, earlier, word

    def forward(self, o: torch.Tensor, local: torch.Tensor, sent: torch.Tensor, prev: torch.Tensor):
        """Every word of a block at once (teacher forcing). ``o`` (B, W+1, 3d) (index 0 unused),
        ``local`` (B, W+1) index in the sentence, ``sent`` (B, W+1) sentence number (-1: none),
        ``prev`` (B, W+1, W+1, 3) scorer features. Returns dict with ``head_logits`` (B, W+1, W+1):
        [w, v] = logit(v -> w) (v = 0: root; v = w: the self pair), ``dep_logits`` [w, v] = logit(w -> v),
        ``head_mask``/``dep_mask`` (valid candidates; logits elsewhere are 0) and ``count_logits`` (B, W+1, 30).
        Only the valid pairs (within a sentence) are represented: O(sum of squared sentence lengths)."""
        b, n = sent.shape
        head_mask, dep_mask, word = self.masks(sent)
        valid = head_mask | dep_mask
        bi, wi, vi = valid.nonzero(as_tuple=True)  # pairs (w, v) decided at w
        dist = torch.where(vi == 0, local[bi, wi], wi - vi)  # the root at distance local[w]
        par, chd = self.sides(o, dist, prev[bi, wi, vi], vi, batch=bi)
        at = torch.full((b, n, n), -1, dtype=torch.long, device=o.device)
        at[bi, wi, vi] = torch.arange(bi.numel(), device=o.device)
        own = at[bi, wi, wi]  # the self pair of each pair's word
        par_w, chd_w = par[own], chd[own]
        is_head, is_dep = head_mask[bi, wi, vi], dep_mask[bi, wi, vi]
        head_logits = torch.zeros(b, n, n, dtype=par.dtype, device=o.device)
        dep_logits = torch.zeros_like(head_logits)
        head_logits[bi[is_head], wi[is_head], vi[is_head]] = (par * self.b1 * chd_w).sum(-1)[is_head]
        dep_logits[bi[is_dep], wi[is_dep], vi[is_dep]] = (par_w * self.b1 * chd).sum(-1)[is_dep]
        # counts: sum over the 2i pairs of par (.) B2 (.) chd, / sqrt(2i)
        # an earlier word v is a candidate in both directions (v -> w and w -> v): both terms
        square_pairs = (par * self.b2 * chd_w * is_head[:, None].to(par.dtype)
                        + par_w * self.b2 * chd * is_dep[:, None].to(par.dtype))
        square = torch.zeros(b * n, par.size(-1), dtype=par.dtype, device=o.device).index_add_(0, bi * n + wi, square_pairs)
        scale = torch.sqrt(2.0 * local.clamp(min=1).to(par.dtype))[..., None]
        count_logits = self.count(square.view(b, n, -1) / scale)
        return {"head_logits": head_logits, "dep_logits": dep_logits, "head_mask": head_mask, "dep_mask": dep_mask,
                "count_logits": count_logits, "word_mask": word}

    def score_word(self, o_nodes: torch.Tensor, prev: torch.Tensor):
        """Incremental form of :meth:`forward` for the newest word i of one sentence per row.
        ``o_nodes`` (B, i+1, 3d): index 0 ignored (the root), 1..i the words' o; ``prev`` (B, i+1, 3):
        features of nodes 0..i in the graph before word i's arcs (node i: 0). Returns ``head_logits``
        (B, i+1) [v] = logit(v -> i) (v = i: the self pair), ``dep_logits`` (B, i+1) [v] = logit(i -> v)
        (valid for v = 1..i-1) and ``count_logits`` (B, 30)."""
        b, n = o_nodes.shape[:2]
        i = n - 1
        idx = torch.arange(n, device=o_nodes.device)
        dist = (i - idx).clone()
        dist[0] = i
        par, chd = self.sides(o_nodes, dist.expand(b, n), prev, idx.expand(b, n))
        head = torch.einsum("bvd,d,bd->bv", par, self.b1, chd[:, i])
        dep = torch.einsum("bd,d,bvd->bv", par[:, i], self.b1, chd)
        square = par.sum(1) * self.b2 * chd[:, i] + par[:, i] * self.b2 * chd[:, 1:i].sum(1)
        count_logits = self.count(square / torch.sqrt(torch.tensor(2.0 * i, dtype=par.dtype)))
        return head, dep, count_logits


def arc_losses(out: dict, gold_head: torch.Tensor, gold_dep: torch.Tensor):
    """Summed arc BCE over every valid candidate pair (self pairs negative), summed count CE over words
    (gold count clipped to 29), and counts for logging: (bce, ce, n_pairs, n_words, count_correct, tp, n_pred, n_gold)."""
    hm, dm, wm = out["head_mask"], out["dep_mask"], out["word_mask"]
    bce = (F.binary_cross_entropy_with_logits(out["head_logits"].float(), gold_head.float(), reduction="none")[hm].sum()
           + F.binary_cross_entropy_with_logits(out["dep_logits"].float(), gold_dep.float(), reduction="none")[dm].sum())
    gold_count = ((gold_head.bool() & hm).sum(-1) + (gold_dep.bool() & dm).sum(-1)).clamp(max=MAX_COUNT)
    logits = out["count_logits"][wm].float()
    ce = F.cross_entropy(logits, gold_count[wm], reduction="sum")
    correct = int((logits.argmax(-1) == gold_count[wm]).sum())
    pred_h, pred_d = (out["head_logits"] > 0) & hm, (out["dep_logits"] > 0) & dm
    tp = int((pred_h & gold_head.bool()).sum() + (pred_d & gold_dep.bool()).sum())
    n_pred = int(pred_h.sum() + pred_d.sum())
    n_gold = int((gold_head.bool() & hm).sum() + (gold_dep.bool() & dm).sum())
    return bce, ce, int(hm.sum() + dm.sum()), int(wm.sum()), correct, tp, n_pred, n_gold


def arc_layer_indices(n_layers: int):
    """Indices into a decoder's inner states (0 = embeddings, i = output of layer i) that feed o_w:
    layers L/2+1 and L-1 (docs/gilt-reference.md section 2)."""
    return min(n_layers, n_layers // 2 + 1), max(0, n_layers - 1)


def word_inputs(inner, tokens_embedded: torch.Tensor, word_pos: torch.Tensor, sent: torch.Tensor,
                lower_first: bool = False):
    """o_w = [h^(L/2+1)_(k-1); h^(L-1)_(k-1); emb(x_k)] (B, W+1, 3d) from the decoder's inner states
    (index 0 = embeddings, i = output of layer i) and the embeddings of the input positions as the
    scorer reads them; ``lower_first``: [h^(L-1)_(k-1); h^(L/2+1)_(k-1); emb(x_k)] (GiLT-GPT2's order).

    Rows with ``sent`` < 0 (index 0, padding) are 0. A word (``sent`` >= 0) whose first subword x_k is
    at input position 0 has no position k-1, and position 0 has already read x_k: ``ValueError``
    (blocks start with </s> or <s>, so a first word is at position >= 1)."""
    word = sent >= 0
    if bool((word & (word_pos < 1)).any()):
        raise ValueError("arc scorer input: a word starts at input position 0, so there is no state before its first "
                         "subword (o_w reads h at k-1; position 0 has already seen x_k); the block must begin with "
                         "</s> or <s>")
    up, low = arc_layer_indices(len(inner) - 1)
    first, second = (inner[low], inner[up]) if lower_first else (inner[up], inner[low])
    prev = torch.where(word, word_pos - 1, torch.zeros_like(word_pos))  # non-words: any row, zeroed below
    take = lambda x, pos: x.gather(1, pos[..., None].expand(-1, -1, x.size(-1)))  # noqa: E731
    o = torch.cat([take(first, prev), take(second, prev), take(tokens_embedded, word_pos)], dim=-1)
    return o * word[..., None].to(o.dtype)


__all__ = ["ArcScorer", "MAX_COUNT", "arc_layer_indices", "arc_losses", "word_inputs"]

"""GiLT's graph-feature score term (arXiv 2605.15562; docs/gilt-reference.md section 3), one more score term
of :class:`~sipe_fairseq.modules.attention.SiPEAttention` (its ``pair_terms``).

For query position i and key position j, three small integers v_f(i, j) in 0..150 (degree, depth,
distance of j's word in the graph as it stood when i's word arrived, :mod:`sipe_fairseq.data.gilt.graph_features`)
index three tables shared by all layers (151 x 256). Each layer projects each feature with its own
Linear 256 -> d, sums them into d_ij and adds, through the layer's key matrix, an offset to the key
(Pushdown-LM Eq. 1 with Transformer-XL's content bias u)::

    A_ij = AC + BD + (q_i + u) . W_k d_ij / sqrt(d_head),   d_ij = sum_f P_f e_f[v_f(i, j)]

By linearity in d_ij the term is sum_f S_f[i, v_f(i, j)] with S_f = (q + u) (W_k P_f E_f)^T: the
tables are projected once per layer into (3 * 151, H, d_head), every query gets a (3 * 151)-column
score row, and each pair gathers its three columns. Nothing of shape (B, H, T, T, d) is formed;
the largest tensors are the (B, H, T, T) scores themselves (references: :func:`naive_pair_scores`).
"""
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn

from ..data.gilt.graph_features import MAX_VALUE, N_FEATURES

N_VALUES = MAX_VALUE + 1
FEATURE_DIM = 256


@dataclass
class GraphContext:
    """What the pair terms see: ``index`` (B, Tq, Tk, 3) int64, feature f's value plus 151 * f, for
    the query rows computed now (all rows; incremental decoding: the new rows) and every key."""

    index: torch.Tensor

    @staticmethod
    def from_values(values: torch.Tensor) -> "GraphContext":
        """(B, Tq, Tk, 3) feature values (any integer dtype, already clipped) -> offset indices."""
        offsets = torch.arange(N_FEATURES, device=values.device) * N_VALUES
        return GraphContext(values.long() + offsets)


class GraphFeatureTables(nn.Module):
    """The three shared 151 x 256 feature embeddings (degree, depth, distance), initialised N(0, ``init_std``^2):
    1 as the authors' ``nn.Embedding`` tables (docs/gilt-reference.md)."""

    def __init__(self, dim: int = FEATURE_DIM, init_std: float = 1.0):
        super().__init__()
        self.tables = nn.Parameter(torch.empty(N_FEATURES, N_VALUES, dim))
        nn.init.normal_(self.tables, std=init_std)


class GraphFeatureTerm(nn.Module):
    """One layer's term: per-feature Linear 256 -> d (bias-free), through the layer's W_k.

    The shared tables are held by reference (registered once, by the model that owns them)."""

    def __init__(self, tables: GraphFeatureTables, embed_dim: int, init_std: float = 0.02):
        super().__init__()
        self._tables = [tables]  # not a submodule: shared across layers
        dim = tables.tables.size(-1)
        self.proj = nn.Parameter(torch.empty(N_FEATURES, embed_dim, dim))  # P_f: 256 -> d per feature
        nn.init.normal_(self.proj, std=init_std) if init_std > 0 else nn.init.zeros_(self.proj)

    def feature_vectors(self) -> torch.Tensor:
        """P_f e_f[v] for every feature and value: (3 * 151, d)."""
        tables = self._tables[0].tables  # (3, 151, 256)
        return torch.einsum("fvk,fdk->fvd", tables, self.proj).reshape(N_FEATURES * N_VALUES, -1)

    def key_offsets(self, w_k: Optional[torch.Tensor], num_heads: int) -> torch.Tensor:
        """W_k P_f e_f[v] per head: (3 * 151, H, d_head); ``w_k`` None: P_f e_f[v] itself, added directly
        to the per-head keys (GiLT-GPT2, docs/gilt-reference.md section 6)."""
        keys = self.feature_vectors()
        if w_k is not None:
            keys = torch.matmul(keys, w_k.t().to(self.proj.dtype))
        return keys.view(keys.size(0), num_heads, -1)

    def pair_scores(self, q_content: torch.Tensor, ctx: GraphContext, w_k: Optional[torch.Tensor],
                    scale: float) -> torch.Tensor:
        """(q_i + u) . W_k d_ij * scale for the query rows of ``q_content`` (B, H, Tq, d_head): (B, H, Tq, Tk)
        (``w_k`` None: q_i . d_ij * scale)."""
        b, h, tq, _ = q_content.shape
        keys = self.key_offsets(w_k, h).to(q_content.dtype)  # (453, H, d_head)
        per_value = torch.einsum("bhtd,vhd->bhtv", q_content * scale, keys)  # (B, H, Tq, 453)
        idx = ctx.index
        if idx.shape[:2] != (b, tq):
            raise ValueError(f"graph features for {tuple(idx.shape[:2])} (batch, query rows), expected {(b, tq)}")
        tk = idx.size(2)
        out: Optional[torch.Tensor] = None
        for f in range(N_FEATURES):
            term = per_value.gather(-1, idx[:, None, :, :, f].expand(b, h, tq, tk))
            out = term if out is None else out + term
        return out


def naive_pair_scores(term: GraphFeatureTerm, q_content: torch.Tensor, values: torch.Tensor, w_k: Optional[torch.Tensor],
                      scale: float) -> torch.Tensor:
    """Reference: d_ij = sum_f P_f e_f[v_f(i, j)] materialised as (B, Tq, Tk, d), then W_k d_ij and the dot product."""
    tables = term._tables[0].tables
    d_ij = sum(torch.matmul(tables[f][values[..., f].long()], term.proj[f].t()) for f in range(N_FEATURES))
    b, h, tq, dh = q_content.shape
    k_ij = (d_ij if w_k is None else torch.matmul(d_ij, w_k.t())).view(b, tq, values.size(2), h, dh)
    return torch.einsum("bhid,bijhd->bhij", q_content, k_ij) * scale


def attach_graph_terms(attentions, tables: GraphFeatureTables, first_layer: int = 1, init_std: float = 0.02) -> None:
    """Append a :class:`GraphFeatureTerm` to ``attentions[first_layer - 1:]`` (``--gilt-first-layer``)."""
    if not 1 <= first_layer <= max(1, len(attentions)):
        raise ValueError(f"--gilt-first-layer {first_layer} outside 1..{len(attentions)}")
    for attn in attentions[first_layer - 1:]:
        attn.pair_terms.append(GraphFeatureTerm(tables, attn.num_heads * attn.head_dim, init_std))

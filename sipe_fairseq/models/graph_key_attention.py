"""fairseq's ``MultiheadAttention`` with GiLT-GPT2's graph key offsets (arXiv 2605.15562; docs/gilt-reference.md
section 6): one more score term of the existing attention, for the upper blocks of a post-trained
``transformer_lm`` (``models/gilt_transformer_lm.py``).

Each GiLT block has a new projection of the concatenated shared feature tables (degree, depth,
distance; 3 x 151 x 256) to d, whose output is added *directly* to the per-head keys (no W_k)::

    A_ij = q_i . (k_j + d_ij) / sqrt(d_head),   d_ij = P [e_deg; e_dep; e_dist](i, j)

A bias-free Linear 768 -> d over the concatenation is the sum of three Linear 256 -> d, so the term
is :class:`~sipe_fairseq.modules.graph_term.GraphFeatureTerm` called with ``w_k=None``: the tables are projected once per
layer and each (query, key) pair gathers its three columns of a (B, H, Tq, 453) score table.

Only the score changes; the keys and values cached for incremental decoding stay fairseq's own.
The pair scores q_i . d_ij need fairseq's scaled query, q_proj(x) / sqrt(d_head), which this module
computes once more (one d x d product). Full forward: they enter fairseq's forward as the additive
float ``attn_mask`` (B*H, T, T), together with the causal mask, so fairseq's fused path still runs.
Incremental decoding: fairseq's forward with ``before_softmax=True`` (it appends the new keys/values
to its cache and returns the raw scores), then the pair scores, softmax, values and output projection.
"""
from typing import Optional

import torch
from fairseq import utils
from fairseq.modules import MultiheadAttention

from ..modules.graph_term import GraphContext, GraphFeatureTerm


class GraphKeyAttention(MultiheadAttention):
    """Causal self-attention of a GiLT block. Set :attr:`graph_term` once (the model does) and
    :attr:`pairs` (a :class:`~.graph_term.GraphContext` for the query rows computed now) before each
    forward; with ``pairs`` None the layer is fairseq's attention unchanged."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.graph_term: Optional[GraphFeatureTerm] = None
        self.pairs: Optional[GraphContext] = None

    def pair_scores(self, query: torch.Tensor) -> torch.Tensor:
        """q_i . d_ij / sqrt(d_head) for the rows of ``query`` (T, B, C): (B, H, T, S)."""
        t, b, _ = query.shape
        q = (self.q_proj(query) * self.scaling).view(t, b, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        return self.graph_term.pair_scores(q, self.pairs, None, 1.0)

    def forward(self, query, key, value, key_padding_mask=None, incremental_state=None, need_weights=True,
                static_kv=False, attn_mask=None, before_softmax=False, need_head_weights=False):
        if self.pairs is None or self.graph_term is None:
            return super().forward(query, key, value, key_padding_mask, incremental_state, need_weights, static_kv,
                                   attn_mask, before_softmax, need_head_weights)
        if not self.self_attention or static_kv or before_softmax:
            raise ValueError("graph key offsets apply to causal self-attention only")
        t, b, _ = query.shape
        pairs = self.pair_scores(query)
        if incremental_state is None:  # the pair scores as fairseq's additive float mask
            mask = pairs if attn_mask is None else pairs + attn_mask.to(pairs.dtype)
            return super().forward(query, key, value, key_padding_mask, None, need_weights, static_kv,
                                   mask.reshape(b * self.num_heads, t, -1), False, need_head_weights)
        scores, v = super().forward(query, key, value, key_padding_mask, incremental_state, False, static_kv,
                                    attn_mask, before_softmax=True)  # (B*H, T, S), (B*H, S, d_head); cache updated
        scores = scores + pairs.reshape(scores.shape).to(scores.dtype)
        probs = utils.softmax(scores, dim=-1).type_as(scores)
        out = torch.bmm(self.dropout_module(probs), v)
        out = self.out_proj(out.transpose(0, 1).reshape(t, b, self.embed_dim))
        weights = None
        if need_weights or need_head_weights:
            weights = probs.view(b, self.num_heads, t, -1).transpose(1, 0)
            weights = weights if need_head_weights else weights.mean(dim=0)
        return out, weights

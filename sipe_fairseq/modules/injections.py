"""SiPE injection strategies as small attention hooks (paper sections 3.3-3.5).

An :class:`Injection` is attached to one attention layer and may implement any of four hooks;
the attention combines them (see :class:`~sipe_fairseq.modules.attention.SiPEAttention`)::

    A~ = AC + (1 + sum position_scale) * BD + sum score_bias        # logits
    z  = softmax(A~) (V + sum value_offset)                         # output
    q, k rotated by p * w + sum rotary_phase                        # rotary angle

Every tag-dependent term is computed per tag *class* (11 rows, see ``tag_embedding``):
``position_scale`` and ``score_bias`` return a (B, H, T, 11) table -- the term for query i and
any key of class c -- which the attention spreads over the keys with a one-hot matmul (B, 1, 11, T),
O(T^2 * 11) and no (B, H, T, T) gather index; ``value_offset`` returns a per-key (B, H, T, d_head)
offset added to V before the attention-weighted sum, which by linearity equals adding
softmax(A~) V_tag (Eq. 9) at O(T * d_head) instead of a second O(T^2 * d_head) matmul.
A new injection only needs a subclass that returns tensors from the hooks it uses.
"""
from dataclasses import dataclass
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TagContext:
    """What the hooks see: class ids per position (B, T) and the (11, d) class table; ``tables``
    holds the class tables of pathways that have their own tag table (``--sipe-tag-tables
    per-pathway``, appendix B's "7d parameters per pathway"), keyed by injection part.

    ``memo`` (incremental decoding): a dict kept across decoding steps, in which :meth:`project`
    keeps each projection's (11, H, d) table -- it depends on the weights only, and for one new
    token it costs more than the token's own projections."""

    cls: torch.Tensor
    table: torch.Tensor
    tables: Optional[Dict[str, torch.Tensor]] = None
    memo: Optional[Dict[str, torch.Tensor]] = None

    def for_pathway(self, part: Optional[str]) -> torch.Tensor:
        """The class table the ``part`` pathway reads (its own, else the shared one)."""
        return self.tables[part] if self.tables and part in self.tables else self.table

    def project(self, projection: nn.Module, part: Optional[str] = None) -> torch.Tensor:
        """``projection(table of part)``, memoized when ``memo`` is set (a projection belongs to one pathway)."""
        if self.memo is None:
            return projection(self.for_pathway(part))
        key = f"proj{id(projection)}"
        if key not in self.memo:
            self.memo[key] = projection(self.for_pathway(part))
        return self.memo[key]

    def per_class(self, query: torch.Tensor, projection: nn.Module, scale: float, part: Optional[str] = None) -> torch.Tensor:
        """``per_class_scores(query, projection(table of part), scale)``; with ``memo``, one (H, B T, d) @
        (H, d, 11) product against the memoized, pre-scaled layout (few query rows, no autograd-layout
        concerns): a (B, H, T, d) @ (H, d, 11) matmul would copy the table to every row and run B H tiny products."""
        if self.memo is None:
            return per_class_scores(query, projection(self.for_pathway(part)), scale)
        key = f"per_class{id(projection)}:{scale}"
        if key not in self.memo:
            self.memo[key] = (self.project(projection, part) * scale).permute(1, 2, 0).to(query.dtype)
        b, h, t, d = query.shape
        by_head = torch.matmul(query.transpose(0, 1).reshape(h, b * t, d), self.memo[key])
        return by_head.view(h, b, t, -1).transpose(0, 1)  # (B, H, T, 11)


class TagProjection(nn.Module):
    """W_E: tag embedding -> per-head vectors (11, H, d_head).

    ``target="d_model"`` maps to H * d_head and splits into heads; ``"d_head"`` maps into one
    head's subspace and shares it across heads (appendix A.2). Initialized N(0, init_std) so that
    a small std starts the model at the vanilla score (footnote 3); no bias, so "no tag" stays 0.
    """

    def __init__(self, tag_dim: int, num_heads: int, head_dim: int, target: str = "d_model", init_std: float = 1e-3,
                 out_dim: Optional[int] = None):
        super().__init__()
        if target not in ("d_model", "d_head"):
            raise ValueError(f"projection target must be d_model or d_head, got {target!r}")
        self.num_heads, self.target = num_heads, target
        self.head_dim = out_dim or head_dim
        self.proj = nn.Linear(tag_dim, self.head_dim * (num_heads if target == "d_model" else 1), bias=False)
        nn.init.normal_(self.proj.weight, std=init_std) if init_std > 0 else nn.init.zeros_(self.proj.weight)

    def forward(self, table: torch.Tensor) -> torch.Tensor:
        out = self.proj(table).view(table.size(0), -1, self.head_dim)
        return out.expand(-1, self.num_heads, -1)


def per_class_scores(query: torch.Tensor, proj: torch.Tensor, scale: float) -> torch.Tensor:
    """<query_i, P[c]> * scale for every query i and class c: (B, H, T, 11).

    Laid out so that what autograd saves costs nothing extra (measured with
    scripts/bench_decoders.py, up to 5% of a training step's peak memory): a contiguous query goes
    through one bmm over B * H rows (saves a view); a view into a larger buffer (the plain query
    inside the qkv projection) is copied once, rather than keeping that buffer alive as einsum
    would; a query with its own permuted storage (q + v) goes through einsum, which saves a view of it.
    """
    b, h, t, d = query.shape
    n, p = proj.size(0), proj.to(query.dtype)
    if query.is_contiguous() or query.untyped_storage().nbytes() > query.numel() * query.element_size():
        per_head = p.permute(1, 2, 0).expand(b, h, d, n).reshape(b * h, d, n)  # (B*H, d, 11), small
        out = torch.bmm(query.reshape(b * h, t, d), per_head).view(b, h, t, n)
    else:
        out = torch.einsum("bhtd,chd->bhtc", query, p)
    return out * scale


def class_onehot(cls: torch.Tensor, n_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """(B, T) class ids -> (B, 1, n_classes, T) one-hot; ``table @ onehot`` spreads a (B, H, T, n)
    per-class table over the keys: out[b, h, i, j] = table[b, h, i, cls[b, j]]."""
    return F.one_hot(cls, n_classes).to(dtype).transpose(1, 2).unsqueeze(1)


def per_position(proj: torch.Tensor, cls: torch.Tensor) -> torch.Tensor:
    """P[cls_j] laid out as (B, H, T, d) for per-key terms."""
    return proj[cls].permute(0, 2, 1, 3)


class Injection(nn.Module):
    """Base class: every hook returns ``None`` (no effect) unless overridden. ``pathway``: the
    ``--sipe-injection`` part the hook implements (it reads that pathway's tag table)."""

    pathway = ""

    def position_scale(self, q: torch.Tensor, q_pos: torch.Tensor, tags: TagContext, scale: float):
        """Per-class gate c, (B, H, T, 11): BD_ij is scaled by 1 + c[i, cls_j]."""
        return None

    def score_bias(self, q: torch.Tensor, q_pos: torch.Tensor, tags: TagContext, scale: float):
        """Per-class logit term, (B, H, T, 11): added to A_ij as bias[i, cls_j]."""
        return None

    def value_offset(self, tags: TagContext):
        """Per-key value offset, (B, H, T, d_head): z_i gets sum_j p_ij offset_j."""
        return None

    def rotary_phase(self, tags: TagContext):
        return None


class PositionCoupling(Injection):
    """PP-SiPE, Eq. 5-6: c_ij = <q_i + v, [W_E e_j]_n> / sqrt(d_head);  A~ = AC + (1 + c) BD."""

    pathway = "position"

    def __init__(self, projection: TagProjection):
        super().__init__()
        self.projection = projection

    def position_scale(self, q, q_pos, tags, scale):
        return tags.per_class(q_pos, self.projection, scale, self.pathway)


class DisentangledBias(Injection):
    """Eq. 7: A~ = AC + BD + c, with the same c as Eq. 5 (effective query q + v)."""

    pathway = "disentangled"

    def __init__(self, projection: TagProjection):
        super().__init__()
        self.projection = projection

    def score_bias(self, q, q_pos, tags, scale):
        return tags.per_class(q_pos, self.projection, scale, self.pathway)


class AttentionBias(Injection):
    """Eq. 8-9 (after Shaw et al.): key bias <q_i, [W_K e_j]_n> / sqrt(d_head) on the logit, from
    the plain query; value bias [W_V e_j]_n added to the attended output."""

    pathway = "attention-bias"

    def __init__(self, key_projection: TagProjection, value_projection: TagProjection):
        super().__init__()
        self.key_projection, self.value_projection = key_projection, value_projection

    def score_bias(self, q, q_pos, tags, scale):
        return tags.per_class(q, self.key_projection, scale, self.pathway)

    def value_offset(self, tags):
        return per_position(tags.project(self.value_projection, self.pathway), tags.cls)  # (B, H, T, d_head)


class RotaryPhase(Injection):
    """Eq. 14-16: delta_theta_p = W_delta e_p, a per-frequency phase added to the rotary angle of
    both query and key at p. W_delta starts at zero, so the model starts as plain RoPE."""

    pathway = "position"

    def __init__(self, projection: TagProjection):
        super().__init__()
        self.projection = projection

    def rotary_phase(self, tags):
        proj = tags.project(self.projection, self.pathway)
        if self.projection.target == "d_head":  # one phase shared by all heads: broadcast, do not copy per head
            proj = proj[:, :1]
        return per_position(proj, tags.cls)  # (B, H or 1, T, d_head/2)

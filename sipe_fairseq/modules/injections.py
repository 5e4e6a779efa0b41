"""SiPE injection strategies as small attention hooks (paper sections 3.3-3.5).

An :class:`Injection` is attached to one attention layer and may implement any of four hooks;
the attention combines them (see :class:`~sipe_fairseq.modules.attention.SiPEAttention`)::

    A~ = AC + (1 + sum position_scale) * BD + sum score_bias        # logits
    z  = softmax(A~) V + sum value_bias                             # output
    q, k rotated by p * w + sum rotary_phase                        # rotary angle

Every tag-dependent term is computed per tag *class* (11 rows, see ``tag_embedding``) and then
gathered per key, so its cost is O(T * 11 * d_head) + a gather, far below BD's O(T^2 * d_head).
A new injection only needs a subclass that returns tensors from the hooks it uses.
"""
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn


@dataclass
class TagContext:
    """What the hooks see: class ids per position (B, T) and the (11, d) class table."""

    cls: torch.Tensor
    table: torch.Tensor


class TagProjection(nn.Module):
    """W_E: tag embedding -> per-head vectors (11, H, d_head).

    ``target="d_model"`` maps to H * d_head and splits into heads; ``"d_head"`` maps into one
    head's subspace and shares it across heads (appendix A.2). Initialized N(0, init_std) so that
    a small std starts the model at the vanilla score (footnote 3); no bias, so "no tag" stays 0.
    """

    def __init__(self, tag_dim: int, num_heads: int, head_dim: int, target: str = "d_model", init_std: float = 1e-3, out_dim: Optional[int] = None):
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


def class_scores(query: torch.Tensor, proj: torch.Tensor, cls: torch.Tensor, scale: float) -> torch.Tensor:
    """<query_i, P[cls_j]> * scale for every (i, j): (B, H, T, T), via 11 classes and a gather."""
    per_class = torch.einsum("bhtd,chd->bhtc", query, proj.to(query.dtype)) * scale
    b, h, t, _ = per_class.shape
    index = cls[:, None, None, :].expand(b, h, t, cls.size(1))
    return per_class.gather(-1, index)


def per_position(proj: torch.Tensor, cls: torch.Tensor) -> torch.Tensor:
    """P[cls_j] laid out as (B, H, T, d) for per-key terms."""
    return proj[cls].permute(0, 2, 1, 3)


class Injection(nn.Module):
    """Base class: every hook returns ``None`` (no effect) unless overridden."""

    def position_scale(self, q: torch.Tensor, q_pos: torch.Tensor, tags: TagContext, scale: float):
        return None

    def score_bias(self, q: torch.Tensor, q_pos: torch.Tensor, tags: TagContext, scale: float):
        return None

    def value_bias(self, probs: torch.Tensor, tags: TagContext):
        return None

    def rotary_phase(self, tags: TagContext):
        return None


class PositionCoupling(Injection):
    """PP-SiPE, Eq. 5-6: c_ij = <q_i + v, [W_E e_j]_n> / sqrt(d_head);  A~ = AC + (1 + c) BD."""

    def __init__(self, projection: TagProjection):
        super().__init__()
        self.projection = projection

    def position_scale(self, q, q_pos, tags, scale):
        return class_scores(q_pos, self.projection(tags.table), tags.cls, scale)


class DisentangledBias(Injection):
    """Eq. 7: A~ = AC + BD + c, with the same c as Eq. 5 (effective query q + v)."""

    def __init__(self, projection: TagProjection):
        super().__init__()
        self.projection = projection

    def score_bias(self, q, q_pos, tags, scale):
        return class_scores(q_pos, self.projection(tags.table), tags.cls, scale)


class AttentionBias(Injection):
    """Eq. 8-9 (after Shaw et al.): key bias <q_i, [W_K e_j]_n> / sqrt(d_head) on the logit, from
    the plain query; value bias [W_V e_j]_n added to the attended output."""

    def __init__(self, key_projection: TagProjection, value_projection: TagProjection):
        super().__init__()
        self.key_projection, self.value_projection = key_projection, value_projection

    def score_bias(self, q, q_pos, tags, scale):
        return class_scores(q, self.key_projection(tags.table), tags.cls, scale)

    def value_bias(self, probs, tags):
        values = per_position(self.value_projection(tags.table), tags.cls)  # (B, H, T, d_head)
        return torch.matmul(probs, values.to(probs.dtype))


class RotaryPhase(Injection):
    """Eq. 14-16: delta_theta_p = W_delta e_p, a per-frequency phase added to the rotary angle of
    both query and key at p. W_delta starts at zero, so the model starts as plain RoPE."""

    def __init__(self, projection: TagProjection):
        super().__init__()
        self.projection = projection

    def rotary_phase(self, tags):
        return per_position(self.projection(tags.table), tags.cls)  # (B, H, T, d_head/2)

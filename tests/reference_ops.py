"""Plain-autograd references of the fused score terms (test and benchmark code, not used by the
models): the tests compare the in-place kernels of ``sipe_fairseq.modules.gated_bd`` and the
per-class gathers of the attention with these direct computations."""
import torch

from sipe_fairseq.modules.attention import _disentangled_spos
from sipe_fairseq.modules.injections import class_onehot, per_class_scores
from sipe_fairseq.modules.positional import rel_shift


def _gated_bd(q_pos, r, gate, onehot, scale):
    """Eq. 6's (1 + c) * BD as bd + bd * c, with c_ij = gate[i, cls_j] spread by the one-hot (plain
    autograd reference of :func:`gated_bd.gated_bd_add`, which the forward uses)."""
    bd = rel_shift(torch.matmul(q_pos * scale, r.transpose(-1, -2)))  # scale the (T, d) side, not (T, T)
    return torch.addcmul(bd, bd, torch.matmul(gate, onehot))


def _gated_spos(q, k, pos_q, pos_k, gate, onehot, scale):
    """Eq. 13's (1 + c) * S_pos (plain autograd reference of :func:`gated_bd.gated_spos_add`)."""
    spos = _disentangled_spos(q, k, pos_q, pos_k, scale)
    return torch.addcmul(spos, spos, torch.matmul(gate, onehot))


def class_scores(query: torch.Tensor, proj: torch.Tensor, cls: torch.Tensor, scale: float) -> torch.Tensor:
    """<query_i, P[cls_j]> * scale for every (i, j): (B, H, T, T), via 11 classes (reference form;
    the attention adds the per-class table directly, see ``SiPEAttention``)."""
    per_class = per_class_scores(query, proj, scale)
    return torch.matmul(per_class, class_onehot(cls, proj.size(0), per_class.dtype))

"""Eq. 6's gated position term added to the scores in place: ``scores + (1 + c) * BD``.

BD = rel_shift((q + v) W_R r^T / sqrt(d)) (Eq. 3) and c_ij = gate[i, cls_j] (Eq. 5), a (T, 11)
per-class table spread over the keys by the one-hot (B, 1, 11, T). Every column of the one-hot
holds exactly one 1, so ``(gate + 1) @ onehot = 1 + c`` costs nothing extra.

The work goes one batch row at a time through two reused (H, T, T+1) / (H, T, T) buffers:
the (B, H, T, T) product is never allocated (on CPU each fresh 64 MB tensor costs as much as a
matmul in page faults) and nothing of size T x T is saved for backward, which recomputes BD and c
per batch row. The shift is the exact one of :func:`~.positional.rel_shift` (pad a zero column,
reinterpret (T, T+1) as (T+1, T), drop the first row): the matmul writes straight into the padded
buffer, the shifted scores are a view of it, and in backward the adjoint is the same view of a
second buffer, so the gradient is exact also for the entries ``j > i`` (garbage, masked when causal).
"""
import torch
from torch.autograd.function import once_differentiable


def _views(pad: torch.Tensor, t: int):
    """(H, T, T+1) padded buffer -> (its (T, T) product part, the rel-shifted (T, T) view)."""
    h = pad.size(0)
    return pad[..., 1:], pad.view(h, -1)[:, t:].view(h, t, t)


def _buffers(like: torch.Tensor, h: int, t: int):
    pad = like.new_empty(h, t, t + 1)
    pad[..., 0].zero_()  # rel_shift's zero column; with the next line, the slots no matmul/mul writes
    pad.view(h, -1)[:, :t].zero_()
    return pad, like.new_empty(h, t, t)


def _gated_bd_add_(scores, q_pos, r_scaled, gate1, onehot):
    """scores[b] += rel_shift(q_pos[b] r_scaled^T) * (gate1[b] @ onehot[b]), in place (no autograd)."""
    b, h, t, _ = scores.shape
    pad, cbuf = _buffers(scores, h, t)
    prod, shifted = _views(pad, t)
    r_t = r_scaled.transpose(-1, -2)
    for i in range(b):
        torch.matmul(q_pos[i], r_t, out=prod)  # BD before the shift, in distance layout
        torch.matmul(gate1[i], onehot[i], out=cbuf)  # 1 + c (Eq. 6)
        scores[i].addcmul_(shifted, cbuf)
    return scores


class GatedBDAdd(torch.autograd.Function):
    """``scores + (1 + gate @ onehot) * rel_shift(q_pos * scale @ r^T)`` written into ``scores``."""

    @staticmethod
    def forward(ctx, scores, q_pos, r, gate, onehot, scale):
        ctx.scale = scale
        ctx.mark_dirty(scores)
        ctx.save_for_backward(q_pos, r, gate, onehot)
        return _gated_bd_add_(scores, q_pos, r * scale, gate + 1, onehot)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q_pos, r, gate, onehot = ctx.saved_tensors
        need_q, need_r, need_gate = ctx.needs_input_grad[1:4]
        b, h, t, _ = grad.shape
        r_scaled, gate1 = r * ctx.scale, gate + 1
        pad, cbuf = _buffers(grad, h, t)  # recomputed BD; then 1 + c, reused for grad wrt (1 + c)
        gpad, _ = _buffers(grad, h, t)  # grad wrt the unshifted product, padded like the forward's
        prod, shifted = _views(pad, t)
        gprod, gshifted = _views(gpad, t)
        grad_q = torch.empty_like(q_pos) if need_q else None
        grad_r = torch.zeros(h, t, r.size(-1), dtype=r.dtype, device=r.device) if need_r else None
        grad_gate_t = gate.new_empty(b, h, gate.size(-1), t) if need_gate else None  # transposed: faster matmul
        r_t = r_scaled.transpose(-1, -2)
        for i in range(b):
            g = grad[i]
            torch.matmul(q_pos[i], r_t, out=prod)
            torch.matmul(gate1[i], onehot[i], out=cbuf)
            if need_q or need_r:
                torch.mul(g, cbuf, out=gshifted)  # d/dBD = g * (1 + c), at the shifted positions
                if need_q:
                    torch.matmul(gprod, r_scaled, out=grad_q[i])
                if need_r:
                    grad_r.baddbmm_(gprod.transpose(-1, -2), q_pos[i])
            if need_gate:  # d/dc = g * BD, summed per key class: onehot @ (g * BD)^T
                torch.mul(g, shifted, out=cbuf)
                torch.matmul(onehot[i], cbuf.transpose(-1, -2), out=grad_gate_t[i])
        if need_r:
            grad_r.mul_(ctx.scale)
        grad_gate = grad_gate_t.transpose(-1, -2) if need_gate else None
        return grad, grad_q, grad_r, grad_gate, None, None


def gated_bd_add(scores, q_pos, r, gate, onehot, scale):
    """Eq. 6: scores + (1 + c) * BD, in place (``scores`` must be a fresh (B, H, T, T) tensor that
    nothing saved for backward). q_pos (B, H, T, d), r (H, T, d), gate (B, H, T, 11), onehot
    (B, 1, 11, T). Entries j > i are rel_shift's garbage, as in BD; the caller masks them."""
    if torch.is_grad_enabled():
        return GatedBDAdd.apply(scores, q_pos, r, gate, onehot, scale)
    return _gated_bd_add_(scores, q_pos, r * scale, gate + 1, onehot)


def _class_bias_add_(scores, bias, onehot):
    for i in range(scores.size(0)):
        scores[i].baddbmm_(bias[i], onehot[i].expand(scores.size(1), -1, -1))
    return scores


class ClassBiasAdd(torch.autograd.Function):
    """``scores + bias @ onehot`` written into ``scores`` (Eq. 7, 8: A_ij += bias[i, cls_j])."""

    @staticmethod
    def forward(ctx, scores, bias, onehot):
        ctx.mark_dirty(scores)
        ctx.save_for_backward(onehot)
        return _class_bias_add_(scores, bias, onehot)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (onehot,) = ctx.saved_tensors
        grad_bias = None
        if ctx.needs_input_grad[1]:  # onehot @ grad^T: (11, T) x (T, T) is far faster than grad @ onehot^T
            grad_bias = torch.matmul(onehot, grad.transpose(-1, -2)).transpose(-1, -2)
        return grad, grad_bias, None


def class_bias_add(scores, bias, onehot):
    """scores + bias @ onehot, in place (same contract as :func:`gated_bd_add`): scores (B, H, T, T),
    bias (B, H, T, 11), onehot (B, 1, 11, T)."""
    if torch.is_grad_enabled():
        return ClassBiasAdd.apply(scores, bias, onehot)
    return _class_bias_add_(scores, bias, onehot)

"""Score terms added into the attention scores in place, without (B, H, T, T) temporaries.

:func:`gated_bd_add` is Eq. 6's ``scores + (1 + c) * BD``: BD = rel_shift((q + v) W_R r^T / sqrt(d))
(Eq. 3) and c_ij = gate[i, cls_j] (Eq. 5), a (T, 11) per-class table spread over the keys by the
one-hot (B, 1, 11, T). Every column of the one-hot holds exactly one 1, so ``(gate + 1) @ onehot``
is 1 + c at no extra cost.

The work goes a few batch rows, and (causal) one block of query rows, at a time through small
reused buffers: on CPU a fresh 64 MB tensor costs about as much as a matmul in page faults, so no
(B, H, T, T) temporary is allocated, and nothing of that size is saved for backward, which
recomputes BD and c block by block. Each block is a handful of ops over all heads and those batch
rows (few thread synchronisations; the products are (B' * rows) x d x cols matmuls per head), in
training and inference alike. Causal: query rows [r0, r1) only need keys j < r1, i.e. the
distances T - r1 .. T - 1, so about half of the products and element-wise work is skipped; the
entries j > i are unspecified (the caller masks them). Non-causal: one block, exactly rel_shift,
garbage included. The shift (pad a zero column, reinterpret (rows, cols+1) as (rows+1, cols), drop
the first row) is a view: the matmul writes straight into a padded buffer, and in backward the
adjoint is the same view of a second buffer, so gradients are exact.

:func:`class_bias_add` is Eq. 7-8's ``scores + bias @ onehot`` in the same way.

Mixed precision (``--fp16``, ``--memory-efficient-fp16``, ``--bf16``, ``torch.autocast``): every
block product, the 1 + c spread and the per-class gradient sums run in float32 with autocast off
(:func:`_acc_dtype`) on the inputs' device; the term is added into ``scores`` in float32 and
rounded once to its dtype, and every gradient is returned in the dtype of its input (float32
parameters under autocast get float32 gradients). Only the per-block buffers are float32; nothing
(B, H, T, T) is allocated in float32. float32 and float64 inputs run exactly as before.
"""
import contextlib

import torch
from torch.autograd.function import once_differentiable

BLOCK_ROWS = 64  # query rows per causal block
BATCH_ROWS = 4  # batch rows per op


def _acc_dtype(*xs) -> torch.dtype:
    """The dtype the products and additions run in, from tensors or dtypes (None skipped): float32
    for half/bfloat16 (fp32 accumulation of the softmax-input terms), else the promoted dtype."""
    dtypes = [x if isinstance(x, torch.dtype) else x.dtype for x in xs if x is not None]
    dtype = dtypes[0]
    for other in dtypes[1:]:
        dtype = torch.promote_types(dtype, other)
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _no_autocast(like: torch.Tensor):
    """Autocast off on ``like``'s device: the dtypes here are explicit (and ``out=`` needs them)."""
    kind = like.device.type
    if torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind):
        return torch.autocast(like.device.type, enabled=False)
    return contextlib.nullcontext()


def _blocks(t: int, causal: bool):
    """(r0, r1, cols): query rows [r0, r1) and the keys [0, cols) they see."""
    if not causal:
        return [(0, t, t)]
    return [(r0, min(r0 + BLOCK_ROWS, t), min(r0 + BLOCK_ROWS, t)) for r0 in range(0, t, BLOCK_ROWS)]


def _chunks(b: int):
    return [slice(i, min(i + BATCH_ROWS, b)) for i in range(0, b, BATCH_ROWS)]


def _buffer(like: torch.Tensor, b: int, h: int, blocks, dtype: torch.dtype, width: int = 1):
    return like.new_empty(min(b, BATCH_ROWS) * h * max((r1 - r0) * (cols + width) for r0, r1, cols in blocks), dtype=dtype)


def _views(buf: torch.Tensor, b: int, h: int, rows: int, cols: int):
    """Buffer -> (zero column (H, B*rows), product (H, B*rows, cols) in padded rows of cols+1, its
    rel-shifted (H, B, rows, cols) view: [.., i, j] = product[.., i, rows - 1 - i + j], i.e. distance
    r0 + i - j when the product's column m holds distance cols - 1 - m; the (H, B, rows) slots the
    shifted view skips, which the adjoint reads and must be zero)."""
    seg = buf[:h * b * rows * (cols + 1)].view(h, b, rows * (cols + 1))
    padded = seg.view(h, b * rows, cols + 1)
    return padded[..., 0], padded[..., 1:], seg[..., rows:].view(h, b, rows, cols), seg[..., :rows]


def _rows(x: torch.Tensor, r0: int, r1: int, dtype: torch.dtype):
    """(B, H, T, k) -> rows [r0, r1) as (H, B * rows, k) in ``dtype`` (a copy)."""
    b, h, _, k = x.shape
    return x[:, :, r0:r1].transpose(0, 1).reshape(h, b * (r1 - r0), k).to(dtype)


def _class_rows(table: torch.Tensor, r0: int, r1: int, dtype: torch.dtype):
    """(B, H, T, 11) -> rows [r0, r1) as (B, H * rows, 11) in ``dtype``."""
    b, h, _, n = table.shape
    return table[:, :, r0:r1].reshape(b, h * (r1 - r0), n).to(dtype)


def _gated_bd_add_(scores, q_pos, r, gate, onehot, scale, causal):
    """scores += rel_shift(q_pos (r * scale)^T) * (1 + gate @ onehot), in place, without autograd;
    ``gate=None``: scores += BD (Eq. 3, the vanilla model)."""
    b, h, t, _ = scores.shape
    acc = _acc_dtype(scores, q_pos, r, gate)
    with _no_autocast(scores):
        r_scaled = r.to(acc) * scale
        gate1 = gate.to(acc) + 1 if gate is not None else None
        onehot = onehot.to(acc) if gate is not None else None
        blocks = _blocks(t, causal)
        pad = _buffer(scores, b, h, blocks, acc)
        cbuf = _buffer(scores, b, h, blocks, acc) if gate1 is not None else None
        for sl in _chunks(b):
            bc = sl.stop - sl.start
            for r0, r1, cols in blocks:
                rows = r1 - r0
                zero, prod, shifted, _ = _views(pad, bc, h, rows, cols)
                zero.zero_()
                # BD, distance layout
                torch.bmm(_rows(q_pos[sl], r0, r1, acc), r_scaled[:, t - cols:].transpose(-1, -2), out=prod)
                out = scores[sl, :, r0:r1, :cols]
                if gate1 is None:
                    out.add_(shifted.transpose(0, 1))  # in acc, rounded once to scores' dtype
                    continue
                c1 = cbuf[:bc * h * rows * cols].view(bc, h * rows, cols)
                torch.bmm(_class_rows(gate1[sl], r0, r1, acc), onehot[sl, 0, :, :cols], out=c1)  # 1 + c (Eq. 6)
                out.addcmul_(shifted.transpose(0, 1), c1.view(bc, h, rows, cols))
    return scores


class GatedBDAdd(torch.autograd.Function):
    """``scores + (1 + gate @ onehot) * rel_shift(q_pos * scale @ r^T)`` written into ``scores``."""

    @staticmethod
    def forward(ctx, scores, q_pos, r, gate, onehot, scale, causal):
        ctx.scale, ctx.causal = scale, causal
        ctx.mark_dirty(scores)
        ctx.save_for_backward(q_pos, r, gate, onehot)
        return _gated_bd_add_(scores, q_pos, r, gate, onehot, scale, causal)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q_pos, r, gate, onehot = ctx.saved_tensors
        with _no_autocast(grad):
            return GatedBDAdd._backward(ctx, grad, q_pos, r, gate, onehot)

    @staticmethod
    def _backward(ctx, grad, q_pos, r, gate, onehot):
        need_q, need_r, need_gate = ctx.needs_input_grad[1:4]
        gated = gate is not None
        b, h, t, d = q_pos.shape
        acc = _acc_dtype(grad, q_pos, r, gate)
        r_scaled, gate1 = r.to(acc) * ctx.scale, gate.to(acc) + 1 if gated else None
        onehot = onehot.to(acc) if gated else None
        blocks = _blocks(t, ctx.causal)
        gpad = _buffer(grad, b, h, blocks, acc)
        pad, cbuf = (_buffer(grad, b, h, blocks, acc), _buffer(grad, b, h, blocks, acc)) if gated else (None, None)
        grad_q = q_pos.new_empty(q_pos.shape) if need_q else None  # rows written (rounded) block by block
        grad_r = r.new_zeros(r.shape, dtype=acc) if need_r else None  # summed over blocks in acc
        grad_gate = gate.new_empty(gate.shape) if need_gate else None
        for sl in _chunks(b):
            bc = sl.stop - sl.start
            for r0, r1, cols in blocks:
                rows = r1 - r0
                _, gprod, gshifted, gskipped = _views(gpad, bc, h, rows, cols)  # grad wrt the product
                g = grad[sl, :, r0:r1, :cols]
                q_rows, r_s = _rows(q_pos[sl], r0, r1, acc), r_scaled[:, t - cols:]
                gskipped.zero_()
                if gated:  # recompute BD and 1 + c
                    oh = onehot[sl, 0]
                    zero, prod, shifted, _ = _views(pad, bc, h, rows, cols)
                    c1 = cbuf[:bc * h * rows * cols].view(bc, h * rows, cols)  # 1 + c, then grad wrt it
                    c1_4d = c1.view(bc, h, rows, cols)
                    zero.zero_()
                    torch.bmm(q_rows, r_s.transpose(-1, -2), out=prod)
                    torch.bmm(_class_rows(gate1[sl], r0, r1, acc), oh[..., :cols], out=c1)
                if need_q or need_r:
                    if gated:
                        torch.mul(g, c1_4d, out=gshifted.transpose(0, 1))  # d/dBD = g * (1 + c)
                    else:
                        gshifted.transpose(0, 1).copy_(g)  # d/dBD = g
                    if need_q:
                        grad_q[sl, :, r0:r1] = torch.bmm(gprod, r_s).view(h, bc, rows, d).transpose(0, 1)
                    if need_r:
                        grad_r[:, t - cols:].baddbmm_(gprod.transpose(-1, -2), q_rows)
                if gated and need_gate:  # d/dc = g * BD, summed per key class: onehot @ (g * BD)^T
                    torch.mul(g, shifted.transpose(0, 1), out=c1_4d)
                    per_class = torch.bmm(oh[..., :cols], c1.transpose(-1, -2))  # (B', 11, H * rows)
                    grad_gate[sl, :, r0:r1] = per_class.view(bc, -1, h, rows).permute(0, 2, 3, 1)
        if need_r:
            grad_r = grad_r.mul_(ctx.scale).to(r.dtype)
        return grad, grad_q, grad_r, grad_gate, None, None, None


def gated_bd_add(scores, q_pos, r, gate, onehot, scale, causal=False):
    """Eq. 6: scores + (1 + c) * BD, in place (``scores`` must be a fresh (B, H, T, T) tensor that
    nothing saved for backward). q_pos (B, H, T, d), r (H, T, d), gate (B, H, T, 11), onehot
    (B, 1, 11, T); ``gate=None`` (and ``onehot=None``): scores + BD, Eq. 3's position term by the
    same route. Entries j > i: rel_shift's garbage as in BD; with ``causal`` unspecified (masked
    by the caller; backward assumes nothing about their gradient, it is exact for what was written)."""
    if torch.is_grad_enabled():
        return GatedBDAdd.apply(scores, q_pos, r, gate, onehot, scale, causal)
    return _gated_bd_add_(scores, q_pos, r, gate, onehot, scale, causal)


def _class_bias_add_(scores, bias, onehot, causal):
    b, h, t, _ = scores.shape
    acc = _acc_dtype(scores, bias)
    with _no_autocast(scores):
        onehot = onehot.to(acc)
        blocks = _blocks(t, causal)
        buf = _buffer(scores, b, h, blocks, acc, width=0)
        for sl in _chunks(b):
            bc, oh = sl.stop - sl.start, onehot[sl, 0]
            for r0, r1, cols in blocks:
                rows = r1 - r0
                term = torch.bmm(_class_rows(bias[sl], r0, r1, acc), oh[..., :cols],
                                 out=buf[:bc * h * rows * cols].view(bc, h * rows, cols))
                scores[sl, :, r0:r1, :cols].add_(term.view(bc, h, rows, cols))  # in acc, rounded once
    return scores


class ClassBiasAdd(torch.autograd.Function):
    """``scores + bias @ onehot`` written into ``scores`` (Eq. 7, 8: A_ij += bias[i, cls_j])."""

    @staticmethod
    def forward(ctx, scores, bias, onehot, causal):
        ctx.causal, ctx.bias_dtype = causal, bias.dtype
        ctx.mark_dirty(scores)
        ctx.save_for_backward(onehot)
        return _class_bias_add_(scores, bias, onehot, causal)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (onehot,) = ctx.saved_tensors
        grad_bias = None
        if ctx.needs_input_grad[1]:
            with _no_autocast(grad):
                grad_bias = ClassBiasAdd._grad_bias(ctx, grad, onehot)
        return grad, grad_bias, None, None

    @staticmethod
    def _grad_bias(ctx, grad, onehot):
        """onehot @ grad^T per block ((11, T) x (T, T) is far faster than grad @ onehot^T), in acc."""
        b, h, t, _ = grad.shape
        acc = _acc_dtype(grad, ctx.bias_dtype)
        onehot = onehot.to(acc)
        blocks = _blocks(t, ctx.causal)
        buf = _buffer(grad, b, h, blocks, acc, width=0)
        grad_bias = grad.new_empty(b, h, t, onehot.size(-2), dtype=ctx.bias_dtype)
        for sl in _chunks(b):
            bc, oh = sl.stop - sl.start, onehot[sl, 0]
            for r0, r1, cols in blocks:
                rows = r1 - r0
                g = buf[:bc * h * rows * cols].view(bc, h * rows, cols)
                g.view(bc, h, rows, cols).copy_(grad[sl, :, r0:r1, :cols])
                per_class = torch.bmm(oh[..., :cols], g.transpose(-1, -2))  # (B', 11, H * rows)
                grad_bias[sl, :, r0:r1] = per_class.view(bc, -1, h, rows).permute(0, 2, 3, 1)
        return grad_bias


def class_bias_add(scores, bias, onehot, causal=False):
    """scores + bias @ onehot, in place (same contract as :func:`gated_bd_add`, with ``causal`` the
    entries j > i are unspecified): scores (B, H, T, T), bias (B, H, T, 11), onehot (B, 1, 11, T)."""
    if torch.is_grad_enabled():
        return ClassBiasAdd.apply(scores, bias, onehot, causal)
    return _class_bias_add_(scores, bias, onehot, causal)


# ----------------------------------------------------------------------------- DeBERTa (Eq. 12-13)

def _skew_view(buf: torch.Tensor, t: int) -> torch.Tensor:
    """(H, T, 2T-1) buffer -> (H, T, T) view with [i, j] = buf[i, T-1-i+j] (offset i - j; see
    ``positional.skew``)."""
    h = buf.size(0)
    return buf.as_strided((h, t, t), (buf.stride(0), 2 * t - 2, 1), buf.storage_offset() + t - 1)


def _spos_row(q_s, k_s, pos_q, pos_k, full_a, full_b, out):
    """One batch row's S_pos = c2p + p2c (Eq. 10) from scaled q, k into ``out`` (H, T, T), via two
    (H, T, 2T-1) buffers."""
    t = q_s.size(-2)
    torch.matmul(q_s, pos_k.transpose(-1, -2), out=full_a)  # c2p over offsets
    torch.matmul(k_s, pos_q.transpose(-1, -2), out=full_b)  # p2c over offsets, key-major
    torch.add(_skew_view(full_a, t), _skew_view(full_b, t).transpose(-1, -2), out=out)
    return out


def _gated_spos_add_(scores, q, k, pos_q, pos_k, gate, onehot, scale):
    b, h, t, _ = scores.shape
    acc = _acc_dtype(scores, q, k, pos_q, pos_k, gate)
    with _no_autocast(scores):
        pos_q, pos_k, onehot = pos_q.to(acc), pos_k.to(acc), onehot.to(acc)
        full_a, full_b = scores.new_empty(h, t, 2 * t - 1, dtype=acc), scores.new_empty(h, t, 2 * t - 1, dtype=acc)
        spos, c1 = scores.new_empty(h, t, t, dtype=acc), scores.new_empty(h, t, t, dtype=acc)
        for i in range(b):  # q, k scaled on the (T, d) side, one batch row at a time
            _spos_row(q[i].to(acc) * scale, k[i].to(acc) * scale, pos_q, pos_k, full_a, full_b, spos)
            torch.matmul(gate[i].to(acc) + 1, onehot[i], out=c1)  # 1 + c (Eq. 12)
            scores[i].addcmul_(spos, c1)  # in acc, rounded once to scores' dtype
    return scores


class GatedSposAdd(torch.autograd.Function):
    """``scores + (1 + gate @ onehot) * S_pos`` written into ``scores`` (Eq. 13); S_pos and c are
    recomputed per batch row in backward instead of being saved."""

    @staticmethod
    def forward(ctx, scores, q, k, pos_q, pos_k, gate, onehot, scale):
        ctx.scale = scale
        ctx.mark_dirty(scores)
        ctx.save_for_backward(q, k, pos_q, pos_k, gate, onehot)
        return _gated_spos_add_(scores, q, k, pos_q, pos_k, gate, onehot, scale)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        with _no_autocast(grad):
            return GatedSposAdd._backward(ctx, grad, *ctx.saved_tensors)

    @staticmethod
    def _backward(ctx, grad, q, k, pos_q, pos_k, gate, onehot):
        s = ctx.scale
        b, h, t, _ = grad.shape
        acc = _acc_dtype(grad, q, k, pos_q, pos_k, gate)
        pos_q_in, pos_k_in = pos_q, pos_k
        pos_q, pos_k, onehot = pos_q.to(acc), pos_k.to(acc), onehot.to(acc)
        full_a, full_b = grad.new_empty(h, t, 2 * t - 1, dtype=acc), grad.new_empty(h, t, 2 * t - 1, dtype=acc)
        d_a, d_b = grad.new_zeros(h, t, 2 * t - 1, dtype=acc), grad.new_zeros(h, t, 2 * t - 1, dtype=acc)  # off-view cells stay 0
        spos, c1, g_s = (grad.new_empty(h, t, t, dtype=acc) for _ in range(3))
        grad_q, grad_k = torch.empty_like(q, dtype=acc), torch.empty_like(k, dtype=acc)
        grad_pos_q, grad_pos_k = torch.zeros_like(pos_q), torch.zeros_like(pos_k)
        grad_gate_t = gate.new_empty(b, h, gate.size(-1), t, dtype=acc)
        for i in range(b):
            g = grad[i]
            q_s, k_s = q[i].to(acc) * s, k[i].to(acc) * s  # scaled on the (T, d) side, as the forward
            _spos_row(q_s, k_s, pos_q, pos_k, full_a, full_b, spos)
            torch.matmul(gate[i].to(acc) + 1, onehot[i], out=c1)
            torch.mul(g, spos, out=spos)  # d/dc = g * S_pos, summed per key class below
            torch.matmul(onehot[i], spos.transpose(-1, -2), out=grad_gate_t[i])
            torch.mul(g, c1, out=g_s)  # d/dS_pos = g * (1 + c)
            _skew_view(d_a, t).copy_(g_s)  # adjoint of the c2p skew
            _skew_view(d_b, t).copy_(g_s.transpose(-1, -2))  # adjoint of the transposed p2c skew
            torch.matmul(d_a, pos_k, out=grad_q[i])
            torch.matmul(d_b, pos_q, out=grad_k[i])
            grad_pos_k.baddbmm_(d_a.transpose(-1, -2), q_s)
            grad_pos_q.baddbmm_(d_b.transpose(-1, -2), k_s)
        grad_q, grad_k = grad_q.mul_(s).to(q.dtype), grad_k.mul_(s).to(k.dtype)
        grad_pos_q, grad_pos_k = grad_pos_q.to(pos_q_in.dtype), grad_pos_k.to(pos_k_in.dtype)
        return grad, grad_q, grad_k, grad_pos_q, grad_pos_k, grad_gate_t.transpose(-1, -2).to(gate.dtype), None, None


def gated_spos_add(scores, q, k, pos_q, pos_k, gate, onehot, scale):
    """Eq. 13: scores + (1 + c) * S_pos, in place (``scores``: a fresh (B, H, T, T) tensor nothing
    saved for backward). q, k (B, H, T, d); pos_q, pos_k (H, 2T-1, d) for offsets T-1 .. -(T-1);
    gate (B, H, T, 11); onehot (B, 1, 11, T)."""
    if torch.is_grad_enabled():
        return GatedSposAdd.apply(scores, q, k, pos_q, pos_k, gate, onehot, scale)
    return _gated_spos_add_(scores, q, k, pos_q, pos_k, gate, onehot, scale)

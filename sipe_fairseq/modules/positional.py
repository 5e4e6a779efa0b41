"""Positional mechanisms used inside attention: Transformer-XL's relative term and RoPE."""
import math

import torch
import torch.nn as nn


def sinusoid(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """The one sinusoid of the package: (...,) positions or distances (any dtype, computed in float32) ->
    (..., dim) vectors of [sin | cos] halves, angle ``p / 10000^(2k/dim)`` for k < dim/2 (Transformer-XL's
    relative term; GiLT's arc scorer's distances)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim))
    angles = positions.float()[..., None] * inv_freq
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, T) scores over distances ``T-1 .. 0`` -> scores indexed by key ``j`` (distance
    ``i - j``). Entries with ``j > i`` are garbage and must be masked (causal)."""
    b, h, q, k = x.shape
    x = torch.cat([x.new_zeros(b, h, q, 1), x], dim=-1).view(b, h, k + 1, q)
    return x[:, :, 1:].view(b, h, q, k)


class RelativePosition(nn.Module):
    """Transformer-XL position term (Eq. 3): BD_ij = <q_i + v, W_R r_{i-j}> / sqrt(d_head)."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.r_proj = nn.Linear(embed_dim, embed_dim, bias=False)  # W_R
        self.v_bias = nn.Parameter(torch.zeros(num_heads, self.head_dim))  # v
        nn.init.normal_(self.v_bias, std=0.02)

    def effective_query(self, q: torch.Tensor) -> torch.Tensor:
        """q + v, (B, H, T, d_head)."""
        return q + self.v_bias[None, :, None, :]

    def keys(self, t: int, dtype: torch.dtype, device) -> torch.Tensor:
        """W_R r for distances ``t-1 .. 0``, (H, T, d_head)."""
        dist = torch.arange(t - 1, -1, -1, device=device)
        r = self.r_proj(sinusoid(dist, self.r_proj.in_features).to(dtype))
        return r.view(t, self.num_heads, self.head_dim).transpose(0, 1)

    def score(self, q_v: torch.Tensor, scale: float, r: torch.Tensor = None) -> torch.Tensor:
        """BD (B, H, T, T) for causal attention without memory (``r``: precomputed ``keys``)."""
        if r is None:
            r = self.keys(q_v.size(2), q_v.dtype, q_v.device)
        return rel_shift(torch.matmul(q_v * scale, r.transpose(-1, -2)))


class Rotary(nn.Module):
    """RoPE (Su et al.): pair t of a head is rotated by angle ``p * w_t`` (rotate-half layout).

    ``phase`` (B, T, H or 1, d_head/2) adds a per-position, per-frequency offset to the angle
    (Eq. 14-16); the query and key of a position get the same offset.
    """

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary attention needs an even head dimension, got {head_dim}")
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def angles(self, seq_len: int, device, offset: int = 0) -> torch.Tensor:
        pos = torch.arange(offset, offset + seq_len, device=device, dtype=torch.float)
        return pos[:, None] * self.inv_freq[None, :]  # (T, d_head/2)

    @staticmethod
    def rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        """x (B, H, T, d_head); angles broadcastable to (B, H, T, d_head/2)."""
        x1, x2 = x.chunk(2, dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def log_bucket(rel: torch.Tensor, buckets: int, max_distance: int) -> torch.Tensor:
    """DeBERTa-v3's log-bucketed signed offset (paper footnote 9): with mid = buckets/2, offsets
    with |rel| <= mid keep their value, larger ones become sign(rel) * (mid + ceil(log(|rel|/mid) /
    log((max_distance-1)/mid) * (mid-1))), so that ``max_distance - 1`` maps to ``buckets - 1``.
    Returns integers in [-(buckets-1), buckets-1] for |rel| < max_distance (larger offsets go on
    growing; :class:`DisentangledPosition` clamps them to its table)."""
    mid = buckets // 2
    sign = torch.sign(rel)
    dist = rel.abs()
    far = dist.clamp(min=mid).float()  # only used where dist > mid
    log_pos = torch.ceil(torch.log(far / mid) / math.log((max_distance - 1) / mid) * (mid - 1)).long() + mid
    return torch.where(dist <= mid, rel, log_pos * sign)


RELATIVE_LAYOUTS = ("deberta", "legacy")


def skew(x: torch.Tensor) -> torch.Tensor:
    """(..., T, 2T-1) scores over offsets ``T-1 .. -(T-1)`` (column m = offset T-1-m) ->
    (..., T, T) with out[i, j] the score for offset ``i - j``: a strided view, no copy."""
    t = x.size(-2)
    x = x.contiguous()
    size = x.shape[:-1] + (t,)
    stride = x.stride()[:-2] + (2 * t - 2, 1)
    return x.as_strided(size, stride, x.storage_offset() + t - 1)


class DisentangledPosition(nn.Module):
    """DeBERTa-v3's relative-position table (Eq. 10, 18): learned rows r_delta, layer-normed, shared
    by all layers (each layer projects them with its own W_Q, W_K). ``forward(T)`` returns the rows
    for offsets ``T-1 .. -(T-1)``: (2T-1, C).

    ``layout="deberta"`` (DeBERTa-v3, position_buckets=256): attention span = ``buckets``, a table of
    ``2 * buckets`` rows, row ``log_bucket(delta) + buckets`` (clamped to the table), so offsets up
    to ``max_distance - 1`` each reach a row, exact up to ``buckets/2`` and log-compressed beyond.
    ``layout="legacy"``: the table of ``buckets`` rows (span ``buckets/2``) that sipe_fairseq used
    before; every offset beyond ``buckets/2 - 1`` shares the last row. Kept only to load old
    checkpoints (:meth:`layout_of_rows` tells the two apart from the table's size)."""

    def __init__(self, embed_dim: int, buckets: int = 256, max_distance: int = 512, layout: str = "deberta"):
        super().__init__()
        if buckets < 4 or buckets % 2:
            raise ValueError(f"relative buckets must be an even number >= 4, got {buckets}")
        if layout not in RELATIVE_LAYOUTS:
            raise ValueError(f"relative table layout must be one of {RELATIVE_LAYOUTS}, got {layout!r}")
        self.buckets, self.max_distance, self.layout = buckets, max_distance, layout
        self.span = buckets if layout == "deberta" else buckets // 2
        self.table = nn.Embedding(2 * self.span, embed_dim)
        self.norm = nn.LayerNorm(embed_dim)

    @staticmethod
    def layout_of_rows(rows: int, buckets: int) -> str:
        """The layout whose table has ``rows`` rows for ``buckets`` buckets (ValueError if none)."""
        for layout, n in (("deberta", 2 * buckets), ("legacy", 2 * (buckets // 2))):
            if rows == n:
                return layout
        raise ValueError(f"a relative table of {rows} rows fits no layout for {buckets} buckets "
                         f"(deberta: {2 * buckets}, legacy: {2 * (buckets // 2)})")

    def indices(self, offsets: torch.Tensor) -> torch.Tensor:
        """Table rows of signed offsets i - j."""
        return (log_bucket(offsets, self.buckets, self.max_distance) + self.span).clamp(0, 2 * self.span - 1)

    def forward(self, t: int, device=None) -> torch.Tensor:
        offsets = torch.arange(t - 1, -t, -1, device=device)
        return self.norm(self.table(self.indices(offsets)))

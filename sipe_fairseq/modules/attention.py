"""One multi-head attention with pluggable score terms.

The positional mechanism is chosen by ``position``:
  * ``"relative"``: Transformer-XL (Eq. 3): A = AC + BD with content bias u and position bias v;
  * ``"rotary"``: RoPE on q and k (A = q k^T / sqrt(d));
  * ``"disentangled"``: DeBERTa-v3 (Eq. 10, 18): A = c2c + c2p + p2c over log-bucketed offsets, the
    shared relative table passed in as ``rel`` (see :class:`DisentangledPosition`), scaled 1/sqrt(3d);
  * ``"none"``: plain dot product (absolute positions are added to the input elsewhere).
SiPE injections (``injections.py``) are appended to ``self.injections`` and hook into the score;
pair terms (``self.pair_terms``, GiLT's graph features, ``graph_term.py``) add a per-(query, key) logit
from ``pairs`` (a :class:`~.graph_term.GraphContext`).
Attention is causal (decoder) unless ``causal=False`` is passed with a key padding mask; ``window``
> 0 restricts it to keys within window/2 positions (ModernBERT's local layers).

Incremental decoding (``cache``, a dict the caller keeps per layer): the input holds only the new
positions, the keys/values of the earlier ones come from the cache, see :meth:`SiPEAttention.forward`.
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .gated_bd import class_bias_add, gated_bd_add, gated_spos_add
from . import kv_cache
from .injections import TagContext, class_onehot
from .positional import RelativePosition, Rotary, skew


def _disentangled_spos(q, k, pos_q, pos_k, scale):
    """DeBERTa's S_pos = c2p + p2c (Eq. 10, 18): c2p_ij = <q_i, K_r[d(i,j)]>, p2c_ij = <k_j, Q_r[d(j,i)]>;
    ``pos_q``/``pos_k`` (H, 2T-1, d) hold offsets T-1 .. -(T-1)."""
    c2p = skew(torch.matmul(q * scale, pos_k.transpose(-1, -2)))
    p2c = skew(torch.matmul(k * scale, pos_q.transpose(-1, -2))).transpose(-1, -2)
    return c2p + p2c


def _softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the keys in at least float32 (half precision is upcast; float64 stays float64)."""
    return F.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(scores.dtype)


def _total(terms):
    """Sum of a non-empty list of tensors (no ``0 +`` op for one term)."""
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


class SiPEAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, position: str = "relative", bias: bool = False,
                 window: int = 0, rotary_base: float = 10000.0):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.scale = self.head_dim ** -0.5  # 1/sqrt(d_head): the tag terms (Eq. 5, 8, 12) always use it
        # DeBERTa divides its three score terms by sqrt(3 d_head)
        self.score_scale = (3 * self.head_dim) ** -0.5 if position == "disentangled" else self.scale
        self.dropout, self.position, self.window = dropout, position, window
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.relative = self.rotary = None
        if position == "relative":
            self.relative = RelativePosition(embed_dim, num_heads)
            self.u_bias = nn.Parameter(torch.zeros(num_heads, self.head_dim))  # u (Eq. 3)
            nn.init.normal_(self.u_bias, std=0.02)
        elif position == "rotary":
            self.rotary = Rotary(self.head_dim, rotary_base)
        elif position not in ("none", "disentangled"):
            raise ValueError(f"unknown attention position mechanism {position!r}")
        self.injections = nn.ModuleList()
        self.pair_terms = nn.ModuleList()  # GiLT: (q_i + u) . W_k d_ij (graph_term.py)

    def forward(self, x: torch.Tensor, tags: Optional[TagContext] = None, causal: bool = True,
                key_padding_mask: Optional[torch.Tensor] = None, need_weights: bool = False,
                rel: Optional[torch.Tensor] = None, cache: Optional[Dict[str, torch.Tensor]] = None, pairs=None):
        """x: (B, T, C) -> (B, T, C) [, attention probabilities (B, H, T, T)]; ``rel``: the
        relative table rows (2T-1, C) for ``position="disentangled"``.

        ``cache`` (causal decoders only, relative/rotary/none positions): incremental decoding. ``x``
        holds the k >= 1 new positions S .. S+k-1 after the S cached ones, ``tags.cls`` the classes
        of all S+k positions; returns (B, k, C) [, probabilities (B, H, k, S+k)] and appends this
        step's keys and values to ``cache`` (see :meth:`_cached_forward`)."""
        if cache is not None:
            return self._cached_forward(x, tags, cache, need_weights, pairs)
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        hooks = list(self.injections) if tags is not None else []
        onehot = class_onehot(tags.cls, tags.table.size(0), q.dtype) if hooks else None  # (B, 1, 11, T)

        if self.rotary is not None:
            angles = self.rotary.angles(t, x.device)[None, None]  # (1, 1, T, d/2)
            for inj in hooks:
                phase = inj.rotary_phase(tags)
                if phase is not None:
                    angles = angles + phase  # Eq. 15 (query), Eq. 16 (key)
            q, k = Rotary.rotate(q, angles), Rotary.rotate(k, angles)

        q_content = q + self.u_bias[None, :, None, :] if self.relative is not None else q
        scores = torch.matmul(q_content * self.score_scale, k.transpose(-1, -2))  # AC (scaled on the small side)
        q_pos = q
        if self.relative is not None:
            q_pos = self.relative.effective_query(q)  # q + v
            r = self.relative.keys(t, q.dtype, x.device)
            gates = [g for g in (inj.position_scale(q, q_pos, tags, self.scale) for inj in hooks) if g is not None]
            # + BD (Eq. 3), or + (1 + c) BD (Eq. 6), added in place; nothing (B, H, T, T) saved, BD (and c)
            # recomputed in backward (gated_bd.py); references: self.relative.score, tests/reference_ops.py
            gate = sum(gates) if gates else None
            scores = gated_bd_add(scores, q_pos, r, gate, onehot if gates else None, self.scale, causal)
        elif self.position == "disentangled":
            if rel is None:
                raise ValueError("disentangled attention needs the relative table rows (rel)")
            w, bias = self.qkv.weight[: 2 * c], self.qkv.bias[: 2 * c] if self.qkv.bias is not None else None
            pos_q, pos_k = F.linear(rel, w, bias).view(-1, 2, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
            gates = [g for g in (inj.position_scale(q, q, tags, self.scale) for inj in hooks) if g is not None]
            # Eq. 12-13 added in place, S_pos and c recomputed in backward (gated_bd.py); reference: tests/reference_ops.py
            if gates:
                scores = gated_spos_add(scores, q, k, pos_q, pos_k, sum(gates), onehot, self.score_scale)
            else:
                scores = scores + _disentangled_spos(q, k, pos_q, pos_k, self.score_scale)
        biases = [e for e in (inj.score_bias(q, q_pos, tags, self.scale) for inj in hooks) if e is not None]
        if biases:  # Eq. 7, 8: scores_ij += bias[i, cls_j], (T x 11) @ (11 x T) matmul-adds in place
            scores = class_bias_add(scores, sum(biases), onehot, causal)
        scores = self._add_pair_terms(scores, q_content, pairs)

        if causal:
            future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu_(1)
            scores = scores.masked_fill(future, float("-inf"))
        if self.window > 0:  # local attention: |i - j| <= window / 2
            pos = torch.arange(t, device=x.device)
            far = (pos[:, None] - pos[None, :]).abs() > self.window // 2
            if key_padding_mask is not None:  # a pad query may see only pads: leave such rows unmasked (finite, unused)
                far = far | key_padding_mask[:, None, None, :]
                far = far & ~far.all(-1, keepdim=True)
                key_padding_mask = None
            scores = scores.masked_fill(far, float("-inf"))
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        probs = _softmax(scores)
        probs_drop = F.dropout(probs, p=self.dropout, training=self.training)

        offsets = [o for o in (inj.value_offset(tags) for inj in hooks) if o is not None]
        if offsets:  # Eq. 9: softmax(A~) V + softmax(A~) V_tag = softmax(A~) (V + V_tag)
            v = v + sum(offsets).to(v.dtype)
        out = torch.matmul(probs_drop, v)
        out = self.out_proj(out.transpose(1, 2).reshape(b, t, c))
        return (out, probs) if need_weights else (out, None)

    # ------------------------------------------------------------------ incremental decoding

    def _add_pair_terms(self, scores, q_content, pairs, to_columns=None):
        """+ every pair term (GiLT: (q_i + u) . W_k d_ij, scaled as AC), gathered per (query, key);
        ``to_columns``: absolute key positions -> the columns of ``scores`` (a shared KV cache)."""
        if pairs is None or not len(self.pair_terms):
            return scores
        c = self.num_heads * self.head_dim
        w_k = self.qkv.weight[c: 2 * c]
        for term in self.pair_terms:
            term_scores = term.pair_scores(q_content, pairs, w_k, self.score_scale)
            scores = scores + (term_scores if to_columns is None else to_columns(term_scores))
        return scores

    def _cached_forward(self, x: torch.Tensor, tags: Optional[TagContext], cache: Dict[str, torch.Tensor], need_weights: bool,
                        pairs=None):
        """The new rows i = S .. S+k-1 against every key j < S+k, computed directly (few query rows,
        no (T, T) training buffers, so no in-place Functions). ``cache`` (:mod:`.kv_cache`, asked through its
        functions) holds, batch first, the keys (B, H, S, d) (rotary: already rotated at their absolute
        positions, with their tag phase, Eq. 14-16), the values (B, H, S, d) with the value offset of their
        class already added (Eq. 9), and W_R r for distances N-1 .. 0 (relative only, extended on demand; not
        per hypothesis). Every class term of a new query against a cached key (Eq. 5-8) is looked up from
        ``tags.cls``, the classes of all S+k positions."""
        if self.position not in ("relative", "rotary", "none") or self.window > 0:
            raise ValueError(f"incremental decoding needs causal relative/rotary/none attention, not {self.position!r}"
                             + (f" with window {self.window}" if self.window > 0 else ""))
        b, k, c = x.shape
        s = kv_cache.rows_and_length(cache)[1]
        n = s + k
        hooks = list(self.injections) if tags is not None else []
        if hooks and tags.cls.size(1) != n:
            raise ValueError(f"incremental attention: tags for {tags.cls.size(1)} positions, expected {s} cached + {k} new")
        new_tags = TagContext(cls=tags.cls[:, s:], table=tags.table, memo=tags.memo) if hooks else None
        q, k_new, v = self._step_projections(x, hooks, new_tags, s)
        keys, values = kv_cache.append(cache, k_new, v)
        cols = kv_cache.shared_columns(cache, n, x.device) if kv_cache.is_shared(cache) else None
        q_content = q + self.u_bias[None, :, None, :] if self.relative is not None else q
        if cols is not None:  # columns: the rows' prefixes (positions 0 .. Lp-1), then own positions lo .. n-1
            keys, values = keys[:, :, cols.lo:], values[:, :, cols.lo:]
            qs = q_content * self.score_scale
            own = torch.matmul(qs, keys.transpose(-1, -2))
            scores = torch.cat([kv_cache.prefix_scores(cache, qs), own], -1) if cols.width else own  # AC
        else:
            scores = torch.matmul(q_content * self.score_scale, keys.transpose(-1, -2))  # AC, (B, H, k, S+k)
        key_cls = None  # c_ij = table[i, cls_j], by column
        if hooks:
            key_cls = (tags.cls if cols is None else cols.select(tags.cls))[:, None, None, :].expand_as(scores)
        q_pos = q
        if self.relative is not None:
            q_pos = self.relative.effective_query(q)  # q + v
            scores = scores + self._step_bd(q, q_pos, cache, s, cols, hooks, new_tags, key_cls)
        biases = [e for e in (inj.score_bias(q, q_pos, new_tags, self.scale) for inj in hooks) if e is not None]
        if biases:  # Eq. 7, 8: bias[i, cls_j]
            scores = scores + _total(biases).gather(-1, key_cls)
        scores = self._add_pair_terms(scores, q_content, pairs, None if cols is None else cols.select)
        out, probs = self._step_mix(scores, values, cache, s, cols, need_weights)
        out = self.out_proj(out.transpose(1, 2).reshape(b, k, c))
        return (out, probs) if need_weights else (out, None)

    def _step_projections(self, x, hooks, new_tags, s: int):
        """q, k, v (B, H, k, d) of the new positions S .. S+k-1: rotary (with the tag phases) applied to q
        and k at their absolute positions, the value offsets added to v."""
        b, k, _ = x.shape
        q, k_new, v = self.qkv(x).view(b, k, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if self.rotary is not None:  # absolute positions S .. S+k-1
            angles = self.rotary.angles(k, x.device, offset=s)[None, None]
            for inj in hooks:
                phase = inj.rotary_phase(new_tags)
                if phase is not None:
                    angles = angles + phase  # Eq. 15 (query), Eq. 16 (key)
            q, k_new = Rotary.rotate(q, angles), Rotary.rotate(k_new, angles)
        offsets = [o for o in (inj.value_offset(new_tags) for inj in hooks) if o is not None]
        if offsets:  # Eq. 9, by linearity on the values (as the full forward)
            v = v + _total(offsets).to(v.dtype)
        return q, k_new, v

    def _step_bd(self, q, q_pos, cache, s: int, cols, hooks, new_tags, key_cls):
        """BD (Eq. 3), or (1 + c) BD with c_ij = gate[i, cls_j] (Eq. 5-6), of the new rows, by column."""
        b, h, k, d = q.shape
        n = s + k
        r = kv_cache.relative_keys(cache, n, lambda size: self.relative.keys(size, q.dtype, q.device))
        # column j of (B, H, k, n): distance n-1-j. One (H, B k, d) @ (H, d, n) product: r is shared by
        # every row, so it is not broadcast (copied) to (B, H, d, n) as a batched matmul would
        by_key = torch.matmul((q_pos * self.scale).transpose(0, 1).reshape(h, b * k, d),
                              r[:, r.size(1) - n:].transpose(-1, -2)).view(h, b, k, n).transpose(0, 1)
        if k == 1:  # the one query is the last position: key j at distance n-1-j
            bd = by_key  # BD (Eq. 3)
        else:  # query S+a, key j: distance S+a-j, column n-1-(S+a-j)
            dist = (torch.arange(s, n, device=q.device)[:, None] - torch.arange(n, device=q.device)[None, :]).clamp_(min=0)
            bd = by_key.gather(-1, (n - 1 - dist).expand(b, h, k, n))  # BD (Eq. 3); j > i masked later
        if cols is not None:
            bd = cols.select(bd)
        gates = [g for g in (inj.position_scale(q, q_pos, new_tags, self.scale) for inj in hooks) if g is not None]
        if gates:  # (1 + c) BD, c_ij = gate[i, cls_j] (Eq. 5-6)
            bd = torch.addcmul(bd, bd, _total(gates).gather(-1, key_cls))
        return bd

    def _step_mix(self, scores, values, cache, s: int, cols, need_weights: bool):
        """The causal mask, softmax and value mix of the new rows: (B, H, k, d) and the probabilities
        (B, H, k, S+k) by absolute key position (``need_weights``)."""
        b, h, k, _ = scores.shape
        n = s + k
        if cols is not None:
            hidden = ~cols.valid[:, None, None, :]
            if k > 1:  # the new rows among themselves: query S+a sees keys j <= S+a
                queries = torch.arange(s, n, device=scores.device)
                hidden = hidden | (cols.positions[None, None, None, :] > queries[None, None, :, None])
            scores = scores.masked_fill(hidden, float("-inf"))
        elif k > 1:  # the new rows among themselves: query S+a sees keys j <= S+a
            future = torch.ones(k, n, dtype=torch.bool, device=scores.device).triu_(s + 1)
            scores = scores.masked_fill(future, float("-inf"))
        probs = _softmax(scores)
        dropped = F.dropout(probs, p=self.dropout, training=self.training)
        if cols is None:
            return torch.matmul(dropped, values), probs
        lp = cols.width  # a row's columns before its own start are stale (maybe never written): no 0 * nan
        mine = cols.valid[:, lp:]
        out = torch.matmul(dropped[..., lp:], values.masked_fill(~mine[:, None, :, None], 0.0))
        if lp:
            out = out + kv_cache.prefix_mix(cache, dropped[..., :lp])
        if need_weights:  # back to absolute key positions
            shown = probs.masked_fill(hidden, 0.0)
            probs = probs.new_zeros(b, h, k, n)
            probs[..., cols.lo:] += shown[..., lp:]
            probs[..., :lp] += shown[..., :lp]
        return out, probs

    @staticmethod
    def reorder_cache(cache: Dict[str, torch.Tensor], new_order: torch.Tensor) -> Dict[str, torch.Tensor]:
        """The cache for batch rows ``new_order`` (beam search: may repeat or drop rows;
        :func:`.kv_cache.reorder`: a repeated row's children share its positions)."""
        return kv_cache.reorder(cache, new_order)

"""A Transformer block around :class:`SiPEAttention` (post-norm as Transformer-XL/RoBERTa/DeBERTa,
or pre-norm as ModernBERT), with a plain or gated (GeGLU) feed-forward."""
import torch.nn as nn
import torch.nn.functional as F

from .attention import SiPEAttention

ACTIVATIONS = ("relu", "gelu", "geglu")


class SiPETransformerLayer(nn.Module):
    def __init__(self, embed_dim, num_heads, ffn_dim, dropout=0.1, attention_dropout=0.0,
                 activation_dropout=0.0, activation="relu", normalize_before=False, position="relative",
                 bias=True, attention_bias=False, window=0, rotary_base=10000.0):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}, expected one of {ACTIVATIONS}")
        self.attn = SiPEAttention(embed_dim, num_heads, attention_dropout, position, attention_bias, window, rotary_base)
        self.attn_norm = nn.LayerNorm(embed_dim, bias=bias)
        self.gated = activation == "geglu"  # GeGLU: gelu(x W_a) * (x W_b) (ModernBERT)
        self.fc1 = nn.Linear(embed_dim, ffn_dim * (2 if self.gated else 1), bias=bias)
        self.fc2 = nn.Linear(ffn_dim, embed_dim, bias=bias)
        self.ffn_norm = nn.LayerNorm(embed_dim, bias=bias)
        self.activation = F.relu if activation == "relu" else F.gelu
        self.dropout, self.activation_dropout = dropout, activation_dropout
        self.normalize_before = normalize_before

    def _residual(self, x, fn, norm, skip_extra=None):
        skip = x if skip_extra is None else x + skip_extra
        if self.normalize_before:
            return skip + F.dropout(fn(norm(x)), self.dropout, self.training)
        return norm(skip + F.dropout(fn(x), self.dropout, self.training))

    def _ffn(self, x):
        h = self.fc1(x)
        if self.gated:
            a, b = h.chunk(2, dim=-1)
            h = self.activation(a) * b
        else:
            h = self.activation(h)
        return self.fc2(F.dropout(h, self.activation_dropout, self.training))

    def forward(self, x, tags=None, causal=True, key_padding_mask=None, need_weights=False, rel=None, skip_extra=None,
                cache=None, pairs=None):
        """``skip_extra`` (B, T, C) is added on the attention sublayer's skip branch only (Table 12's
        residual strategy: h = LN(x + extra + Attn(x))); ``cache``: the attention's incremental
        decoding state (``x`` then holds the new positions only, see :class:`SiPEAttention`);
        ``pairs``: GiLT's graph features for the attention's pair terms."""
        attn = {}

        def sublayer(h):
            out, attn["probs"] = self.attn(h, tags, causal, key_padding_mask, need_weights, rel, cache, pairs)
            return out

        x = self._residual(x, sublayer, self.attn_norm, skip_extra)
        x = self._residual(x, self._ffn, self.ffn_norm)
        return x, attn["probs"]

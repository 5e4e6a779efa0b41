"""A Transformer block around :class:`SiPEAttention` (post-norm as Transformer-XL, or pre-norm)."""
import torch.nn as nn
import torch.nn.functional as F

from .attention import SiPEAttention


class SiPETransformerLayer(nn.Module):
    def __init__(self, embed_dim, num_heads, ffn_dim, dropout=0.1, attention_dropout=0.0,
                 activation_dropout=0.0, activation="relu", normalize_before=False, position="relative"):
        super().__init__()
        self.attn = SiPEAttention(embed_dim, num_heads, attention_dropout, position)
        self.attn_norm = nn.LayerNorm(embed_dim)
        self.fc1, self.fc2 = nn.Linear(embed_dim, ffn_dim), nn.Linear(ffn_dim, embed_dim)
        self.ffn_norm = nn.LayerNorm(embed_dim)
        self.activation = {"relu": F.relu, "gelu": F.gelu}[activation]
        self.dropout, self.activation_dropout = dropout, activation_dropout
        self.normalize_before = normalize_before

    def _residual(self, x, fn, norm):
        if self.normalize_before:
            return x + F.dropout(fn(norm(x)), self.dropout, self.training)
        return norm(x + F.dropout(fn(x), self.dropout, self.training))

    def _ffn(self, x):
        return self.fc2(F.dropout(self.activation(self.fc1(x)), self.activation_dropout, self.training))

    def forward(self, x, tags=None, causal=True, key_padding_mask=None, need_weights=False):
        attn = {}

        def sublayer(h):
            out, attn["probs"] = self.attn(h, tags, causal, key_padding_mask, need_weights)
            return out

        x = self._residual(x, sublayer, self.attn_norm)
        x = self._residual(x, self._ffn, self.ffn_norm)
        return x, attn["probs"]

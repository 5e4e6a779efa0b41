"""Model ``sipe_tagger``: a bidirectional encoder over subwords with two tag heads (a hexatagger).

Layers are :class:`~sipe_fairseq.modules.SiPETransformerLayer` with ``causal=False`` and a key
padding mask; positions are rotary (default) or Transformer-XL relative. Each position gets
terminal (2) and non-terminal (5) logits; the task/criterion use only words' first subwords.
The encoder starts from scratch: initializing it from a RoBERTa or plugin checkpoint is a later
extension (not implemented).
"""
import logging
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture

from ..hexatag import NONTERMINALS, TERMINALS
from ..modules import SiPETransformerLayer

logger = logging.getLogger(__name__)


@dataclass
class SiPETaggerConfig(FairseqDataclass):
    dropout: float = field(default=0.1, metadata={"help": "dropout on embeddings, residuals"})
    attention_dropout: float = field(default=0.0, metadata={"help": "dropout on attention probabilities"})
    encoder_embed_dim: int = field(default=256, metadata={"help": "model dimension"})
    encoder_ffn_embed_dim: int = field(default=1024, metadata={"help": "FFN inner dimension"})
    encoder_layers: int = field(default=4, metadata={"help": "number of layers"})
    encoder_attention_heads: int = field(default=4, metadata={"help": "number of attention heads"})
    position_encoding: ChoiceEnum(["rotary", "relative"]) = field(
        default="rotary", metadata={"help": "rotary (RoPE) or Transformer-XL relative attention"})


@register_model("sipe_tagger", dataclass=SiPETaggerConfig)
class SiPETaggerModel(BaseFairseqModel):
    def __init__(self, cfg, dictionary):
        super().__init__()
        d = cfg.encoder_embed_dim
        self.cfg = cfg
        self.padding_idx = dictionary.pad()
        self.embed_tokens = nn.Embedding(len(dictionary), d, padding_idx=self.padding_idx)
        nn.init.normal_(self.embed_tokens.weight, std=d ** -0.5)
        self.embed_scale = d ** 0.5
        self.layers = nn.ModuleList(
            SiPETransformerLayer(d, cfg.encoder_attention_heads, cfg.encoder_ffn_embed_dim, dropout=cfg.dropout,
                                 attention_dropout=cfg.attention_dropout, normalize_before=True,
                                 position=str(cfg.position_encoding))
            for _ in range(cfg.encoder_layers))
        self.final_norm = nn.LayerNorm(d)
        self.terminal_head = nn.Linear(d, len(TERMINALS))
        self.nonterminal_head = nn.Linear(d, len(NONTERMINALS))

    @classmethod
    def build_model(cls, cfg, task):
        return cls(cfg, task.source_dictionary)

    def forward(self, src_tokens, src_lengths=None, **kwargs):
        """(B, T) subword ids -> terminal logits (B, T, 2), non-terminal logits (B, T, 5)."""
        pad = src_tokens.eq(self.padding_idx)
        x = nn.functional.dropout(self.embed_tokens(src_tokens) * self.embed_scale, self.cfg.dropout, self.training)
        mask = pad if pad.any() else None
        for layer in self.layers:
            x, _ = layer(x, causal=False, key_padding_mask=mask)
        x = self.final_norm(x)
        return self.terminal_head(x), self.nonterminal_head(x)

    def max_positions(self):
        return None


def _set(args, **defaults):
    for k, v in defaults.items():
        setattr(args, k, getattr(args, k, v))


@register_model_architecture("sipe_tagger", "sipe_tagger_tiny")
def sipe_tagger_tiny(args):
    """Tests: 2 layers, d 64, 4 heads."""
    _set(args, encoder_embed_dim=64, encoder_ffn_embed_dim=256, encoder_layers=2, encoder_attention_heads=4)


@register_model_architecture("sipe_tagger", "sipe_tagger_small")
def sipe_tagger_small(args):
    """CPU size: 4 layers, d 256, 4 heads."""
    _set(args, encoder_embed_dim=256, encoder_ffn_embed_dim=1024, encoder_layers=4, encoder_attention_heads=4)

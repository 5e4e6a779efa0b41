"""Absolute positions: fairseq's ``transformer_lm`` with SiPE ``input`` injection (Eq. 2/4).

The tag embedding is added to the token embedding before fairseq scales it and adds the
learned/sinusoidal position embedding, so the tag term sits at the level of the token term.
"""
import logging
from dataclasses import dataclass, field

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder
from fairseq.models.transformer_lm import TransformerLanguageModel, TransformerLanguageModelConfig, base_lm_architecture
from fairseq.dataclass import ChoiceEnum
import torch.nn as nn
import torch.nn.functional as F

from ..modules import HexatagEmbedding, tag_head, tag_pair_classes

logger = logging.getLogger(__name__)


class _TaggedEmbedding(nn.Module):
    """Wraps the token embedding; adds m_p (E^T + E^N) for the tags set by the decoder."""

    def __init__(self, embed_tokens: nn.Embedding):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.tags = HexatagEmbedding(embed_tokens.embedding_dim)
        self.weight = embed_tokens.weight  # fairseq ties the output projection to ``.weight``
        self.padding_idx, self.embedding_dim = embed_tokens.padding_idx, embed_tokens.embedding_dim
        self.pending = None

    def forward(self, tokens):
        x = self.embed_tokens(tokens)
        if self.pending is None:
            raise ValueError("sipe_transformer_lm needs hexatags: pass src_terminals/src_nonterminals (--task hexatag_lm)")
        cls = self.pending
        if cls.shape != tokens.shape:  # incremental decoding feeds the last token only
            cls = cls[:, -tokens.size(1):]
        return x + F.embedding(cls, self.tags.class_table())


class SiPETransformerDecoder(TransformerDecoder):
    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=True):
        super().__init__(args, dictionary, _TaggedEmbedding(embed_tokens), no_encoder_attn=no_encoder_attn)
        heads = getattr(args, "sipe_tag_heads", "on") != "off"
        d = self.embed_dim
        self.terminal_head = tag_head("terminal", d) if heads else None
        self.nonterminal_head = tag_head("nonterminal", d) if heads else None

    def forward(self, prev_output_tokens, src_terminals=None, src_nonterminals=None, features_only=False, **kwargs):
        self.embed_tokens.pending = None if src_terminals is None else tag_pair_classes(src_terminals, src_nonterminals)
        try:
            x, extra = super().forward(prev_output_tokens, features_only=True, **kwargs)
        finally:
            self.embed_tokens.pending = None
        if self.terminal_head is not None:
            extra["terminal_logits"] = self.terminal_head(x)
            extra["nonterminal_logits"] = self.nonterminal_head(x)
        if not features_only:
            x = self.output_layer(x)
        return x, extra


@dataclass
class SiPETransformerLMConfig(TransformerLanguageModelConfig):
    sipe_tag_heads: ChoiceEnum(["on", "off"]) = field(default="on", metadata={"help": "auxiliary tag prediction heads"})


@register_model("sipe_transformer_lm", dataclass=SiPETransformerLMConfig)
class SiPETransformerLanguageModel(TransformerLanguageModel):
    """``transformer_lm`` + hexatag input injection (always on: use ``transformer_lm`` for none)."""

    @classmethod
    def build_model(cls, args, task):
        model = super().build_model(args, task)
        decoder = SiPETransformerDecoder(args, task.target_dictionary, model.decoder.embed_tokens, no_encoder_attn=True)
        return cls(decoder)


@register_model_architecture("sipe_transformer_lm", "sipe_transformer_lm_tiny")
def sipe_transformer_lm_tiny(args):
    """Same sizes as ``sipe_txl_tiny`` (2 layers, d 64, 4 heads)."""
    for k, v in dict(decoder_embed_dim=64, decoder_ffn_embed_dim=256, decoder_layers=2, decoder_attention_heads=4,
                     share_decoder_input_output_embed=True, dropout=0.1).items():
        setattr(args, k, getattr(args, k, v))
    base_lm_architecture(args)

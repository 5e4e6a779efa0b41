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
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..modules import HexatagEmbedding, tag_pair_classes
from ._common import (RefusesFairseqHub, add_tag_logits, build_tag_heads, check_tag_inputs, declared_defaults,
                      missing_tags_error, preset,
                      tag_heads_enabled, task_tag_timing)

logger = logging.getLogger(__name__)

MODEL, TASK = "sipe_transformer_lm", "hexatag_lm"  # for the missing-tags error


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
            raise missing_tags_error(MODEL, TASK)
        cls = self.pending
        if cls.shape != tokens.shape:  # incremental decoding feeds the last token only
            cls = cls[:, -tokens.size(1):]
        return x + F.embedding(cls, self.tags.class_table())


class SiPETransformerDecoder(TransformerDecoder):
    """fairseq's ``TransformerDecoder`` with the tag embedding added to the token embedding.

    Incremental decoding: as :class:`~sipe_fairseq.models.sipe_lm.SiPEDecoder` -- the caller passes
    the full prefix (tokens and tag streams, right-padded) and ``incremental_state``; only the
    positions after the cached ones are computed (k >= 1 of them; fairseq's decoder takes one
    token per call, so k new tokens are k calls). Cached: fairseq's per-layer keys/values, and
    ``tags`` -> the class ids of the cached positions (which also give the cached length).
    :meth:`reorder_incremental_state` reorders both (and equals ``reorder_incremental_state_scripting``).
    """

    structure = "hexatags"  # what it reads (structure/family.py)
    takes_tags = True  # forward reads the hexatag streams src_terminals/src_nonterminals

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=True):
        super().__init__(args, dictionary, _TaggedEmbedding(embed_tokens), no_encoder_attn=no_encoder_attn)
        heads = tag_heads_enabled(declared_defaults(args, SiPETransformerLMConfig).sipe_tag_heads, tagged=True)
        self.terminal_head, self.nonterminal_head = build_tag_heads(self.embed_dim, heads)

    def forward(self, prev_output_tokens, src_terminals=None, src_nonterminals=None, features_only=False,
                incremental_state=None, **kwargs):
        check_tag_inputs(prev_output_tokens, src_terminals, src_nonterminals, MODEL, TASK)
        cls = tag_pair_classes(src_terminals, src_nonterminals)
        if incremental_state is None:
            x, extra = self._features(prev_output_tokens, cls, **kwargs)
        else:
            x, extra = self._incremental_features(prev_output_tokens, cls, incremental_state, **kwargs)
        add_tag_logits(self, x, extra)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def _features(self, tokens, cls, **kwargs):
        self.embed_tokens.pending = cls
        try:
            return super().forward(tokens, features_only=True, **kwargs)
        finally:
            self.embed_tokens.pending = None

    def _incremental_features(self, tokens, cls, incremental_state, **kwargs):
        state = self.get_incremental_state(incremental_state, "tags")
        start = 0 if state is None else state["cls"].size(1)
        if start and (state["cls"].size(0) != cls.size(0) or not torch.equal(state["cls"], cls[:, :start])):
            raise ValueError("incremental decoding: the rows or tags of the cached prefix changed (after a beam step "
                             "call reorder_incremental_state; to rescore a prefix with other tags start a new state)")
        if tokens.size(1) <= start:
            raise ValueError(f"incremental decoding: prev_output_tokens has {tokens.size(1)} positions, {start} are "
                             "already cached; pass the full prefix plus at least one new token")
        steps = [self._features(tokens[:, :t], cls[:, :t], incremental_state=incremental_state, **kwargs)
                 for t in range(start + 1, tokens.size(1) + 1)]
        self.set_incremental_state(incremental_state, "tags", {"cls": cls})
        extra = steps[-1][1]
        extra["inner_states"] = [torch.cat(h, dim=0) for h in zip(*(e["inner_states"] for _, e in steps))]  # (k, B, C)
        return torch.cat([x for x, _ in steps], dim=1), extra

    def reorder_incremental_state(self, incremental_state, new_order):
        """Keep batch rows ``new_order`` (may repeat rows) of every layer's keys/values and of the tags."""
        for module in self.modules():
            if module is not self and hasattr(module, "reorder_incremental_state"):
                module.reorder_incremental_state(incremental_state, new_order)
        state = self.get_incremental_state(incremental_state, "tags")
        if state is not None:
            self.set_incremental_state(incremental_state, "tags", {"cls": state["cls"].index_select(0, new_order)})

    def reorder_incremental_state_scripting(self, incremental_state, new_order):
        self.reorder_incremental_state(incremental_state, new_order)  # once (fairseq's walks every submodule)


@dataclass
class SiPETransformerLMConfig(TransformerLanguageModelConfig):
    sipe_tag_heads: ChoiceEnum(["on", "off"]) = field(default="on", metadata={"help": "auxiliary tag prediction heads"})


@register_model("sipe_transformer_lm", dataclass=SiPETransformerLMConfig)
class SiPETransformerLanguageModel(RefusesFairseqHub, TransformerLanguageModel):
    """``transformer_lm`` + hexatag input injection (always on: use ``transformer_lm`` for none)."""

    @classmethod
    def build_model(cls, args, task):
        model = super().build_model(args, task)
        decoder = SiPETransformerDecoder(args, task.target_dictionary, model.decoder.embed_tokens, no_encoder_attn=True)
        decoder.tag_timing = task_tag_timing(task)
        return cls(decoder)


@register_model_architecture("sipe_transformer_lm", "sipe_transformer_lm_tiny")
def sipe_transformer_lm_tiny(args):
    """Same sizes as ``sipe_txl_tiny`` (2 layers, d 64, 4 heads)."""
    preset(args, decoder_embed_dim=64, decoder_ffn_embed_dim=256, decoder_layers=2, decoder_attention_heads=4,
           share_decoder_input_output_embed=True, dropout=0.1)
    base_lm_architecture(args)

"""Model ``gilt_transformer_lm``: GiLT post-training of a trained fairseq ``transformer_lm`` or
``sipe_transformer_lm`` (the paper's GiLT-GPT2 recipe, arXiv 2605.15562; docs/gilt-reference.md section 6).

fairseq's ``TransformerDecoder`` with, in layers K..L (``--gilt-first-layer K``, 1-based; default
L/2+1, i.e. blocks L/2..L-1 of 0..L-1 as GiLT-GPT2's 12..23 of 24), GiLT-GPT2's graph key offsets
(:class:`~sipe_fairseq.models.graph_key_attention.GraphKeyAttention`: a new projection of the
three shared feature tables per block, added directly to the per-head keys, no W_k); layers 1..K-1
are fairseq's own. The arc scorer / count head (:mod:`..modules.arc_scorer`, docs/gilt-reference.md section 2)
reads o_w = [h^(L-1)_(k-1); h^(L/2+1)_(k-1); wte+wpe of x_k] (hidden_states[-2], hidden_states[L/2+1]
and the scaled token + position embedding after dropout, fairseq's ``inner_states[0]``).

``--gilt-init-from CKPT`` (read by task ``gilt_lm`` when a model is first built, see
:mod:`sipe_fairseq.checkpoints.gilt_init`) copies a trained ``transformer_lm``/``sipe_transformer_lm``
(or an earlier stage's ``gilt_transformer_lm``) checkpoint: its architecture settings replace the preset's, every weight
of the base is copied, the graph projections (``--gilt-proj-init zero``: the model starts as the
base LM, exactly) and the arc scorer are new. A ``sipe_transformer_lm`` base keeps its hexatag input
injection (``--gilt-hexatag-input``, set from the checkpoint); its tag heads are dropped.

Parameter groups (fairseq's ``param_group`` attribute, read by the ``grouped_adam`` optimizer of
:mod:`sipe_fairseq.optim.grouped_adam`): ``gilt`` = the per-layer key projections, ``arc`` = the arc
scorer, everything else ``default`` (the pre-trained weights and, as in the authors' code, the shared
feature tables; ``--gilt-tables-lr-group gilt`` puts the tables in ``gilt``).

Incremental decoding: fairseq's contract (one new token per call, the full prefix passed); the
graph features are those of the new query row against every key (``src_words``/``gilt_pairs`` of
the full prefix, or ``gilt_features`` (B, 1, S, 3)).
"""
import logging
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from fairseq.dataclass import ChoiceEnum
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoder
from fairseq.models.transformer_lm import (TransformerLanguageModel, TransformerLanguageModelConfig, base_lm_architecture,
                                           transformer_lm_gpt2_medium)
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from fairseq.modules.checkpoint_activations import checkpoint_wrapper

from ..modules import tag_pair_classes
from ..modules.arc_scorer import ArcScorer
from .graph_key_attention import GraphKeyAttention
from ..modules.graph_term import GraphFeatureTables, GraphFeatureTerm
from ._common import RefusesFairseqHub, check_tag_inputs, declared_defaults, log_parameters, preset
from .gilt_arcs import GiltArcsMixin, first_gilt_layer, gilt_graph_config
from .sipe_transformer_lm import _TaggedEmbedding

logger = logging.getLogger(__name__)

MODEL = "gilt_transformer_lm"
GROUP_GRAPH, GROUP_ARC = "gilt", "arc"  # param_group names (module docstring)


@dataclass
class GiltTransformerLMConfig(TransformerLanguageModelConfig, gilt_graph_config(MODEL)):
    gilt_proj_init: ChoiceEnum(["trunc_normal", "zero"]) = field(default="trunc_normal", metadata={
        "help": "init of the new per-layer projections: trunc_normal (std --gilt-proj-init-std, cut at 2 std; "
                "GiLT-GPT2) or zero (the model starts as the base LM exactly)"})
    gilt_hexatag_input: bool = field(default=False, metadata={
        "help": "hexatag input injection of a sipe_transformer_lm base (set by --gilt-init-from)"})
    gilt_arc_input_order: ChoiceEnum(["lower_first", "upper_first"]) = field(default="lower_first", metadata={
        "help": "the arc scorer's o_w: [h^(L-1); h^(L/2+1); emb] (GiLT-GPT2's cat([hidden_states[-2], "
                "hidden_states[13]])) or [h^(L/2+1); h^(L-1); emb] (the from-scratch order; task "
                "gilt_lm sets it for checkpoints saved without --gilt-tables-lr-group)"})
    gilt_tables_lr_group: ChoiceEnum(["default", "gilt"]) = field(default="default", metadata={
        "help": "parameter group (grouped_adam --lr-scales) of the shared feature tables: default, with the "
                "pre-trained weights (the authors' code: 3e-5 in both stages) or gilt, with the key projections "
                "(trained at their rate)"})
    gilt_init_from: str = field(default="", metadata={
        "help": "initialize from this trained transformer_lm / sipe_transformer_lm (or gilt_transformer_lm) "
                "checkpoint: its architecture replaces the preset, its weights are copied, the GiLT parts are new "
                "(read by --task gilt_lm when the model is first built, not when a checkpoint of this model is loaded)"})


class _GiltDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer whose self-attention is a :class:`GraphKeyAttention` (same arguments)."""

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return GraphKeyAttention(embed_dim, cfg.decoder.attention_heads, dropout=cfg.attention_dropout,
                                 add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
                                 self_attention=not cfg.cross_self_attention, q_noise=self.quant_noise,
                                 qn_block_size=self.quant_noise_block_size,
                                 xformers_att_config=cfg.decoder.xformers_att_config)


class GiltTransformerDecoder(GiltArcsMixin, TransformerDecoder):
    """fairseq's ``TransformerDecoder``; layers >= ``--gilt-first-layer`` get the graph key offsets."""
    model_name = MODEL
    takes_tags = True  # forward takes src_terminals/src_nonterminals (read with --gilt-hexatag-input)
    time_first = True  # fairseq's inner_states are T x B x C

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=True):
        args = declared_defaults(args, GiltTransformerLMConfig)
        self._layers_built, self._first = 0, first_gilt_layer(args)
        self.hexatag_input = bool(args.gilt_hexatag_input)
        self.arc_lower_first = str(args.gilt_arc_input_order) == "lower_first"
        if self.hexatag_input:
            embed_tokens = _TaggedEmbedding(embed_tokens)
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.graph_tables = GraphFeatureTables(init_std=float(args.gilt_table_init_std))
        zero = str(args.gilt_proj_init) == "zero"
        std = float(args.gilt_proj_init_std)
        for attn in self.graph_attentions():
            attn.graph_term = GraphFeatureTerm(self.graph_tables, self.embed_dim, init_std=0.0)
            if not zero:
                nn.init.trunc_normal_(attn.graph_term.proj, std=std, a=-2 * std, b=2 * std)
        self.arc_scorer = (ArcScorer(self.embed_dim, float(args.gilt_arc_table_init_std))
                           if args.gilt_arc_scorer else None)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        """As fairseq's, with :class:`_GiltDecoderLayer` from layer ``--gilt-first-layer`` on."""
        index, self._layers_built = self._layers_built, self._layers_built + 1
        cfg = TransformerConfig.from_namespace(cfg)
        layer_cls = _GiltDecoderLayer if index + 1 >= self._first else TransformerDecoderLayerBase
        layer = layer_cls(cfg, no_encoder_attn)
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0)

    # the structure engine's interface (GiltArcsMixin): the cache and the embedding of this decoder
    def cached_step(self, prefix: torch.Tensor, features: torch.Tensor, incremental_state: dict):
        """As :meth:`GiltArcsMixin.cached_step`; fairseq's incremental contract is one new token per call, so the
        k new positions are fed one at a time."""
        n, k = prefix.size(1), features.size(1)
        steps = [self(prefix[:, : n - k + j + 1], gilt_features=features[:, j:j + 1, : n - k + j + 1],
                      incremental_state=incremental_state) for j in range(k)]
        return torch.cat([s[0] for s in steps], 1), steps[-1][1]

    def arc_embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, d): o_w's third part for the last token of ``tokens`` (B, S), what the arc scorer reads in
        training (``inner_states[0]``: scaled token embedding + its position's embedding, as fairseq's
        ``extract_features`` builds it; no dropout in eval)."""
        x = self.embed_scale * self.embed_tokens(tokens[:, -1:])
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if self.embed_positions is not None:
            x = x + self.embed_positions(tokens)[:, -1:]
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        return self.dropout_module(x)[:, 0]

    def graph_attentions(self):
        """The attentions that carry a graph term, lowest layer first."""
        return [m for m in self.layers.modules() if isinstance(m, GraphKeyAttention)]

    def forward(self, prev_output_tokens, src_words=None, gilt_pairs=None, gilt_prev=None, gilt_word_pos=None,
                gilt_local=None, gilt_sent=None, gilt_features=None, src_terminals=None, src_nonterminals=None,
                features_only=False, incremental_state=None, return_all_hiddens=False, **unused):
        rows = slice(None) if incremental_state is None else slice(-1, None)  # fairseq: the last token only
        ctx = self.graph_context(prev_output_tokens, src_words, gilt_pairs, gilt_features, rows)
        attentions = self.graph_attentions()
        if self.hexatag_input:
            check_tag_inputs(prev_output_tokens, src_terminals, src_nonterminals, MODEL, "gilt_lm")
            self.embed_tokens.pending = tag_pair_classes(src_terminals, src_nonterminals)
        for attn in attentions:
            attn.pairs = ctx
        try:
            x, extra = super().forward(prev_output_tokens, incremental_state=incremental_state, features_only=True,
                                       return_all_hiddens=return_all_hiddens)
        finally:
            for attn in attentions:
                attn.pairs = None
            if self.hexatag_input:
                self.embed_tokens.pending = None
        if self.arc_scorer is not None and gilt_word_pos is not None and incremental_state is None:
            inner = [h.transpose(0, 1) for h in extra["inner_states"]]  # batch first; [0]: wte + wpe
            extra["arcs"] = self.word_arcs(inner, inner[0], gilt_word_pos, gilt_local, gilt_sent, gilt_prev)
        if not features_only:
            x = self.output_layer(x)
        return x, extra


@register_model(MODEL, dataclass=GiltTransformerLMConfig)
class GiltTransformerLanguageModel(RefusesFairseqHub, TransformerLanguageModel):
    @classmethod
    def build_model(cls, args, task):
        model = super().build_model(args, task)  # fairseq's embedding (and decoder, replaced)
        decoder = GiltTransformerDecoder(args, task.target_dictionary, model.decoder.embed_tokens)
        if str(args.gilt_tables_lr_group) == "gilt":  # filled by the decoder (declared_defaults)
            for p in decoder.graph_tables.parameters():
                p.param_group = GROUP_GRAPH
        for attn in decoder.graph_attentions():
            attn.graph_term.proj.param_group = GROUP_GRAPH
        if decoder.arc_scorer is not None:
            for p in decoder.arc_scorer.parameters():
                p.param_group = GROUP_ARC
        log_parameters(cls.__name__, decoder)
        n = {g: sum(p.numel() for p in decoder.parameters() if getattr(p, "param_group", "default") == g)
             for g in (GROUP_GRAPH, GROUP_ARC)}
        logger.info(f"{cls.__name__}: graph key offsets in layers {decoder._first}..{len(decoder.layers)}; "
                    f"{n[GROUP_GRAPH]:,} parameters in group {GROUP_GRAPH!r} (key projections"
                    f"{', tables' if str(args.gilt_tables_lr_group) == 'gilt' else ''}), "
                    f"{n[GROUP_ARC]:,} in group {GROUP_ARC!r} (arc scorer)")
        return cls(decoder)


@register_model_architecture(MODEL, "gilt_transformer_lm_tiny")
def gilt_transformer_lm_tiny(args):
    """Tests and the walkthrough: 2 layers, d 64, 4 heads (``sipe_transformer_lm_tiny``'s sizes)."""
    preset(args, decoder_embed_dim=64, decoder_ffn_embed_dim=256, decoder_layers=2, decoder_attention_heads=4,
           share_decoder_input_output_embed=True, dropout=0.1)
    base_lm_architecture(args)


@register_model_architecture(MODEL, "gilt_transformer_lm_gpt2_medium")
def gilt_transformer_lm_gpt2_medium(args):
    """GiLT-GPT2's size (fairseq's ``transformer_lm_gpt2_medium``: 24 x 1024, 16 heads, FFN 4096, GELU);
    graph key offsets in layers 13..24 (docs/gilt-reference.md section 6)."""
    transformer_lm_gpt2_medium(args)


__all__ = ["GiltTransformerDecoder", "GiltTransformerLanguageModel", "GiltTransformerLMConfig", "first_gilt_layer",
           "GROUP_ARC", "GROUP_GRAPH"]

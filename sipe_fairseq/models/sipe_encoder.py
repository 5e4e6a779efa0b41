"""Masked-LM encoders with SiPE (paper sections 3.2, 3.4, 3.5; appendix A.5, A.6, E).

One encoder stack; the three registered models differ only in config defaults, chiefly the
positional mechanism:

* ``sipe_roberta``: learned absolute positions added to the input, post-norm, GELU (section 3.2);
  injections: ``input`` with any Table 12 strategy (``--sipe-input-strategy``);
* ``sipe_deberta``: DeBERTa-v3 disentangled attention over log-bucketed relative positions, no
  input position embedding (section 3.4); ``input`` (Eq. 11) or ``position`` (Eq. 12-13);
* ``sipe_modernbert``: rotary attention, pre-norm, GeGLU, no biases, alternating local/global
  attention (section 3.5); ``input`` or ``position`` (phase offsets, Eq. 14-16).

The score-side hooks of the decoders (``disentangled``, ``attention-bias``) attach to these
encoders too. Tag tables are initialized uniformly (appendix A.5); W_E small, W_delta zero.
"""
import logging
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import FairseqEncoder, FairseqEncoderModel, register_model, register_model_architecture
from fairseq.models.roberta.model import RobertaLMHead
from fairseq.modules import PositionalEmbedding
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from omegaconf import II

from ..data.tag_dictionary import FIRST_TAG_ID
from ..modules import SiPETransformerLayer, attach_injections, parse_injection, tag_pair_classes
from ..modules.assembly import INJECTION_CHOICES, TAG_TABLE_CHOICES, build_tag_tables, tag_context
from ..modules.input_injection import STRATEGIES, InputFusion, prior_embeddings, uses_deprel
from ..modules.positional import RELATIVE_LAYOUTS, DisentangledPosition
from ._common import (add_tag_logits, build_tag_heads, check_tag_inputs, declared_defaults, log_parameters, preset,
                      tag_heads_enabled)
from .classification import ClassificationHeadsMixin

logger = logging.getLogger(__name__)


@dataclass
class SiPEEncoderConfig(FairseqDataclass):
    dropout: float = field(default=0.1, metadata={"help": "dropout on embeddings and residuals"})
    attention_dropout: float = field(default=0.1, metadata={"help": "dropout on attention probabilities"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout inside the FFN"})
    activation_fn: ChoiceEnum(["relu", "gelu", "geglu"]) = field(
        default="gelu", metadata={"help": "FFN activation (geglu: gated)"})
    encoder_embed_dim: int = field(default=768, metadata={"help": "model dimension"})
    encoder_ffn_embed_dim: int = field(default=3072, metadata={"help": "FFN inner dimension (per gate branch for geglu)"})
    encoder_layers: int = field(default=12, metadata={"help": "number of layers"})
    encoder_attention_heads: int = field(default=12, metadata={"help": "number of attention heads"})
    encoder_normalize_before: bool = field(default=False, metadata={"help": "pre-norm (ModernBERT) instead of post-norm"})
    position_encoding: ChoiceEnum(["absolute", "disentangled", "rotary"]) = field(
        default="absolute", metadata={"help": "absolute: learned input positions (RoBERTa); disentangled: DeBERTa-v3 "
                                              "relative attention (Eq. 10); rotary: RoPE (ModernBERT)"})
    bias: bool = field(default=True, metadata={"help": "biases in FFN and layer norms"})
    attention_bias: bool = field(default=True, metadata={"help": "biases in the q/k/v and output projections"})
    relative_buckets: int = field(default=256, metadata={"help": "disentangled: number of relative-position buckets"})
    max_relative_positions: int = field(default=512, metadata={"help": "disentangled: offset mapped to the last log bucket"})
    relative_table_layout: ChoiceEnum(list(RELATIVE_LAYOUTS)) = field(
        default="deberta", metadata={"help": "disentangled: 'deberta' = DeBERTa-v3's 2 x buckets rows (attention span "
                                             "= buckets, log buckets beyond buckets/2); 'legacy' = the buckets-row table of "
                                             "checkpoints before it (detected from the table size when loading)"})
    rotary_base: float = field(default=10000.0, metadata={"help": "rotary: theta of global-attention layers"})
    local_rotary_base: float = field(default=10000.0, metadata={"help": "rotary: theta of local-attention layers"})
    local_attention_window: int = field(default=0, metadata={"help": "window of local-attention layers (0: all global)"})
    global_attention_every: int = field(default=1, metadata={"help": "every N-th layer (from layer 1) attends globally"})
    sipe_injection: ChoiceEnum(list(INJECTION_CHOICES)) = field(
        default="none", metadata={"help": "none | input (Eq. 2, 11) | position (DeBERTa Eq. 12-13, rotary Eq. 14-16) | "
                                          "disentangled | attention-bias and their combinations"})
    sipe_input_strategy: ChoiceEnum(list(STRATEGIES)) = field(
        default="ADD_T_NT", metadata={"help": "how `input` fuses the priors with the embedding (Table 12); "
                                              "*_DR / *DNT strategies need a deprel stream"})
    sipe_alpha_init: float = field(default=0.5, metadata={"help": "initial alpha of the *_ALPHA strategies (Table 10)"})
    sipe_projection_sharing: ChoiceEnum(["auto", "layer", "shared"]) = field(
        default="auto", metadata={"help": "tag projections per layer or shared (auto: per layer)"})
    sipe_projection_target: ChoiceEnum(["auto", "d_model", "d_head"]) = field(
        default="auto", metadata={"help": "project tags into d_model or one head's d_head (auto: paper default)"})
    sipe_tag_tables: ChoiceEnum(list(TAG_TABLE_CHOICES)) = field(
        default="shared", metadata={"help": "combined injections (input+attention-bias, position+attention-bias): one tag "
                                            "table read by both pathways, or one per pathway (7d parameters each, appendix B)"})
    sipe_first_layer: int = field(default=1, metadata={"help": "score-side injections from layer K on"})
    sipe_proj_init_std: float = field(default=1e-3, metadata={"help": "init std of W_E (small: starts as the vanilla model)"})
    sipe_tag_heads: ChoiceEnum(["auto", "on", "off"]) = field(
        default="auto", metadata={"help": "tag prediction heads at masked positions (auto: on unless injection none)"})
    pooler_dropout: float = field(default=0.0, metadata={"help": "dropout in sentence classification heads"})
    pooler_activation_fn: ChoiceEnum(["tanh", "relu", "gelu", "linear"]) = field(
        default="tanh", metadata={"help": "activation of the classification head's dense layer"})
    max_positions: int = II("task.tokens_per_sample")


class SiPEEncoder(FairseqEncoder):
    """Embedding (+ input priors), N SiPE layers, masked-LM head tied to the embedding, tag heads."""

    def __init__(self, cfg, dictionary, deprel_dictionary=None):
        super().__init__(dictionary)
        cfg = declared_defaults(cfg, SiPEEncoderConfig)
        d = cfg.encoder_embed_dim
        self.cfg = cfg
        self.parts = parse_injection(str(cfg.sipe_injection))
        self.position = str(cfg.position_encoding)
        self.padding_idx = dictionary.pad()
        self.embed_tokens = nn.Embedding(len(dictionary), d, self.padding_idx)
        self.embed_positions = (PositionalEmbedding(cfg.max_positions, d, self.padding_idx, learned=True)
                                if self.position == "absolute" else None)
        self.emb_norm = nn.LayerNorm(d, bias=cfg.bias)
        self.relative = (DisentangledPosition(d, cfg.relative_buckets, cfg.max_relative_positions,
                                              str(cfg.relative_table_layout))
                         if self.position == "disentangled" else None)
        attn_position = {"absolute": "none"}.get(self.position, self.position)
        self.layers = nn.ModuleList()
        for i in range(cfg.encoder_layers):
            local = cfg.local_attention_window > 0 and i % max(1, cfg.global_attention_every) != 0
            self.layers.append(SiPETransformerLayer(
                d, cfg.encoder_attention_heads, cfg.encoder_ffn_embed_dim, cfg.dropout, cfg.attention_dropout,
                cfg.activation_dropout, str(cfg.activation_fn), cfg.encoder_normalize_before, attn_position,
                bias=cfg.bias, attention_bias=cfg.attention_bias, window=cfg.local_attention_window if local else 0,
                rotary_base=cfg.local_rotary_base if local else cfg.rotary_base))
        self.final_norm = nn.LayerNorm(d, bias=cfg.bias) if cfg.encoder_normalize_before else None
        self.lm_head = RobertaLMHead(d, len(dictionary), "gelu", weight=self.embed_tokens.weight)
        self.apply(init_bert_params)  # before the SiPE modules, which keep their own init

        strategy = str(cfg.sipe_input_strategy)
        self.tags, self.pathway_tags = build_tag_tables(self.parts, d, str(cfg.sipe_tag_tables), "uniform")
        self.fusion = InputFusion(strategy, d, cfg.sipe_alpha_init) if "input" in self.parts else None
        self.deprel = None
        if self.fusion is not None and uses_deprel(strategy):
            if deprel_dictionary is None:
                raise ValueError(f"--sipe-input-strategy {strategy} needs the deprel stream: preprocess with --deprel "
                                 "and train with --deprel-stream")
            n = len(deprel_dictionary) - FIRST_TAG_ID
            self.deprel = nn.Embedding(n + 1, d, padding_idx=n)  # row n: no label (m_p = 0)
            nn.init.uniform_(self.deprel.weight, -d ** -0.5, d ** -0.5)
            with torch.no_grad():
                self.deprel.weight[n].zero_()
        score_parts = [p for p in self.parts if p != "input"]
        if "position" in score_parts and self.position == "absolute":
            raise ValueError("the position injection needs relative (sipe_deberta) or rotary (sipe_modernbert) "
                             "attention; with absolute positions use --sipe-injection input (Eq. 2)")
        attach_injections([layer.attn for layer in self.layers], score_parts, d,
                          sharing=str(cfg.sipe_projection_sharing), target=str(cfg.sipe_projection_target),
                          first_layer=cfg.sipe_first_layer, init_std=cfg.sipe_proj_init_std)
        self.terminal_head, self.nonterminal_head = build_tag_heads(d, tag_heads_enabled(cfg.sipe_tag_heads, bool(self.parts)))

    takes_tags = True  # forward reads the hexatag streams src_terminals/src_nonterminals (structure/family.py)

    @property
    def structure(self) -> str:
        """What it reads (structure/family.py): hexatags with an injection, none without."""
        return "hexatags" if self.tags is not None else "none"

    @property
    def needs_tags(self) -> bool:
        """Whether the tags change its output (an injection; then its ``structure`` is hexatags)."""
        return self.tags is not None

    def upgrade_state_dict_named(self, state_dict, name):
        """A checkpoint saved before the DeBERTa-v3 table (``buckets`` rows, no recorded layout) gets
        the legacy table back, so that it loads and scores as it was trained."""
        key = f"{name}.relative.table.weight" if name else "relative.table.weight"
        if self.relative is not None and key in state_dict:
            rows = state_dict[key].size(0)
            layout = DisentangledPosition.layout_of_rows(rows, self.relative.buckets)
            if layout != self.relative.layout:
                logger.warning(f"relative-position table of {rows} rows for {self.relative.buckets} buckets: loading it with "
                               f"the {layout!r} layout (checkpoint saved before DeBERTa-v3's 2 x buckets table)")
                self.relative = DisentangledPosition(self.relative.table.embedding_dim, self.relative.buckets,
                                                     self.relative.max_distance, layout).to(self.relative.table.weight.device)
                self.cfg.relative_table_layout = layout
        super().upgrade_state_dict_named(state_dict, name)

    def _deprel_classes(self, deprels):
        n = self.deprel.padding_idx
        cls = deprels - FIRST_TAG_ID
        return torch.where((cls >= 0) & (cls < n), cls, torch.full_like(cls, n))

    def forward(self, src_tokens, src_lengths=None, src_terminals=None, src_nonterminals=None, src_deprels=None,
                features_only: bool = False, return_all_hiddens: bool = False, masked_tokens=None,
                need_attn: bool = False, **unused):
        """Returns ``(logits or features (B, T, C), extra)``; with ``masked_tokens`` the logits are
        computed only there, flattened (as fairseq's RoBERTa). ``extra`` holds the tag logits for
        every position (``terminal_logits`` (B, T, 2), ``nonterminal_logits`` (B, T, 5))."""
        x, extra = self.extract_features(src_tokens, src_terminals, src_nonterminals, src_deprels, return_all_hiddens, need_attn)
        if not features_only:
            x = self.lm_head(x, masked_tokens)
        return x, extra

    def extract_features(self, tokens, terminals=None, nonterminals=None, deprels=None, return_all_hiddens=False,
                         need_attn=False, **unused):
        x = self.embed_tokens(tokens)
        if self.embed_positions is not None:
            x = x + self.embed_positions(tokens)
        tag_ctx, skip_extra = None, None
        if self.tags is not None:
            check_tag_inputs(tokens, terminals, nonterminals, f"this model (--sipe-injection {self.cfg.sipe_injection})",
                             "hexatag_mlm")
            cls = tag_pair_classes(terminals, nonterminals)
            tag_ctx = tag_context(cls, self.tags, self.pathway_tags)
            if self.fusion is not None:
                deprel_cls = None
                if self.deprel is not None:
                    if deprels is None:
                        raise ValueError(f"--sipe-input-strategy {self.fusion.strategy} needs src_deprels "
                                         "(train with --deprel-stream on data preprocessed with --deprel)")
                    deprel_cls = self._deprel_classes(deprels)
                if self.fusion.strategy == "ADD_T_NT":  # Eq. 2 / 11: one gather from the 11-row class table
                    x = x + F.embedding(cls, tag_ctx.table)
                else:  # Table 12
                    priors = prior_embeddings(self.tags, cls, self.deprel, deprel_cls, self.fusion.components)
                    x, skip_extra = self.fusion(x, priors)  # inside the embedding norm
        x = F.dropout(self.emb_norm(x), self.cfg.dropout, self.training)
        if skip_extra is not None:
            skip_extra = F.dropout(skip_extra, self.cfg.dropout, self.training)
        padding = tokens.eq(self.padding_idx)
        padding = padding if padding.any() else None
        rel = self.relative(tokens.size(1), tokens.device) if self.relative is not None else None
        inner, attn, layer_attn = [x], None, []
        for i, layer in enumerate(self.layers):
            x, attn = layer(x, tag_ctx, causal=False, key_padding_mask=padding, need_weights=need_attn, rel=rel,
                            skip_extra=skip_extra if i == 0 else None)
            layer_attn.append(attn)
            if return_all_hiddens:
                inner.append(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
        extra = {"inner_states": inner, "attn": [attn]}
        if need_attn:  # every layer's (B, H, T, T) probabilities, lowest first (appendix C averages them)
            extra["attn_layers"] = layer_attn
        add_tag_logits(self, x, extra)
        return x, extra

    def max_positions(self):
        return self.cfg.max_positions


class _SiPEEncoderModel(ClassificationHeadsMixin, FairseqEncoderModel):
    """A masked-LM encoder; classifies sentences from the first token ``<s>`` as RoBERTa does."""

    pool = "first"
    body_name = "encoder"

    def __init__(self, encoder):
        super().__init__(encoder)
        self._init_classification_heads()

    def forward(self, src_tokens, features_only=False, return_all_hiddens=False, classification_head_name=None, **kwargs):
        if classification_head_name is not None:
            return self.classify(src_tokens, classification_head_name, **kwargs)
        return self.encoder(src_tokens, features_only=features_only, return_all_hiddens=return_all_hiddens, **kwargs)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        logits = net_output[0].float()
        return F.log_softmax(logits, dim=-1) if log_probs else F.softmax(logits, dim=-1)

    @classmethod
    def build_model(cls, args, task):
        encoder = SiPEEncoder(args, task.source_dictionary, getattr(task, "deprel_dictionary", None))
        log_parameters(cls.__name__, encoder)
        return cls(encoder)


@register_model("sipe_roberta", dataclass=SiPEEncoderConfig)
class SiPERobertaModel(_SiPEEncoderModel):
    """RoBERTa-style encoder: learned absolute positions; SiPE at the input (Eq. 2, Table 12)."""


@dataclass
class SiPEDebertaConfig(SiPEEncoderConfig):
    position_encoding: ChoiceEnum(["absolute", "disentangled", "rotary"]) = field(
        default="disentangled", metadata={"help": "disentangled relative attention for this model"})


@register_model("sipe_deberta", dataclass=SiPEDebertaConfig)
class SiPEDebertaModel(_SiPEEncoderModel):
    """DeBERTa-v3-style encoder: disentangled attention, no input positions (Eq. 10-13)."""


@dataclass
class SiPEModernBertConfig(SiPEEncoderConfig):
    position_encoding: ChoiceEnum(["absolute", "disentangled", "rotary"]) = field(
        default="rotary", metadata={"help": "rotary attention for this model"})
    encoder_normalize_before: bool = field(default=True, metadata={"help": "pre-norm"})
    activation_fn: ChoiceEnum(["relu", "gelu", "geglu"]) = field(default="geglu", metadata={"help": "gated FFN"})
    bias: bool = field(default=False, metadata={"help": "no biases (ModernBERT)"})
    attention_bias: bool = field(default=False, metadata={"help": "no biases (ModernBERT)"})
    attention_dropout: float = field(default=0.0, metadata={"help": "dropout on attention probabilities"})
    dropout: float = field(default=0.0, metadata={"help": "dropout on embeddings and residuals"})
    rotary_base: float = field(default=160000.0, metadata={"help": "theta of global layers (ModernBERT: 160k)"})
    local_attention_window: int = field(default=128, metadata={"help": "window of local layers (ModernBERT: 128)"})
    global_attention_every: int = field(default=3, metadata={"help": "every 3rd layer is global (ModernBERT)"})


@register_model("sipe_modernbert", dataclass=SiPEModernBertConfig)
class SiPEModernBertModel(_SiPEEncoderModel):
    """ModernBERT-style encoder: rotary, pre-norm, GeGLU, local/global layers (Eq. 14-16)."""


_TINY = dict(encoder_embed_dim=64, encoder_ffn_embed_dim=256, encoder_layers=2, encoder_attention_heads=4)
_SMALL = dict(encoder_embed_dim=256, encoder_ffn_embed_dim=1024, encoder_layers=4, encoder_attention_heads=4)
_BASE = dict(encoder_embed_dim=768, encoder_ffn_embed_dim=3072, encoder_layers=12, encoder_attention_heads=12)


@register_model_architecture("sipe_roberta", "sipe_roberta_tiny")
def sipe_roberta_tiny(args):
    """Tests: 2 layers, d 64, 4 heads."""
    preset(args, **_TINY)


@register_model_architecture("sipe_roberta", "sipe_roberta_small")
def sipe_roberta_small(args):
    """CPU walkthroughs: 4 layers, d 256."""
    preset(args, **_SMALL)


@register_model_architecture("sipe_roberta", "sipe_roberta_base")
def sipe_roberta_base(args):
    """RoBERTa-base sizes (the paper's RoBERTa encoder)."""
    preset(args, **_BASE)


@register_model_architecture("sipe_deberta", "sipe_deberta_tiny")
def sipe_deberta_tiny(args):
    preset(args, relative_buckets=32, max_relative_positions=128, **_TINY)


@register_model_architecture("sipe_deberta", "sipe_deberta_small")
def sipe_deberta_small(args):
    preset(args, relative_buckets=64, max_relative_positions=256, **_SMALL)


@register_model_architecture("sipe_deberta", "sipe_deberta_base")
def sipe_deberta_base(args):
    """DeBERTa-v3-base sizes: 12 x 768, 256 position buckets, max relative position 512."""
    preset(args, relative_buckets=256, max_relative_positions=512, **_BASE)


@register_model_architecture("sipe_modernbert", "sipe_modernbert_tiny")
def sipe_modernbert_tiny(args):
    preset(args, local_attention_window=16, **_TINY)


@register_model_architecture("sipe_modernbert", "sipe_modernbert_small")
def sipe_modernbert_small(args):
    preset(args, local_attention_window=64, **_SMALL)


@register_model_architecture("sipe_modernbert", "sipe_modernbert_base")
def sipe_modernbert_base(args):
    """ModernBERT-base sizes: 22 layers, d 768, 12 heads, GeGLU inner 1152, local window 128,
    every 3rd layer global (rotary theta 160k global, 10k local)."""
    preset(args, encoder_embed_dim=768, encoder_ffn_embed_dim=1152, encoder_layers=22, encoder_attention_heads=12)

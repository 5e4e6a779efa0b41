"""Decoder LMs with SiPE: ``sipe_txl`` (Transformer-XL relative attention, paper section 3.3) and
``sipe_rope`` (rotary attention, Eq. 14-16). Both use one decoder class; the positional family
and the injection are config switches.

Transformer-XL here follows the paper's setting: no memory (mem_len 0), causal, a tied output
projection instead of the adaptive softmax.
"""
import logging
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import FairseqIncrementalDecoder, FairseqLanguageModel, register_model, register_model_architecture
from omegaconf import II

from ..data.lm_dataset import task_placement
from ..hexatag.errors import OptionError
from ..hexatag.timing import TIMINGS, check_timing
from ..modules import (SiPETransformerLayer, TagContext, WordAwareInput, attach_injections, kv_cache, parse_injection,
                       tag_pair_classes)
from ..modules.assembly import INJECTION_CHOICES, TAG_TABLE_CHOICES, build_tag_tables, tag_context
from ._common import (RefusesFairseqHub, add_tag_logits, build_tag_heads, check_tag_inputs, declared_defaults,
                      log_parameters, preset,
                      tag_heads_enabled, task_tag_timing)
from .classification import ClassificationHeadsMixin

logger = logging.getLogger(__name__)


@dataclass
class SiPEDecoderConfig(FairseqDataclass):
    dropout: float = field(default=0.1, metadata={"help": "dropout on embeddings, residuals"})
    attention_dropout: float = field(default=0.0, metadata={"help": "dropout on attention probabilities"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout inside the FFN"})
    activation_fn: ChoiceEnum(["relu", "gelu"]) = field(default="relu", metadata={"help": "FFN activation"})
    decoder_embed_dim: int = field(default=512, metadata={"help": "model dimension d_model"})
    decoder_ffn_embed_dim: int = field(default=2048, metadata={"help": "FFN inner dimension"})
    decoder_layers: int = field(default=6, metadata={"help": "number of layers"})
    decoder_attention_heads: int = field(default=8, metadata={"help": "number of attention heads"})
    decoder_normalize_before: bool = field(default=False, metadata={"help": "pre-norm (default: post-norm as Transformer-XL)"})
    position_encoding: ChoiceEnum(["relative", "rotary"]) = field(
        default="relative", metadata={"help": "relative: Transformer-XL sinusoidal relative attention (Eq. 3); rotary: RoPE"})
    sipe_injection: ChoiceEnum(list(INJECTION_CHOICES)) = field(
        default="none", metadata={"help": "where the hexatag embedding enters: none | input (Eq. 4) | position "
                                          "(Eq. 5-6; rotary: Eq. 14-16) | disentangled (Eq. 7) | attention-bias "
                                          "(Eq. 8-9) | input+attention-bias | position+attention-bias"})
    sipe_projection_sharing: ChoiceEnum(["auto", "layer", "shared"]) = field(
        default="auto", metadata={"help": "tag projections per layer or shared across layers "
                                          "(auto: per layer, appendix A.2-A.4)"})
    sipe_projection_target: ChoiceEnum(["auto", "d_model", "d_head"]) = field(
        default="auto", metadata={"help": "project tags into d_model (split into heads) or one head's d_head "
                                          "(auto: position d_model, disentangled d_head, attention-bias d_model)"})
    sipe_tag_tables: ChoiceEnum(list(TAG_TABLE_CHOICES)) = field(
        default="shared", metadata={"help": "combined injections (input+attention-bias, position+attention-bias): one tag "
                                            "table read by both pathways, or one per pathway (7d parameters each, appendix B)"})
    sipe_first_layer: int = field(default=1, metadata={"help": "inject into attention layers K..N (section 5 sweep)"})
    sipe_proj_init_std: float = field(
        default=1e-3, metadata={"help": "init std of W_E (small: starts as the vanilla model, footnote 3)"})
    sipe_tag_heads: ChoiceEnum(["auto", "on", "off"]) = field(
        default="auto", metadata={"help": "auxiliary tag prediction heads (auto: on unless --sipe-injection none)"})
    sipe_tag_head_input: ChoiceEnum(["state", "word"]) = field(
        default="state", metadata={"help": "what the tag heads that choose word w's pair read: state = the prefix state "
                                           "at the anchor (the paper); word = the prefix state just before word w and the "
                                           "embedding of w's first subword, through one GELU layer (the pair is chosen "
                                           "once that subword is seen; needs --tag-head-placement last_subword)"})
    sipe_tag_head_detach: bool = field(
        default=False, metadata={"help": "the tag heads read the decoder's states (and, word-aware, the token embedding) "
                                         "detached: the tag losses train the heads only and do not shape the LM, which "
                                         "still reads the tags as input"})
    pooler_dropout: float = field(default=0.1, metadata={"help": "dropout in sentence classification heads (fine-tuning)"})
    pooler_activation_fn: ChoiceEnum(["tanh", "relu", "gelu", "linear"]) = field(
        default="tanh", metadata={"help": "activation of the classification head's dense layer (RoBERTa: tanh)"})
    tokens_per_sample: int = II("task.tokens_per_sample")
    max_target_positions: Optional[int] = II("task.max_target_positions")


class SiPEDecoder(FairseqIncrementalDecoder):
    """Token embedding (+ tag embedding for ``input``), N SiPE layers, tied output, tag heads.

    Incremental decoding (fairseq's :class:`FairseqIncrementalDecoder` API, KV cache). The caller
    keeps one dict ``incremental_state = {}`` per batch of hypotheses and passes, at every step, the
    *full* prefix: ``prev_output_tokens`` (B, S+k) and, for a tagged model, ``src_terminals`` /
    ``src_nonterminals`` (B, S+k), whose first S positions are the ones already cached (their tags
    must be unchanged: checked against the cached class ids). Only the k >= 1 new positions are
    computed: the output (LM logits, ``terminal_logits``/``nonterminal_logits``, ``attn`` (B, H, k,
    S+k) with ``need_attn``) covers positions S .. S+k-1. k > 1 scores several tokens at once
    (e.g. a word's subwords). Batches are padded on the right (causal: no real position sees a
    pad); a finished row may keep receiving pads, its outputs there are meaningless.

    What is cached, under this decoder's keys of ``incremental_state``: per layer ``layer{i}``,
    the attention's keys and values of every cached position (see
    :meth:`SiPEAttention._cached_forward`: rotary keys already rotated with their tag phase, values
    with their Eq. 9 offset; plus W_R r per distance for relative attention), ``tags`` -> the
    class ids (B, S) of the cached positions, which the new queries' class terms (Eq. 5-8) look up,
    and ``tables`` -> the class table and its per-layer projections (weights only: a state is only
    valid for the weights it was built with, as are its keys and values).
    :meth:`reorder_incremental_state` (or fairseq's ``reorder_incremental_state_scripting``)
    selects batch rows by ``new_order``, which may repeat rows (one cache per beam hypothesis).
    """

    def __init__(self, cfg, dictionary):
        super().__init__(dictionary)
        cfg = declared_defaults(cfg, SiPEDecoderConfig)
        d = cfg.decoder_embed_dim
        self.cfg = cfg
        self.parts = parse_injection(str(cfg.sipe_injection))
        self.padding_idx = dictionary.pad()
        self.embed_tokens = nn.Embedding(len(dictionary), d, padding_idx=self.padding_idx)
        nn.init.normal_(self.embed_tokens.weight, std=d ** -0.5)
        nn.init.zeros_(self.embed_tokens.weight[self.padding_idx])
        self.embed_scale = d ** 0.5
        self.layers = nn.ModuleList(
            SiPETransformerLayer(d, cfg.decoder_attention_heads, cfg.decoder_ffn_embed_dim, cfg.dropout,
                                 cfg.attention_dropout, cfg.activation_dropout, str(cfg.activation_fn),
                                 cfg.decoder_normalize_before, str(cfg.position_encoding))
            for _ in range(cfg.decoder_layers))
        self.final_norm = nn.LayerNorm(d) if cfg.decoder_normalize_before else None
        self.tags, self.pathway_tags = build_tag_tables(self.parts, d, str(cfg.sipe_tag_tables))
        attach_injections([layer.attn for layer in self.layers], [p for p in self.parts if p != "input"], d,
                          sharing=str(cfg.sipe_projection_sharing), target=str(cfg.sipe_projection_target),
                          first_layer=cfg.sipe_first_layer, init_std=cfg.sipe_proj_init_std)
        self.terminal_head, self.nonterminal_head = build_tag_heads(d, tag_heads_enabled(cfg.sipe_tag_heads, bool(self.parts)))
        word_aware = str(cfg.sipe_tag_head_input) == "word" and self.terminal_head is not None
        self.tag_head_input = WordAwareInput(d) if word_aware else None
        self.register_buffer("tag_timing_id", torch.tensor(TIMINGS.index("paper")))  # see tag_timing

    takes_tags = True  # forward reads the hexatag streams src_terminals/src_nonterminals (structure/family.py)

    @property
    def tag_timing(self) -> str:
        """Which tags each word carries (the task's ``--tag-timing``, :mod:`sipe_fairseq.hexatag.timing`), kept in
        the checkpoint (buffer ``tag_timing_id``) so that a run evaluated with another timing fails at load."""
        return TIMINGS[int(self.tag_timing_id)]

    @tag_timing.setter
    def tag_timing(self, timing: str) -> None:
        self.tag_timing_id.fill_(TIMINGS.index(check_timing(timing)))

    def upgrade_state_dict_named(self, state_dict, name):
        """A checkpoint trained with another timing than the task's is refused (the data would carry other tags
        than the model learned to read). A checkpoint without the buffer (written before it existed) takes the
        task's timing: nothing to check it against."""
        key = f"{name}.tag_timing_id" if name else "tag_timing_id"
        if key not in state_dict:
            logger.info(f"checkpoint without {key}: --tag-timing {self.tag_timing} (the task's) is not checked")
            state_dict[key] = self.tag_timing_id.clone()
        trained = TIMINGS[int(state_dict[key])]
        if trained != self.tag_timing:
            raise OptionError(f"this checkpoint was trained with --tag-timing {trained}; the task has --tag-timing "
                              f"{self.tag_timing}: pass --tag-timing {trained}")
        super().upgrade_state_dict_named(state_dict, name)

    @property
    def structure(self) -> str:
        """What it reads (structure/family.py): hexatags with an injection, none without."""
        return "hexatags" if self.tags is not None else "none"

    def forward(self, prev_output_tokens, src_lengths=None, src_terminals=None, src_nonterminals=None,
                features_only: bool = False, return_all_hiddens: bool = False, need_attn: bool = False,
                incremental_state=None, **unused):
        x, extra = self.extract_features(prev_output_tokens, src_terminals, src_nonterminals, return_all_hiddens, need_attn,
                                         incremental_state=incremental_state)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, tokens, terminals=None, nonterminals=None, return_all_hiddens=False, need_attn=False,
                         incremental_state=None, **unused):
        tag_ctx = None
        caches = None if incremental_state is None else self._layer_caches(incremental_state)
        start = 0 if caches is None else self._cached_length(caches, tokens)
        x = self.embed_tokens(tokens[:, start:])
        if self.tags is not None:
            check_tag_inputs(tokens, terminals, nonterminals, f"this model (--sipe-injection {self.cfg.sipe_injection})",
                             "hexatag_lm")
            cls = tag_pair_classes(terminals, nonterminals)
            if incremental_state is not None:
                self._check_cached_tags(incremental_state, cls, start)
            tag_ctx = self._tag_context(cls, incremental_state)
            if "input" in self.parts:
                x = x + F.embedding(cls[:, start:], tag_ctx.table)  # Eq. 4 (m_p = 0 rows are zero)
        x = F.dropout(x * self.embed_scale, self.cfg.dropout, self.training)
        inner, attn, layer_attn = [x], None, []
        for i, layer in enumerate(self.layers):
            x, attn = layer(x, tag_ctx, causal=True, need_weights=need_attn, cache=None if caches is None else caches[i])
            layer_attn.append(attn)
            if return_all_hiddens:
                inner.append(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
        extra = {"attn": [attn], "inner_states": inner}
        if need_attn:  # every layer's (B, H, T, T) probabilities, lowest first (appendix C averages them)
            extra["attn_layers"] = layer_attn
        # --sipe-tag-head-detach: the heads read the LM's states and embeddings without sending gradients back
        grad = (lambda t: t.detach()) if self.cfg.sipe_tag_head_detach else (lambda t: t)
        if self.tag_head_input is None:
            add_tag_logits(self, grad(x), extra)
        else:  # word-aware heads at position p read the input token p+1 (the last one: unknown here, pad)
            nxt = torch.cat([tokens[:, start + 1:], tokens.new_full((tokens.size(0), 1), self.padding_idx)], 1)
            extra["tag_state"] = x  # the engine chooses from it once the next token is known (word_tag_logits)
            add_tag_logits(self, self.tag_head_input(grad(x), grad(self.embed_tokens(nxt) * self.embed_scale)), extra)
        return x, extra

    def word_tag_logits(self, state: torch.Tensor, next_tokens: torch.Tensor):
        """Word-aware heads (``--sipe-tag-head-input word``): (terminal, non-terminal) logits from the
        prefix states ``state`` (..., d) (``extra["tag_state"]`` at the anchor) and the tokens that
        follow them (...,), the new words' first subwords."""
        h = self.tag_head_input(state, self.embed_tokens(next_tokens) * self.embed_scale)
        return self.terminal_head(h), self.nonterminal_head(h)

    # -- incremental decoding (see the class docstring)

    def _layer_caches(self, incremental_state):
        caches = []
        for i in range(len(self.layers)):
            cache = self.get_incremental_state(incremental_state, f"layer{i}")
            if cache is None:
                cache = {}
                self.set_incremental_state(incremental_state, f"layer{i}", cache)
            caches.append(cache)  # the attention appends to it in place
        return caches

    @staticmethod
    def _cached_length(caches, tokens):
        rows, start = kv_cache.rows_and_length(caches[0])
        if start and rows != tokens.size(0):
            raise ValueError(f"incremental decoding: {tokens.size(0)} rows given, {rows} cached "
                             "(after a beam step call reorder_incremental_state)")
        if tokens.size(1) <= start:
            raise ValueError(f"incremental decoding: prev_output_tokens has {tokens.size(1)} positions, {start} are "
                             "already cached; pass the full prefix plus at least one new token")
        return start

    def _check_cached_tags(self, incremental_state, cls, start):
        state = self.get_incremental_state(incremental_state, "tags")
        if start and (state is None or not torch.equal(state["cls"], cls[:, :start])):
            raise ValueError("incremental decoding: the tags of the cached prefix changed; start a new "
                             "incremental_state to rescore a prefix with other tags")
        self.set_incremental_state(incremental_state, "tags", {"cls": cls})

    def _tag_context(self, cls, incremental_state):
        if incremental_state is None:
            return tag_context(cls, self.tags, self.pathway_tags)
        memo = self.get_incremental_state(incremental_state, "tables")  # weight-only tables, kept across steps
        if memo is None:
            ctx = tag_context(cls, self.tags, self.pathway_tags)
            memo = {"class_table": ctx.table, "pathway_tables": ctx.tables}
            self.set_incremental_state(incremental_state, "tables", memo)
        return TagContext(cls=cls, table=memo["class_table"], tables=memo["pathway_tables"], memo=memo)

    def reorder_incremental_state(self, incremental_state, new_order):
        """Keep batch rows ``new_order`` of every cache (repeats duplicate a hypothesis)."""
        for i, layer in enumerate(self.layers):
            cache = self.get_incremental_state(incremental_state, f"layer{i}")
            if cache is not None:
                self.set_incremental_state(incremental_state, f"layer{i}", layer.attn.reorder_cache(cache, new_order))
        state = self.get_incremental_state(incremental_state, "tags")
        if state is not None:
            self.set_incremental_state(incremental_state, "tags", {"cls": state["cls"].index_select(0, new_order)})

    def output_layer(self, features, **kwargs):
        return F.linear(features, self.embed_tokens.weight)  # tied (section 3.3)

    def max_positions(self):
        return self.cfg.max_target_positions or self.cfg.tokens_per_sample


class _SiPELanguageModel(RefusesFairseqHub, ClassificationHeadsMixin, FairseqLanguageModel):
    """A decoder LM; with a registered classification head it also classifies sentences from the
    last non-pad position (``--task hexatag_sentence_prediction``, see :mod:`.classification`)."""

    def __init__(self, decoder):
        super().__init__(decoder)
        self._init_classification_heads()

    def forward(self, src_tokens, classification_head_name=None, **kwargs):
        if classification_head_name is not None:
            kwargs.pop("features_only", None)
            return self.classify(src_tokens, classification_head_name, **kwargs)
        return self.decoder(src_tokens, **kwargs)

    @classmethod
    def build_model(cls, args, task):
        placement = task_placement(task, default=None)  # None: a task without placement, nothing to check
        args = declared_defaults(args, SiPEDecoderConfig)
        if str(args.sipe_tag_head_input) == "word" and placement not in (None, "last_subword"):
            raise OptionError(f"--sipe-tag-head-input word reads the state just before each word: it needs "
                              f"--tag-head-placement last_subword (given: {placement})")
        decoder = SiPEDecoder(args, task.target_dictionary)
        decoder.tag_timing = task_tag_timing(task)
        log_parameters(cls.__name__, decoder)
        return cls(decoder)


@register_model("sipe_txl", dataclass=SiPEDecoderConfig)
class SiPETransformerXLModel(_SiPELanguageModel):
    """Transformer-XL decoder (relative attention, no memory) with SiPE injections."""


@dataclass
class SiPERopeConfig(SiPEDecoderConfig):
    position_encoding: ChoiceEnum(["relative", "rotary"]) = field(default="rotary", metadata={"help": "rotary for this model"})
    decoder_normalize_before: bool = field(default=True, metadata={"help": "pre-norm, as current rotary LLMs"})
    activation_fn: ChoiceEnum(["relu", "gelu"]) = field(default="gelu", metadata={"help": "FFN activation"})


@register_model("sipe_rope", dataclass=SiPERopeConfig)
class SiPERopeModel(_SiPELanguageModel):
    """Rotary decoder: ``input`` injection or ``position`` as per-frequency phase offsets."""


@register_model_architecture("sipe_txl", "sipe_txl_tiny")
def sipe_txl_tiny(args):
    """Tests and the demo: 2 layers, d 64, 4 heads."""
    preset(args, decoder_embed_dim=64, decoder_ffn_embed_dim=256, decoder_layers=2, decoder_attention_heads=4, dropout=0.1)


@register_model_architecture("sipe_txl", "sipe_txl_small")
def sipe_txl_small(args):
    """Walkthrough size for CPU: 4 layers, d 256, 4 heads."""
    preset(args, decoder_embed_dim=256, decoder_ffn_embed_dim=1024, decoder_layers=4, decoder_attention_heads=4)


@register_model_architecture("sipe_txl", "sipe_txl_16l")
def sipe_txl_16l(args):
    """Section 5's 16-layer decoder. The paper trains "with the hyperparameters of" Sartran et al.
    (2022) / Zhao et al. (2024); their released Transformer-XL configs (google-deepmind/
    transformer_grammars ``configs/config_txl.py``; zhaoyd1/Dep_Transformer_Grammars
    ``scripts/train_bllip_txl_dep.sh``) use d_model 1024, 16 layers, 8 heads (d_head 128),
    FFN 4096, dropout 0.1, tied embeddings, 256-token segments; optimizer settings in
    ``examples/txl_16l/README.md``."""
    preset(args, decoder_embed_dim=1024, decoder_ffn_embed_dim=4096, decoder_layers=16, decoder_attention_heads=8,
         dropout=0.1, attention_dropout=0.0)


@register_model_architecture("sipe_rope", "sipe_rope_tiny")
def sipe_rope_tiny(args):
    sipe_txl_tiny(args)


@register_model_architecture("sipe_rope", "sipe_rope_small")
def sipe_rope_small(args):
    sipe_txl_small(args)

"""GiLT decoder LM ``gilt_txl`` (arXiv 2605.15562; docs/gilt-reference.md sections 2-3): the ``sipe_txl``
Transformer-XL decoder (relative attention, post-LN, ReLU FFN, tied embeddings, no injection; as the
authors' TransformerGrammar, one u and one v for all layers and no sqrt(d) embedding scale, see
``--gilt-txl-biases``, ``--gilt-embed-scale`` and docs/gilt-reference.md) with
GiLT's graph-feature score term in layers K..L (``--gilt-first-layer``, :mod:`..modules.graph_term`)
and the arc scorer / arc-count head (:mod:`..modules.arc_scorer`).

Inputs (``net_input``, from task ``gilt_lm``, :mod:`..data.gilt_dataset`): the tokens, ``src_words``
(block word per position) and ``gilt_pairs`` (word-level features), from which each layer's term
gathers its (T, T) feature values; with ``gilt_word_pos``/``gilt_local``/``gilt_sent``/``gilt_prev`` the
arc scorer runs on every word (teacher forcing) and ``extra["arcs"]`` holds its logits.

Incremental decoding: pass ``gilt_features`` (B, k, S+k, 3), the feature values of the k new query
rows against every key, and an ``incremental_state`` (the KV cache of ``sipe_txl``); the arc scorer
for one word is :meth:`ArcScorer.score_word` (used by the structure engine, ``structure/arcs.py``, for scoring
and generation, through the interface of :class:`~.gilt_arcs.GiltArcsMixin`).
"""
import logging
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq.dataclass import ChoiceEnum
from fairseq.models import FairseqLanguageModel, register_model, register_model_architecture

from ..modules.arc_scorer import ArcScorer
from ..modules.graph_term import GraphFeatureTables, attach_graph_terms
from ._common import RefusesFairseqHub, declared_defaults, log_parameters, preset
from .gilt_arcs import GiltArcsMixin, first_gilt_layer, gilt_graph_config, pair_values  # noqa: F401  (pair_values: the feature gather, also imported from here)
from .sipe_lm import SiPEDecoder, SiPEDecoderConfig, sipe_txl_small, sipe_txl_tiny

logger = logging.getLogger(__name__)


@dataclass
class GiltConfig(SiPEDecoderConfig, gilt_graph_config("gilt_txl")):
    gilt_txl_biases: ChoiceEnum(["shared", "layer"]) = field(default="shared", metadata={
        "help": "Transformer-XL's content bias u (also in the graph term) and position bias v: one pair shared by all "
                "layers (the authors' TransformerGrammar) or one per layer (as sipe_txl; task gilt_lm sets it for "
                "checkpoints saved without --gilt-embed-scale)"})
    gilt_embed_scale: ChoiceEnum(["none", "sqrt_d"]) = field(default="none", metadata={
        "help": "token embedding into the first layer and into the arc scorer's o_w: emb(x) (the authors' "
                "TransformerGrammar, whose emb_scale is unused) or sqrt(d) emb(x) (as sipe_txl; task gilt_lm sets it "
                "for checkpoints saved without this option)"})


class GiltDecoder(GiltArcsMixin, SiPEDecoder):
    model_name = "gilt_txl"

    def __init__(self, cfg, dictionary):
        cfg = declared_defaults(cfg, GiltConfig)
        if str(cfg.sipe_injection) != "none":
            raise ValueError("gilt_txl takes no hexatag injection (--sipe-injection none)")
        super().__init__(cfg, dictionary)
        self.embed_dim = cfg.decoder_embed_dim
        if str(cfg.gilt_embed_scale) == "none":
            self.embed_scale = 1.0
        self.shared_biases = str(cfg.gilt_txl_biases) == "shared" \
            and self.layers[0].attn.relative is not None
        if self.shared_biases:  # one u and one v, the first layer's, in every layer
            first = self.layers[0].attn
            for layer in self.layers[1:]:
                layer.attn.u_bias = first.u_bias
                layer.attn.relative.v_bias = first.relative.v_bias
        self.graph_tables = GraphFeatureTables(init_std=float(cfg.gilt_table_init_std))
        attach_graph_terms([layer.attn for layer in self.layers], self.graph_tables, first_gilt_layer(cfg),
                           cfg.gilt_proj_init_std)
        self.arc_scorer = (ArcScorer(cfg.decoder_embed_dim, float(cfg.gilt_arc_table_init_std))
                           if cfg.gilt_arc_scorer else None)

    def upgrade_state_dict_named(self, state_dict, name):
        """A model with shared u and v refuses a checkpoint whose layers hold different ones (per-layer biases):
        loading it would keep the last layer's values in every layer."""
        if self.shared_biases:
            prefix = f"{name}." if name else ""
            for key in ("attn.u_bias", "attn.relative.v_bias"):
                values = [state_dict.get(f"{prefix}layers.{i}.{key}") for i in range(len(self.layers))]
                if all(v is not None for v in values) and any(not torch.equal(v, values[0]) for v in values[1:]):
                    raise ValueError(f"this checkpoint has one Transformer-XL {key.split('.')[-1][0]} per layer; the "
                                     "model shares one across layers (--gilt-txl-biases shared, the default): build it "
                                     "with --gilt-txl-biases layer")
        return super().upgrade_state_dict_named(state_dict, name)

    def forward(self, prev_output_tokens, src_lengths=None, src_words=None, gilt_pairs=None, gilt_prev=None,
                gilt_word_pos=None, gilt_local=None, gilt_sent=None, gilt_features=None, features_only=False,
                return_all_hiddens=False, need_attn=False, incremental_state=None, **unused):
        x, extra = self.extract_features(prev_output_tokens, src_words, gilt_pairs, gilt_prev, gilt_word_pos, gilt_local,
                                         gilt_sent, gilt_features, need_attn, incremental_state)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, tokens, src_words=None, gilt_pairs=None, gilt_prev=None, gilt_word_pos=None, gilt_local=None,
                         gilt_sent=None, gilt_features=None, need_attn=False, incremental_state=None, **unused):
        caches = None if incremental_state is None else self._layer_caches(incremental_state)
        start = 0 if caches is None else self._cached_length(caches, tokens)
        ctx = self.graph_context(tokens, src_words, gilt_pairs, gilt_features, slice(start, None))
        emb = self.embed_tokens(tokens[:, start:]) * self.embed_scale
        x = F.dropout(emb, self.cfg.dropout, self.training)
        inner, attn = [x], None
        for i, layer in enumerate(self.layers):
            x, attn = layer(x, None, causal=True, need_weights=need_attn, cache=None if caches is None else caches[i], pairs=ctx)
            inner.append(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
        extra = {"attn": [attn], "inner_states": inner, "embedded": emb}
        arcs = self.word_arcs(inner, emb, gilt_word_pos, gilt_local, gilt_sent, gilt_prev) if caches is None else None
        if arcs is not None:
            extra["arcs"] = arcs
        return x, extra

    # the structure engine's interface (GiltArcsMixin): the cache and the embedding of this decoder
    def cached_step(self, prefix: torch.Tensor, features: torch.Tensor, incremental_state: dict):
        """As :meth:`GiltArcsMixin.cached_step`, in one call (this decoder takes k >= 1 new tokens)."""
        return self(prefix, gilt_features=features, incremental_state=incremental_state)

    def arc_embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, d): o_w's third part for the last token of ``tokens`` (B, S), as the arc scorer reads it in
        training (the token embedding times ``embed_scale``: 1, or sqrt(d) with ``--gilt-embed-scale sqrt_d``;
        Transformer-XL has no absolute positions)."""
        return self.embed_tokens(tokens[:, -1]) * self.embed_scale


class GiltLanguageModel(RefusesFairseqHub, FairseqLanguageModel):
    @classmethod
    def build_model(cls, args, task):
        decoder = GiltDecoder(args, task.target_dictionary)
        log_parameters(cls.__name__, decoder)
        n_arc = sum(p.numel() for p in decoder.arc_scorer.parameters()) if decoder.arc_scorer is not None else 0
        logger.info(f"{cls.__name__}: {n_arc:,} parameters in the arc scorer")
        return cls(decoder)


register_model("gilt_txl", dataclass=GiltConfig)(GiltLanguageModel)


@register_model_architecture("gilt_txl", "gilt_txl_tiny")
def gilt_txl_tiny(args):
    """Tests and the demo: the sizes of ``sipe_txl_tiny`` (2 layers, d 64, 4 heads)."""
    sipe_txl_tiny(args)


@register_model_architecture("gilt_txl", "gilt_txl_small")
def gilt_txl_small(args):
    """Walkthrough size for CPU: the sizes of ``sipe_txl_small`` (4 layers, d 256, 4 heads)."""
    sipe_txl_small(args)


@register_model_architecture("gilt_txl", "gilt_txl_16l")
def gilt_txl_16l(args):
    """The paper's from-scratch model (src/scripts/train_graphLayer.sh): 16 layers, d 1024, 8 x 128 heads,
    FFN 4096, dropout 0 (docs/gilt-reference.md section 5)."""
    preset(args, decoder_embed_dim=1024, decoder_ffn_embed_dim=4096, decoder_layers=16, decoder_attention_heads=8,
         dropout=0.0, attention_dropout=0.0)

"""The arc interface of a GiLT decoder, written once for ``gilt_txl`` (:class:`~.gilt_lm.GiltDecoder`) and
``gilt_transformer_lm`` (:class:`~.gilt_transformer_lm.GiltTransformerDecoder`).

:class:`GiltArcsMixin` declares what such a decoder is (``structure = "arcs"``, read by
:mod:`sipe_fairseq.structure.family`) and holds what both do alike:

* the graph features of the new query rows (:meth:`~GiltArcsMixin.graph_context`, from ``gilt_features``
  or from ``src_words`` and the word-level ``gilt_pairs``);
* the arc scorer on every word in training (:meth:`~GiltArcsMixin.word_arcs`: o_w from the inner states,
  :func:`~sipe_fairseq.modules.arc_scorer.word_inputs`);
* the per-word interface of the structure engine (``structure/arcs.py``): :attr:`~GiltArcsMixin.arc_dim`,
  :meth:`~GiltArcsMixin.arc_states`, and the two methods each decoder writes for its own cache and
  embedding, :meth:`~GiltArcsMixin.cached_step` and :meth:`~GiltArcsMixin.arc_embedding`.

A decoder sets ``embed_dim`` (its width), ``layers``, ``arc_scorer`` (None without one) and the class
attributes below.

:func:`gilt_graph_config` declares, once, the five options both models share (the graph term's layers and
initialisation, the arc scorer), with each model's defaults (:data:`GRAPH_DEFAULTS`).
"""
from dataclasses import dataclass, field

import torch
from fairseq.dataclass import FairseqDataclass

from ..modules.arc_scorer import arc_layer_indices, word_inputs
from ..modules.graph_term import GraphContext


# each model's defaults of the options of gilt_graph_config (its own numbers: the from-scratch model's
# nn.Embedding tables and graph term in every layer; GiLT-GPT2's tables and the upper half of the layers)
GRAPH_DEFAULTS = {"gilt_txl": {"gilt_first_layer": 1, "gilt_table_init_std": 1.0},
                  "gilt_transformer_lm": {"gilt_first_layer": 0, "gilt_table_init_std": 0.02}}


def gilt_graph_config(model: str):
    """The dataclass of the graph options of GiLT model ``model`` (a base of its configuration), with
    ``model``'s defaults from :data:`GRAPH_DEFAULTS`."""
    own = GRAPH_DEFAULTS[model]

    @dataclass
    class GiltGraphConfig(FairseqDataclass):
        gilt_first_layer: int = field(default=own["gilt_first_layer"], metadata={
            "help": "the graph term (gilt_txl) or graph key offsets (gilt_transformer_lm) in attention layers K..L "
                    "(1-based); 0: the upper half, L/2+1..L (GiLT-GPT2); default: gilt_txl 1 (every layer), "
                    "gilt_transformer_lm 0"})
        gilt_proj_init_std: float = field(default=0.02, metadata={
            "help": "init std of the per-layer feature projections (gilt_txl, 0: the model starts as plain "
                    "Transformer-XL; gilt_transformer_lm: the std of --gilt-proj-init trunc_normal)"})
        gilt_arc_scorer: bool = field(default=True, metadata={
            "help": "build the arc scorer and count head (section 2); on by default: the flag --gilt-arc-scorer turns "
                    "it off (fairseq's rule for a default-True field)"})
        gilt_table_init_std: float = field(default=own["gilt_table_init_std"], metadata={
            "help": "init std of the three shared feature tables (151 x 256): gilt_txl 1, as the authors' nn.Embedding "
                    "tables; gilt_transformer_lm 0.02, as GiLT-GPT2's, which transformers' from_pretrained initialises "
                    "with GPT-2's _init_weights (docs/gilt-reference.md); 0.0625 = 256^-0.5 is the other init "
                    "docs/gilt-reference.md describes"})
        gilt_arc_table_init_std: float = field(default=1.0, metadata={
            "help": "init std of the arc scorer's own three feature tables: 1 as the authors' (BiaffineAttention, "
                    "nn.Embedding); 0.0625 = 256^-0.5 is the other init docs/gilt-reference.md describes"})

    GiltGraphConfig.__name__ = GiltGraphConfig.__qualname__ = f"GiltGraphConfig_{model}"
    return GiltGraphConfig


def first_gilt_layer(cfg) -> int:
    """``--gilt-first-layer`` resolved (1-based; 0: the upper half), checked against the number of layers."""
    n, k = int(cfg.decoder_layers), int(cfg.gilt_first_layer or 0)
    k = k or n // 2 + 1
    if not 1 <= k <= n:
        raise ValueError(f"--gilt-first-layer {k} outside 1..{n}")
    return k


def pair_values(src_words: torch.Tensor, pairs: torch.Tensor, rows: slice = slice(None)) -> torch.Tensor:
    """(B, Tq, Tk, 3) feature values of query positions ``rows`` against every key, from the block
    word of each position and the word-level ``pairs`` (B, W+1, W+1, 3)."""
    b = torch.arange(src_words.size(0), device=src_words.device)[:, None, None]
    return pairs[b, src_words[:, rows, None], src_words[:, None, :]]


class GiltArcsMixin:
    structure = "arcs"  # what the decoder reads: graph features; it predicts arcs (structure/family.py)
    takes_tags = False  # whether forward reads the hexatag streams src_terminals/src_nonterminals
    model_name = "gilt"  # the architecture, in error messages
    arc_lower_first = False  # o_w = [h^(L/2+1); h^(L-1); emb]; True: [h^(L-1); h^(L/2+1); emb] (GiLT-GPT2's order)
    time_first = False  # the layout of extra["inner_states"]: (B, T, C), or (T, B, C) as fairseq's decoders

    def graph_context(self, tokens: torch.Tensor, src_words=None, gilt_pairs=None, gilt_features=None,
                      rows: slice = slice(None)) -> GraphContext:
        """The graph features of the query positions ``rows`` of ``tokens`` (B, S) against every key:
        ``gilt_features`` (B, k, S, 3) as given, or gathered from ``src_words`` and ``gilt_pairs``."""
        if gilt_features is None:
            if src_words is None or gilt_pairs is None:
                raise ValueError(f"{self.model_name} needs its graph features: src_words and gilt_pairs (--task gilt_lm) "
                                 "or gilt_features")
            gilt_features = pair_values(src_words, gilt_pairs, rows)
        n_rows = tokens[:, rows].size(1)
        if gilt_features.shape[:3] != (tokens.size(0), n_rows, tokens.size(1)):
            raise ValueError(f"graph features {tuple(gilt_features.shape[:3])} for {n_rows} new of "
                             f"{tokens.size(1)} positions")
        return GraphContext.from_values(gilt_features)

    def word_arcs(self, inner, embedded: torch.Tensor, gilt_word_pos=None, gilt_local=None, gilt_sent=None,
                  gilt_prev=None):
        """The arc scorer's outputs on every word (teacher forcing; ``extra["arcs"]``) from the batch-first
        inner states ``inner`` (index 0 = embeddings) and the embedded input positions; None without an arc
        scorer or word positions."""
        if self.arc_scorer is None or gilt_word_pos is None:
            return None
        o = word_inputs(inner, embedded, gilt_word_pos, gilt_sent, lower_first=self.arc_lower_first)
        return self.arc_scorer(o, gilt_local, gilt_sent, gilt_prev)

    @property
    def arc_dim(self) -> int:
        """d of each of o_w's three parts."""
        return self.embed_dim

    def arc_states(self, extra) -> torch.Tensor:
        """(B, 2, d): o_w's first two parts for the next word, the last position's outputs of layers L/2+1
        and L-1 (``arc_lower_first``: L-1 first) from a forward's ``extra``."""
        up, low = arc_layer_indices(len(self.layers))
        first, second = (low, up) if self.arc_lower_first else (up, low)
        states = extra["inner_states"]
        last = (lambda h: h[-1]) if self.time_first else (lambda h: h[:, -1])  # noqa: E731
        return torch.stack([last(states[first]), last(states[second])], 1)

    def cached_step(self, prefix: torch.Tensor, features: torch.Tensor, incremental_state: dict):
        """(logits (B, k, V), extra) of the k new positions of ``prefix`` (B, S) through the KV cache, with
        their graph feature rows ``features`` (B, k, S, 3)."""
        raise NotImplementedError

    def arc_embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, d): o_w's third part for the last token of ``tokens`` (B, S), as the arc scorer reads it in
        training."""
        raise NotImplementedError

"""Model ``sipe_tagger``: a bidirectional encoder over subwords with two tag heads (a hexatagger).

Each position gets terminal (2) and non-terminal (5) logits; the task/criterion use only words'
first subwords. The encoder is one of:

* the built-in stack (default, from scratch): :class:`~sipe_fairseq.modules.SiPETransformerLayer`
  with ``causal=False`` and a key padding mask; rotary (default) or Transformer-XL relative positions;
* ``--encoder-arch ARCH``: a plugin encoder (``sipe_roberta*``, ``sipe_deberta*``,
  ``sipe_modernbert*``: :class:`~sipe_fairseq.models.sipe_encoder.SiPEEncoder`) or fairseq's RoBERTa
  sentence encoder (``roberta*``), from scratch with the architecture's preset sizes;
* ``--init-encoder CK.pt``: that body initialized from a ``hexatag_mlm`` (sipe_*) or fairseq
  ``masked_lm`` (``roberta``) checkpoint, its architecture settings taken from the checkpoint's
  config (see :mod:`sipe_fairseq.checkpoints.encoder_init`). Its LM head (and MLM tag heads,
  classification heads) are dropped; the tag heads are new.

A body sees ``<s> tokens </s>`` as in masked-LM pre-training: the model prepends ``<s>`` and drops
its output. The tagger is never given tags: a SiPE checkpoint with an injection other than ``none``
loads whole, and every position is fed as untagged (m_p = 0, as a masked position in pre-training).
Its tag tables, deprel table and score-side projections then contribute exactly zero (they stay in
the model, inert); an input fusion's own weights (CONCAT W, ALPHA alpha) still act on the embedding.
"""
import json
import logging
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from omegaconf import OmegaConf, open_dict

from ..checkpoints import encoder_init
from ..data.tag_dictionary import NOTAG_ID
from ..modules import SiPETransformerLayer
from ._common import build_tag_heads, declared_defaults, preset

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
    init_encoder: str = field(
        default="", metadata={"help": "initialize the encoder from this checkpoint: a hexatag_mlm one (sipe_roberta/"
                                      "sipe_deberta/sipe_modernbert) or a fairseq masked_lm roberta one; its "
                                      "architecture comes from the checkpoint (the options above are then unused)"})
    init_encoder_dict: str = field(
        default="", metadata={"help": "the dict.txt the --init-encoder checkpoint was trained with (default: "
                                      "DATA/dict.txt of its saved task config, else dict.txt next to it)"})
    encoder_arch: str = field(
        default="", metadata={"help": "from scratch, use this plugin or fairseq RoBERTa encoder architecture "
                                      "(e.g. sipe_deberta_small, roberta_base) with its preset sizes instead of "
                                      "the built-in stack"})
    encoder_dropout: Optional[float] = field(
        default=None, metadata={"help": "with --init-encoder/--encoder-arch: the encoder's dropout (default: the "
                                        "checkpoint's or architecture's)"})
    encoder_spec: str = field(
        default="", metadata={"help": "set by the task from --init-encoder/--encoder-arch (JSON: body kind, "
                                      "architecture, settings) so that the trained tagger rebuilds without them"})


@register_model("sipe_tagger", dataclass=SiPETaggerConfig)
class SiPETaggerModel(BaseFairseqModel):
    def __init__(self, cfg, dictionary, spec: Optional[dict] = None):
        super().__init__()
        self.cfg = cfg
        self.spec = spec
        self.padding_idx = dictionary.pad()
        self.bos = dictionary.bos()
        if spec is None:  # the built-in stack
            d = cfg.encoder_embed_dim
            self.embed_tokens = nn.Embedding(len(dictionary), d, padding_idx=self.padding_idx)
            nn.init.normal_(self.embed_tokens.weight, std=d ** -0.5)
            self.embed_scale = d ** 0.5
            self.layers = nn.ModuleList(
                SiPETransformerLayer(d, cfg.encoder_attention_heads, cfg.encoder_ffn_embed_dim, dropout=cfg.dropout,
                                     attention_dropout=cfg.attention_dropout, normalize_before=True,
                                     position=str(cfg.position_encoding))
                for _ in range(cfg.encoder_layers))
            self.final_norm = nn.LayerNorm(d)
        else:
            self.encoder = encoder_init.build_body(spec, dictionary)
            d = spec["args"]["encoder_embed_dim"]
        self.terminal_head, self.nonterminal_head = build_tag_heads(d)

    @classmethod
    def build_model(cls, cfg, task):
        spec = json.loads(cfg.encoder_spec) if cfg.encoder_spec else None
        if spec is None and (cfg.init_encoder or cfg.encoder_arch):
            raise ValueError("--init-encoder/--encoder-arch are resolved by the task: train sipe_tagger with "
                             "--task hexatag_tagging")
        if spec is not None:
            logger.info(f"encoder: {spec['arch']} ({spec['kind']}), "
                        + ", ".join(f"{k} {spec['args'][k]}" for k in ("encoder_layers", "encoder_embed_dim",
                                                                       "encoder_attention_heads") if k in spec["args"]))
        return cls(cfg, task.source_dictionary, spec)

    @classmethod
    def prepare_encoder(cls, cfg, task) -> Optional[encoder_init.EncoderInit]:
        """For a new tagger: resolve ``--init-encoder``/``--encoder-arch`` into ``cfg.encoder_spec``
        (saved with the checkpoint); returns what ``--init-encoder`` read, to load after building."""
        cfg = declared_defaults(cfg, SiPETaggerConfig)
        init_path, arch = cfg.init_encoder, cfg.encoder_arch
        if not init_path and not arch:
            return None
        if init_path and arch:
            raise ValueError(f"--encoder-arch {arch} and --init-encoder {init_path}: give one (with --init-encoder "
                             "the architecture is the checkpoint's)")
        dictionary = task.source_dictionary
        if init_path:
            init = encoder_init.read_encoder_init(init_path, dictionary, task.dictionary_path, cfg.init_encoder_dict)
        else:  # +1: the body also sees <s>
            init = encoder_init.EncoderInit("", encoder_init.spec_from_arch(arch, len(dictionary), task.max_positions() + 1))
        dropout = cfg.encoder_dropout
        if dropout is not None:
            init.spec["args"]["dropout"] = dropout
        _set_cfg(cfg, "encoder_spec", json.dumps(init.spec, sort_keys=True))
        return init

    def load_encoder(self, init: encoder_init.EncoderInit) -> None:
        """Copy the checkpoint's encoder weights into the body; log loaded / new / dropped / inert."""
        state = dict(init.state)
        # fairseq's key upgrades of older TransformerEncoder checkpoints; a sipe_deberta's old relative table
        self.encoder.upgrade_state_dict_named(state, "encoder")
        own = self.encoder.state_dict(prefix="encoder.")
        missing = [k for k in own if k not in state]
        wrong = [f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in own.items()
                 if k in state and state[k].shape != v.shape]
        if missing or wrong:
            raise ValueError(f"--init-encoder {init.path}: its weights do not fit the {self.spec['arch']} encoder "
                             f"built from its config: missing {encoder_init.fold_layer_names(missing)}; shape mismatch: "
                             f"{'; '.join(wrong) or '(none)'}")
        self.encoder.load_state_dict({k[len("encoder."):]: state[k] for k in own}, strict=True)
        dropped = init.dropped + [k for k in state if k not in own]
        new = [k for k in self.state_dict() if not k.startswith("encoder.")]
        inert = [k for k in own if k.startswith(("encoder.tags.", "encoder.deprel.")) or ".injections." in k]
        n = sum(v.numel() for v in own.values())
        logger.info(f"--init-encoder {init.path}: loaded {len(own)} tensors ({n:,} values) into the encoder: "
                    f"{encoder_init.fold_layer_names(own)}")
        logger.info(f"new (initialized here): {encoder_init.fold_layer_names(new)}")
        logger.info(f"dropped from the checkpoint: {encoder_init.fold_layer_names(dropped)}")
        if inert:
            logger.info(f"SiPE injection {self.spec['args'].get('sipe_injection')}: the tagger feeds every position as "
                        f"untagged (m_p = 0), so these loaded tensors contribute nothing: {encoder_init.fold_layer_names(inert)}")

    def forward(self, src_tokens, src_lengths=None, **kwargs):
        """(B, T) subword ids -> terminal logits (B, T, 2), non-terminal logits (B, T, 5)."""
        x = self._features(src_tokens) if self.spec is not None else self._builtin_features(src_tokens)
        return self.terminal_head(x), self.nonterminal_head(x)

    def _builtin_features(self, src_tokens):
        pad = src_tokens.eq(self.padding_idx)
        x = nn.functional.dropout(self.embed_tokens(src_tokens) * self.embed_scale, self.cfg.dropout, self.training)
        mask = pad if pad.any() else None
        for layer in self.layers:
            x, _ = layer(x, causal=False, key_padding_mask=mask)
        return self.final_norm(x)

    def _features(self, src_tokens):
        limit = self.max_positions()
        if limit is not None and src_tokens.size(1) > limit:
            raise ValueError(f"{src_tokens.size(1)} subwords: longer than the encoder's {limit} positions "
                             f"({self.spec['arch']}, <s> included)")
        tokens = torch.cat([src_tokens.new_full((src_tokens.size(0), 1), self.bos), src_tokens], dim=1)
        if self.spec["kind"] == "sipe":
            notag = torch.full_like(tokens, NOTAG_ID) if self.encoder.needs_tags else None
            deprels = notag if self.encoder.deprel is not None else None
            x, _ = self.encoder.extract_features(tokens, notag, notag, deprels)
        else:
            x = self.encoder(tokens)["encoder_out"][0].transpose(0, 1)
        return x[:, 1:]

    def max_positions(self):
        """Longest input (subwords incl. ``</s>``) a body with learned absolute positions takes."""
        if self.spec is None:
            return None
        args = self.spec["args"]
        absolute = (args.get("position_encoding") == "absolute" if self.spec["kind"] == "sipe"
                    else not args.get("no_token_positional_embeddings", False))
        return args["max_positions"] - 1 if absolute else None


def _set_cfg(cfg, key, value):
    if OmegaConf.is_config(cfg):
        with open_dict(cfg):
            cfg[key] = value
    else:
        setattr(cfg, key, value)


@register_model_architecture("sipe_tagger", "sipe_tagger_tiny")
def sipe_tagger_tiny(args):
    """Tests: 2 layers, d 64, 4 heads."""
    preset(args, encoder_embed_dim=64, encoder_ffn_embed_dim=256, encoder_layers=2, encoder_attention_heads=4)


@register_model_architecture("sipe_tagger", "sipe_tagger_small")
def sipe_tagger_small(args):
    """CPU size: 4 layers, d 256, 4 heads."""
    preset(args, encoder_embed_dim=256, encoder_ffn_embed_dim=1024, encoder_layers=4, encoder_attention_heads=4)

"""Sentence classification heads for SiPE LMs and encoders (fine-tuning on GLUE, as fairseq's RoBERTa).

A decoder classifies from its final token: the features of the last non-pad position (for
``s1 </s> s2 </s>`` the final ``</s>``, which has seen the whole input); an encoder (``pool =
"first"``) from its first token ``<s>``, as RoBERTa. The pooled features go through RoBERTa's head
(dropout, dense, tanh, dropout, linear). Heads live in ``model.classification_heads[name]`` and are
created by the task (``register_classification_head``); the LM body keeps its state-dict keys, so a
``hexatag_lm`` checkpoint loads into the classifier with only the new head missing:
:meth:`ClassificationHeadsMixin.upgrade_state_dict_named` fills exactly those keys from the fresh
initialization and logs them (everything else is loaded strictly). A masked-LM encoder keeps its
LM head (``encoder.lm_head.*``) as fairseq's RoBERTa does: it is unused by classification (no
gradient; multi-GPU runs need ``--find-unused-parameters`` as in fairseq's RoBERTa GLUE recipe), and
the fine-tuned checkpoint stays a complete masked LM. A body that does not match the checkpoint
still fails, with hints for the usual causes (:meth:`ClassificationHeadsMixin.load_state_dict`).
"""
import logging
import re
from typing import Optional

import torch
import torch.nn as nn
from fairseq import utils

from ..data.settings import setting
from ..hexatag.errors import CheckpointError

logger = logging.getLogger(__name__)


def last_positions(tokens: torch.Tensor, pad: int) -> torch.Tensor:
    """Index of the last non-pad position of each row (right or left padding)."""
    keep = tokens.ne(pad).long()
    return tokens.size(1) - 1 - keep.flip(1).argmax(1)


def pool_last(features: torch.Tensor, tokens: torch.Tensor, pad: int) -> torch.Tensor:
    """``features`` (B, T, C) at each row's last non-pad position -> (B, C)."""
    idx = last_positions(tokens, pad)
    return features[torch.arange(features.size(0), device=features.device), idx]


class SentenceClassificationHead(nn.Module):
    """RoBERTa's head on pooled features: dropout, dense, activation, dropout, out_proj."""

    def __init__(self, input_dim: int, inner_dim: int, num_classes: int, activation_fn: str = "tanh",
                 pooler_dropout: float = 0.0):
        super().__init__()
        self.dense = nn.Linear(input_dim, inner_dim)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.dropout = nn.Dropout(p=pooler_dropout)
        self.out_proj = nn.Linear(inner_dim, num_classes)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        x = self.dropout(pooled)
        x = self.activation_fn(self.dense(x))
        return self.out_proj(self.dropout(x))


_SIZE_MISMATCH = re.compile(r"size mismatch for ([\w.]+): copying a param with shape torch.Size\(\[([\d, ]*)\]\) "
                            r"from checkpoint, the shape in current model is torch.Size\(\[([\d, ]*)\]\)")


def size_mismatch_line(message: str) -> Optional[str]:
    """torch's ``size mismatch`` error (a paragraph) as one line with the hint for a model loaded with another
    data directory than its own; None for another error."""
    m = _SIZE_MISMATCH.search(message)
    if m is None:
        return None
    return (f"{m.group(1)} has shape [{m.group(2)}] in the checkpoint but [{m.group(3)}] in the model built for this "
            "data directory (its dict.txt has another size): use the data directory the checkpoint was trained on")


class ClassificationHeadsMixin:
    """For a fairseq language model (``self.decoder``) or encoder model (``self.encoder``) whose body
    returns ``(features, extra)`` with ``features_only=True``: ``model(src_tokens,
    classification_head_name=NAME, ...)`` returns ``(logits, extra)`` from the pooled position
    (``pool``: ``"last"`` non-pad or ``"first"``), what fairseq's ``sentence_prediction`` criterion
    calls. Call :meth:`_init_classification_heads` in ``__init__``; the model class declares ``body_name``."""

    pool = "last"
    body_name = "decoder"  # the body's attribute: "decoder" (a language model) or "encoder" (an encoder model)

    def _init_classification_heads(self):
        self.classification_heads = nn.ModuleDict()

    @property
    def body(self):
        return getattr(self, self.body_name)

    def classify(self, src_tokens, classification_head_name: str, **kwargs):
        kwargs.pop("features_only", None)
        x, extra = self.body(src_tokens, features_only=True, **kwargs)
        pooled = x[:, 0] if self.pool == "first" else pool_last(x, src_tokens, self.body.padding_idx)
        return self.classification_heads[classification_head_name](pooled), extra

    def register_classification_head(self, name, num_classes=None, inner_dim=None, **kwargs):
        """Add (or replace, with a warning if its shape changes) the head ``name``."""
        d = self.body.embed_tokens.embedding_dim
        if name in self.classification_heads:
            old = self.classification_heads[name]
            if old.out_proj.out_features != num_classes or old.dense.out_features != (inner_dim or d):
                logger.warning(f're-registering head "{name}" with num_classes {num_classes} '
                               f"(prev: {old.out_proj.out_features}) and inner_dim {inner_dim or d} "
                               f"(prev: {old.dense.out_features})")
        cfg = getattr(self, "cfg", None) or self.body.cfg
        self.classification_heads[name] = SentenceClassificationHead(
            d, inner_dim or d, num_classes, activation_fn=setting(cfg, "pooler_activation_fn", "tanh"),
            pooler_dropout=setting(cfg, "pooler_dropout", 0.0))  # a body of another kind may lack them

    def upgrade_state_dict_named(self, state_dict, name):
        """Reconcile a checkpoint's heads with this model's (RoBERTa's approach): heads of the
        checkpoint that this model lacks (or with another shape) are dropped; this model's heads
        missing from the checkpoint (an LM checkpoint) keep their fresh initialization; the LM's
        tag-head weights are dropped when this model has no tag heads (``--sipe-tag-heads off``).
        Each case is logged with the keys concerned."""
        super().upgrade_state_dict_named(state_dict, name)
        prefix = name + "." if name else ""
        heads = getattr(self, "classification_heads", {})
        dropped = []
        for k in list(state_dict):
            if not k.startswith(prefix + "classification_heads."):
                continue
            head, _, param = k[len(prefix + "classification_heads."):].partition(".")
            own = heads[head].state_dict().get(param) if head in heads else None
            if own is None or own.shape != state_dict[k].shape:
                dropped.append(k)
                del state_dict[k]
        if dropped:
            logger.warning(f"dropped checkpoint head weights this model does not have (or of another shape): {dropped}")
        body = self.body_name
        for kind in ("terminal_head", "nonterminal_head"):
            keys = [k for k in state_dict if k.startswith(f"{prefix}{body}.{kind}.")]
            if keys and getattr(self.body, kind, None) is None:
                logger.info(f"dropped the LM's {kind} weights (this model has no tag heads): {keys}")
                for k in keys:
                    del state_dict[k]
        fresh = []
        for head, module in heads.items():
            for param, value in module.state_dict().items():
                k = f"{prefix}classification_heads.{head}.{param}"
                if k not in state_dict:
                    state_dict[k] = value
                    fresh.append(k)
        if fresh:
            logger.info(f"not in the checkpoint, initialized fresh (the new classification head): {fresh}")

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's strict load; a mismatch error gets hints on its usual causes appended (a classifier), or is
        one line (:class:`CheckpointError`: a model loaded as it was trained, e.g. an LM on another dictionary)."""
        try:
            return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        except CheckpointError:
            raise
        except RuntimeError as e:
            line = size_mismatch_line(str(e))
            if line and not len(self.classification_heads):
                raise CheckpointError(line) from None
            raise RuntimeError(f"{e}\n{self._mismatch_hints(state_dict)}") from e

    def _mismatch_hints(self, state_dict) -> str:
        """Hints for a checkpoint whose body does not fit this model (``state_dict`` as upgraded)."""
        body, hints = self.body_name, []
        ck_emb, own_emb = state_dict.get(f"{body}.embed_tokens.weight"), self.body.embed_tokens.weight
        if ck_emb is not None and ck_emb.size(0) != own_emb.size(0):
            if ck_emb.size(0) == own_emb.size(0) + 1:
                hints.append("the checkpoint's dictionary has one more symbol (a masked LM's <mask>): pass --add-mask-symbol")
            elif ck_emb.size(0) + 1 == own_emb.size(0):
                hints.append("this dictionary has one more symbol than the checkpoint's: drop --add-mask-symbol")
            else:
                hints.append(f"the checkpoint has {ck_emb.size(0)} token types, this dictionary {own_emb.size(0)}: "
                             "preprocess with --pretrain-data of the checkpoint's own data directory")
        ck_pos = state_dict.get(f"{body}.embed_positions.weight")
        own_pos = getattr(getattr(self.body, "embed_positions", None), "weight", None)
        if ck_pos is not None and own_pos is not None and ck_pos.shape != own_pos.shape:
            n = ck_pos.size(0) - self.body.padding_idx - 1  # fairseq's learned positions: max_positions + pad + 1 rows
            hints.append(f"the checkpoint's learned positions cover {n} tokens: pass --max-positions {n} "
                         "(its pre-training --tokens-per-sample) and --shorten-method truncate")
        hints.append("build the body with the checkpoint's settings (--arch, --sipe-injection, ...): "
                     "`sipe-eval glue --model-flags --path CHECKPOINT` prints them")
        return "hints: " + "; ".join(hints)

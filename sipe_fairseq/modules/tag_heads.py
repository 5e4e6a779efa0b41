"""Tag heads: the terminal (2-way) and non-terminal (5-way) classifiers on top of the last layer
(paper Figure 2: L = L_LM + L_T + L_NT; for decoders the heads at a first subword predict the tags
of the next tagged position, appendix A.1), and the one place that turns their logits into
log-probabilities of tag-stream targets.

Targets are tag-dictionary ids (:mod:`sipe_fairseq.data.tag_dictionary`): class ``c`` of a head is
id ``FIRST_TAG_ID + c``; any other id (specials, ``<notag>``, padding) is an untagged position that
no head scores.
"""
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..data.tag_dictionary import FIRST_TAG_ID, TAG_HEADS

HEAD_SIZES = dict(TAG_HEADS)  # kind -> number of classes


class WordAwareInput(nn.Module):
    """The input of word-aware tag heads (``--sipe-tag-head-input word``): the heads that choose word
    w's pair read the prefix state just before word w *and* the embedding of w's first subword (GiLT's
    o_w), through one layer: GELU(W [h; e] + b), (..., d). The state does not depend on word w's tags,
    so training stays one forward pass; at inference the choice is made once the subword is seen."""

    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(2 * dim, dim)

    def forward(self, state: torch.Tensor, next_embedding: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(torch.cat([state, next_embedding], -1)))


def tag_head(kind: str, dim: int) -> nn.Linear:
    """The ``kind`` ("terminal"/"nonterminal") head: ``nn.Linear(dim, 2 or 5)``."""
    return nn.Linear(dim, HEAD_SIZES[kind])


class TagLogProbs(NamedTuple):
    """Per position of a target tensor (same shape): ``logprob`` = log p(target class) in nats
    (0 where untagged), ``tagged`` = the positions a head scores, ``correct`` = tagged and the
    argmax class is the target."""
    logprob: torch.Tensor
    tagged: torch.Tensor
    correct: torch.Tensor

    def nll(self) -> torch.Tensor:
        """Summed negative log-likelihood over the tagged positions."""
        return -self.logprob.sum()


def tag_log_probs(logits: torch.Tensor, target_ids: torch.Tensor, n_classes: Optional[int] = None) -> TagLogProbs:
    """``logits`` (..., n_classes) of one tag head, ``target_ids`` (...) tag-dictionary ids.
    Computed in float32 with a log-softmax over the head's classes."""
    n_classes = logits.size(-1) if n_classes is None else n_classes
    cls = target_ids - FIRST_TAG_ID
    tagged = (cls >= 0) & (cls < n_classes)
    safe = cls.clamp(0, n_classes - 1)
    lprobs = F.log_softmax(logits.float(), dim=-1)
    lp = lprobs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    lp = torch.where(tagged, lp, torch.zeros_like(lp))
    correct = tagged & (lprobs.argmax(-1) == safe)
    return TagLogProbs(lp, tagged, correct)

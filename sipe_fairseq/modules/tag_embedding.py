"""Hexatag embeddings (paper Eq. 1): e_p = m_p * (E^T[tau_p] + E^N[nu_p]).

Tag streams carry fairseq dictionary ids; ids below ``first_tag_id`` (specials and ``<notag>``)
mean "no tag" (m_p = 0). Because a position takes one of only |T| x |N| = 10 tag pairs or none,
every tag-dependent quantity is computed once per *class* (11 rows) and gathered per position:
``class_table()`` returns the 11 summed embeddings, row ``NO_TAG_CLASS`` being zero.
The id layout (``FIRST_TAG_ID``, the 2 and 5 classes) is :mod:`sipe_fairseq.data.tag_dictionary`'s.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..data.tag_dictionary import FIRST_TAG_ID, N_NONTERMINALS, N_TERMINALS

NO_TAG_CLASS = N_TERMINALS * N_NONTERMINALS  # 10


def tag_pair_classes(terminals: torch.Tensor, nonterminals: torch.Tensor, first_tag_id: int = FIRST_TAG_ID):
    """Map dictionary ids to class ids ``t * 5 + n`` in 0..9, or ``NO_TAG_CLASS`` where untagged."""
    t = terminals - first_tag_id
    n = nonterminals - first_tag_id
    tagged = (t >= 0) & (t < N_TERMINALS) & (n >= 0) & (n < N_NONTERMINALS)
    cls = t.clamp(0, N_TERMINALS - 1) * N_NONTERMINALS + n.clamp(0, N_NONTERMINALS - 1)
    return torch.where(tagged, cls, torch.full_like(cls, NO_TAG_CLASS))


class HexatagEmbedding(nn.Module):
    """The two tag tables E^T (2 x d) and E^N (5 x d): 7d parameters (paper appendix B)."""

    def __init__(self, dim: int, init: str = "normal"):
        super().__init__()
        self.dim = dim
        self.terminal = nn.Parameter(torch.empty(N_TERMINALS, dim))
        self.nonterminal = nn.Parameter(torch.empty(N_NONTERMINALS, dim))
        if init == "normal":  # decoders: like token embeddings
            nn.init.normal_(self.terminal, std=dim ** -0.5)
            nn.init.normal_(self.nonterminal, std=dim ** -0.5)
        elif init == "uniform":  # encoders (appendix A.5)
            bound = 1.0 / math.sqrt(dim)
            nn.init.uniform_(self.terminal, -bound, bound)
            nn.init.uniform_(self.nonterminal, -bound, bound)
        else:
            raise ValueError(f"unknown tag embedding init {init!r}")

    def class_table(self) -> torch.Tensor:
        """(11, d): row ``t * 5 + n`` is E^T[t] + E^N[n]; the last row (no tag) is zero."""
        pairs = (self.terminal[:, None, :] + self.nonterminal[None, :, :]).reshape(-1, self.dim)
        return torch.cat([pairs, pairs.new_zeros(1, self.dim)], dim=0)

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        """Per-position embedding (B, T, d) from class ids (B, T); zero where untagged."""
        return F.embedding(cls, self.class_table())

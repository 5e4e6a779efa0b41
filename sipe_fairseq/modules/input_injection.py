"""Input-side fusion of the syntactic priors with the embedding (paper Eq. 2, 4, 11; appendix E).

``x`` is the model's input embedding before its layer norm (token + absolute position for RoBERTa,
token only for DeBERTa-v3 and ModernBERT). The priors are per-position embeddings, zero where
m_p = 0: ``t`` = E^T[tau_p], ``n`` = E^N[nu_p], ``dr`` = E^D[deprel_p]. A strategy (Table 12)
names which priors it uses and how it fuses them:

========================  =====================================  =====================
strategy                  x'                                      priors
========================  =====================================  =====================
ADD_T_NT (default)        x + t + n                               t, n
CONCAT_T_NT               W [x; t; n]                             t, n
ADD_T_NT_RESIDUAL         x, and t + n on layer 1's attention     t, n
                          skip branch: LN(x + t + n + Attn(x))
ADD_T_NT_ALPHA            alpha x + (1 - alpha)(t + n)            t, n
ADD_T_NT_DR               x + t + n + dr                          t, n, dr
CONCAT_POS_NT_T_DR        W [x; n; t; dr]                         n, t, dr
ADD_DNT                   x + dr + n                              dr, n
ADD_DNT_ALPHA             alpha x + (1 - alpha)(dr + n)           dr, n
CONCAT_POS_DNT            W [x; dr; n]                            dr, n
========================  =====================================  =====================

W is a learned (k+1) D -> D projection, initialized as [I 0 .. 0] (the prior blocks exactly zero), so
x' = x at initialization and training starts from the un-fused embedding; the prior blocks, and
through them the tag tables, learn from the first update on (d loss / d W_prior = g p^T != 0). The
paper (Table 9, Table 12) only says "a learned linear down-projection" and names no initialization;
starting as the un-fused model is our choice, in line with its identity-at-initialization variants
(appendix A.5, A.6). alpha is one learned scalar (its initial value is an option: Table 10 uses
0.1, 0.5, 0.9).
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..data.tag_dictionary import N_NONTERMINALS
from .tag_embedding import NO_TAG_CLASS

STRATEGIES: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "ADD_T_NT": ("add", ("t", "n")),
    "CONCAT_T_NT": ("concat", ("t", "n")),
    "ADD_T_NT_RESIDUAL": ("residual", ("t", "n")),
    "ADD_T_NT_ALPHA": ("alpha", ("t", "n")),
    "ADD_T_NT_DR": ("add", ("t", "n", "dr")),
    "CONCAT_POS_NT_T_DR": ("concat", ("n", "t", "dr")),
    "ADD_DNT": ("add", ("dr", "n")),
    "ADD_DNT_ALPHA": ("alpha", ("dr", "n")),
    "CONCAT_POS_DNT": ("concat", ("dr", "n")),
}


def uses_deprel(strategy: str) -> bool:
    return "dr" in STRATEGIES[strategy][1]


class InputFusion(nn.Module):
    """Fuses per-position prior embeddings into the input embedding by one Table 12 strategy.

    ``forward(x, priors)`` returns ``(x', skip_extra)``: ``skip_extra`` is ``None`` except for the
    residual strategy, whose prior sum goes to the first layer's attention skip branch.
    """

    def __init__(self, strategy: str, dim: int, alpha_init: float = 0.5):
        super().__init__()
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown input strategy {strategy!r}; choose from {sorted(STRATEGIES)}")
        self.strategy = strategy
        self.mode, self.components = STRATEGIES[strategy]
        self.proj = self.alpha = None
        if self.mode == "concat":
            k = len(self.components)
            self.proj = nn.Linear((k + 1) * dim, dim, bias=False)
            with torch.no_grad():  # W = [I 0 .. 0]: x' = x at initialization
                self.proj.weight.zero_()
                self.proj.weight[:, :dim].copy_(torch.eye(dim))
        elif self.mode == "alpha":
            if not 0.0 <= alpha_init <= 1.0:
                raise ValueError(f"alpha init must be in [0, 1], got {alpha_init}")
            self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))

    def forward(self, x: torch.Tensor, priors: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        missing = [c for c in self.components if c not in priors]
        if missing:
            raise ValueError(f"input strategy {self.strategy} needs the priors {missing} (deprel: preprocess with "
                             "--deprel and train with --deprel-stream)")
        parts = [priors[c].to(x.dtype) for c in self.components]
        if self.mode == "concat":
            return self.proj(torch.cat([x] + parts, dim=-1)), None
        prior = sum(parts)
        if self.mode == "add":
            return x + prior, None  # Eq. 2 / 4 / 11
        if self.mode == "alpha":
            return self.alpha * x + (1 - self.alpha) * prior, None
        return x, prior  # residual


def prior_embeddings(tags, cls: torch.Tensor, deprel_table: Optional[nn.Embedding], deprel_cls: Optional[torch.Tensor],
                     components) -> Dict[str, torch.Tensor]:
    """The per-position priors a strategy uses, zero where m_p = 0 (``cls`` = NO_TAG_CLASS)."""

    out = {}
    tagged = (cls != NO_TAG_CLASS).unsqueeze(-1)
    if "t" in components:
        out["t"] = F.embedding(cls.div(N_NONTERMINALS, rounding_mode="floor").clamp(max=1), tags.terminal) * tagged
    if "n" in components:
        out["n"] = F.embedding(cls.remainder(N_NONTERMINALS), tags.nonterminal) * tagged
    if "dr" in components and deprel_cls is not None:
        out["dr"] = deprel_table(deprel_cls)
    return out

"""Criterion ``gilt_post``: ``gilt_lm`` with GiLT-GPT2's stage-2 weights as defaults (docs/gilt-reference.md
section 6: "loss 5/7 LM + 2/7 arc losses"): L = 5/7 L_LM + 2/7 (arc BCE + count CE), every term summed
over the batch and divided by its tokens as in ``gilt_lm`` (the paper's normalization of each term is
not known). Stage 1 (LM only) is ``--criterion gilt_lm --lm-only``.
"""
from dataclasses import dataclass, field

from fairseq.criterions import register_criterion

from .gilt_lm import GiltLMCriterion, GiltLMCriterionConfig

LM_WEIGHT, ARC_WEIGHT = 5 / 7, 2 / 7


@dataclass
class GiltPostCriterionConfig(GiltLMCriterionConfig):
    lm_weight: float = field(default=LM_WEIGHT, metadata={"help": "weight of the summed LM loss (GiLT-GPT2: 5/7)"})
    arc_weight: float = field(default=ARC_WEIGHT, metadata={"help": "weight of the summed arc BCE (GiLT-GPT2: 2/7)"})
    count_weight: float = field(default=ARC_WEIGHT, metadata={"help": "weight of the summed arc-count CE (GiLT-GPT2: 2/7)"})


@register_criterion("gilt_post", dataclass=GiltPostCriterionConfig)
class GiltPostCriterion(GiltLMCriterion):
    def __init__(self, task, arc_weight=ARC_WEIGHT, count_weight=ARC_WEIGHT, lm_weight=LM_WEIGHT, lm_only=False):
        super().__init__(task, arc_weight, count_weight, lm_weight, lm_only)

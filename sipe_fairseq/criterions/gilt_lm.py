"""Criterion ``gilt_lm``: L = lambda_LM L_LM + lambda_arc BCE + lambda_count CE (docs/gilt-reference.md section 2:
the released code weights both auxiliary terms 0.4 against the summed LM loss, lambda_LM = 1; the
post-training weights 5/7, 2/7, 2/7 of section 6 are the defaults of criterion ``gilt_post``).

Logged (base 2 where a loss): ``nll_loss``/``ppl`` = the LM term alone, the gold-graph conditional
perplexity p(x | G_gold); ``arc_loss`` per candidate pair, ``count_loss`` per word, ``count_acc``,
arc precision/recall/F1 of the scorer's own decisions (logit > 0) against the gold arcs; and
``joint_loss``/``joint_ppl`` = (LM + arc BCE) per token: the gold arcs paid for under the scorer's
product-Bernoulli distribution over arc sets: a bound on -log p(x) for a model that draws its graph
from those Bernoullis, which is the training objective, but not for the count-then-top-c model that
``--tags self``/``beam:K`` score (there a gold graph that is no count's top-c has probability 0); the
count head is not part of that distribution and is not added.
"""
import math
from dataclasses import dataclass, field

import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from ..data.gilt.arcs import arc_f1
from ..modules.arc_scorer import arc_losses


@dataclass
class GiltLMCriterionConfig(FairseqDataclass):
    arc_weight: float = field(default=0.4, metadata={"help": "weight of the summed arc BCE"})
    count_weight: float = field(default=0.4, metadata={"help": "weight of the summed arc-count CE"})
    lm_weight: float = field(default=1.0, metadata={"help": "weight of the summed LM loss"})
    lm_only: bool = field(default=False, metadata={"help": "do not run the arc scorer: the loss is the weighted LM "
                                                          "term alone (GiLT-GPT2 post-training stage 1)"})


@register_criterion("gilt_lm", dataclass=GiltLMCriterionConfig)
class GiltLMCriterion(FairseqCriterion):
    def __init__(self, task, arc_weight=0.4, count_weight=0.4, lm_weight=1.0, lm_only=False):
        super().__init__(task)
        self.arc_weight, self.count_weight = arc_weight, count_weight
        self.lm_weight, self.lm_only = lm_weight, lm_only

    def forward(self, model, sample, reduce=True):
        net_input = sample["net_input"]
        if self.lm_only:  # without word positions the model's arc scorer does not run
            net_input = {k: v for k, v in net_input.items() if k != "gilt_word_pos"}
        net_output = model(**net_input)
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = model.get_targets(sample, net_output)
        lm = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1), ignore_index=self.padding_idx, reduction="sum")
        ntokens = sample["ntokens"]
        log = {"lm_loss": lm.data, "ntokens": ntokens, "nsentences": sample["target"].size(0), "sample_size": ntokens}
        loss, joint = (lm if self.lm_weight == 1 else self.lm_weight * lm), lm.data
        arcs = net_output[1].get("arcs")
        if arcs is not None:
            bce, ce, n_pairs, n_words, correct, tp, n_pred, n_gold = arc_losses(arcs, sample["gilt_head"], sample["gilt_dep"])
            loss = loss + self.arc_weight * bce + self.count_weight * ce
            joint = joint + bce.data
            log.update(arc_loss=bce.data, count_loss=ce.data, arc_pairs=n_pairs, arc_words=n_words, count_correct=correct,
                       arc_tp=tp, arc_pred=n_pred, arc_gold=n_gold)
        log["loss"] = loss.data
        log["joint_loss"] = joint
        return loss, ntokens, log

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        total = lambda key: sum(log.get(key, 0) for log in logging_outputs)  # noqa: E731
        ntokens, ln2 = total("ntokens"), math.log(2)
        metrics.log_scalar("loss", total("loss") / ntokens / ln2, ntokens, round=3)
        metrics.log_scalar("nll_loss", total("lm_loss") / ntokens / ln2, ntokens, round=3)
        metrics.log_derived("ppl", lambda m: utils.get_perplexity(m["nll_loss"].avg))
        metrics.log_scalar("joint_loss", total("joint_loss") / ntokens / ln2, ntokens, round=3)
        metrics.log_derived("joint_ppl", lambda m: utils.get_perplexity(m["joint_loss"].avg))
        pairs, words = total("arc_pairs"), total("arc_words")
        if pairs:
            metrics.log_scalar("arc_loss", total("arc_loss") / pairs / ln2, pairs, round=4)
        if words:
            metrics.log_scalar("count_loss", total("count_loss") / words / ln2, words, round=3)
            metrics.log_scalar("count_acc", 100.0 * total("count_correct") / words, words, round=2)
        tp, n_pred, n_gold = total("arc_tp"), total("arc_pred"), total("arc_gold")
        if n_gold:
            metrics.log_scalar("arc_f1", 100.0 * arc_f1(tp, n_pred, n_gold)[2], n_gold, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

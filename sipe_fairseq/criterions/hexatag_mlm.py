"""Criterion ``hexatag_mlm``: L = L_MLM + lambda_T L_T + lambda_NT L_NT (appendix A.1).

The MLM term is fairseq's masked-LM cross-entropy over masked positions (logits computed only
there); the tag terms are cross-entropies of the tag heads at masked first subwords (the task's
``terminal_target``/``nonterminal_target``). Logged separately, base 2: ``nll_loss``/``ppl`` of
the MLM term per masked token, each tag loss per tagged target, tag accuracies.
"""
import math
from dataclasses import dataclass

import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import register_criterion

from .hexatag_lm import HexatagLMCriterion, HexatagLMCriterionConfig


@dataclass
class HexatagMLMCriterionConfig(HexatagLMCriterionConfig):
    """Same options as ``hexatag_lm``: --terminal-weight, --nonterminal-weight, --tag-loss-normalization."""


@register_criterion("hexatag_mlm", dataclass=HexatagMLMCriterionConfig)
class HexatagMLMCriterion(HexatagLMCriterion):
    """The tag weights and tag-loss bookkeeping of ``hexatag_lm``, on a masked-LM term."""

    supports_distillation = False  # --distill-teacher is refused in one line

    def forward(self, model, sample, reduce=True):
        masked = sample["target"].ne(self.padding_idx)
        sample_size = int(masked.sum())
        if sample_size == 0:  # keep the graph connected (as fairseq's masked_lm): score one position
            masked = masked.clone()
            masked.view(-1)[0] = True
        logits, extra = model(**sample["net_input"], masked_tokens=masked)
        targets = sample["target"][masked]
        mlm = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1), reduction="sum",
                              ignore_index=self.padding_idx)
        loss = mlm
        log = {"mlm_loss": mlm.data, "ntokens": sample["ntokens"], "nsentences": sample["nsentences"],
               "sample_size": sample_size, "masked_tokens": sample_size}
        loss, _ = self.add_tag_losses(loss, extra, sample, log, max(sample_size, 1))
        log["loss"] = loss.data
        return loss, max(sample_size, 1), log

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        total = lambda key: sum(log.get(key, 0) for log in logging_outputs)  # noqa: E731
        n = max(total("sample_size"), 1)
        ln2 = math.log(2)
        metrics.log_scalar("loss", total("loss") / n / ln2, n, round=3)
        metrics.log_scalar("nll_loss", total("mlm_loss") / n / ln2, n, round=3)
        metrics.log_derived("ppl", lambda m: utils.get_perplexity(m["nll_loss"].avg))
        HexatagLMCriterion.log_tag_metrics(total)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

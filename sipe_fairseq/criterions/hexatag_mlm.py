"""Criterion ``hexatag_mlm``: L = L_MLM + lambda_T L_T + lambda_NT L_NT (appendix A.1).

The MLM term is fairseq's masked-LM cross-entropy over masked positions (logits computed only
there); the tag terms are cross-entropies of the tag heads at masked first subwords (the task's
``terminal_target``/``nonterminal_target``). Logged separately, base 2: ``nll_loss``/``ppl`` of
the MLM term per masked token, each tag loss per tagged target, tag accuracies.
"""
import math
from dataclasses import dataclass, field

import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from .hexatag_lm import TAG_HEADS, tag_nll


@dataclass
class HexatagMLMCriterionConfig(FairseqDataclass):
    terminal_weight: float = field(default=1.0, metadata={"help": "lambda_T, weight of the terminal-tag loss"})
    nonterminal_weight: float = field(default=1.0, metadata={"help": "lambda_NT, weight of the non-terminal-tag loss"})


@register_criterion("hexatag_mlm", dataclass=HexatagMLMCriterionConfig)
class HexatagMLMCriterion(FairseqCriterion):
    def __init__(self, task, terminal_weight=1.0, nonterminal_weight=1.0):
        super().__init__(task)
        self.weights = {"terminal": terminal_weight, "nonterminal": nonterminal_weight}

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
        for kind, n in TAG_HEADS:
            tag_logits = extra.get(f"{kind}_logits")
            if tag_logits is None or f"{kind}_target" not in sample:
                continue
            nll, count, correct = tag_nll(tag_logits, sample[f"{kind}_target"], n)
            loss = loss + self.weights[kind] * nll
            log.update({f"{kind}_loss": nll.data, f"{kind}_count": count, f"{kind}_correct": correct})
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
        for kind, _ in TAG_HEADS:
            count = total(f"{kind}_count")
            if count:
                metrics.log_scalar(f"{kind}_loss", total(f"{kind}_loss") / count / ln2, count, round=3)
                metrics.log_scalar(f"{kind}_acc", 100.0 * total(f"{kind}_correct") / count, count, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

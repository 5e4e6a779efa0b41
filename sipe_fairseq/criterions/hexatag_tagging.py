"""Criterion ``hexatag_tagging``: terminal CE + non-terminal CE over words' first subwords.

Logged: ``loss`` (base 2, per tagged word), ``terminal_loss``/``nonterminal_loss`` and the
accuracies ``terminal_acc``/``nonterminal_acc``/``pair_acc`` (%, unconstrained argmax).
"""
import math

from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion

from ..modules.tag_heads import tag_log_probs


@register_criterion("hexatag_tagging")
class HexatagTaggingCriterion(FairseqCriterion):
    def forward(self, model, sample, reduce=True):
        term_logits, nt_logits = model(**sample["net_input"])
        out = {}
        loss = 0.0
        correct_all = None
        words = 0
        for kind, logits in (("terminal", term_logits), ("nonterminal", nt_logits)):
            scores = tag_log_probs(logits, sample[f"{kind}_target"])
            valid = scores.tagged
            nll = scores.nll()
            ok = scores.correct[valid]
            correct_all = ok if correct_all is None else correct_all & ok
            loss = loss + nll
            words = int(valid.sum())
            out[f"{kind}_loss"] = nll.data
            out[f"{kind}_correct"] = int(ok.sum())
        out.update(loss=loss.data, pair_correct=int(correct_all.sum()), nwords=words,
                   ntokens=sample["ntokens"], nsentences=sample["nsentences"], sample_size=words)
        return loss, words, out

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        s = lambda k: sum(log.get(k, 0) for log in logging_outputs)  # noqa: E731
        n = max(s("nwords"), 1)
        metrics.log_scalar("loss", s("loss") / n / math.log(2), n, round=3)
        for kind in ("terminal", "nonterminal"):
            metrics.log_scalar(f"{kind}_loss", s(f"{kind}_loss") / n / math.log(2), n, round=3)
            metrics.log_scalar(f"{kind}_acc", 100.0 * s(f"{kind}_correct") / n, n, round=2)
        metrics.log_scalar("pair_acc", 100.0 * s("pair_correct") / n, n, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

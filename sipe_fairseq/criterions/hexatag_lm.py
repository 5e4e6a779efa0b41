"""Criterion ``hexatag_lm``: L = L_LM + lambda_T L_T + lambda_NT L_NT.

Logged (base 2, summed across workers before dividing): ``nll_loss``/``ppl`` from the LM term
alone (p(x | tags)), ``terminal_loss``/``nonterminal_loss`` per tagged target, tag accuracies, and
``joint_loss``/``joint_ppl`` = (LM + tag NLL) per token, the bound on -log p(x) that compares with
a model that sees no tags.

``--tag-loss-normalization`` (appendix A.1): fairseq divides the summed loss by the sample size
(tokens for the LM, masked tokens for the MLM), so with ``token`` (the default, as trained so far)
a tag term weighs lambda * (#tagged / #tokens) against the per-token LM loss; with ``tagged`` each
tag head's summed NLL is rescaled by sample_size / #tagged in the batch, so the optimized loss is
L_LM per token + lambda * L_T per tagged position (the paper's L = L_LM + L_T + L_NT with every
term a mean over the positions it scores). The logged tag losses are per tagged target either way.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from ..data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID, TAG_HEADS
from ..modules.tag_heads import tag_log_probs

TAG_LOSS_NORMALIZATIONS = ("token", "tagged")


def tag_nll(logits, target_ids, n_classes):
    """Summed NLL, number of scored positions and number correct for one tag head."""
    scores = tag_log_probs(logits, target_ids, n_classes)
    return scores.nll(), int(scores.tagged.sum()), int(scores.correct.sum())


def drop_word_tags(net_input: dict, p: float) -> dict:
    """``net_input`` with the input tags of a share ``p`` of the tagged positions (words) set to <notag>
    in both streams (torch's generator: fairseq seeds it per update, so a resumed run draws the same)."""
    terms, nts = net_input["src_terminals"], net_input["src_nonterminals"]
    tagged = (terms >= FIRST_TAG_ID) | (nts >= FIRST_TAG_ID)
    drop = tagged & (torch.rand(terms.shape, device=terms.device) < p)
    return {**net_input, "src_terminals": terms.masked_fill(drop, NOTAG_ID), "src_nonterminals": nts.masked_fill(drop, NOTAG_ID)}


@dataclass
class HexatagLMCriterionConfig(FairseqDataclass):
    terminal_weight: float = field(default=1.0, metadata={"help": "lambda_T, weight of the terminal-tag loss"})
    nonterminal_weight: float = field(default=1.0, metadata={"help": "lambda_NT, weight of the non-terminal-tag loss"})
    tag_loss_normalization: ChoiceEnum(TAG_LOSS_NORMALIZATIONS) = field(default="token", metadata={
        "help": "divisor of each tag loss: 'token' = the LM's sample size (all tokens; a tag term then weighs "
                "lambda * #tagged/#tokens), 'tagged' = the head's own number of tagged targets (a mean per tagged position)"})
    tag_dropout: float = field(default=0.0, metadata={
        "help": "in training, the share of words whose input tags become <notag> (both streams; the heads' targets "
                "stay gold), drawn per word and update: the model learns to read untagged words as a plain LM "
                "(score with --tags untagged)"})


@register_criterion("hexatag_lm", dataclass=HexatagLMCriterionConfig)
class HexatagLMCriterion(FairseqCriterion):
    def __init__(self, task, terminal_weight=1.0, nonterminal_weight=1.0, tag_loss_normalization="token", tag_dropout=0.0):
        super().__init__(task)
        if not 0.0 <= float(tag_dropout) <= 1.0:
            raise ValueError(f"--tag-dropout must be in [0, 1], got {tag_dropout}")
        self.tag_dropout = float(tag_dropout)
        self.weights = {"terminal": terminal_weight, "nonterminal": nonterminal_weight}
        if str(tag_loss_normalization) not in TAG_LOSS_NORMALIZATIONS:
            raise ValueError(f"--tag-loss-normalization must be one of {TAG_LOSS_NORMALIZATIONS}, got {tag_loss_normalization!r}")
        self.tag_loss_normalization = str(tag_loss_normalization)

    def forward(self, model, sample, reduce=True):
        net_input = sample["net_input"]
        if self.tag_dropout > 0 and model.training and "src_terminals" in net_input:
            net_input = drop_word_tags(net_input, self.tag_dropout)
        net_output = model(**net_input)
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = model.get_targets(sample, net_output)
        lm = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1), ignore_index=self.padding_idx, reduction="sum")
        loss = lm
        ntokens = sample["ntokens"]
        log = {"lm_loss": lm.data, "ntokens": ntokens, "nsentences": sample["target"].size(0), "sample_size": ntokens}
        loss, tag_total = self.add_tag_losses(loss, net_output[1], sample, log, ntokens)
        log["loss"] = loss.data
        log["joint_loss"] = lm.data + tag_total
        return loss, ntokens, log

    def add_tag_losses(self, loss, extra, sample, log, sample_size):
        """loss + lambda_T L_T + lambda_NT L_NT from the tag heads' logits in ``extra`` against the
        sample's ``{kind}_target``; logs each head's loss, count and correct. Returns (loss, tag NLL).
        ``sample_size`` is the divisor fairseq applies to the returned loss; with the ``tagged``
        normalization each head's NLL is scaled by sample_size / count so that, after that division,
        it is a mean per tagged target."""
        tag_total = loss.new_zeros(())
        for kind, n in TAG_HEADS:
            logits = extra.get(f"{kind}_logits")
            if logits is None or f"{kind}_target" not in sample:
                continue
            nll, count, correct = tag_nll(logits, sample[f"{kind}_target"], n)
            scale = sample_size / count if self.tag_loss_normalization == "tagged" and count else 1.0
            loss = loss + self.weights[kind] * scale * nll
            tag_total = tag_total + nll.data
            log.update({f"{kind}_loss": nll.data, f"{kind}_count": count, f"{kind}_correct": correct})
        return loss, tag_total

    @staticmethod
    def log_tag_metrics(total) -> None:
        ln2 = math.log(2)
        for kind, _ in TAG_HEADS:
            count = total(f"{kind}_count")
            if count:
                metrics.log_scalar(f"{kind}_loss", total(f"{kind}_loss") / count / ln2, count, round=3)
                metrics.log_scalar(f"{kind}_acc", 100.0 * total(f"{kind}_correct") / count, count, round=2)

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        total = lambda key: sum(log.get(key, 0) for log in logging_outputs)  # noqa: E731
        ntokens = total("ntokens")
        ln2 = math.log(2)
        metrics.log_scalar("loss", total("loss") / ntokens / ln2, ntokens, round=3)
        metrics.log_scalar("nll_loss", total("lm_loss") / ntokens / ln2, ntokens, round=3)
        metrics.log_derived("ppl", lambda m: utils.get_perplexity(m["nll_loss"].avg))
        metrics.log_scalar("joint_loss", total("joint_loss") / ntokens / ln2, ntokens, round=3)
        metrics.log_derived("joint_ppl", lambda m: utils.get_perplexity(m["joint_loss"].avg))
        HexatagLMCriterion.log_tag_metrics(total)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

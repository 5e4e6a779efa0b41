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

from ..data.lm_dataset import task_placement
from ..data.settings import task_setting
from ..data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID, TAG_HEADS
from ..hexatag.errors import OptionError, UsageError
from ..hexatag.timing import TIMINGS
from ..modules.tag_heads import tag_log_probs
from ..structure.family import family_of
from .own_tags import sample_word_tags
from .tag_marginal import marginal_nll

TAG_LOSS_NORMALIZATIONS = ("token", "tagged")
TAG_SAMPLING_CHOICES = ("argmax", "sample")


def tag_nll(logits, target_ids, n_classes):
    """Summed NLL, number of scored positions and number correct for one tag head."""
    scores = tag_log_probs(logits, target_ids, n_classes)
    return scores.nll(), int(scores.tagged.sum()), int(scores.correct.sum())


def needs_last_subword(task, why: str):
    """Refuse (one UsageError line) a task whose tag heads do not sit at a word's last subword: ``why``
    says which option needs them there."""
    placement = task_placement(task, default=None)
    if placement != "last_subword":
        raise UsageError(f"{why}: it needs --task hexatag_lm with --tag-head-placement last_subword (given: {placement})")


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
    tag_sampling: float = field(default=0.0, metadata={
        "help": "scheduled sampling: in training, the share p of words fed the model's own tags (the heads' argmax "
                "after the gold prefix, constrained to units the prefix allows, from one no-grad forward with the "
                "gold tags) instead of the parse's; the heads' targets stay gold; --tag-dropout applies after it. "
                "Needs --tag-head-placement last_subword"})
    tag_sampling_warmup: int = field(default=0, metadata={
        "help": "updates over which the --tag-sampling share rises linearly from 0 to its value (0: from the start)"})
    tag_sampling_choice: ChoiceEnum(TAG_SAMPLING_CHOICES) = field(default="argmax", metadata={
        "help": "what --tag-sampling feeds: 'argmax' = the heads' best allowed unit; 'sample' = a unit drawn from "
                "the heads' distribution renormalized over the allowed units, so the LM is trained on the tag "
                "sequences a beam sums over (p(x | T) for T ~ the heads), not only on the greedy one"})
    tag_marginal: int = field(default=0, metadata={
        "help": "K >= 1: train the LM term on -log sum_T p(x, T) per sentence over K distinct tag sequences: the "
                "parse's, the heads' constrained argmax after the gold prefix and K - 2 draws from the heads (a bound "
                "on -log p(x) whose gradient weighs each sequence by its posterior share: the training matched to "
                "--tags mix:K). K = 1 is the joint -log p(x, parse's tags). A step costs about K plain ones. Needs "
                "--tag-head-placement last_subword; not with --tag-sampling, --tag-dropout or --distill-teacher. The "
                "tag losses on the parse's tags stay (set --terminal-weight 0 --nonterminal-weight 0 for latent tags). "
                "0: off"})
    distill_teacher: str = field(default="", metadata={
        "help": "a hexatag_lm checkpoint whose next-token distributions, read with the batch's gold tags (a parse of "
                "the whole sentence), become soft targets in training (knowledge distillation: --distill-weight of the "
                "LM term). Its dictionary and --tag-timing must be the student's. Validation scores the plain loss"})
    distill_weight: float = field(default=0.5, metadata={
        "help": "alpha of --distill-teacher: the LM term is (1 - alpha) NLL + alpha CE(teacher, student) per token"})


@register_criterion("hexatag_lm", dataclass=HexatagLMCriterionConfig)
class HexatagLMCriterion(FairseqCriterion):
    def __init__(self, task, terminal_weight=1.0, nonterminal_weight=1.0, tag_loss_normalization="token", tag_dropout=0.0,
                 tag_sampling=0.0, tag_sampling_warmup=0, tag_sampling_choice="argmax", distill_teacher="",
                 distill_weight=0.5, tag_marginal=0):
        super().__init__(task)
        if not 0.0 <= float(tag_dropout) <= 1.0:
            raise UsageError(f"--tag-dropout must be in [0, 1], got {tag_dropout}")
        self.tag_dropout = float(tag_dropout)
        self.tag_sampling, self.tag_sampling_warmup = self.check_tag_sampling(task, tag_sampling, tag_sampling_warmup)
        if str(tag_sampling_choice) not in TAG_SAMPLING_CHOICES:
            raise UsageError(f"--tag-sampling-choice must be one of {', '.join(TAG_SAMPLING_CHOICES)}, "
                              f"got {tag_sampling_choice!r}")
        self.tag_sampling_choice = str(tag_sampling_choice)
        self.tag_marginal = self.check_tag_marginal(task, tag_marginal, self.tag_sampling, self.tag_dropout, distill_teacher)
        self.timing = str(task_setting(task, "tag_timing", "paper"))
        if self.timing not in TIMINGS:  # a task without the option reads the paper's timing
            self.timing = "paper"
        self.num_updates = None  # set_num_updates; until then the trainer's count (current_update)
        self.weights = {"terminal": terminal_weight, "nonterminal": nonterminal_weight}
        if str(tag_loss_normalization) not in TAG_LOSS_NORMALIZATIONS:
            raise UsageError(f"--tag-loss-normalization must be one of {TAG_LOSS_NORMALIZATIONS}, got {tag_loss_normalization!r}")
        self.tag_loss_normalization = str(tag_loss_normalization)
        self.distill_weight = float(distill_weight)
        self._teacher = ()  # (model,): a tuple, so fairseq neither trains, saves nor wraps it as a submodule
        if not 0.0 <= self.distill_weight <= 1.0:
            raise UsageError(f"--distill-weight must be in [0, 1], got {distill_weight}")
        if distill_teacher:
            if not self.supports_distillation:
                raise UsageError(f"--distill-teacher: criterion {type(self).__name__} does not distill (use hexatag_lm)")
            self.set_teacher(self.load_teacher(task, str(distill_teacher)))

    supports_distillation = True

    @classmethod
    def build_criterion(cls, cfg, task):
        """fairseq's construction from the command line, after the check that only the command line allows (in
        Python a teacher may come later, :meth:`set_teacher`): a ``--distill-weight`` other than its default
        without ``--distill-teacher`` weighs no term, and is refused in one line (exit status 2)."""
        default = HexatagLMCriterionConfig.distill_weight
        weight = getattr(cfg, "distill_weight", default)
        if not getattr(cfg, "distill_teacher", "") and weight != default:
            raise UsageError(f"--distill-weight {weight} without --distill-teacher: the weight is the teacher's term's "
                             "(give --distill-teacher CKPT, or leave --distill-weight out)")
        return super().build_criterion(cfg, task)

    def load_teacher(self, task, path: str):
        """The teacher model of ``path`` scored on the student task's data; one OptionError line when its
        dictionary, or (for a teacher that reads tags) its tag timing, differs from the student's."""
        from ..checkpoints.load import load_lm  # lazy (heavy); same layer

        try:
            teacher, teacher_task = load_lm(path, str(task_setting(task, "data", "")))
        except ValueError as e:
            raise OptionError(f"--distill-teacher {path}: {e}") from None
        ours, theirs = task.target_dictionary, teacher_task.target_dictionary
        if ours != theirs:  # fairseq's Dictionary compares its symbol -> index maps
            raise OptionError(f"--distill-teacher {path}: its dictionary ({len(theirs)} symbols) is not the student's "
                              f"({len(ours)})")
        timing = str(task_setting(teacher_task, "tag_timing", "paper"))
        if family_of(teacher).reads_tags and timing != self.timing:  # a teacher without an injection ignores the tag streams
            raise OptionError(f"--distill-teacher {path}: trained with --tag-timing {timing}, the student reads "
                              f"{self.timing}: the teacher would be fed tags in the wrong layout")
        return teacher

    def set_teacher(self, teacher) -> None:
        """Use ``teacher`` (a decoder that takes the sample's ``net_input``) for distillation, frozen, in eval mode."""
        teacher.eval()
        for param in teacher.parameters():
            param.requires_grad_(False)
        self._teacher = (teacher,)

    @torch.no_grad()
    def teacher_log_probs(self, sample, like):
        """The teacher's next-token log-probs for the sample's gold-tagged input (float32, on ``like``'s device)."""
        teacher = self._teacher[0]
        if next(teacher.parameters()).device != like.device:
            teacher.to(like.device)
        out = teacher(**sample["net_input"])
        return teacher.get_normalized_probs(out, log_probs=True).float()

    @staticmethod
    def check_tag_sampling(task, share, warmup):
        """(share, warmup) of ``--tag-sampling``/``--tag-sampling-warmup``, or one OptionError line."""
        try:
            share, warmup_f = float(share), float(warmup)
        except (TypeError, ValueError):
            raise UsageError(f"--tag-sampling {share!r} / --tag-sampling-warmup {warmup!r}: expected numbers") from None
        if not 0.0 <= share <= 1.0:
            raise UsageError(f"--tag-sampling must be a share in [0, 1], got {share}")
        if warmup_f < 0 or warmup_f != int(warmup_f):
            raise UsageError(f"--tag-sampling-warmup must be a whole number of updates >= 0, got {warmup}")
        if share > 0:
            needs_last_subword(task, "--tag-sampling feeds the heads' choice at position q to the input q+1")
        return share, int(warmup_f)

    @staticmethod
    def check_tag_marginal(task, k, sampling, dropout, teacher) -> int:
        """K of ``--tag-marginal``, or one OptionError line."""
        try:
            k_f = float(k)
        except (TypeError, ValueError):
            raise UsageError(f"--tag-marginal {k!r}: expected a whole number of tag sequences") from None
        if k_f < 0 or k_f != int(k_f):
            raise UsageError(f"--tag-marginal must be a whole number K >= 0 of tag sequences, got {k}")
        k = int(k_f)
        if k == 0:
            return 0
        others = [name for name, on in (("--tag-sampling", sampling > 0), ("--tag-dropout", dropout > 0),
                                        ("--distill-teacher", bool(teacher))) if on]
        if others:
            raise UsageError(f"--tag-marginal chooses the fed tags itself: not with {', '.join(others)}")
        needs_last_subword(task, "--tag-marginal scores each word's tags at the input before it")
        return k

    def set_num_updates(self, num_updates):
        self.num_updates = int(num_updates)

    def current_update(self) -> int:
        """The update being trained: what :meth:`set_num_updates` set, else the trainer's count (fairseq
        0.12's trainer does not call ``set_num_updates`` on criterions; it logs ``num_updates`` to the
        always-active ``default`` metrics aggregator at every update and when it loads a checkpoint)."""
        if self.num_updates is not None:
            return self.num_updates
        meter = metrics.get_meter("default", "num_updates")
        return int(meter.val) if meter is not None and getattr(meter, "val", None) is not None else 0

    def sampling_share(self, num_updates=None) -> float:
        """p at ``num_updates`` (default: :meth:`current_update`): P * min(1, n / warmup)."""
        n = self.current_update() if num_updates is None else num_updates
        if self.tag_sampling_warmup <= 0:
            return self.tag_sampling
        return self.tag_sampling * min(1.0, n / self.tag_sampling_warmup)

    def forward(self, model, sample, reduce=True):
        net_input = sample["net_input"]
        sampled = None
        if self.tag_sampling > 0 and model.training and "src_terminals" in net_input:
            p = self.sampling_share()
            if p > 0:
                starts = (self.task.target_dictionary.eos(), self.task.target_dictionary.bos())
                net_input, sampled = sample_word_tags(model, sample, p, self.timing, starts, self.tag_sampling_choice)
                sampled["p"] = p
        if self.tag_dropout > 0 and model.training and "src_terminals" in net_input:
            net_input = drop_word_tags(net_input, self.tag_dropout)
        ntokens = sample["ntokens"]
        log = {"ntokens": ntokens, "nsentences": sample["target"].size(0), "sample_size": ntokens}
        if self.tag_marginal and model.training and "src_terminals" in net_input:
            starts = (self.task.target_dictionary.eos(), self.task.target_dictionary.bos())
            loss, lm, net_output, stats = marginal_nll(model, sample, self.timing, starts, self.tag_marginal,
                                                       self.padding_idx)
            log.update({"marginal_loss": loss.data, "tm_sentences": stats["sentences"], "tm_distinct": stats["distinct"],
                        "tm_gold_share": stats["gold_share"]})
        else:
            net_output = model(**net_input)
            lprobs = model.get_normalized_probs(net_output, log_probs=True)
            target = model.get_targets(sample, net_output)
            lm = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1), ignore_index=self.padding_idx,
                            reduction="sum")
            loss = lm
        log["lm_loss"] = lm.data
        if self._teacher and model.training:
            loss = self.distilled(lm, lprobs, target, sample, log)
        loss, tag_total = self.add_tag_losses(loss, net_output[1], sample, log, ntokens)
        log["loss"] = loss.data
        log["joint_loss"] = lm.data + tag_total
        if sampled is not None:
            log.update({"ss_words": sampled["words"], "ss_replaced": sampled["replaced"], "ss_changed": sampled["changed"],
                        "ss_differs": sampled["differs"], "ss_p_words": sampled["p"] * sampled["words"]})
        return loss, ntokens, log

    def distilled(self, lm, lprobs, target, sample, log):
        """(1 - alpha) NLL + alpha CE(teacher, student), summed over the target tokens; logs the KL of the
        teacher from the student (``distill_kl``: the CE less the teacher's entropy)."""
        teacher = self.teacher_log_probs(sample, lprobs)
        keep = target != self.padding_idx
        student, teacher = lprobs[keep].float(), teacher[keep]
        p = teacher.exp()
        ce = -(p * student).sum()
        log["distill_kl"] = (ce + (p * teacher).sum()).data
        return (1.0 - self.distill_weight) * lm + self.distill_weight * ce

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
        sentences = total("tm_sentences")
        if sentences:  # --tag-marginal: the optimized bound per token, sequences summed and the parse's share
            metrics.log_scalar("marginal_loss", total("marginal_loss") / ntokens / ln2, ntokens, round=3)
            metrics.log_scalar("tag_marginal_distinct", total("tm_distinct") / sentences, sentences, round=2)
            metrics.log_scalar("tag_marginal_gold_share", 100.0 * total("tm_gold_share") / sentences, sentences, round=2)
        if any("distill_kl" in log for log in logging_outputs):
            metrics.log_scalar("distill_kl", total("distill_kl") / ntokens / ln2, ntokens, round=3)
        words = total("ss_words")
        if words:
            metrics.log_scalar("tag_sampling_p", total("ss_p_words") / words, words, round=3)
            for key, name in (("ss_replaced", "tag_sampled"), ("ss_changed", "tag_sampled_changed"),
                              ("ss_differs", "tag_choice_err")):
                metrics.log_scalar(name, 100.0 * total(key) / words, words, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True

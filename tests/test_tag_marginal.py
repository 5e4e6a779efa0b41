"""The marginal over tag sequences as a training objective (``--tag-marginal K``, criterion ``hexatag_lm``,
``criterions/tag_marginal.py``; issue 23 item 2).

Float64 tiny decoders and batches of several sentences per block (tests/test_tag_sampling.py). What is
asserted:
- K = 1 is the joint -log p(x, parse's tags): the plain criterion's loss with both tag weights 1;
- the K copies fed in the one training forward are the parse's tags, the constrained argmax after the
  gold prefix (the brute-force :func:`expected_feed`) and draws among the allowed units;
- the loss is, sentence by sentence, -log sum over the *distinct* fed sequences of p(x_s, T), computed
  here from the definition: one forward per block row and copy, the LM log-prob of every target plus
  the heads' log-prob of every fed unit at the input before it, duplicates found by comparing the
  sentences' units;
- more sequences never lower the sum (it includes the parse's);
- bad values and incompatible options are refused in one line; fairseq-train logs the bound.

Tolerance: the tag log-probs are computed in float32 (``modules/tag_heads.tag_log_probs``), so sums
over the same terms in another order agree to about 1e-7 relative; 1e-6 is used.
"""
import math
import re

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from sipe_fairseq.criterions.hexatag_lm import HexatagLMCriterion
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID
from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS
from sipe_fairseq.hexatag.errors import OptionError
from conftest import small_dictionary, txl  # noqa: E402
from test_prefix_tags import make_model  # noqa: E402
from test_tag_sampling import Recorder, allowed_scores, batch_of, expected_feed, random_trees, run, task_for  # noqa: E402
from test_word_aware_heads import make_word_model  # noqa: E402

REL = 1e-6


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(12, mark="\u2581", n_continuations=6)


def latent(task, **kwargs):
    """The criterion whose loss is the marginal term alone (tag losses weighted 0)."""
    return HexatagLMCriterion(task, terminal_weight=0.0, nonterminal_weight=0.0, **kwargs)


@torch.no_grad()
def reference_loss(model, sample, fed_t, fed_n, eos):
    """-sum over sentences of log sum over distinct copies of p(x_s, T_copy), from the definition."""
    inner = model.inner
    src, target = sample["net_input"]["src_tokens"], sample["target"]
    gold_tt, gold_nt = sample["terminal_target"], sample["nonterminal_target"]
    K = fed_t.size(0)
    B, T = src.shape
    total = 0.0
    for b in range(B):
        per_copy = []  # per copy: [(units of the sentence, log p)] in sentence order
        for c in range(K):
            logits, extra = inner(src[b:b + 1], src_terminals=fed_t[c, b:b + 1], src_nonterminals=fed_n[c, b:b + 1])
            lm = torch.log_softmax(logits[0].double(), -1)
            lt = torch.log_softmax(extra["terminal_logits"][0].double(), -1)
            ln = torch.log_softmax(extra["nonterminal_logits"][0].double(), -1)
            sentences = []
            for j in range(T):
                if int(target[b, j]) == 1:  # <pad>
                    continue
                if int(src[b, j]) == eos:
                    sentences.append([[], 0.0])
                units, score = sentences[-1]
                score += float(lm[j, target[b, j]])
                if j + 1 < T and int(fed_t[c, b, j + 1]) >= FIRST_TAG_ID:
                    units.append((int(fed_t[c, b, j + 1]), int(fed_n[c, b, j + 1])))
                if FIRST_TAG_ID <= int(gold_tt[b, j]) < FIRST_TAG_ID + len(TERMINALS):
                    score += float(lt[j, int(fed_t[c, b, j + 1]) - FIRST_TAG_ID])
                if FIRST_TAG_ID <= int(gold_nt[b, j]) < FIRST_TAG_ID + len(NONTERMINALS):
                    score += float(ln[j, int(fed_n[c, b, j + 1]) - FIRST_TAG_ID])
                sentences[-1] = [units, score]
            per_copy.append(sentences)
        for s in range(len(per_copy[0])):
            seen, scores = [], []
            for c in range(K):
                units, score = per_copy[c][s]
                if units not in seen:
                    seen.append(units)
                    scores.append(score)
            total -= float(torch.logsumexp(torch.tensor(scores, dtype=torch.float64), 0))
    return total


@pytest.mark.parametrize("timing", ["paper", "nt-delay"])
def test_k1_is_the_joint_of_the_parse(dictionary, timing):
    model = Recorder(make_word_model(dictionary, seed=4))
    sample = batch_of(dictionary, [random_trees(3, seed=70 + s) for s in range(4)], timing)
    task = task_for(dictionary, timing)
    joint, _ = run(HexatagLMCriterion(task), model, sample)  # LM + both tag NLLs (weights 1, per token)
    k1, log = run(latent(task, tag_marginal=1), model, sample)
    assert k1 == pytest.approx(joint, rel=REL)
    assert log["tm_distinct"] == log["tm_sentences"] == 12 and log["tm_gold_share"] == pytest.approx(12)


@pytest.mark.parametrize("heads", ["word", "state"])
@pytest.mark.parametrize("timing", ["paper", "nt-delay"])
def test_loss_is_the_sum_over_distinct_sequences(dictionary, timing, heads):
    inner = make_word_model(dictionary, seed=5) if heads == "word" else make_model(dictionary, seed=5)
    inner.decoder.tag_timing = timing
    model = Recorder(inner)
    sample = batch_of(dictionary, [random_trees(4, seed=90 + s) for s in range(5)], timing)
    task = task_for(dictionary, timing)
    K, B = 5, 5
    torch.manual_seed(0)
    loss, log = run(latent(task, tag_marginal=K), model, sample)
    fed_t, fed_n = (x.view(K, B, -1) for x in model.fed[-1])
    net = sample["net_input"]
    assert torch.equal(fed_t[0], net["src_terminals"]) and torch.equal(fed_n[0], net["src_nonterminals"])
    argmax_t, argmax_n = expected_feed(model, sample, timing, dictionary.eos())
    assert torch.equal(fed_t[1], argmax_t) and torch.equal(fed_n[1], argmax_n)
    allowed = {(b, j): {u for u, _ in scored} for b, j, scored in allowed_scores(model, sample, timing, dictionary.eos())}
    for c in range(2, K):  # draws: allowed units on the chosen words, the parse's tags elsewhere
        for b in range(B):
            for j in range(fed_t.size(2)):
                if (b, j) in allowed:
                    unit = (TERMINALS[int(fed_t[c, b, j]) - FIRST_TAG_ID], NONTERMINALS[int(fed_n[c, b, j]) - FIRST_TAG_ID])
                    assert unit in allowed[(b, j)], (c, b, j, unit)
                else:
                    assert int(fed_t[c, b, j]) == int(net["src_terminals"][b, j])
    want = reference_loss(model, sample, fed_t, fed_n, dictionary.eos())
    assert loss == pytest.approx(want, rel=REL)
    assert log["tm_sentences"] == 20 and 20 < log["tm_distinct"] < 20 * K  # some copies differ, some repeat
    assert 0 < log["tm_gold_share"] < 20
    k1, _ = run(latent(task, tag_marginal=1), model, sample)
    assert loss < k1  # the parse's sequence plus others: a larger sum


def test_gradient_reaches_the_heads_through_the_marginal(dictionary):
    """With the tag losses weighted 0, the heads still learn: the marginal includes their log-probs."""
    model = Recorder(make_word_model(dictionary, seed=6))
    sample = batch_of(dictionary, [random_trees(3, seed=110 + s) for s in range(3)], "nt-delay")
    model.train()
    loss, _, _ = latent(task_for(dictionary, "nt-delay"), tag_marginal=3)(model, sample)
    loss.backward()
    grad = model.inner.decoder.nonterminal_head.weight.grad
    assert grad is not None and float(grad.abs().sum()) > 0
    model.eval()


BAD = [
    ({"tag_marginal": -1}, "paper", "--tag-marginal must be a whole number"),
    ({"tag_marginal": 2.5}, "paper", "--tag-marginal must be a whole number"),
    ({"tag_marginal": "x"}, "paper", "expected a whole number"),
    ({"tag_marginal": 4, "tag_sampling": 0.5}, "paper", "not with --tag-sampling"),
    ({"tag_marginal": 4, "tag_dropout": 0.3}, "paper", "not with --tag-dropout"),
    ({"tag_marginal": 4, "distill_teacher": "no-such.pt"}, "paper", "not with --distill-teacher"),  # before loading
    ({"tag_marginal": 4}, "first_subword", "last_subword"),  # the heads must sit at the input before the word
]


def test_bad_values_are_refused(dictionary):
    for kwargs, placement, match in BAD:
        task = task_for(dictionary, placement="last_subword" if placement == "paper" else placement)
        with pytest.raises(OptionError, match=match) as err:
            HexatagLMCriterion(task, **kwargs)
        assert "\n" not in str(err.value), kwargs
    HexatagLMCriterion(task_for(dictionary, placement="first_subword"), tag_marginal=0)  # off: any placement


def test_fairseq_train_logs_the_bound(train_checkpoint):
    ck = train_checkpoint(txl("position", "--tag-head-placement", "last_subword", "--sipe-tag-head-input", "word",
                              "--tag-timing", "nt-delay", "--tag-marginal", "3", "--log-interval", "1"))
    log = train_checkpoint.log(ck)
    lines = [line for line in log.splitlines() if "train_inner" in line]
    assert lines
    for line in lines:
        got = {k: float(re.search(rf"{k}[= ]([-0-9.]+)", line).group(1))
               for k in ("tag_marginal_distinct", "tag_marginal_gold_share", "marginal_loss", "joint_loss", "nll_loss")}
        assert 1 <= got["tag_marginal_distinct"] <= 3 and 0 < got["tag_marginal_gold_share"] <= 100
        assert got["marginal_loss"] <= got["joint_loss"] + 1e-3  # a larger sum than the parse's alone
        assert math.isfinite(got["nll_loss"])

"""Tag-loss normalization (issue 11, item 3): ``--tag-loss-normalization token`` divides the tag
NLLs by the criterion's sample size (as the LM term), ``tagged`` by each head's own number of tagged
targets; both against a hand computation, for ``hexatag_lm`` and ``hexatag_mlm``."""
import math

import pytest
import torch
import torch.nn as nn
from fairseq.data import Dictionary

import sipe_fairseq

sipe_fairseq.register()

from sipe_fairseq.criterions.hexatag_lm import HexatagLMCriterion  # noqa: E402
from sipe_fairseq.criterions.hexatag_mlm import HexatagMLMCriterion  # noqa: E402

V, FIRST_TAG = 12, 5


class Task:
    def __init__(self):
        self.target_dictionary = Dictionary()  # pad = 1
        for i in range(V - 4):
            self.target_dictionary.add_symbol(f"w{i}")


class FakeModel(nn.Module):
    """Returns fixed logits: token logits (B, T, V) and tag logits; with ``masked_tokens`` the token
    logits at the masked positions only (as the encoders)."""

    def __init__(self, lm, term, nonterm):
        super().__init__()
        self.lm, self.term, self.nonterm = lm, term, nonterm

    def forward(self, src_tokens, masked_tokens=None, **unused):
        lm = self.lm if masked_tokens is None else self.lm[masked_tokens]
        return lm, {"terminal_logits": self.term, "nonterminal_logits": self.nonterm}

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return torch.log_softmax(net_output[0], -1)

    def get_targets(self, sample, net_output):
        return sample["target"]


def data(seed=0, b=2, t=6):
    g = torch.Generator().manual_seed(seed)
    lm = torch.randn(b, t, V, generator=g)
    term, nonterm = torch.randn(b, t, 2, generator=g), torch.randn(b, t, 5, generator=g)
    target = torch.randint(4, V, (b, t), generator=g)
    target[1, -2:] = 1  # padding
    tt = torch.tensor([[5, 4, 6, 4, 5, 4], [6, 6, 4, 5, 1, 1]])  # 4 = <notag>, 1 = pad
    nt = torch.tensor([[9, 4, 5, 4, 7, 4], [8, 6, 4, 4, 1, 1]])  # one terminal-only tagged position
    return FakeModel(lm, term, nonterm), target, tt, nt


def nll(logits_row, k):
    """-log softmax(logits_row)[k], by hand."""
    z = [float(v) for v in logits_row]
    m = max(z)
    return -(z[k] - m - math.log(sum(math.exp(v - m) for v in z)))


def hand_sums(model, target, tt, nt, positions):
    lm = sum(nll(model.lm[i, j], int(target[i, j])) for i, j in positions if target[i, j] != 1)
    heads = {}
    for kind, logits, tags, n in (("terminal", model.term, tt, 2), ("nonterminal", model.nonterm, nt, 5)):
        scored = [(i, j) for i, j in positions if 0 <= int(tags[i, j]) - FIRST_TAG < n]
        heads[kind] = (sum(nll(logits[i, j], int(tags[i, j]) - FIRST_TAG) for i, j in scored), len(scored))
    return lm, heads


@pytest.mark.parametrize("norm", ["token", "tagged"])
@pytest.mark.parametrize("weights", [(1.0, 1.0), (0.5, 2.0)])
def test_lm_criterion_matches_hand_computation(norm, weights):
    model, target, tt, nt = data()
    ntokens = int(target.ne(1).sum())
    sample = {"net_input": {"src_tokens": target}, "target": target, "ntokens": ntokens,
              "terminal_target": tt, "nonterminal_target": nt}
    crit = HexatagLMCriterion(Task(), *weights, tag_loss_normalization=norm)
    loss, sample_size, log = crit(model, sample)
    assert sample_size == ntokens == 10
    lm, heads = hand_sums(model, target, tt, nt, [(i, j) for i in range(2) for j in range(6)])
    (t_sum, n_t), (nt_sum, n_nt) = heads["terminal"], heads["nonterminal"]
    assert (n_t, n_nt) == (6, 5) and (log["terminal_count"], log["nonterminal_count"]) == (6, 5)
    if norm == "token":  # every term divided by the 10 tokens
        want = (lm + weights[0] * t_sum + weights[1] * nt_sum) / ntokens
    else:  # LM per token, each tag head per tagged target
        want = lm / ntokens + weights[0] * t_sum / n_t + weights[1] * nt_sum / n_nt
    assert loss.item() / sample_size == pytest.approx(want, rel=1e-5)
    # the logged tag losses and the joint bound do not depend on the normalization
    assert log["terminal_loss"].item() == pytest.approx(t_sum, rel=1e-5)
    assert log["joint_loss"].item() == pytest.approx(lm + t_sum + nt_sum, rel=1e-5)


@pytest.mark.parametrize("norm", ["token", "tagged"])
def test_mlm_criterion_matches_hand_computation(norm):
    model, target, tt, nt = data(seed=3)
    masked_target = torch.full_like(target, 1)
    masked = [(0, 0), (0, 2), (0, 3), (1, 0), (1, 3)]
    for i, j in masked:
        masked_target[i, j] = target[i, j]
    tag_t, tag_nt = torch.full_like(tt, 4), torch.full_like(nt, 4)  # tags targeted at masked positions only
    for i, j in masked:
        tag_t[i, j], tag_nt[i, j] = tt[i, j], nt[i, j]
    sample = {"net_input": {"src_tokens": target}, "target": masked_target, "ntokens": 10, "nsentences": 2,
              "terminal_target": tag_t, "nonterminal_target": tag_nt}
    crit = HexatagMLMCriterion(Task(), 1.0, 1.0, tag_loss_normalization=norm)
    loss, sample_size, log = crit(model, sample)
    assert sample_size == 5
    mlm, heads = hand_sums(model, masked_target, tag_t, tag_nt, masked)
    (t_sum, n_t), (nt_sum, n_nt) = heads["terminal"], heads["nonterminal"]
    assert (n_t, n_nt) == (4, 3)
    want = (mlm + t_sum + nt_sum) / 5 if norm == "token" else mlm / 5 + t_sum / n_t + nt_sum / n_nt
    assert loss.item() / sample_size == pytest.approx(want, rel=1e-5)


def test_unknown_normalization_is_refused():
    with pytest.raises(ValueError, match="--tag-loss-normalization must be one of"):
        HexatagLMCriterion(Task(), tag_loss_normalization="word")

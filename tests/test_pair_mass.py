"""Issue 49 (item 4): SiPE's pair-mass pruning (``--tags-pair-mass`` Q, ``StructureOptions.pair_mass``): at each
word, a sentence keeps the best children of its hypotheses by ``p(x_<t, S)`` times their pair's probability until
their share of all its children's summed mass reaches Q (``structure.search.keep_by_mass``). What is asserted, on
the float64 tiny SiPE decoder of conftest:

* the rule itself on hand-checkable values: which children are kept, in their given order, at least one per
  sentence;
* Q = 1 changes no number: every per-token number, total and count equals that of the default options, under
  ``mix:K`` and ``beam:K``;
* Q < 1 under ``mix:K`` reads only the prefix and stays normalized: every next-token distribution sums to one over
  the whole vocabulary (each symbol read off its own sentence ``prefix v </s>``), the prefix's numbers do not
  depend on ``v``, the per-token numbers sum to the sentence's log-probability; over a batch the decoder positions
  are no more than the unpruned run's (strictly fewer at some Q), and the live hypotheses stay within K;
* Q outside (0, 1] is a ``ValueError`` naming ``--tags-pair-mass``.
"""
import math
import random

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from conftest import random_words_sentence, tiny_decoder_lm
from sipe_fairseq.structure.family import StructureOptions, policy_for
from sipe_fairseq.structure.scoring import score_sentences
from sipe_fairseq.structure.search import keep_by_mass
from sipe_fairseq.structure.sentences import Sentence

TOL = 1e-9  # float64 model; a sum of 64 probabilities


_sentence = random_words_sentence


def _batch(seed=0, n=8):
    rng = random.Random(seed)
    return [_sentence(rng, rng.randrange(3, 10)) for _ in range(n)]


@pytest.fixture(scope="module")
def model():
    return tiny_decoder_lm("sipe").double()


def test_the_rule_keeps_the_best_until_their_share_reaches_q():
    """Two sentences: children with shares 0.2, 0.5, 0.3 (sentence 0) and 0.1, 0.9 (sentence 1), in parent order.
    Q = 0.75 keeps 0.5 and 0.3 (0.5 before the second is below 0.75, 0.8 before the third is not) and 0.9; Q = 0.45
    keeps the best of each only (0.5 before the second is not below 0.45); Q = 0.85 and 1 keep every child of
    sentence 0; the kept children stay in their given order."""
    group = torch.tensor([0, 0, 0, 1, 1])
    values = torch.tensor([0.2, 0.5, 0.3, 0.1, 0.9], dtype=torch.float64).log() - 7.0  # any common scale
    assert keep_by_mass(group, values, 0.75).tolist() == [1, 2, 4]
    assert keep_by_mass(group, values, 0.45).tolist() == [1, 4]
    assert keep_by_mass(group, values, 0.85).tolist() == [0, 1, 2, 4]
    assert keep_by_mass(group, values, 0.95).tolist() == [0, 1, 2, 3, 4]
    assert keep_by_mass(group, values, 1e-12).tolist() == [1, 4]  # at least one per sentence
    # a child of no mass is never needed; a sentence of no mass at all keeps its first
    values = torch.tensor([-math.inf, 0.0, -math.inf, -math.inf], dtype=torch.float64)
    assert keep_by_mass(torch.tensor([0, 0, 1, 1]), values, 0.999).tolist() == [1, 2]
    assert keep_by_mass(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.float64), 0.5).tolist() == []


@pytest.mark.parametrize("source", ["mix:4", "beam:4"])
def test_q_one_changes_nothing(model, source):
    batch = _batch()
    default = score_sentences(model, batch, source, StructureOptions(workers=1))
    one = score_sentences(model, batch, source, StructureOptions(workers=1, pair_mass=1.0))
    for a, b in zip(default, one):
        assert (a.logprob, a.token_logprobs, a.tags) == (b.logprob, b.token_logprobs, b.tags)
        for key in ("positions", "live_hypotheses", "hypotheses", "beam"):
            assert a.extra[key] == b.extra[key]


@pytest.mark.parametrize("new_word", [False, True])
@pytest.mark.parametrize("q", [0.9, 0.5])
def test_pruned_mixture_is_normalized_and_reads_only_the_prefix(model, q, new_word):
    """``prefix v </s>`` for every symbol v of the 64 (v continues the prefix's last word, or starts a word):
    sum_v q_K(v | prefix) = 1 and the prefix's numbers are the same whatever v is, with the pruning biting (fewer
    positions)."""
    rng = random.Random(5)
    prefix = _sentence(rng, 5)
    head, starts = prefix.tokens[:-1], list(prefix.starts)
    m = len(head)
    starts = starts + [m] if new_word else starts
    sents = [Sentence(torch.cat([head, torch.tensor([v, 2])]), starts) for v in range(len(model.decoder.dictionary))]
    options = StructureOptions(workers=1, share_prefixes="none", pair_mass=q)
    scores = score_sentences(model, sents, "mix:4", options)
    probs = torch.tensor([s.token_logprobs[m] for s in scores], dtype=torch.float64).exp()
    assert abs(float(probs.sum()) - 1) < TOL, float(probs.sum())
    ref = scores[0].token_logprobs[:m]
    for s in scores[1:]:
        assert max(abs(u - v) for u, v in zip(s.token_logprobs[:m], ref)) < 1e-10
    full = score_sentences(model, sents[:1], "mix:4", StructureOptions(workers=1, share_prefixes="none"))[0]
    assert scores[0].extra["positions"] < full.extra["positions"]


@pytest.mark.parametrize("source,top_pairs", [("mix:4", 0), ("mix:4", 3), ("mix:8", 0), ("beam:4", 0)])
def test_pruned_numbers_add_up_and_cost_no_more(model, source, top_pairs):
    """Per sentence the per-token numbers sum to its log-probability (the mixture's, or the beam's bound) and the
    live hypotheses of each word are at most K; over the batch the decoder positions never grow as Q shrinks from
    1, and some Q runs strictly fewer."""
    batch = _batch(seed=1, n=10)
    k = int(source.split(":")[1])
    totals = []
    for q in (1.0, 0.999, 0.99, 0.9, 0.5, 1e-9):
        scores = score_sentences(model, batch, source, StructureOptions(workers=1, top_pairs=top_pairs, pair_mass=q))
        for s, sent in zip(scores, batch):
            assert math.isclose(s.logprob, sum(s.token_logprobs), abs_tol=TOL)
            assert all(x <= 1e-12 for x in s.token_logprobs)
            assert s.extra["live_hypotheses"] <= k * len(sent.starts)
            assert 1 <= s.extra["hypotheses"] <= k
        totals.append(sum(s.extra["positions"] for s in scores))
    assert all(t <= totals[0] for t in totals[1:]), totals
    assert min(totals) < totals[0], totals
    assert totals[-1] == sum(s.n for s in batch)  # a tiny Q keeps one child per sentence: one row throughout


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.1])
def test_pair_mass_out_of_range_is_refused(bad):
    with pytest.raises(ValueError, match="--tags-pair-mass"):
        StructureOptions(pair_mass=bad)


def test_policy_takes_the_option(model):
    assert policy_for(model, StructureOptions(pair_mass=0.9)).pair_mass == 0.9
    assert policy_for(model, StructureOptions()).pair_mass == 1.0

"""Issue 50, item 5: the structure's own surprisal per word (``SentenceScore.extra``: ``structure_surprisal``,
``structure_entropy``, ``posterior_entropy``, ``lexical_surprisal``, ``end_structure_surprisal``; docs/evaluation.md,
"The structure's own surprisal").

* ``self``: every number against one full forward with the chosen structure (SiPE: the tag heads at each word's
  anchor, as training reads them; GiLT: the count head of the teacher-forced arc scorer); the identity
  ``sum over words of (structure + lexical) + </s> = -log p(x, S)``;
* ``mix:K``: ``lexical`` sums to the mixture's ``-log q_K(x)``, and ``structure + lexical`` (with the ``</s>``
  and the last ranking) to the beam's own bound ``-log sum_beam p(x, S)``, a separate ``beam:K`` run that sums
  the hypotheses' scores directly; with every structure kept (SiPE unconstrained, K over every prefix), the
  mixture's decision entropy and the posterior entropy equal an enumeration of every structure by full forwards,
  and the structure pays nothing (every decision's whole mass is kept).
"""
import itertools
import math
import random

import pytest
import torch

from test_context_scoring import EOS, FWD, TOL, _gilt_block, gilt_model, random_sentence, run, sipe_model
from sipe_fairseq.data.gilt.arcs import per_word
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS
from sipe_fairseq.hexatag.constrained import PAIRS
from sipe_fairseq.structure.hexatags import pair_logprobs

pytestmark = pytest.mark.usefixtures("share_every_prefix")  # conftest.py
LN2 = math.log(2)
KEYS = ("structure_surprisal", "structure_entropy", "posterior_entropy", "lexical_surprisal")


@pytest.fixture(scope="module")
def models():
    return {"sipe": sipe_model(), "gilt": gilt_model()}


def entropy(lp: torch.Tensor) -> float:
    return float(-(lp.exp() * lp).sum())


@torch.no_grad()
def sipe_forward(model, sentence, pairs):
    """One full forward with the pair index ``pairs[w]`` (None: ``<notag>``) on each word: the LM log-prob per
    target and, per word, the (10,) pair log-probs at its anchor (``first_subword``: the previous word's first
    subword, word 1 the sentence start)."""
    t = sentence.tokens
    terms, nts = torch.full_like(t, NOTAG_ID), torch.full_like(t, NOTAG_ID)
    for q, p in zip(sentence.starts, pairs):
        if p is not None:
            a, b = PAIRS[p]
            terms[q], nts[q] = FIRST_TAG_ID + TERMINALS.index(a), FIRST_TAG_ID + NONTERMINALS.index(b)
    src = torch.cat([t.new_tensor([EOS]), t[:-1]])
    sa = torch.cat([t.new_tensor([NOTAG_ID]), terms[:-1]])
    sb = torch.cat([t.new_tensor([NOTAG_ID]), nts[:-1]])
    logits, extra = model(src[None], src_terminals=sa[None], src_nonterminals=sb[None])
    lm = torch.log_softmax(logits[0].double(), -1).gather(-1, t[:, None]).squeeze(-1)
    anchors = [0] + [q + 1 for q in sentence.starts[:-1]]
    heads = pair_logprobs(extra["terminal_logits"][0, anchors], extra["nonterminal_logits"][0, anchors])
    return lm, heads


def word_sums(values, starts, n):
    bounds = list(starts) + [n - 1]
    return [sum(values[a:b]) for a, b in zip(bounds, bounds[1:])]


def check_identity(score, joint):
    """sum over words of (structure + lexical), plus the ``</s>`` and the last ranking, is ``-joint`` in bits."""
    e = score.extra
    total = sum(s + x for s, x in zip(e["structure_surprisal"], e["lexical_surprisal"]))
    total += -score.token_logprobs[-1] / LN2 + e["end_structure_surprisal"]
    assert abs(total + joint / LN2) < TOL


def test_sipe_self_against_the_full_forward(models):
    model, rng = models["sipe"], random.Random(21)
    for _ in range(4):
        s = random_sentence(rng, (3, 7))
        got = run(model, [s], "self")[0]
        e = got.extra
        assert all(len(e[k]) == len(s.starts) for k in KEYS)
        lm, heads = sipe_forward(model, s, [PAIRS.index(tuple(p)) for p in got.tags])
        for w, p in enumerate(got.tags):
            assert abs(e["structure_surprisal"][w] + float(heads[w, PAIRS.index(tuple(p))]) / LN2) < FWD
            assert abs(e["structure_entropy"][w] - entropy(heads[w]) / LN2) < FWD
            assert e["posterior_entropy"][w] == 0.0
        want = [-x / LN2 for x in word_sums(lm.tolist(), s.starts, s.n)]
        assert max(abs(a - b) for a, b in zip(e["lexical_surprisal"], want)) < FWD
        # self is exact: the words' totals are the lexical surprisal; the joint adds the structure beside it
        assert abs(sum(e["lexical_surprisal"]) - got.token_logprobs[-1] / LN2 + got.logprob / LN2) < TOL
        assert e["end_structure_surprisal"] == 0.0
        check_identity(got, got.joint)


def test_gilt_self_against_the_full_forward(models):
    model, rng = models["gilt"], random.Random(22)
    for _ in range(4):
        s = random_sentence(rng, (3, 7))
        got = run(model, [s], "self")[0]
        e = got.extra
        lm, count_lp = _gilt_block(model, s, [per_word(got.extra["arcs"], len(s.starts))])
        for w, c in enumerate(e["counts"]):
            assert abs(e["structure_surprisal"][w] + float(count_lp[w, c]) / LN2) < FWD
            assert abs(e["structure_entropy"][w] - entropy(count_lp[w]) / LN2) < FWD
        want = [-x / LN2 for x in word_sums(lm.tolist(), s.starts, s.n)]
        assert max(abs(a - b) for a, b in zip(e["lexical_surprisal"], want)) < FWD
        check_identity(got, got.joint)


@pytest.mark.parametrize("family", ["sipe", "gilt"])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_mix_decomposes_the_beam_bound(models, family, k):
    """Under ``mix:K``: lexical = the mixture (exact); structure + lexical = the beam's bound, a separate run."""
    options = {"count_rule": "allowed-then-top"} if family == "gilt" else {}
    model, rng = models[family], random.Random(30 + k)
    branched = 0
    for _ in range(3):
        s = random_sentence(rng, (3, 7))
        mix = run(model, [s], f"mix:{k}", **options)[0]
        beam = run(model, [s], f"beam:{k}", **options)[0]
        e = mix.extra
        assert abs(sum(e["lexical_surprisal"]) - mix.token_logprobs[-1] / LN2 + mix.logprob / LN2) < TOL
        check_identity(mix, beam.logprob)
        assert all(x >= 0 for k_ in KEYS[:3] for x in e[k_])
        branched += max(e["posterior_entropy"]) > 0
    assert branched == (0 if k == 1 else 3)


@torch.no_grad()
def test_mix_entropies_equal_the_enumeration(models):
    """SiPE unconstrained (every pair allowed), K = 100 >= every structure of two words: at each word the mixture's
    decision distribution is ``sum_S pi(S) p(d | S)`` over every structure S of the earlier words, with ``pi(S)``
    proportional to ``p(x_1 .. x_(first subword of the word), S)``; both entropies equal that enumeration, and no
    decision loses mass (structure surprisal 0)."""
    model = models["sipe"]
    s = random_sentence(random.Random(5), (3, 3))
    got = run(model, [s], "mix:100", constrained=False)[0]
    e = got.extra
    for w, q in enumerate(s.starts):
        weights, decisions = [], []
        for prefix in itertools.product(range(len(PAIRS)), repeat=w):
            lm, heads = sipe_forward(model, s, list(prefix) + [None] * (len(s.starts) - w))
            costs = sum(float(sipe_forward(model, s, list(prefix[:v]) + [None] * (len(s.starts) - v))[1][v, prefix[v]])
                        for v in range(w)) if w else 0.0
            weights.append(float(lm[: q + 1].sum()) + costs)
            decisions.append(heads[w])
        log_pi = torch.log_softmax(torch.tensor(weights, dtype=torch.float64), 0)
        mixture = torch.logsumexp(log_pi[:, None] + torch.stack(decisions), 0)
        assert abs(e["structure_entropy"][w] - entropy(mixture) / LN2) < FWD
        assert abs(e["posterior_entropy"][w] - entropy(log_pi) / LN2) < FWD
        assert abs(e["structure_surprisal"][w]) < 1e-12
    assert e["posterior_entropy"][2] > 1.0  # many structures are live


def test_context_measures_cover_the_text(models):
    """After a context, the measures cover the text's words; their lexical part sums to ``log p(text | context)``."""
    from sipe_fairseq.structure.sentences import with_context
    rng = random.Random(8)
    for family in ("sipe", "gilt"):
        context, text = [random_sentence(rng)], random_sentence(rng)
        for source in ("self", "mix:4"):
            got = run(models[family], [with_context(text, context)], source)[0]
            e = got.extra
            assert all(len(e[k]) == len(text.starts) for k in KEYS)
            assert abs(sum(e["lexical_surprisal"]) - got.token_logprobs[-1] / LN2 + got.logprob / LN2) < TOL

"""Issues 49 (item 3) and 50 (speed): sentences of a batch that begin alike share their rows until they differ
(``structure.search.shared_forks``): a context before several texts (``--tags-share-prefixes contexts``, the
default), and with ``all`` also the prefix of a minimal pair, are run once. Sharing changes no number:

* every per-token log-probability, the sentence's total, its tags and the structure's own measures equal those of
  the search without sharing (``--tags-share-prefixes none``), under ``self``, ``beam:K`` and ``mix:K``, SiPE and
  GiLT (float64 models: the same products in the same order, 1e-9);
* the positions saved are counted exactly: after one context of ``c`` tokens, each text but the first takes the
  context's ``c`` positions from it (``extra["shared_positions"]``); ``extra["positions"]`` stays what the text
  alone costs;
* ``given`` does not share (the parse of each sentence differs before the sentences do); by default, sentences
  without a context do not share (measured slower on a CPU, docs/benchmarks.md);
* the batches put sentences that begin alike together, so a shuffled list of minimal pairs shares within each pair.
"""
import random

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from conftest import random_words_sentence, tiny_decoder_lm
from sipe_fairseq.structure.family import StructureOptions
from sipe_fairseq.structure.scoring import batch_order, score_sentences
from sipe_fairseq.structure.search import MIN_SHARED, shared_forks
from sipe_fairseq.structure.sentences import Sentence, with_context

TOL = 1e-9  # float64 models: the shared rows are copies, the same numbers up to float64 summation order
MEASURES = ("structure_surprisal", "structure_entropy", "posterior_entropy", "lexical_surprisal")


_sentence = random_words_sentence


def _pair(rng, words):
    """Two sentences alike but for one token near the end (a minimal pair's shape)."""
    a = _sentence(rng, words)
    b = Sentence(a.tokens.clone(), list(a.starts))
    b.tokens[-3] = 4 + (int(a.tokens[-3]) - 3) % 56
    return [a, b]


def _batch(seed=0):
    rng = random.Random(seed)
    context = [_sentence(rng, 10) for _ in range(4)]
    texts = [_sentence(rng, rng.randrange(3, 9)) for _ in range(5)]
    pairs = [s for _ in range(3) for s in _pair(rng, 8)]
    documents = [with_context(t, context[:k]) for k, t in enumerate(texts)]  # each after its predecessors
    return [with_context(t, context) for t in texts] + pairs + documents


def _close(a, b):
    assert a.tags == b.tags
    assert a.logprob == pytest.approx(b.logprob, abs=TOL)
    assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=TOL)
    for key in MEASURES:
        assert a.extra.get(key, []) == pytest.approx(b.extra.get(key, []), abs=TOL)
    assert a.extra["positions"] == b.extra["positions"]


@pytest.mark.parametrize("family", ["sipe", "gilt"])
@pytest.mark.parametrize("source", ["self", "mix:4"])
def test_sharing_changes_no_number(family, source):
    model = tiny_decoder_lm(family).double()
    batch = _batch()
    off = score_sentences(model, batch, source, StructureOptions(workers=1, share_prefixes="none"))
    assert all("shared_positions" not in s.extra for s in off)
    for mode in ("contexts", "all"):
        on = score_sentences(model, batch, source, StructureOptions(workers=1, share_prefixes=mode))
        for a, b, s in zip(on, off, batch):
            _close(a, b)
            if mode == "contexts":  # at most the context's positions
                assert a.extra.get("shared_positions", 0) <= s.context_end * (1 if source == "self" else 8 * 4)
        assert sum(s.extra.get("shared_positions", 0) for s in on) > 0


@pytest.mark.parametrize("family", ["sipe", "gilt"])
def test_beam_shares_minimal_pairs(family):
    """``beam:K`` refuses a context, but a minimal pair's common prefix is shared, bound and best tags alike."""
    model = tiny_decoder_lm(family).double()
    rng = random.Random(1)
    batch = [s for _ in range(4) for s in _pair(rng, 9)]
    on = score_sentences(model, batch, "beam:4", StructureOptions(workers=1, share_prefixes="all"))
    off = score_sentences(model, batch, "beam:4", StructureOptions(workers=1, share_prefixes="none"))
    for a, b in zip(on, off):
        _close(a, b)
        assert [lab for lab, _ in a.extra["beam"]] == [lab for lab, _ in b.extra["beam"]]
    assert sum(1 for s in on if s.extra.get("shared_positions")) == 4  # the second of each pair
    default = score_sentences(model, batch, "beam:4", StructureOptions(workers=1))  # contexts only: no context here
    assert all("shared_positions" not in s.extra for s in default)


def test_a_context_is_run_once_per_batch():
    """Texts that differ from their first token on, after one context of ``c`` tokens: every text but one takes
    exactly ``c`` positions (one row each under ``self``) from another."""
    model = tiny_decoder_lm("sipe").double()
    rng = random.Random(2)
    context = [_sentence(rng, 6) for _ in range(3)]
    c = sum(s.n for s in context)
    texts = []
    for first in range(5, 11):  # distinct first tokens
        t = _sentence(rng, 4)
        t.tokens[0] = first
        texts.append(with_context(t, context))
    scores = score_sentences(model, texts, "self", StructureOptions(workers=1))
    shared = sorted(s.extra.get("shared_positions", 0) for s in scores)
    assert shared == [0] + [c] * (len(texts) - 1)
    assert all(s.extra["positions"] == t.n for s, t in zip(scores, texts))


def test_given_does_not_share():
    model = tiny_decoder_lm("gilt").double()
    rng = random.Random(3)
    batch = [s for _ in range(2) for s in _pair(rng, 6)]
    for s in batch:
        s.arcs = [([w - 1], []) for w in range(1, len(s.starts) + 1)]  # a chain: each word's head the one before
    scores = score_sentences(model, batch, "given", StructureOptions(workers=1, share_prefixes="all"))
    assert all("shared_positions" not in s.extra for s in scores)


def test_forks_follow_the_earliest_alike_sentence():
    """``shared_forks`` on hand-made inputs: the fork is one before the first input that differs (the target
    before it is the one that differs), never past a sentence's end, and never from a sentence whose rows start
    later (its leader is taken instead)."""
    eos = 2
    rows = [[eos, 5, 6, 7, 8, 9], [eos, 5, 6, 7, 8, 10], [eos, 5, 6, 11, 12, 13], [eos, 5, 6, 7, 8, 9]]
    inp = torch.tensor(rows)
    word_at = torch.zeros(4, 7, dtype=torch.long)
    word_at[:, 1] = 1
    next_word = torch.zeros_like(word_at)
    n = torch.tensor([6, 6, 6, 4])
    fork, leader = shared_forks(inp, word_at, next_word, n, [None] * 4)
    # 1: alike with 0 for inputs 0..4 -> fork 4; 2: alike for 0..2 -> fork 2; 3: alike with 0 through its end (4)
    assert fork.tolist() == [0, 4, 2, 3]
    assert leader.tolist() == [-1, 0, 0, 0]
    word_at[1, 3] = 2  # sentence 1 starts a word at input 3, sentence 0 does not: alike for 0..2 only
    fork, leader = shared_forks(inp, word_at, next_word, n, [None, None, 1, None])
    assert fork.tolist()[:3] == [0, 2, 0]  # 2 is capped below MIN_SHARED: no fork
    assert MIN_SHARED == 2


def test_batches_keep_alike_sentences_together():
    rng = random.Random(4)
    pairs = [_pair(rng, rng.randrange(3, 12)) for _ in range(20)]
    flat = [s for p in pairs for s in p]
    shuffled = list(range(len(flat)))
    rng.shuffle(shuffled)
    sentences = [flat[i] for i in shuffled]
    order = batch_order(sentences, share="all")
    where = {i: k for k, i in enumerate(order)}
    for p in range(len(pairs)):  # the two sentences of each pair are neighbours
        a, b = shuffled.index(2 * p), shuffled.index(2 * p + 1)
        assert abs(where[a] - where[b]) == 1
    assert batch_order(sentences, share=None) == sorted(range(len(sentences)), key=lambda i: sentences[i].n)


def test_contexts_group_only_what_shares_a_context():
    """Under ``contexts`` the texts after one context, and a document's sentences, are neighbours; texts each after
    a context of their own keep the shortest-first order (grouping them would only mix lengths in a batch)."""
    rng = random.Random(5)
    one = [_sentence(rng, 6)]
    texts = [_sentence(rng, rng.randrange(2, 12)) for _ in range(12)]
    own = [with_context(t, [_sentence(rng, 5)]) for t in texts[:6]]
    shared = [with_context(t, one) for t in texts[6:]]
    sentences = own + shared
    order = batch_order(sentences, share="contexts")
    spots = sorted(order.index(i) for i in range(6, 12))
    assert spots == list(range(spots[0], spots[0] + 6))  # the texts after one context: one run
    assert [i for i in order if i < 6] == sorted(range(6), key=lambda i: sentences[i].n)

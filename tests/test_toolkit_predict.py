"""Issue 50, item 2: next-token and next-word distributions (``predict``), and per token the rank of the actual
token and the entropy of the distribution it was drawn from (``score(measures=...)``).

The independent computation: one ordinary full forward of the decoder (no cache, no batch, no search) with the
structure the model chose (``self``: the tags ``score`` reports, fed as fixed tags), whose full log-softmax gives
every distribution; under ``mix:K`` the search's own mixture log-probabilities of the targets (``score``), which
the distribution of ``predict`` must give its tokens."""
import math

import pytest
import torch

from conftest import txl
from sipe_fairseq import hub
from sipe_fairseq.data.tag_dictionary import NOTAG_ID
from sipe_fairseq.data.tag_timing import time_sentence_streams
from sipe_fairseq.structure.family import takes_tags

LN2 = math.log(2)
PREFIXES = ["the dog", "some owls near the cat", "the nurses see"]
SENTENCES = ["the dog sleeps .", "some owls near the cat sing ."]


@pytest.fixture(scope="module")
def models(train_checkpoint):
    pos, none = train_checkpoint.many([txl("position"), txl("none")])
    return {"pos": hub.load(pos), "none": hub.load(none)}


@torch.no_grad()
def full_distributions(lm, words, tags=None):
    """(n, V) float64 log-probs of every target of ``words`` (``</s>`` last) from one full forward of the model alone,
    the tags (one pair per word, or None: every word ``<notag>``) fed as fixed input, as fairseq-eval-lm feeds them."""
    model = lm.model
    tokens, terms, nts, _ = lm.encoder.encode(words, tags=tags)
    timing = str(getattr(model.decoder, "tag_timing", "paper"))
    if timing != "paper":
        terms, nts = time_sentence_streams(terms, nts, timing)
    n, eos = len(tokens), lm.dictionary.eos()
    src = torch.cat([tokens.new_tensor([eos]), tokens[:-1]])[None]
    a, b = torch.full_like(src, NOTAG_ID), torch.full_like(src, NOTAG_ID)
    a[0, 1:n], b[0, 1:n] = terms[:-1], nts[:-1]
    kwargs = {"src_terminals": a, "src_nonterminals": b} if takes_tags(model) else {}
    out = model(src, src_lengths=torch.tensor([n]), **kwargs)
    return model.get_normalized_probs(out, log_probs=True).double()[0, :n], tokens


def reference(lm, text, tags):
    """The full forward's distributions of ``text`` with the structure ``tags`` chooses (``self``: the tags score
    reports; a model without structure: none)."""
    [r] = lm.score([text], tags=tags)
    chosen = r.structure["tags"] if r.structure else None
    return full_distributions(lm, r.words, chosen)


@pytest.mark.parametrize("name,tags", [("pos", "self"), ("none", "untagged")])
def test_predict_is_the_full_softmax_after_the_prefix(models, name, tags):
    """The top-k next tokens, their probabilities and the entropy equal those of the full forward's last
    distribution (the one after the prefix's last piece, where ``</s>`` would be scored)."""
    lm = models[name]
    k = 7
    predictions = lm.predict(PREFIXES, k=k, tags=tags, word_budget=32)
    assert [p.text for p in predictions] == PREFIXES
    for p in predictions:
        lp, _ = reference(lm, p.text, tags)
        last = lp[-1]
        top = torch.topk(last, k)
        assert [t for t, _ in p.tokens] == [lm.dictionary[int(i)] for i in top.indices]
        assert [q for _, q in p.tokens] == pytest.approx(top.values.exp().tolist(), rel=1e-5)
        entropy = float(-(last.exp() * last).sum() / LN2)
        assert p.entropy == pytest.approx(entropy, rel=1e-5)
        assert p.kind == "exact" and p.source == tags and len(p.words) == k
        assert all(a[1] >= b[1] for a, b in zip(p.words, p.words[1:]))  # best first


@pytest.mark.parametrize("name,tags", [("pos", "self"), ("none", "untagged"), ("pos", "given")])
def test_rank_and_entropy_per_token_equal_the_full_softmax(models, name, tags):
    """Per scored token: its rank (1 + the symbols strictly more probable, within the float32 rounding of the two
    forwards) and the entropy in bits of the distribution, against the full forward with the same structure."""
    lm = models[name]
    for r in lm.score(SENTENCES, tags=tags, measures=("rank", "entropy")):
        tags_fed = r.structure["tags"] if r.structure else None
        lp, tokens = full_distributions(lm, r.words, tags_fed)
        assert len(r.token_rank) == len(r.token_entropy) == len(tokens)
        for t, target in enumerate(tokens.tolist()):
            row = lp[t]
            low = 1 + int((row > row[target] + 1e-5).sum())
            high = 1 + int((row > row[target] - 1e-5).sum())
            assert low <= r.token_rank[t] <= high, (t, r.token_rank[t], low, high)
            assert r.token_entropy[t] == pytest.approx(float(-(row.exp() * row).sum() / LN2), rel=1e-5, abs=1e-6)
    plain = lm.score(SENTENCES, tags=tags)
    assert plain[0].token_rank is None and plain[0].token_entropy is None
    assert [p.token_logprobs for p in plain] == [m.token_logprobs for m in lm.score(SENTENCES, tags=tags,
                                                                                      measures=("rank",))]


def test_mix_predicts_the_mixture_that_score_scores(models):
    """Under ``mix:4`` the distribution after a prefix is the beam's mixture: a next token that is a whole word
    (one word-initial piece) has the probability ``score`` gives it as the first piece after the prefix; a next
    word has the probability of ``score``'s corrected word surprisal."""
    lm = models["pos"]
    checked_tokens = checked_words = 0
    for p in lm.predict(PREFIXES, k=10, tags="mix:4", word_budget=64):
        [prefix] = lm.tokenize([p.text])
        for token, prob in p.tokens:
            word = token.replace("\u2581", "")
            if not token.startswith("\u2581") or not word:
                continue
            [t] = lm.tokenize([p.text + " " + word])
            if t.tokens != prefix.tokens[:-1] + [token, "</s>"]:
                continue
            [s] = lm.score([p.text + " " + word], tags="mix:4")
            assert s.token_logprobs[len(prefix.tokens) - 1] == pytest.approx(math.log(prob), abs=1e-5)
            checked_tokens += 1
        for word, prob in p.words:
            [s] = lm.score([p.text + " " + word], tags="mix:4")
            if s.words[-1] != word or len(s.words) != len(prefix.words) + 1:
                continue
            assert 2 ** -s.word_surprisal[-1] == pytest.approx(prob, rel=1e-4)
            checked_words += 1
    assert checked_tokens >= 3 and checked_words >= 3


def test_bad_input(models):
    """``k`` below 1 or above the vocabulary, a source without a next-token distribution, an unknown measure: one
    ``ValueError`` naming the limit or the reason."""
    lm = models["pos"]
    size = len(lm.dictionary)
    for k in (0, -1, size + 1, 2.5, True):
        with pytest.raises(ValueError, match=rf"k={k!r}: expected a whole number from 1 to {size} \(the vocabulary"):
            lm.predict(["the dog"], k=k)
    assert len(lm.predict(["the dog"], k=size, word_budget=1)[0].tokens) == size
    with pytest.raises(ValueError, match="beam:2 is a bound|given has no parse"):
        lm.predict(["the dog"], tags="beam:2")
    with pytest.raises(ValueError, match="given has no parse"):
        lm.predict(["the dog"], tags="given")
    with pytest.raises(ValueError, match="a bound has no next-token distribution"):
        lm.score(["the dog ."], tags="beam:2", measures=("entropy",))
    with pytest.raises(ValueError, match="measure 'surprise': expected any of rank, entropy"):
        lm.score(["the dog ."], measures=("surprise",))
    assert lm.predict([]) == []
    [tokens_only] = lm.predict(["the dog"], k=3, word_budget=0)
    assert tokens_only.words == [] and not tokens_only.words_exact and len(tokens_only.tokens) == 3
    for budget in (-1, 1.5, None):
        with pytest.raises(ValueError, match=rf"word_budget={budget!r}: expected a whole number >= 0"):
            lm.predict(["the dog"], word_budget=budget)

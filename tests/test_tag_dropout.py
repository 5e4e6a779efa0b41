"""Tag dropout in training (``--tag-dropout``) and the ``untagged`` tag source.

``drop_word_tags`` sets both input streams of a share of the tagged positions to <notag> and nothing
else; the criterion applies it only in training; ``untagged`` scores a SiPE decoder with every word
<notag>: one full forward's exact log-probabilities, with no tag cost (float64).
"""
import pytest
import torch
import torch.nn.functional as F

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from sipe_fairseq.criterions.hexatag_lm import HexatagLMCriterion, drop_word_tags
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from sipe_fairseq.structure.family import StructureOptions
from sipe_fairseq.structure.scoring import score_sentences
from sipe_fairseq.structure.sentences import sentence_of
from test_prefix_tags import make_model, sentence_pairs  # noqa: E402
from conftest import small_dictionary  # noqa: E402


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(12, mark="\u2581", n_continuations=6)


def tag_streams(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    terms = torch.randint(FIRST_TAG_ID, FIRST_TAG_ID + 2, shape, generator=g)
    nts = torch.randint(FIRST_TAG_ID, FIRST_TAG_ID + 5, shape, generator=g)
    untagged = torch.rand(shape, generator=g) < 0.4
    return terms.masked_fill(untagged, NOTAG_ID), nts.masked_fill(untagged, NOTAG_ID), ~untagged


def test_drop_word_tags_drops_a_share_of_words_in_both_streams():
    terms, nts, tagged = tag_streams((50, 200))
    net = {"src_tokens": torch.zeros(50, 200, dtype=torch.long), "src_terminals": terms, "src_nonterminals": nts}
    assert torch.equal(drop_word_tags(net, 0.0)["src_terminals"], terms)
    every = drop_word_tags(net, 1.0)
    assert bool((every["src_terminals"] == NOTAG_ID).all()) and bool((every["src_nonterminals"] == NOTAG_ID).all())
    torch.manual_seed(1)
    out = drop_word_tags(net, 0.3)
    dropped = out["src_terminals"] != terms
    assert torch.equal(dropped, out["src_nonterminals"] != nts)  # a word loses both tags or neither
    assert not bool((dropped & ~tagged).any())  # untagged positions stay as they were
    kept = tagged & ~dropped
    assert torch.equal(out["src_terminals"][kept], terms[kept])
    share = float(dropped.sum()) / float(tagged.sum())  # ~6,000 tagged positions: sd of the share 0.006
    assert abs(share - 0.3) < 0.04
    assert net["src_terminals"] is terms  # the sample is not modified in place


def test_criterion_drops_only_in_training(dictionary):
    class Task:
        target_dictionary = dictionary

    model = make_model(dictionary)
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (3, 12), generator=torch.Generator().manual_seed(2))
    terms, nts, _ = tag_streams((3, 12), seed=3)
    sample = {"net_input": {"src_tokens": tokens, "src_terminals": terms, "src_nonterminals": nts},
              "target": tokens.roll(-1, 1), "ntokens": 36,
              "terminal_target": terms.roll(-1, 1), "nonterminal_target": nts.roll(-1, 1)}
    plain, dropping = HexatagLMCriterion(Task()), HexatagLMCriterion(Task(), tag_dropout=1.0)
    with torch.no_grad():
        assert float(dropping(model, sample)[0]) == float(plain(model, sample)[0])  # eval mode: no dropout
        model.train()
        untagged = {**sample, "net_input": {**sample["net_input"], "src_terminals": torch.full_like(terms, NOTAG_ID),
                                            "src_nonterminals": torch.full_like(nts, NOTAG_ID)}}
        assert float(dropping(model, sample)[0]) == pytest.approx(float(plain(model, untagged)[0]), rel=1e-12)
        assert float(dropping(model, sample)[0]) != pytest.approx(float(plain(model, sample)[0]), rel=1e-6)
    model.eval()
    with pytest.raises(ValueError, match="tag-dropout"):
        HexatagLMCriterion(Task(), tag_dropout=1.5)


def test_untagged_source_is_the_model_with_every_word_untagged(dictionary):
    model = make_model(dictionary)
    encoded = [s for pair in sentence_pairs(dictionary, 3, seed=7) for s in pair]
    eos = dictionary.eos()
    sents = [sentence_of(i, *e, eos=eos) for i, e in enumerate(encoded)]
    got = score_sentences(model, sents, "untagged", StructureOptions(), eos, dictionary.pad())
    given = score_sentences(model, sents, "given", StructureOptions(), eos, dictionary.pad())
    for e, s, g in zip(encoded, got, given):
        src = torch.cat([torch.tensor([eos]), e[0][:-1]])[None]
        none = torch.full_like(src, NOTAG_ID)
        with torch.no_grad():
            want = F.log_softmax(model(src, src_terminals=none, src_nonterminals=none)[0].double(), -1)[0]
        want = want.gather(-1, e[0][:, None])[:, 0]
        assert max(abs(u - v) for u, v in zip(s.token_logprobs, want.tolist())) < 1e-9
        assert s.tags == [] and s.tag_logprobs == [] and abs(s.joint - s.logprob) < 1e-12
        assert abs(s.logprob - g.logprob) > 1e-6  # the tags matter to this model


def test_abstaining_self_is_exact_and_spans_self_to_untagged(dictionary):
    """``self`` with ``abstain`` P: P = 0 is plain ``self``; P = 1 leaves every word <notag> (= ``untagged``);
    in between, the words whose best allowed pair has p < P are left untagged, and the per-token numbers are
    one full forward's with exactly those tags (the choice is a function of the prefix: exact)."""
    from sipe_fairseq.hexatag.constrained import PAIRS
    from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS

    model = make_model(dictionary)
    encoded = [s for pair in sentence_pairs(dictionary, 3, seed=9) for s in pair]
    eos, pad = dictionary.eos(), dictionary.pad()
    sents = [sentence_of(i, *e, eos=eos) for i, e in enumerate(encoded)]
    plain = score_sentences(model, sents, "self", StructureOptions(), eos, pad)
    zero = score_sentences(model, sents, "self", StructureOptions(abstain=0.0), eos, pad)
    every = score_sentences(model, sents, "self", StructureOptions(abstain=1.0), eos, pad)
    untagged = score_sentences(model, sents, "untagged", StructureOptions(), eos, pad)
    import math
    probs = sorted(math.exp(c) for x in plain for c in x.tag_logprobs)
    middle = probs[len(probs) // 2]  # about half of the words' best pairs are less sure than this
    some = score_sentences(model, sents, "self", StructureOptions(abstain=middle), eos, pad)
    left = 0
    for e, p, z, a, u, s in zip(encoded, plain, zero, every, untagged, some):
        assert z.tags == p.tags and z.logprob == p.logprob
        assert all(t == ("-", "-") for t in a.tags) and abs(a.logprob - u.logprob) < 1e-9
        # an independent full forward with the chosen tags on the words' first subwords
        starts = [k for k in range(len(e[0]) - 1) if int(e[1][k]) >= FIRST_TAG_ID]
        src = torch.cat([torch.tensor([eos]), e[0][:-1]])[None]
        terms, nts = torch.full_like(src, NOTAG_ID), torch.full_like(src, NOTAG_ID)
        for k, tag in zip(starts, s.tags):
            if tag != ("-", "-"):
                terms[0, k + 1] = FIRST_TAG_ID + TERMINALS.index(tag[0])
                nts[0, k + 1] = FIRST_TAG_ID + NONTERMINALS.index(tag[1])
        with torch.no_grad():
            want = F.log_softmax(model(src, src_terminals=terms, src_nonterminals=nts)[0].double(), -1)[0]
        want = want.gather(-1, e[0][:, None])[:, 0]
        assert max(abs(x - y) for x, y in zip(s.token_logprobs, want.tolist())) < 1e-9
        left += sum(t == ("-", "-") for t in s.tags)
        assert all(t in PAIRS or t == ("-", "-") for t in s.tags)
    words = sum(len(s.tags) for s in some)
    assert 0 < left < words  # some words untagged, not all

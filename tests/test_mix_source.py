"""``mix:K``: the word-synchronous beam read as a language model (``structure/search.py``).

What is asserted, on float64 tiny decoders (SiPE with both anchors, word-aware SiPE with both tag
timings, GiLT):

* every next-token distribution sums to one over the whole vocabulary (each symbol's probability read
  off its own sentence ``prefix v </s>``), so ``q_K(x)`` is normalized and its perplexity exact;
* the numbers over a shared prefix do not depend on what follows (the beam only reads the prefix);
* with every tag sequence kept and no constraint (the heads' distribution is then a full one), the
  mixture telescopes to the marginal ``log sum_T p(x, T)`` by enumeration (independent full forwards);
* the same two properties with the adaptive width (``mass`` P < 1, ``--tags-mass``) alone and with
  ``top_pairs`` M (``--tags-top-pairs``); the mass ranking keeps exactly the hypotheses a plain
  Python loop over the softmax shares keeps, and on a sentence whose hypotheses are all counted its
  live hypotheses per word are sum_w min(K, 10^w) at P = 1, one per word at a tiny P, and never more
  (nor more decoder positions) at a smaller P.

Tolerance: float64 models whose attention softmax runs in float32 (``modules/attention.py``): the
same computation repeated agrees to 1e-10; a sum of 20 probabilities to 1e-9; the enumeration's full
forwards against the cache to 1e-6 (tests/test_prefix_tags.py).
"""
import itertools
import math

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from fairseq.data import Dictionary
from sipe_fairseq.data.tag_dictionary import NOTAG_ID
from sipe_fairseq.hexatag.constrained import PAIRS
from sipe_fairseq.models.gilt_lm import GiltConfig, GiltDecoder
from sipe_fairseq.eval.prefix_scores import source_summary
from sipe_fairseq.structure.family import StructureOptions, policy_for
from sipe_fairseq.structure.policy import top_per_group
from sipe_fairseq.structure.scoring import score_sentences
from sipe_fairseq.structure.sentences import Sentence, sentence_of
from sipe_fairseq.structure.sources import Mix, parse_source
from test_prefix_tags import encode_sentence, make_model, parser_tags, reference, word_pieces  # noqa: E402
from test_word_aware_heads import make_word_model  # noqa: E402
from conftest import small_dictionary  # noqa: E402

WORDS = [(1, 1), (7, 0), (4, 2), (9, 1)]


@pytest.fixture(autouse=True)
def share_every_prefix(monkeypatch):
    """Short sentences that branch: share the KV cache from the first position (as test_prefix_tags)."""
    from sipe_fairseq.modules import kv_cache
    monkeypatch.setattr(kv_cache, "SHARE_FROM", 0)


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(12, mark="\u2581", n_continuations=6)


class _GiltModel(torch.nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder


def gilt_model():
    d = Dictionary()
    for i in range(20):
        d.add_symbol(f"w{i}")
    cfg = GiltConfig(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=2, decoder_attention_heads=2,
                     dropout=0.0, tokens_per_sample=64, max_target_positions=64, gilt_proj_init_std=0.3)
    torch.manual_seed(1)
    return _GiltModel(GiltDecoder(cfg, d).double().eval())


def sipe_variants(dictionary, **width):
    """(name, model, options): the classic heads at both anchors, the word-aware heads at both timings;
    ``width``: the beam's ``mass`` and ``top_pairs``."""
    out = [("first_subword", make_model(dictionary), StructureOptions(placement="first_subword", **width)),
           ("last_subword", make_model(dictionary, seed=1), StructureOptions(placement="last_subword", **width))]
    for timing in ("paper", "nt-delay"):
        m = make_word_model(dictionary, seed=2)
        m.decoder.tag_timing = timing
        out.append((f"word-{timing}", m, StructureOptions(placement="last_subword", **width)))
    return out


def sipe_sentence(dictionary, pieces, extra=None):
    """Tokens of ``pieces`` (+ ``extra`` as a continuation) + </s>, word starts marked by the terminals."""
    toks, terms, nts = encode_sentence(dictionary, pieces, parser_tags(len(pieces)))
    if extra is not None:
        toks = torch.cat([toks[:-1], toks.new([extra]), toks[-1:]])
        terms = torch.cat([terms[:-1], terms.new([NOTAG_ID]), terms[-1:]])
        nts = torch.cat([nts[:-1], nts.new([NOTAG_ID]), nts[-1:]])
    return toks, terms, nts


def test_parse_mix_source():
    mix = parse_source(" mix:16 ")
    assert type(mix) is Mix and mix == Mix(16) != Mix(4) and (mix.k, str(mix)) == (16, "mix:16")
    assert (mix.kind, mix.number, mix.needs_parse, mix.chooses, mix.branches, mix.takes_width) == (
        "mix", "exact", False, True, True, True)
    for bad in ("mix", "mix:0", "mix:x", "mixture:4"):
        with pytest.raises(ValueError):
            parse_source(bad)


@pytest.mark.parametrize("k,width", [(1, {}), (3, {}), (3, {"mass": 0.6}), (3, {"mass": 0.6, "top_pairs": 2})])
def test_sipe_mixture_is_normalized_and_reads_only_the_prefix(dictionary, k, width):
    """For prefixes that end inside a word and at a word's end, sum_v q_K(v | prefix) = 1 over every
    symbol v (each scored as ``prefix v </s>``), and the prefix's own numbers are the same whatever v is;
    also with the adaptive width (``width``: mass P, top pairs M)."""
    pieces = word_pieces(dictionary, WORDS)
    for name, model, options in sipe_variants(dictionary, **width):
        for cut in (1, 2, 3):  # words kept whole before v
            prefix = pieces[:cut]
            for mid_word in (False, True):
                head = [list(p) for p in prefix]
                if mid_word:
                    head[-1] = head[-1][:1]  # v continues the last word after its first subword
                sents, m = [], sum(len(p) for p in head)
                for v in range(len(dictionary)):
                    toks, terms, nts = sipe_sentence(dictionary, head, v)
                    sents.append(sentence_of(v, toks, terms, nts, dictionary, dictionary.eos()))
                scores = score_sentences(model, sents, f"mix:{k}", options, dictionary.eos(), dictionary.pad(), 64)
                probs = torch.tensor([s.token_logprobs[m] for s in scores], dtype=torch.float64).exp()
                assert abs(float(probs.sum()) - 1) < 1e-9, (name, cut, mid_word, float(probs.sum()))
                ref = scores[0].token_logprobs[:m]
                for s in scores[1:]:
                    assert max(abs(u - v) for u, v in zip(s.token_logprobs[:m], ref)) < 1e-10, (name, cut)
                assert all(math.isclose(s.logprob, sum(s.token_logprobs), abs_tol=1e-9) for s in scores)


@pytest.mark.parametrize("mass", [1.0, 0.6])
def test_gilt_mixture_is_normalized_and_reads_only_the_prefix(mass):
    model = gilt_model()
    d = model.decoder.dictionary
    words = [[7, 8], [9], [10, 11]]
    for k in (1, 4):
        for cut in (1, 2):
            head = words[:cut]
            m = sum(len(w) for w in head)
            sents = []
            for v in range(len(d)):
                tokens = [t for w in head for t in w] + [v, d.eos()]
                starts = [sum(len(w) for w in head[:j]) for j in range(cut)]
                sents.append(Sentence(torch.tensor(tokens), starts, None, None))
            scores = score_sentences(model, sents, f"mix:{k}", StructureOptions(mass=mass), d.eos(), d.pad(), 64)
            probs = torch.tensor([s.token_logprobs[m] for s in scores], dtype=torch.float64).exp()
            assert abs(float(probs.sum()) - 1) < 1e-9, (k, cut, float(probs.sum()))
            for s in scores[1:]:
                assert max(abs(u - v) for u, v in zip(s.token_logprobs[:m], scores[0].token_logprobs[:m])) < 1e-10


@pytest.mark.parametrize("placement", ["first_subword", "last_subword"])
def test_unpruned_unconstrained_mixture_is_the_marginal(dictionary, placement):
    """With every one of the 1,000 tag sequences of a 3-word sentence kept and no constraint, q(x) =
    sum_T p(x, T) by enumeration; a narrower mixture is a different (still normalized) model, and
    mix:K's running per-token numbers sum to its total."""
    model = make_model(dictionary)
    pieces = word_pieces(dictionary, WORDS[:3])
    seqs = [list(s) for s in itertools.product(PAIRS, repeat=3)]
    encoded = [encode_sentence(dictionary, pieces, seq) for seq in seqs]
    _, joint = reference(model, encoded, placement)
    exact = float(torch.logsumexp(joint, 0))
    toks, terms, nts = encode_sentence(dictionary, pieces, parser_tags(3))
    sent = [sentence_of(0, toks, terms, nts, dictionary, dictionary.eos())]
    options = StructureOptions(placement=placement, constrained=False)
    full = score_sentences(model, sent, f"mix:{len(seqs)}", options, dictionary.eos(), dictionary.pad())[0]
    assert abs(full.logprob - exact) < 1e-6
    bound = score_sentences(model, sent, f"beam:{len(seqs)}", options, dictionary.eos(), dictionary.pad())[0]
    assert abs(bound.logprob - exact) < 1e-6
    narrow = score_sentences(model, sent, "mix:2", options, dictionary.eos(), dictionary.pad())[0]
    assert abs(narrow.logprob - sum(narrow.token_logprobs)) < 1e-9 and abs(narrow.logprob - exact) > 1e-6


def _kept_by_loop(groups, values, k, mass):
    """The reference of the mass ranking: per group, values sorted best first (ties: lower index), kept
    while fewer than k are kept and the kept ones' softmax share is below ``mass``."""
    out = []
    for g in sorted(set(groups)):
        members = sorted((i for i, x in enumerate(groups) if x == g), key=lambda i: (-values[i], i))
        top = values[members[0]]
        if top == -math.inf:  # no mass in the group: its first
            out.append(members[0])
            continue
        weights = [math.exp(values[i] - top) for i in members]
        total, share = sum(weights), 0.0
        for i, w in zip(members, weights):
            if len([j for j in out if groups[j] == g]) >= k or (share >= mass and i != members[0]):
                break
            out.append(i)
            share += w / total
    return out


def test_mass_ranking_keeps_the_best_until_their_share_reaches_p():
    """A crafted case (shares 0.5, 0.3, 0.15, 0.05: P = 0.75 keeps 2, P = 0.85 keeps 3, K = 2 caps it,
    a tiny P keeps 1, P = 1 keeps K), then random groups against a plain loop."""
    values = torch.tensor([0.15, 0.5, 0.05, 0.3], dtype=torch.float64).log()
    group = torch.zeros(4, dtype=torch.long)
    assert top_per_group(group, values, 4, 0.75).tolist() == [1, 3]
    assert top_per_group(group, values, 4, 0.85).tolist() == [1, 3, 0]
    assert top_per_group(group, values, 2, 0.85).tolist() == [1, 3]
    assert top_per_group(group, values, 4, 1e-9).tolist() == [1]
    assert top_per_group(group, values, 3, 1.0).tolist() == [1, 3, 0]
    gen = torch.Generator().manual_seed(0)
    for trial in range(50):
        n = int(torch.randint(1, 30, (1,), generator=gen))
        groups = torch.randint(0, 4, (n,), generator=gen)
        vals = torch.randn(n, generator=gen, dtype=torch.float64) * 3
        vals[torch.rand(n, generator=gen) < 0.1] = -torch.inf  # a pruned candidate: share 0
        k, mass = int(torch.randint(1, 6, (1,), generator=gen)), float(torch.rand(1, generator=gen))
        got = top_per_group(groups, vals, k, mass).tolist()
        assert sorted(got) == sorted(_kept_by_loop(groups.tolist(), vals.tolist(), k, mass)), (trial, k, mass)


def test_mass_out_of_range_is_refused(dictionary):
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="mass"):
            policy_for(make_model(dictionary), StructureOptions(mass=bad))


def test_smaller_mass_keeps_fewer_hypotheses(dictionary):
    """Unconstrained 3-word sentence (every one of the 10^w hypotheses of w words allowed): mix:K keeps
    sum_w min(K, 10^w) live hypotheses at P = 1, one per word at a tiny P; in between, never more
    hypotheses or decoder positions at a smaller P; the numbers stay normalized per token."""
    model = make_model(dictionary)
    pieces = word_pieces(dictionary, WORDS[:3])
    toks, terms, nts = encode_sentence(dictionary, pieces, parser_tags(3))
    sent = [sentence_of(0, toks, terms, nts, dictionary, dictionary.eos())]
    for k in (4, 50):
        previous = None
        for mass in (1.0, 0.999, 0.9, 0.5, 0.1, 1e-12):
            options = StructureOptions(constrained=False, mass=mass)
            s = score_sentences(model, sent, f"mix:{k}", options, dictionary.eos(), dictionary.pad())[0]
            live, positions = s.extra["live_hypotheses"], s.extra["positions"]
            if mass == 1.0:
                assert live == sum(min(k, 10 ** w) for w in (1, 2, 3)), (k, live)
            if mass == 1e-12:
                assert live == 3, (k, live)
            if previous is not None:
                assert live <= previous[0] and positions <= previous[1], (k, mass, live, positions, previous)
            previous = (live, positions)
        assert previous[1] < score_sentences(model, sent, f"mix:{k}", StructureOptions(constrained=False),
                                             dictionary.eos(), dictionary.pad())[0].extra["positions"]


def test_report_counts_live_hypotheses_and_positions(dictionary):
    """given runs one row: one live hypothesis per word and one decoder position per token; a beam's
    rows are summed over its sentences (words: without </s>; tokens: with it)."""
    model = make_model(dictionary)
    sents = []
    for i, words in enumerate((WORDS, WORDS[:2])):
        toks, terms, nts = encode_sentence(dictionary, word_pieces(dictionary, words), parser_tags(len(words)))
        sents.append(sentence_of(i, toks, terms, nts, dictionary, dictionary.eos()))
    for force in (False, True):
        given = source_summary(score_sentences(model, sents, "given", StructureOptions(), dictionary.eos(),
                                               dictionary.pad(), force_incremental=force))
        assert given["live_per_word"] == 1.0 and given["positions_per_token"] == 1.0
    mix = score_sentences(model, sents, "mix:3", StructureOptions(), dictionary.eos(), dictionary.pad())
    row = source_summary(mix)
    words = sum(len(s.starts) for s in sents)
    assert row["live_per_word"] == sum(s.extra["live_hypotheses"] for s in mix) / words
    assert row["positions_per_token"] == sum(s.extra["positions"] for s in mix) / sum(s.n for s in sents)
    assert 1.0 < row["live_per_word"] <= 3.0 and row["positions_per_token"] > 1.0

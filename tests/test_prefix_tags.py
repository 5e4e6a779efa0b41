"""Tags from the prefix only (``structure/``, the hexatag policy): ``given``, ``self`` and ``beam:K``.

Random-init tiny decoders in float64 (position injection with a large W_E so the tags matter).
The independent computation: :func:`reference` scores sentences with fixed tags in one full
forward, with the task's own anchor rule (``data/lm_dataset.tag_targets``) for log p(x, tags),
in float64.

Tolerance: the decoder's attention softmax runs in float32 even for float64 models
(``modules/attention.py``), so a forward over a prefix and one over the whole sentence differ by up
to ~3e-8 at the same positions; comparisons across lengths use TOL = 1e-6, comparisons of equal
computations 1e-10.
"""
import itertools
import math
import random

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from sipe_fairseq.data.lm_dataset import tag_targets
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from sipe_fairseq.eval.prefix_scores import source_summary
from sipe_fairseq.structure.family import StructureOptions
from sipe_fairseq.structure.scoring import score_sentences
from sipe_fairseq.structure.sentences import sentence_of
from sipe_fairseq.structure.sources import Beam, Given, Self, parse_source
from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS, encode
from sipe_fairseq.hexatag.constrained import CLOSED, PAIRS, START, advance
from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig, SiPETransformerXLModel
from conftest import small_dictionary  # noqa: E402

PLACEMENTS = ("first_subword", "last_subword")
TOL = 1e-6


class PrefixTagScorer:
    """The structure engine with one source, on sentences ``(tokens, terminals, nonterminals)``
    (``batch``: sentences scored together; the beam's trace kept)."""

    def __init__(self, model, source="self", placement="first_subword", constrained=True, use_cache=True, batch=64,
                 top_pairs=0):
        self.model, self.source, self.batch = model, source, batch
        self.options = StructureOptions(placement=placement, constrained=constrained, use_cache=use_cache,
                                        top_pairs=top_pairs)

    def score(self, tokens, terminals=None, nonterminals=None, dictionary=None):
        return self.score_batch([(tokens, terminals, nonterminals)], dictionary)[0]

    def score_batch(self, encoded, dictionary=None):
        eos = int(encoded[0][0][-1])
        sents = [sentence_of(i, t, a, b, dictionary, eos) for i, (t, a, b) in enumerate(encoded)]
        return score_sentences(self.model, sents, self.source, self.options, eos, 1, self.batch, keep_trace=True)


@pytest.fixture(autouse=True)
def share_every_prefix(monkeypatch):
    """The beams here branch on short sentences: share the KV cache from the first position
    (modules/kv_cache.py; plain copies below SHARE_FROM are tested in test_incremental.py)."""
    from sipe_fairseq.modules import kv_cache
    monkeypatch.setattr(kv_cache, "SHARE_FROM", 0)


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(12, mark="\u2581", n_continuations=6)


def make_model(dictionary, injection="position", seed=0, positions=64, position_encoding="relative"):
    cfg = SiPEDecoderConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=4,
                            dropout=0.0, sipe_injection=injection, sipe_proj_init_std=0.5, sipe_tag_heads="on",
                            tokens_per_sample=positions, max_target_positions=positions, position_encoding=position_encoding)
    torch.manual_seed(seed)
    model = SiPETransformerXLModel(SiPEDecoder(cfg, dictionary)).double().eval()
    with torch.no_grad():  # sharper tag heads than the init gives, so that choices differ by context
        model.decoder.terminal_head.weight.mul_(8)
        model.decoder.nonterminal_head.weight.mul_(8)
    return model


@pytest.fixture(scope="module")
def model(dictionary):
    return make_model(dictionary)


def word_pieces(dictionary, words):
    """words: list of (stem index, continuation count) -> list of piece-id lists."""
    return [[dictionary.index(f"\u2581w{s}")] + [dictionary.index(f"x{(s + j) % 6}") for j in range(c)] for s, c in words]


def encode_sentence(dictionary, pieces, tags):
    toks, terms, nts = [], [], []
    for ps, (t, nt) in zip(pieces, tags):
        for j, p in enumerate(ps):
            toks.append(p)
            terms.append(FIRST_TAG_ID + TERMINALS.index(t) if j == 0 else NOTAG_ID)
            nts.append(FIRST_TAG_ID + NONTERMINALS.index(nt) if j == 0 else NOTAG_ID)
    toks.append(dictionary.eos())
    terms.append(NOTAG_ID)
    nts.append(NOTAG_ID)
    return torch.tensor(toks), torch.tensor(terms), torch.tensor(nts)


def parser_tags(n):
    """A whole-sentence "parse": every word attaches to the last one (the root), so a word's tags
    depend on how many words follow (word 2 is l/R1 before a third word, r/EOS as the last)."""
    return encode([n] * (n - 1) + [0])


def sentence_pairs(dictionary, n_pairs=6, seed=3):
    """Pairs of sentences sharing their first m words (m >= 2), then different."""
    rng = random.Random(seed)
    out = []
    for _ in range(n_pairs):
        m = rng.randint(2, 3)
        shared = [(rng.randrange(12), rng.randrange(1, 3)) for _ in range(m)]
        a = shared + [(rng.randrange(12), rng.randrange(2)) for _ in range(rng.randint(0, 2))]
        b = shared + [(rng.randrange(12), rng.randrange(2)) for _ in range(rng.randint(1, 3))]
        pa, pb = word_pieces(dictionary, a), word_pieces(dictionary, b)
        out.append((encode_sentence(dictionary, pa, parser_tags(len(a))), encode_sentence(dictionary, pb, parser_tags(len(b)))))
    return out


@torch.no_grad()
def reference(model, encoded, placement):
    """Per sentence (same length): LM log-probs per target (n,) and log p(x, tags), float64."""
    t = torch.stack([e[0] for e in encoded])
    a = torch.stack([e[1] for e in encoded])
    b = torch.stack([e[2] for e in encoded])
    eos = int(t[0, -1])
    src = torch.cat([torch.full_like(t[:, :1], eos), t[:, :-1]], 1)
    sa = torch.cat([torch.full_like(a[:, :1], NOTAG_ID), a[:, :-1]], 1)
    sb = torch.cat([torch.full_like(b[:, :1], NOTAG_ID), b[:, :-1]], 1)
    logits, extra = model(src, src_terminals=sa, src_nonterminals=sb)
    lm = torch.log_softmax(logits.double(), -1).gather(-1, t[..., None]).squeeze(-1)
    joint = lm.sum(-1)
    for (kind, n), future in zip((("terminal", 2), ("nonterminal", 5)), (a, b)):
        lp = torch.log_softmax(extra[f"{kind}_logits"].double(), -1)
        for i in range(len(t)):
            cls = tag_targets(src[i], sa[i], future[i], (eos,), NOTAG_ID, placement) - FIRST_TAG_ID
            pos = ((cls >= 0) & (cls < n)).nonzero().squeeze(-1)
            joint[i] += lp[i, pos].gather(-1, cls[pos][:, None]).sum()
    return lm, joint


def shared_targets(x, y):
    """Number of leading target positions with identical inputs and targets."""
    n = min(len(x), len(y))
    s = 0
    while s < n and int(x[s]) == int(y[s]):
        s += 1
    return s


def test_parse_tag_source():
    given, own, beam = parse_source("given"), parse_source("self"), parse_source(" beam:16 ")
    assert (type(given), type(own), type(beam)) == (Given, Self, Beam) and beam == Beam(16) != Beam(4)
    assert (str(given), str(own), str(beam), beam.k) == ("given", "self", "beam:16", 16)
    assert parse_source(beam) is beam
    assert [(s.kind, s.number, s.needs_parse, s.chooses, s.branches, s.takes_width) for s in (given, own, beam)] == [
        ("given", "conditional", True, False, False, False), ("self", "exact", False, True, False, False),
        ("beam", "bound", False, True, True, True)]
    for bad in ("beam", "beam:0", "beam:x", "gold", "beam-word", "beam-word:4", "given:2", "self:1"):
        with pytest.raises(ValueError):
            parse_source(bad)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("constrained", [True, False])
def test_prefix_invariance(model, dictionary, placement, constrained):
    """Over a shared prefix, ``self`` and ``beam:3`` give identical tags, per-token numbers and
    beam contents; ``given`` parser tags (whole-sentence) differ on some pairs: the leak."""
    leaks = tag_leaks = 0
    pairs = sentence_pairs(dictionary)
    for source in ("self", "beam:3", "given"):
        scorer = PrefixTagScorer(model, source, placement, constrained)
        for (ta, aa, ba), (tb, ab, bb) in pairs:
            s = shared_targets(ta, tb)
            assert s >= 2
            x, y = scorer.score(ta, aa, ba), scorer.score(tb, ab, bb)
            # words that start inside the shared prefix
            words = sum(1 for k in range(s) if int(aa[k]) >= FIRST_TAG_ID)
            diff = max(abs(u - v) for u, v in zip(x.token_logprobs[:s], y.token_logprobs[:s]))
            if source == "given":
                leaks += diff > 1e-6
                tag_leaks += x.tags[:words] != y.tags[:words]
                continue
            assert diff < 1e-10, (source, diff)
            if source == "self":
                assert x.tags[:words] == y.tags[:words]
            if source.startswith("beam"):
                # beam contents after every word whose scored positions all lie in the prefix
                starts = [k for k in range(len(ta) - 1) if int(aa[k]) >= FIRST_TAG_ID]
                ends = starts[1:] + [len(ta) - 1]
                full = [w for w, e in enumerate(ends) if e < s]
                for w in full:
                    bx, by = x.extra["trace"][w], y.extra["trace"][w]
                    assert [p for p, _ in bx] == [p for p, _ in by]
                    assert max(abs(u - v) for (_, u), (_, v) in zip(bx, by)) < 1e-10
    assert leaks >= 1 and tag_leaks >= 1


def valid_prefix_sequences(n):
    """Every length-n pair sequence the constrained beam can reach: each non-final word leaves an
    open (not EOS-closed) valid prefix, the last word any pair the prefix check allows."""
    out = []
    for seq in itertools.product(PAIRS, repeat=n):
        state, ok = START, True
        for w, p in enumerate(seq):
            state = advance(state, p)
            if state is None or (state == CLOSED and w < n - 1):
                ok = False
                break
        if ok:
            out.append(list(seq))
    return out


@pytest.mark.parametrize("placement,constrained,arch", [(p, c, "txl") for p in PLACEMENTS for c in (True, False)]
                         + [("first_subword", True, "rope-input")])
def test_beam_equals_enumerated_marginal(model, dictionary, placement, constrained, arch):
    """beam:K with K >= the number of tag sequences = log sum_T p(x, T) by enumeration (each term
    from one full forward with fixed tags); smaller K gives less; beam:1 = p(x, its tags); self is
    exactly the LM with its own tags."""
    if arch == "rope-input":
        model = make_model(dictionary, injection="input", position_encoding="rotary", seed=2)
    pieces = word_pieces(dictionary, [(1, 1), (7, 0), (4, 2)])
    toks, _, _ = encode_sentence(dictionary, pieces, parser_tags(3))
    seqs = valid_prefix_sequences(3) if constrained else [list(s) for s in itertools.product(PAIRS, repeat=3)]
    assert len(seqs) == 1000 if not constrained else 0 < len(seqs) < 1000
    encoded = [encode_sentence(dictionary, pieces, seq) for seq in seqs]
    _, joint = reference(model, encoded, placement)
    exact = float(torch.logsumexp(joint, 0))
    tags = encoded[0][1], encoded[0][2]
    full = PrefixTagScorer(model, f"beam:{len(seqs)}", placement, constrained).score(toks, *tags)
    assert abs(full.logprob - exact) < TOL
    assert abs(sum(full.token_logprobs) - full.logprob) < 1e-9  # the running bound telescopes
    small = PrefixTagScorer(model, "beam:2", placement, constrained).score(toks, *tags)
    assert small.logprob < exact - 1e-6
    one = PrefixTagScorer(model, "beam:1", placement, constrained).score(toks, *tags)
    k = seqs.index(one.tags)
    assert abs(one.logprob - float(joint[k])) < TOL and abs(one.joint - one.logprob) < 1e-9
    assert float(joint[k]) >= float(joint.max()) - 60  # sanity: a real sequence, not -inf
    own = PrefixTagScorer(model, "self", placement, constrained).score(toks, *tags)
    ref = reference(model, [encode_sentence(dictionary, pieces, own.tags)], placement)[0][0]
    assert max(abs(u - v) for u, v in zip(own.token_logprobs, ref.tolist())) < TOL
    k = seqs.index(own.tags) if own.tags in seqs else None
    if k is not None:
        assert abs(own.joint - float(joint[k])) < TOL


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_top_pairs_pruning(model, dictionary, placement):
    """beam:K expanding each hypothesis with its heads' M best allowed pairs: with M = 10 (every pair)
    it is the exhaustive beam; with M = 1 one path survives, the greedy one: its tags are self's and
    its bound is self's joint log p(x, tags) (a beam is not monotone in M: it drops closed trees)."""
    for (ta, aa, ba), _ in sentence_pairs(dictionary, 3, seed=7):
        full = PrefixTagScorer(model, "beam:16", placement).score(ta, aa, ba)
        all_pairs = PrefixTagScorer(model, "beam:16", placement, top_pairs=10).score(ta, aa, ba)
        assert all_pairs.tags == full.tags and abs(all_pairs.logprob - full.logprob) < 1e-10
        one = PrefixTagScorer(model, "beam:16", placement, top_pairs=1).score(ta, aa, ba)
        own = PrefixTagScorer(model, "self", placement).score(ta, aa, ba)
        assert one.tags == own.tags and one.extra["hypotheses"] == 1
        assert abs(one.logprob - own.joint) < TOL
        two = PrefixTagScorer(model, "beam:16", placement, top_pairs=2).score(ta, aa, ba)
        assert 1 <= two.extra["hypotheses"] <= 16 and math.isfinite(two.logprob)
        assert two.extra["positions"] < full.extra["positions"]  # fewer candidates scored


class OneHotHeads(torch.nn.Module):
    """The model with its tag heads replaced by the gold tags' one-hot (logit 1e4) at the anchors
    the task trains them at (``tag_targets``)."""

    def __init__(self, inner, placement):
        super().__init__()
        self.inner, self.decoder, self.placement, self.gold = inner, inner.decoder, placement, None

    def get_normalized_probs(self, *args, **kwargs):
        return self.inner.get_normalized_probs(*args, **kwargs)

    def forward(self, src, **kwargs):
        logits, extra = self.inner(src, **kwargs)
        t, a, b = self.gold
        eos = int(t[-1])
        full_src, full_terms = torch.cat([t.new([eos]), t[:-1]]), torch.cat([a.new([NOTAG_ID]), a[:-1]])
        extra = dict(extra)
        for (kind, n), future in zip((("terminal", 2), ("nonterminal", 5)), (a, b)):
            target = tag_targets(full_src, full_terms, future, (eos,), NOTAG_ID, self.placement)[: src.size(1)]
            cls = target - FIRST_TAG_ID
            onehot = torch.zeros(src.size(1), n, dtype=logits.dtype)
            has = (cls >= 0) & (cls < n)
            onehot[has.nonzero().squeeze(-1), cls[has]] = 1e4
            k = extra[f"{kind}_logits"].size(1)
            extra[f"{kind}_logits"] = onehot[-k:].expand(src.size(0), -1, -1)
        return logits, extra


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_self_with_gold_onehot_heads_reproduces_given(model, dictionary, placement):
    wrapped = OneHotHeads(model, placement)
    rng = random.Random(5)
    differs = 0
    for _ in range(4):
        n = rng.randint(1, 5)
        heads = [0] * n
        root = rng.randrange(n)
        for i in range(n):  # a random projective tree: everyone attaches towards the root
            heads[i] = 0 if i == root else (i + 2 if i < root else i)
        pieces = word_pieces(dictionary, [(rng.randrange(12), rng.randrange(3)) for _ in range(n)])
        gold = encode(heads)
        sent = encode_sentence(dictionary, pieces, gold)
        wrapped.gold = sent
        own = PrefixTagScorer(wrapped, "self", placement).score(*sent)
        given = PrefixTagScorer(model, "given", placement).score(*sent)
        ref_lm, ref_joint = reference(model, [sent], placement)
        ref = ref_lm[0].tolist()
        assert own.tags == gold == given.tags and own.complete and own.restarts == 0
        assert max(abs(u - v) for u, v in zip(own.token_logprobs, ref)) < TOL
        assert max(abs(u - v) for u, v in zip(given.token_logprobs, ref)) < 1e-10
        assert abs(given.joint - float(ref_joint[0])) < TOL
        differs += PrefixTagScorer(model, "self", placement).score(*sent).tags != gold
    assert differs  # the real heads do not reproduce the gold tags: the test can tell the difference


class FakeCache(torch.nn.Module):
    """A KV-cache stand-in that checks the scorer's bookkeeping: it stores every row's inputs,
    follows ``reorder_incremental_state`` (repeated indices included), checks that each call's
    prefix equals what it holds, and returns only the new positions (of a full forward)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.terminal_head = inner.decoder.terminal_head
        self.dictionary = inner.decoder.dictionary
        self.structure, self.takes_tags = "hexatags", True  # what it stands in for (structure/family.py)
        self.calls = self.reorders = 0

    @property
    def decoder(self):
        return self

    def get_normalized_probs(self, *args, **kwargs):
        return self.inner.get_normalized_probs(*args, **kwargs)

    def forward(self, src, src_terminals=None, src_nonterminals=None, incremental_state=None):
        held = incremental_state.get("inputs")
        rows = torch.stack([src, src_terminals, src_nonterminals])
        start = 0
        if held is not None:
            start = held.size(2)
            assert held.size(1) == src.size(0) and torch.equal(held, rows[:, :, :start]), "stale cache"
        incremental_state["inputs"] = rows
        self.calls += 1
        logits, extra = self.inner(src, src_terminals=src_terminals, src_nonterminals=src_nonterminals)
        extra = {k: v[:, start:] for k, v in extra.items() if k.endswith("_logits")}
        return logits[:, start:], extra

    def reorder_incremental_state_scripting(self, incremental_state, new_order):
        self.reorders += 1
        incremental_state["inputs"] = incremental_state["inputs"][:, new_order]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_cache_path_matches_full_forward(model, dictionary, placement):
    """The scorer's cache bookkeeping (a fake cache that checks every prefix) and the decoder's real
    KV cache both give the full-forward scores."""
    fake = FakeCache(model)
    for (ta, aa, ba), _ in sentence_pairs(dictionary, 3):
        for source in ("self", "beam:4"):
            x = PrefixTagScorer(model, source, placement, use_cache=False).score(ta, aa, ba)
            y = PrefixTagScorer(fake, source, placement).score(ta, aa, ba)
            z = PrefixTagScorer(model, source, placement, use_cache=True).score(ta, aa, ba)
            assert x.tags == y.tags == z.tags and abs(x.logprob - y.logprob) < 1e-10
            assert abs(x.logprob - z.logprob) < TOL
    assert fake.calls > 0 and fake.reorders > 0


def test_model_without_tags_scores_plain_lm(dictionary):
    base = make_model(dictionary, injection="none")
    pieces = word_pieces(dictionary, [(2, 1), (3, 0)])
    sent = encode_sentence(dictionary, pieces, parser_tags(2))
    ref = reference(base, [sent], "first_subword")[0][0]
    for source in ("given", "self", "beam:4"):
        s = PrefixTagScorer(base, source).score(*sent)
        assert abs(s.logprob - float(ref.sum())) < TOL


def test_source_summary_counts(model, dictionary):
    pairs = sentence_pairs(dictionary, 2)
    encoded = [s for pair in pairs for s in pair]
    scores = PrefixTagScorer(model, "self").score_batch(encoded)
    given = [[(TERMINALS[int(a[k]) - FIRST_TAG_ID], NONTERMINALS[int(b[k]) - FIRST_TAG_ID])
              for k in range(len(t) - 1) if int(a[k]) >= FIRST_TAG_ID] for t, a, b in encoded]
    out = source_summary(scores, given)
    tokens = sum(len(t) for t, _, _ in encoded)
    words = sum(len(g) for g in given)
    assert out["tokens"] == tokens and out["words"] == words + len(encoded)
    assert out["tokens.eos"] == len(encoded) and out["tokens.word_initial"] == words
    assert out["tokens.continuation"] == tokens - words - len(encoded)
    nll = -sum(s.logprob for s in scores)
    assert math.isclose(out["ppl"], math.exp(nll / tokens))
    assert math.isclose(out["ppl_per_word"], math.exp(nll / (words + len(encoded))))
    agree = sum(c[0] == g[0] for s, gs in zip(scores, given) for c, g in zip(s.tags, gs))
    assert math.isclose(out["terminal_acc"], 100.0 * agree / words)


def test_split_given_matches_eval_lm_blocks(tmp_path):
    """On a sipe-preprocess directory: every sentence scored alone with its given tags gives the
    perplexity and the joint bound that fairseq's eval-lm data path (``perplexity.score_split``,
    --sample-break-mode eos: one sentence per block) gives, with the same token and word counts;
    ``self`` and ``beam:2`` run over the split and count every sentence."""
    from conftest import toy_lm_task
    from sipe_fairseq.eval.perplexity import score_split
    from sipe_fairseq.eval.prefix_scores import score_split_sources

    # its own tiny corpus (not conftest's toy_data): every valid sentence is scored alone, prefix by prefix
    task = toy_lm_task(tmp_path, sample_break_mode="eos", tokens_per_sample=512, tag_head_placement="last_subword")
    model = make_model(task.source_dictionary, positions=512)
    blocks = score_split(model, task, "valid")
    ours = score_split_sources(model, task, "valid", ["given", "self", "beam:2"])
    given, joint = ours["given"], ours["given-joint"]
    assert given["sentences"] == given["split_sentences"] == 12 and given["placement"] == "last_subword"
    assert given["longer_than_max_positions"] == 0
    assert given["tokens"] == blocks["lm"]["count"] and given["words"] == blocks["lm.per_word"]["count"]
    for kind in ("eos", "word_initial", "continuation"):
        assert given[f"tokens.{kind}"] == blocks[f"lm.{kind}"]["count"]
        assert abs(given[f"bits.{kind}"] - blocks[f"lm.{kind}"]["bits"]) < 1e-4
    assert abs(math.log(given["ppl"]) - blocks["lm"]["nll"]) < 1e-5
    assert abs(math.log(joint["ppl"]) - blocks["joint"]["nll"]) < 1e-5
    assert abs(math.log(joint["ppl_per_word"]) - blocks["joint.per_word"]["nll"]) < 1e-5
    assert ours["self"]["tokens"] == ours["beam:2"]["tokens"] == given["tokens"]
    assert ours["self"]["complete"] <= 12 and ours["given"]["complete"] == 12


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("source", ["given", "self", "beam:1", "beam:3", "beam:16"])
def test_batched_sentences_match_one_at_a_time(model, dictionary, source, placement):
    """Sentences of different lengths scored together (every hypothesis of every sentence through one
    decoder call per position; each sentence leaves the batch after its </s>), in batches of 3 or all
    at once, give each sentence what it gets alone, in input order (float64)."""
    encoded = [s for pair in sentence_pairs(dictionary, 4, seed=11) for s in pair]
    together = PrefixTagScorer(model, source, placement, batch=len(encoded)).score_batch(encoded)
    threes = PrefixTagScorer(model, source, placement, batch=3).score_batch(encoded)
    for sent, x, y in zip(encoded, together, threes):
        alone = PrefixTagScorer(model, source, placement).score(*sent)
        for other in (x, y):
            assert other.tags == alone.tags and other.n_tokens == len(sent[0])
            assert abs(other.logprob - alone.logprob) < 1e-9 and abs(other.joint - alone.joint) < 1e-9
            assert max(abs(u - v) for u, v in zip(other.token_logprobs, alone.token_logprobs)) < 1e-9


def test_given_forced_path_equals_one_full_forward(model, dictionary):
    """given: the search's forced path (one position at a time through the KV cache) gives the one
    full forward's per-token scores and tag costs."""
    encoded = [s for pair in sentence_pairs(dictionary, 3, seed=5) for s in pair]
    eos = dictionary.eos()
    sents = [sentence_of(i, *e, eos=eos) for i, e in enumerate(encoded)]
    for placement in PLACEMENTS:
        opts = StructureOptions(placement=placement)
        full = score_sentences(model, sents, "given", opts, eos, dictionary.pad())
        step = score_sentences(model, sents, "given", opts, eos, dictionary.pad(), force_incremental=True)
        for x, y in zip(full, step):
            assert x.tags == y.tags
            assert max(abs(u - v) for u, v in zip(x.token_logprobs, y.token_logprobs)) < TOL
            assert max(abs(u - v) for u, v in zip(x.tag_logprobs, y.tag_logprobs)) < TOL


def test_word_start_mismatch_is_counted(model, dictionary):
    """A tag on a piece without U+2581 (or the reverse) is counted, not silently used."""
    pieces = word_pieces(dictionary, [(2, 1), (3, 1)])
    good = encode_sentence(dictionary, pieces, parser_tags(2))
    t, a, b = (x.clone() for x in good)
    a[1], b[1] = a[2], b[2]  # move word 2's tags onto word 1's continuation piece
    a[2] = b[2] = NOTAG_ID
    out = PrefixTagScorer(model, "self").score_batch([good, (t, a, b)], dictionary)
    assert [s.extra["word_start_mismatch"] for s in out] == [False, True]
    assert source_summary(out)["word_start_mismatch"] == 1


def test_search_errors_count_where_the_parse_beats_the_beam(model, dictionary):
    """search_errors: sentences whose parse's tags have a higher joint log p(x, tags) than the beam's best
    hypothesis. With the best sequence by enumeration as the "parse" (full forwards, ``reference``), greedy
    beam:1 errs exactly where its joint is below that maximum, and a beam wide enough to keep every sequence
    of these 3-word sentences never errs."""
    from sipe_fairseq.eval.prefix_scores import search_errors

    rng = random.Random(4)
    seqs = valid_prefix_sequences(3)
    encoded, best = [], []
    for _ in range(10):
        pieces = word_pieces(dictionary, [(rng.randrange(12), rng.randrange(2)) for _ in range(3)])
        joint = reference(model, [encode_sentence(dictionary, pieces, seq) for seq in seqs], "first_subword")[1]
        encoded.append(encode_sentence(dictionary, pieces, seqs[int(joint.argmax())]))
        best.append(float(joint.max()))
    eos = dictionary.eos()
    sents = [sentence_of(i, *e, eos=eos) for i, e in enumerate(encoded)]
    opts = StructureOptions(placement="first_subword")
    given = score_sentences(model, sents, "given", opts, eos, dictionary.pad())
    one = score_sentences(model, sents, "beam:1", opts, eos, dictionary.pad())
    want = sum(b.joint < m - 1e-6 for b, m in zip(one, best))
    assert search_errors(given, one) == {"search_errors": want, "search_compared": 10} and 0 < want < 10
    wide = score_sentences(model, sents, f"beam:{len(seqs)}", opts, eos, dictionary.pad())
    assert search_errors(given, wide)["search_errors"] == 0

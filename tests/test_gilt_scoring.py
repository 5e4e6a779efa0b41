"""GiLT scoring through the structure engine (the arc policy): cached incremental decoding = the full
forward; the unbounded beam = exact enumeration, under both count-branching rules; a batch = one
sentence at a time."""
import itertools

import pytest
import torch
import torch.nn.functional as F

import fairseq  # noqa: F401
from fairseq.data import Dictionary
from sipe_fairseq.data.gilt.gilt_dataset import block_graph, position_words
from sipe_fairseq.structure.arcs import branch_counts
from sipe_fairseq.structure.family import StructureOptions
from sipe_fairseq.structure.scoring import score_sentences
from sipe_fairseq.structure.sentences import Sentence
from sipe_fairseq.models.gilt_lm import GiltConfig, GiltDecoder
from sipe_fairseq.modules.arc_scorer import arc_losses
from sipe_fairseq.modules.tag_embedding import FIRST_TAG_ID

WORDS = [[7, 8], [9], [10, 11]]


def sentence(words, gold=None):
    tokens = [t for w in words for t in w] + [2]  # </s> = 2 in fairseq's Dictionary
    starts = [sum(len(w) for w in words[:k]) for k in range(len(words))]
    return Sentence(torch.tensor(tokens), starts, None, gold)


def score(model, words, source="self", gold=None, count_beam=5, rule="top-then-allowed", batch=64, max_memory=0):
    """One sentence (or, with a list of word lists, several) under ``source``; ``max_memory``: the budget (0: the
    default, half of what the machine has free)."""
    many = bool(words) and isinstance(words[0][0], list)
    sents = [sentence(w, g) for w, g in zip(words, gold or [None] * len(words))] if many else [sentence(words, gold)]
    options = StructureOptions(count_beam=count_beam, count_rule=rule, max_memory=max_memory)
    out = score_sentences(model, sents, source, options, 2, 1, batch)
    return out if many else out[0]
GOLD = [([], []), ([0], [1]), ([2], [])]  # root -> 2, 2 -> 1, 2 -> 3


class _Model(torch.nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder


pytestmark = pytest.mark.usefixtures("share_every_prefix")  # conftest.py


@pytest.fixture(scope="module")
def model():
    d = Dictionary()
    for i in range(30):
        d.add_symbol(f"w{i}")
    cfg = GiltConfig(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=3, decoder_attention_heads=2, dropout=0.0,
                     tokens_per_sample=64, max_target_positions=64, gilt_proj_init_std=0.3)
    torch.manual_seed(0)
    dec = GiltDecoder(cfg, d).double().eval()
    return _Model(dec)


def full(model, words, arcs):
    """Full (non-incremental) forward of one sentence: (sum log p(x | G), extra)."""
    eos = model.decoder.dictionary.eos()
    toks = [eos] + [t for w in words for t in w]
    terms = [FIRST_TAG_ID - 1] + [FIRST_TAG_ID if k == 0 else FIRST_TAG_ID - 1 for w in words for k in range(len(w))]
    src, term = torch.tensor(toks), torch.tensor(terms)
    sw, first = position_words(src, term, eos, model.decoder.dictionary.bos())
    g = {k: torch.from_numpy(v)[None] for k, v in block_graph([arcs]).items()}
    logits, extra = model.decoder(src[None], src_words=sw[None], gilt_pairs=g["gilt_pairs"], gilt_prev=g["gilt_prev"],
                                  gilt_word_pos=torch.cat([first.new_zeros(1), first])[None], gilt_local=g["gilt_local"],
                                  gilt_sent=g["gilt_sent"])
    target = torch.tensor(toks[1:] + [eos])
    lp = F.log_softmax(logits[0], -1).gather(-1, target[:, None]).sum()
    return float(lp), extra, g


@torch.no_grad()
def test_incremental_equals_full(model):
    eos = model.decoder.dictionary.eos()
    assert eos == 2
    got = score(model, WORDS, "given", GOLD)
    want, extra, g = full(model, WORDS, GOLD)
    assert got.n_tokens == 6 and got.n_words == 3
    # float64, cached steps vs one full forward (another summation order, and the arc scorer's float32
    # sinusoid features): ~1e-12 here, 1e-9 seen once; a float32 path would show ~1e-6
    assert got.logprob == pytest.approx(want, abs=1e-7)
    bce, ce, *_ = arc_losses(extra["arcs"], g["gilt_head"], g["gilt_dep"])
    # arc_losses computes in float32
    assert got.joint - got.logprob == pytest.approx(-float(bce), abs=1e-5)
    assert sum(got.extra["count_logprobs"]) == pytest.approx(-float(ce), abs=1e-5)
    # another graph gives another score (the features matter)
    assert score(model, WORDS, "given", [([], []), ([], []), ([0], [1, 2])]).logprob != pytest.approx(want, abs=1e-6)


@torch.no_grad()
@pytest.mark.parametrize("count_beam,rule", [(30, "top-then-allowed"), (3, "top-then-allowed"), (2, "allowed-then-top")])
def test_unbounded_beam_equals_enumeration(model, count_beam, rule):
    check_beam_equals_enumeration(model, count_beam=count_beam, rule=rule)


def admissible(count_logits, i, c, count_beam, rule):
    """The branching rule read literally: c is allowed (c <= 2i - 1) and, ``top-then-allowed``, fewer
    than ``count_beam`` of all 30 counts are more likely; ``allowed-then-top``, fewer than ``count_beam``
    of the allowed counts are. (No ties in these random logits.)"""
    lp = count_logits.tolist()
    allowed = [k for k in range(30) if k <= 2 * i - 1]
    pool = range(30) if rule == "top-then-allowed" else allowed
    return c in allowed and sum(lp[k] > lp[c] for k in pool) < count_beam


def test_branch_counts_is_the_rule_read_literally():
    """branch_counts against :func:`admissible` on random count distributions, every word position and
    beam of counts; a word whose top counts are all disallowed takes its most likely allowed count."""
    g = torch.Generator().manual_seed(0)
    fallbacks = 0
    for _ in range(200):
        lp = torch.log_softmax(torch.randn(30, generator=g, dtype=torch.float64) * 3, -1)
        for i in (1, 2, 3, 8, 20):
            for cb in (1, 2, 5, 30):
                for rule in ("top-then-allowed", "allowed-then-top"):
                    got = branch_counts(lp, i, cb, rule)
                    want = sorted((c for c in range(30) if admissible(lp, i, c, cb, rule)), key=lambda c: -float(lp[c]))
                    if not want:  # the fallback
                        fallbacks += 1
                        want = [max((c for c in range(30) if c <= 2 * i - 1), key=lambda c: float(lp[c]))]
                    assert got == want, (i, cb, rule)
    assert fallbacks > 0  # the case occurs


def check_beam_equals_enumeration(model, atol=1e-8, count_beam=30, rule="top-then-allowed"):
    """Every count sequence of WORDS the branching rule admits (all 48 graphs with count_beam 30),
    each scored by full forwards: their logsumexp is the unbounded beam's score (also used for
    gilt_transformer_lm, test_gilt_post.py)."""
    n = len(WORDS)
    scores = []
    for counts in itertools.product(*[range(min(2 * i - 1, 29) + 1) for i in range(1, n + 1)]):
        arcs = [([], []) for _ in range(n)]
        logpi = 0.0
        ok = True
        for i, c in enumerate(counts, 1):
            _, extra, _ = full(model, WORDS, arcs)
            a = extra["arcs"]
            ranked = [k for k in range(30) if admissible(a["count_logits"][0, i], i, k, count_beam, rule)]
            if not ranked:  # the fallback: the most likely allowed count
                ranked = [int(a["count_logits"][0, i, : min(2 * i - 1, 29) + 1].argmax())]
            ok &= c in ranked
            cand = [(float(a["head_logits"][0, i, v]), (v, i)) for v in range(i)] + \
                   [(float(a["dep_logits"][0, i, v]), (i, v)) for v in range(1, i)]
            chosen = [arc for _, arc in sorted(cand, key=lambda x: -x[0])[:c]]
            arcs[i - 1] = (sorted(h for h, d in chosen if d == i), sorted(d for h, d in chosen if h == i))
            logpi += float(F.log_softmax(a["count_logits"][0, i], -1)[c])
        if not ok:
            continue
        lm, _, _ = full(model, WORDS, arcs)
        scores.append(lm + logpi)
    if count_beam == 30:
        assert len(scores) == 2 * 4 * 6
    exact = float(torch.logsumexp(torch.tensor(scores, dtype=torch.float64), 0))
    # an explicit budget: the estimate of an unbounded beam (27,000 rows planned, a few hundred used) is several GiB,
    # near half of what a busy machine has free, so the default budget would make the test depend on the machine
    got = score(model, WORDS, f"beam:{10 ** 6}", count_beam=count_beam, rule=rule, max_memory=2 ** 40)
    assert got.extra["hypotheses"] == len(scores)
    assert got.logprob == pytest.approx(exact, abs=atol)
    # a narrow beam keeps fewer hypotheses and can only lose mass
    narrow = score(model, WORDS, "beam:2", count_beam=2, rule=rule)
    if rule == "allowed-then-top":
        assert narrow.extra["hypotheses"] == 2 and narrow.logprob < exact
    else:  # an early word may branch on one count only
        assert 1 <= narrow.extra["hypotheses"] <= 2 and narrow.logprob <= exact + atol


@torch.no_grad()
def test_batched_sentences_match_one_at_a_time(model):
    """Sentences of 1-6 words scored together (in batches of 3 or all at once) give, for every source,
    what each gets alone (float64)."""
    g = torch.Generator().manual_seed(3)
    words, golds = [], []
    for _ in range(7):
        n = int(torch.randint(1, 7, (1,), generator=g))
        words.append([[int(x) for x in torch.randint(4, 30, (int(torch.randint(1, 3, (1,), generator=g)),), generator=g)]
                      for _ in range(n)])
        golds.append([([i - 1], []) for i in range(1, n + 1)])  # a chain: word i's head is word i - 1 (root first)
    for source in ("given", "self", "beam:1", "beam:3", "beam:16"):
        together = score(model, words, source, golds, batch=len(words))
        threes = score(model, words, source, golds, batch=3)
        for w, gold, x, y in zip(words, golds, together, threes):
            alone = score(model, w, source, gold)
            for other in (x, y):
                assert other.extra["arcs"] == alone.extra["arcs"]
                assert other.logprob == pytest.approx(alone.logprob, abs=1e-9)
                assert other.joint == pytest.approx(alone.joint, abs=1e-9)
                assert max(abs(u - v) for u, v in zip(other.token_logprobs, alone.token_logprobs)) < 1e-9


def test_cli_bad_checkpoint(tmp_path, toy_data, caplog):
    """GiLT scoring is part of sipe-eval-lm: a file that is no checkpoint is exit status 3, one line naming it
    (on a sound data directory: a directory without dict.txt is refused first, exit 2)."""
    from sipe_fairseq.cli.eval_lm import main

    bad = tmp_path / "x.pt"
    bad.write_bytes(b"not a checkpoint")
    assert main([str(toy_data), "--path", str(bad), "--tags", "self"]) == 3
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "x.pt" in errors[0]


@torch.no_grad()
def test_best_arcs_follow_the_counts(model):
    """With beam 1 and count beam 1 the kept graph is the greedy one: per word, the argmax count of
    top arcs (checked against the full forward on the growing graph)."""
    got = score(model, WORDS, "self")
    arcs = [([], []) for _ in WORDS]
    want = []
    for i in range(1, len(WORDS) + 1):
        _, extra, _ = full(model, WORDS, arcs)
        a = extra["arcs"]
        c = int(a["count_logits"][0, i, : min(2 * i - 1, 29) + 1].argmax())
        cand = [(float(a["head_logits"][0, i, v]), (v, i)) for v in range(i)] + \
               [(float(a["dep_logits"][0, i, v]), (i, v)) for v in range(1, i)]
        chosen = [arc for _, arc in sorted(cand, key=lambda x: -x[0])[:c]]
        arcs[i - 1] = (sorted(h for h, d in chosen if d == i), sorted(d for h, d in chosen if h == i))
        want += [(h, i) for h in arcs[i - 1][0]] + [(i, d) for d in arcs[i - 1][1]]
    assert got.extra["hypotheses"] == 1 and sorted(got.extra["arcs"]) == sorted(want)

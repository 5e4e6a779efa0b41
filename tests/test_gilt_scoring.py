"""GiLT scoring: cached incremental decoding = the full forward; the unbounded beam = exact enumeration."""
import itertools

import pytest
import torch
import torch.nn.functional as F

import fairseq  # noqa: F401
from fairseq.data import Dictionary
from sipe_fairseq.data.gilt_dataset import block_graph, position_words
from sipe_fairseq.eval.gilt_scoring import main, score_sentence
from sipe_fairseq.models.gilt_lm import GiltConfig, GiltDecoder
from sipe_fairseq.modules.arc_scorer import arc_losses
from sipe_fairseq.modules.tag_embedding import FIRST_TAG_ID

WORDS = [[7, 8], [9], [10, 11]]
GOLD = [([], []), ([0], [1]), ([2], [])]  # root -> 2, 2 -> 1, 2 -> 3


class _Model(torch.nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder


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
    got = score_sentence(model, WORDS, eos, gold=GOLD)
    want, extra, g = full(model, WORDS, GOLD)
    assert got.n_tokens == 6 and got.n_words == 4
    assert got.logp == pytest.approx(want, abs=1e-9)
    bce, ce, *_ = arc_losses(extra["arcs"], g["gilt_head"], g["gilt_dep"])
    # arc_losses computes in float32
    assert got.arc_logp == pytest.approx(-float(bce), abs=1e-5)
    assert got.count_logp == pytest.approx(-float(ce), abs=1e-5)
    # another graph gives another score (the features matter)
    assert score_sentence(model, WORDS, eos, gold=[([], []), ([], []), ([0], [1, 2])]).logp != pytest.approx(want, abs=1e-6)


@torch.no_grad()
def test_unbounded_beam_equals_enumeration(model):
    check_beam_equals_enumeration(model)


def check_beam_equals_enumeration(model, atol=1e-8):
    """Every count sequence of WORDS enumerated (48 graphs), each scored by full forwards: their
    logsumexp is the unbounded beam's score (also used for gilt_transformer_lm, test_gilt_post.py)."""
    eos = model.decoder.dictionary.eos()
    n = len(WORDS)
    scores = []
    for counts in itertools.product(*[range(min(2 * i - 1, 29) + 1) for i in range(1, n + 1)]):
        arcs = [([], []) for _ in range(n)]
        logpi = 0.0
        for i, c in enumerate(counts, 1):
            _, extra, _ = full(model, WORDS, arcs)
            a = extra["arcs"]
            cand = [(float(a["head_logits"][0, i, v]), (v, i)) for v in range(i)] + \
                   [(float(a["dep_logits"][0, i, v]), (i, v)) for v in range(1, i)]
            chosen = [arc for _, arc in sorted(cand, key=lambda x: -x[0])[:c]]
            arcs[i - 1] = (sorted(h for h, d in chosen if d == i), sorted(d for h, d in chosen if h == i))
            logpi += float(F.log_softmax(a["count_logits"][0, i], -1)[c])
        lm, _, _ = full(model, WORDS, arcs)
        scores.append(lm + logpi)
    assert len(scores) == 2 * 4 * 6
    exact = float(torch.logsumexp(torch.tensor(scores, dtype=torch.float64), 0))
    got = score_sentence(model, WORDS, eos, beam=10 ** 6, count_beam=30)
    assert got.hypotheses == 48
    assert got.logp == pytest.approx(exact, abs=atol)
    # a narrow beam keeps fewer hypotheses and can only lose mass
    narrow = score_sentence(model, WORDS, eos, beam=2, count_beam=2)
    assert narrow.hypotheses == 2 and narrow.logp < exact


def test_cli_bad_checkpoint(tmp_path, capsys):
    bad = tmp_path / "x.pt"
    bad.write_bytes(b"not a checkpoint")
    assert main(["--path", str(bad), "--data", str(tmp_path)]) == 3
    assert "x.pt" in capsys.readouterr().err


@torch.no_grad()
def test_best_arcs_follow_the_counts(model):
    """With beam 1 and count beam 1 the kept graph is the greedy one: per word, the argmax count of
    top arcs (checked against the full forward on the growing graph)."""
    eos = model.decoder.dictionary.eos()
    got = score_sentence(model, WORDS, eos, beam=1, count_beam=1)
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
    assert got.hypotheses == 1 and sorted(got.best_arcs) == sorted(want)

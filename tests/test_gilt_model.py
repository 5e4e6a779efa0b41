"""gilt_txl: arc BCE / count CE against a naive loop, causality, identity at init, fairseq-train + eval-lm."""
import math
import os
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import fairseq  # noqa: F401
import sipe_fairseq
from sipe_fairseq.data.gilt.gilt_dataset import block_graph, position_words
from sipe_fairseq.models.gilt_lm import GiltConfig, GiltDecoder
from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig
from sipe_fairseq.modules.arc_scorer import arc_losses
from sipe_fairseq.modules.positional import sinusoid
from sipe_fairseq.modules.tag_embedding import FIRST_TAG_ID
import launcher
from conftest import small_dictionary  # noqa: E402

sipe_fairseq.register()
BIN = Path(sys.executable).parent
PLUGIN = str(Path(sipe_fairseq.__file__).parent)
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
NOTAG = FIRST_TAG_ID - 1

# sentence 1: 3 words (2, 1, 1 pieces), arcs root->2, 2->1, 2->3; sentence 2: 2 words (1, 2 pieces), 2->1, root->2
SENTS = [[([], []), ([0], [1]), ([2], [])], [([], []), ([0], [1])]]
PIECES = [[2, 1, 1], [1, 2]]


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(40)


def make(dictionary, seed=0, **kw):
    cfg = GiltConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=3, decoder_attention_heads=4, dropout=0.0,
                     tokens_per_sample=64, max_target_positions=64, **kw)
    torch.manual_seed(seed)
    return GiltDecoder(cfg, dictionary).eval()


def sample(dictionary, sents=SENTS, seed=1):
    """One block (complete mode): </s> sentence1 </s> sentence2, net_input tensors with batch 1."""
    g = torch.Generator().manual_seed(seed)
    toks, terms = [dictionary.eos()], [NOTAG]
    for pieces in PIECES:
        for n in pieces:
            toks += torch.randint(5, 40, (n,), generator=g).tolist()
            terms += [FIRST_TAG_ID] + [NOTAG] * (n - 1)
        toks.append(dictionary.eos())
        terms.append(NOTAG)
    toks, terms = torch.tensor(toks[:-1]), torch.tensor(terms[:-1])  # source: the last </s> is a target only
    words, first = position_words(toks, terms, dictionary.eos(), dictionary.bos())
    graph = {k: torch.from_numpy(v)[None] for k, v in block_graph(sents).items()}
    net = {"prev_output_tokens": toks[None], "src_words": words[None],
           "gilt_word_pos": torch.cat([first.new_zeros(1), first])[None],
           **{k: graph[k] for k in ("gilt_pairs", "gilt_prev", "gilt_local", "gilt_sent")}}
    return net, graph


def test_layout(dictionary):
    net, graph = sample(dictionary)
    assert net["src_words"][0].tolist() == [0, 1, 1, 2, 3, 0, 4, 5, 5]
    assert net["gilt_word_pos"][0].tolist() == [0, 1, 3, 4, 6, 7]
    assert graph["gilt_sent"][0].tolist() == [-1, 0, 0, 0, 1, 1]
    assert graph["gilt_local"][0].tolist() == [0, 1, 2, 3, 1, 2]
    # word 3 (head 2): pairs row 3 = tape after word 3; prev row 3 = tape after word 2
    assert graph["gilt_pairs"][0, 3, 2].tolist() == [21, 2, 1] and graph["gilt_pairs"][0, 2, 3].tolist() == [0, 0, 0]
    assert graph["gilt_prev"][0, 3, 2].tolist() == [11, 2, 0] and graph["gilt_prev"][0, 3, 0].tolist() == [10, 1, 1]
    assert graph["gilt_prev"][0, 4, 0].tolist() == [0, 1, 0] and not graph["gilt_prev"][0, 4, 1:].any()


def _side(sc, s, o_v, dist, feats):
    emb = torch.cat([sc.tables[f][int(feats[f])] for f in range(3)])
    return sc.mlp2[s](sc.mlp1[s](o_v) + sc.pos[s](sinusoid(torch.tensor(dist), sc.d)) + sc.feat[s](emb))


def test_arc_losses_naive_loop(dictionary):
    model = make(dictionary)
    net, graph = sample(dictionary)
    _, extra = model(**net)
    out = extra["arcs"]
    bce, ce, n_pairs, n_words, *_ = arc_losses(out, graph["gilt_head"], graph["gilt_dep"])
    # naive: every word, its 2i candidates enumerated by hand, each logit from the scorer's modules
    sc = model.arc_scorer
    inner, emb = extra["inner_states"], extra["embedded"]
    n = len(model.layers)  # docs/gilt-reference.md section 2: layers L/2+1 and L-1
    up, low = n // 2 + 1, n - 1
    want_bce, want_ce, pairs, nw, w_block = 0.0, 0.0, 0, 0, 0
    for sent in SENTS:
        base = w_block
        o = {0: sc.root}
        for i in range(1, len(sent) + 1):
            k = int(net["gilt_word_pos"][0, base + i])
            o[i] = torch.cat([inner[up][0, k - 1], inner[low][0, k - 1], emb[0, k]])
        arcs = {(h, w) for w, (hs, ds) in enumerate(sent, 1) for h in hs}
        arcs |= {(w, d) for w, (hs, ds) in enumerate(sent, 1) for d in ds}
        for i in range(1, len(sent) + 1):
            prev = graph["gilt_prev"][0, base + i]
            col = lambda v: 0 if v == 0 else base + v  # noqa: E731
            par = {v: _side(sc, "par", o[v], i - v if v else i, prev[col(v)]) for v in range(i + 1)}
            chd = {v: _side(sc, "chd", o[v], i - v if v else i, prev[col(v)]) for v in range(1, i + 1)}
            cands = [(v, i) for v in range(i)] + [(i, v) for v in range(1, i)] + [(i, i)]
            assert len(cands) == 2 * i
            square = 0
            for h, d in cands:
                p, c = (par[h], chd[i]) if d == i else (par[i], chd[d])
                logit = (p * sc.b1 * c).sum()
                y = 1.0 if (h, d) in arcs else 0.0
                want_bce += -(y * math.log(torch.sigmoid(logit)) + (1 - y) * math.log(1 - torch.sigmoid(logit)))
                square = square + p * sc.b2 * c
                pairs += 1
            count_logits = sc.count(square / math.sqrt(2 * i))
            gold = sum(1 for h, d in cands if (h, d) in arcs)
            want_ce += -F.log_softmax(count_logits, -1)[gold].item()
            nw += 1
        w_block += len(sent)
    assert (n_pairs, n_words) == (pairs, nw) == (2 * (1 + 2 + 3) + 2 * (1 + 2), 5)
    assert bce.item() == pytest.approx(want_bce, rel=1e-4)
    assert ce.item() == pytest.approx(want_ce, rel=1e-4)


def test_causality(dictionary):
    """Changing the last word's arcs changes nothing before that word's first subword, and the
    features of an earlier word never depend on a later word."""
    model = make(dictionary, gilt_proj_init_std=0.2)
    net, _ = sample(dictionary)
    other = [SENTS[0][:2] + [([0, 1], [])], SENTS[1]]  # word 3 of sentence 1: heads root and 1 instead of 2
    net2, _ = sample(dictionary, other)
    a, _ = model(**net)
    b, _ = model(**net2)
    k = int(net["gilt_word_pos"][0, 3])
    torch.testing.assert_close(a[:, :k], b[:, :k])
    assert (a[:, k] - b[:, k]).abs().max() > 1e-4


def test_identity_at_zero_init(dictionary):
    gilt = make(dictionary, gilt_proj_init_std=0.0, gilt_embed_scale="sqrt_d")  # sipe_txl scales its embedding
    cfg = SiPEDecoderConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=3, decoder_attention_heads=4,
                            dropout=0.0, tokens_per_sample=64, max_target_positions=64)
    txl = SiPEDecoder(cfg, dictionary).eval()
    missing = txl.load_state_dict(gilt.state_dict(), strict=False)
    assert not missing.missing_keys
    net, _ = sample(dictionary)
    torch.testing.assert_close(gilt(**net)[0], txl(net["prev_output_tokens"])[0])


def run(cmd, cwd):
    proc = launcher.run(cmd, cwd=cwd, env=ENV, timeout=600)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def test_train_then_eval_lm(tmp_path):
    from sipe_fairseq.cli.preprocess import main as preprocess_main
    from sipe_fairseq.data import toy_grammar

    toy_grammar.make_corpus(tmp_path / "toy", n_train=200, n_valid=40, n_test=40, seed=3)
    data = tmp_path / "data"
    assert preprocess_main(["--train", str(tmp_path / "toy/train.conllu"), "--valid", str(tmp_path / "toy/valid.conllu"),
                            "--destdir", str(data), "--spm-vocab-size", "200", "--no-progress"]) == 0
    task = ["--task", "gilt_lm", "--tokens-per-sample", "64", "--sample-break-mode", "complete"]
    log = run([BIN / "fairseq-train", data, "--user-dir", PLUGIN, *task, "--criterion", "gilt_lm", "--arch", "gilt_txl_tiny",
               "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "1024", "--max-update", "5", "--seed", "1",
               "--save-dir", tmp_path / "ck", "--no-epoch-checkpoints", "--no-last-checkpoints", "--num-workers", "0",
               "--log-format", "simple"], tmp_path)
    valid = re.findall(r"valid on 'valid' subset \| loss [\d.]+ \| nll_loss ([\d.]+).*?arc_loss ([\d.]+).*?count_loss ([\d.]+)",
                       log)
    assert valid, log[-2000:]
    assert re.search(r"arc_f1 [\d.]+", log) and re.search(r"joint_ppl [\d.]+", log)
    out = run([BIN / "fairseq-eval-lm", data, "--user-dir", PLUGIN, *task, "--path", tmp_path / "ck/checkpoint_best.pt",
               "--gen-subset", "valid", "--max-tokens", "1024", "--num-workers", "0"], tmp_path)
    bits = float(re.search(r"Loss \(base 2\): ([\d.]+), Perplexity: ([\d.]+)", out).group(1))
    assert bits == pytest.approx(float(valid[-1][0]), abs=0.01)

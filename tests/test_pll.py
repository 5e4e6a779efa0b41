"""Pseudo-log-likelihood (Salazar et al. 2020) of masked-LM encoders for BLiMP: the batched scorer
against one masked copy per forward pass, batching invariance, no tag signal at masked positions,
and ``sipe-eval blimp`` end to end on a stock fairseq ``roberta`` and a SiPE encoder checkpoint."""
import itertools
import json

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from fairseq import options, tasks  # noqa: E402
from fairseq.data import Dictionary  # noqa: E402
from fairseq.dataclass.utils import convert_namespace_to_omegaconf  # noqa: E402

from sipe_fairseq.cli.eval import main as eval_main  # noqa: E402
from sipe_fairseq.checkpoints import load_lm as load  # noqa: E402
from sipe_fairseq.data import toy_grammar as tg  # noqa: E402
from sipe_fairseq.data.encode import SentenceEncoder  # noqa: E402
from sipe_fairseq.eval import pll  # noqa: E402
from sipe_fairseq.eval.perplexity import score_split  # noqa: E402
from sipe_fairseq.structure.family import masked_lm  # noqa: E402
from sipe_fairseq.structure.scoring import score_encoded  # noqa: E402

from conftest import MLM_TASK, STOCK_MLM  # noqa: E402

NOTAG, FIRST_TAG = 4, 5
HEADS = (("terminal", 2), ("nonterminal", 5))
ENCODERS = {  # name -> (arch, injection); tags reach the first two
    "deberta-position": ("sipe_deberta_tiny", "position"),
    "modernbert-input": ("sipe_modernbert_tiny", "input"),
    "roberta-none": ("sipe_roberta_tiny", "none"),
}
N_PAIRS = 12


@pytest.fixture(scope="module")
def toy(tmp_path_factory, toy_data):
    """Toy data directory, encoded sentences (with gold tags), their encoder."""
    root = tmp_path_factory.mktemp("pll")
    data = toy_data
    enc = SentenceEncoder(str(data))
    sents = tg.generate(5, seed=11)
    encoded = [enc.encode(s.words, s.heads)[:3] for s in sents]
    pieces = sum(len(t) - 1 for t, _, _ in encoded)
    words = sum(len(s.words) for s in sents)
    assert pieces > words, "the toy sentences should include words split into several pieces"
    return {"root": root, "data": data, "enc": enc, "encoded": encoded}


_models = {}


def build(toy, name):
    """A tiny encoder built in-process through fairseq's task/model API, its weights perturbed so
    the tags (whose projections start near zero) visibly change the output."""
    if name not in _models:
        arch, injection = ENCODERS[name]
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, [str(toy["data"]), "--task", "hexatag_mlm", "--criterion", "hexatag_mlm",
                                                    "--arch", arch, "--sipe-injection", injection, "--tokens-per-sample", "64"])
        cfg = convert_namespace_to_omegaconf(args)
        task = tasks.setup_task(cfg.task)
        torch.manual_seed(0)
        model = task.build_model(cfg.model)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                sipe = pname.startswith(("encoder.tags.", "encoder.fusion.")) or "injections" in pname
                p.add_(torch.randn_like(p) * (0.5 if sipe else 0.05))
        _models[name] = model.eval()
    return _models[name]


def one_at_a_time(model, encoded, d, joint=False):
    """Reference: ``<s> x </s>`` with one token masked (``<mask>``, tags ``<notag>``) per forward
    pass, full logits, the masked token's log-probability (plus its word's tags' with ``joint``)."""
    model.eval()
    mask = model.encoder.dictionary.index("<mask>")
    use_tags = getattr(model.encoder, "needs_tags", False)
    out = []
    for t, a, b in encoded:
        seq = torch.cat([t.new([d.bos()]), t])
        terms, nts = torch.cat([a.new([NOTAG]), a]), torch.cat([b.new([NOTAG]), b])
        terms_lp = []
        for p in range(1, len(seq) - 1):  # x_1 .. x_n; not <s>, not </s>
            x, ta, tb = seq.clone(), terms.clone(), nts.clone()
            x[p], ta[p], tb[p] = mask, NOTAG, NOTAG
            kw = {"src_terminals": ta[None], "src_nonterminals": tb[None]} if use_tags else {}
            with torch.no_grad():
                logits, extra = model(x[None], **kw)
            lp = logits[0, p].float().log_softmax(-1)[seq[p]].item()
            if joint and use_tags:
                for (kind, n), gold in zip(HEADS, (terms, nts)):
                    cls = int(gold[p]) - FIRST_TAG
                    if 0 <= cls < n:
                        lp += extra[f"{kind}_logits"][0, p].float().log_softmax(-1)[cls].item()
            terms_lp.append(lp)
        out.append(torch.tensor(terms_lp))
    return out


def count_passes(model, monkeypatch):
    """Record the masked copies (rows) of every forward pass of ``model``."""
    rows = []
    forward = model.forward

    def spy(src_tokens, *a, **k):
        rows.append(src_tokens.size(0))
        return forward(src_tokens, *a, **k)

    monkeypatch.setattr(model, "forward", spy)
    return rows


# ------------------------------------------------------------------------ scorer vs reference
@pytest.mark.parametrize("name", list(ENCODERS))
def test_pll_equals_one_mask_per_forward(toy, name):
    model = build(toy, name)
    d = toy["enc"].dictionary
    assert model.encoder.needs_tags == (name != "roberta-none")
    assert model.encoder.dictionary.index("<mask>") == len(d)  # dict.txt + <mask> appended
    ref = one_at_a_time(model, toy["encoded"], d)
    got = pll.pseudo_log_likelihoods(model, toy["encoded"], d, batch_size=64)
    for r, g, (t, _, _) in zip(ref, got, toy["encoded"]):
        assert len(g) == len(t) - 1  # every token but </s>
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    scores = pll.pll_sentence_scores(model, toy["encoded"], d, batch_size=64)
    assert scores == pytest.approx([r.sum().item() for r in ref], rel=1e-5, abs=1e-4)
    assert all(s < 0 for s in scores)


@pytest.mark.parametrize("name", ["deberta-position", "roberta-none"])
def test_joint_adds_the_masked_words_tags(toy, name):
    """``joint``: plus the tag heads' log-probabilities of each masked first subword's own tags;
    a model that sees no tags scores the same as with ``lm``."""
    model = build(toy, name)
    d = toy["enc"].dictionary
    lm = pll.pll_sentence_scores(model, toy["encoded"], d, batch_size=64)
    joint = pll.pll_sentence_scores(model, toy["encoded"], d, batch_size=64, joint=True)
    ref = [r.sum().item() for r in one_at_a_time(model, toy["encoded"], d, joint=True)]
    assert joint == pytest.approx(ref, rel=1e-5, abs=1e-4)
    if name == "roberta-none":
        assert joint == lm
    else:
        assert all(j < s - 1e-3 for j, s in zip(joint, lm))  # every sentence has tagged words


def test_batching_invariance_and_one_pass_per_sentence(toy, monkeypatch):
    model = build(toy, "deberta-position")
    d, encoded = toy["enc"].dictionary, toy["encoded"]
    lengths = [len(t) - 1 for t, _, _ in encoded]
    rows = count_passes(model, monkeypatch)
    alone = pll.pll_sentence_scores(model, encoded, d, batch_size=1)
    assert rows == lengths  # batch size 1: each pass holds exactly one sentence's masked copies
    rows.clear()
    size = lengths[0] + lengths[1]
    mid = pll.pll_sentence_scores(model, encoded, d, batch_size=size)
    ends = set(itertools.accumulate(lengths))
    assert set(itertools.accumulate(rows)) <= ends  # no sentence split across passes
    assert rows[0] == size and 1 < len(rows) < len(lengths)
    assert all(r <= size or r in lengths for r in rows)  # a pass exceeds the size only for one long sentence
    rows.clear()
    together = pll.pll_sentence_scores(model, encoded, d, batch_size=10_000)
    assert rows == [sum(lengths)]
    assert mid == pytest.approx(alone, rel=1e-5, abs=1e-5)
    assert together == pytest.approx(alone, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("name", ["deberta-position", "modernbert-input"])
def test_masked_position_carries_no_tag_signal(toy, name):
    """Changing the tags of a word changes no PLL term at that word's first subword (masked with
    its tags there), but it does change the terms of the other positions (which see them)."""
    model = build(toy, name)
    d = toy["enc"].dictionary
    t, a, b = toy["encoded"][0]
    tagged = [k for k in range(len(t)) if a[k] >= FIRST_TAG]
    p = tagged[1]
    a2, b2 = a.clone(), b.clone()
    a2[p] = FIRST_TAG + (1 - (int(a[p]) - FIRST_TAG))  # the other terminal class
    b2[p] = FIRST_TAG + (int(b[p]) - FIRST_TAG + 2) % 5  # another non-terminal
    before, after = pll.pseudo_log_likelihoods(model, [(t, a, b), (t, a2, b2)], d)
    assert after[p] == pytest.approx(before[p].item(), abs=1e-6)
    others = torch.cat([after[:p] - before[:p], after[p + 1:] - before[p + 1:]]).abs()
    assert others.max() > 1e-4  # control: the tags do reach the model elsewhere


# ------------------------------------------------------------------------------ clear failures
def test_needs_mask_and_matching_dictionary(toy, monkeypatch):
    model = build(toy, "roberta-none")
    d = toy["enc"].dictionary
    other = Dictionary()
    other.add_symbol("intruder")
    for s in d.symbols[other.nspecial:]:
        other.add_symbol(s)
    with pytest.raises(ValueError, match="token ids would disagree"):
        pll.pll_sentence_scores(model, toy["encoded"], other)
    with pytest.raises(ValueError, match=r"sentence 0: expected tokens x_1 \.\. x_n </s>"):
        pll.pll_sentence_scores(model, [(torch.tensor([d.eos()]),) * 3], d)
    too_long = torch.tensor([d.index(d.symbols[d.nspecial])] * 63 + [d.eos()])  # 65 positions with <s>
    with pytest.raises(ValueError, match="sentence 0: 65 tokens with <s> and </s>, more than the model's 64 positions"):
        pll.pll_sentence_scores(model, [(too_long, torch.full_like(too_long, NOTAG), torch.full_like(too_long, NOTAG))], d)
    tagged = build(toy, "deberta-position")
    monkeypatch.setattr(tagged.encoder, "deprel", torch.nn.Embedding(3, 4))  # as a *_DR input strategy has
    with pytest.raises(ValueError, match="reads a deprel stream"):
        pll.pll_sentence_scores(tagged, toy["encoded"], d)
    monkeypatch.setattr(model.encoder, "dictionary", d)  # dict.txt alone: no <mask>
    with pytest.raises(ValueError, match="has no <mask> symbol"):
        pll.pll_sentence_scores(model, toy["encoded"], d)


# ------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def checkpoints(toy, train_checkpoint):
    """A stock fairseq ``roberta`` (``--task masked_lm``) and a SiPE encoder, a few updates each."""
    root = toy["root"]
    runs = {"roberta": STOCK_MLM, "deberta": [*MLM_TASK, "--arch", "sipe_deberta_tiny", "--sipe-injection", "position"]}
    paths = dict(zip(runs, train_checkpoint.many(list(runs.values()))))
    pairs = tg.minimal_pairs(N_PAIRS, seed=7)
    tg.write_jsonl(pairs, root / "pairs.jsonl")
    trees = []
    for good, i, bad_form, _ in tg.minimal_pair_trees(N_PAIRS, seed=7):
        trees.append(good)
        trees.append(tg.ToySentence(good.words[:i] + [bad_form] + good.words[i + 1:], good.lemmas, good.upos, good.feats,
                                    good.heads, good.deprels))
    tg.write_conllu(trees, root / "pairs.conllu")
    return paths


def _blimp(toy, checkpoints, name, *extra):
    out = toy["root"] / f"{name}.json"
    argv = ["blimp", "--data", str(toy["data"]), "--path", f"roberta={checkpoints['roberta']}",
            "--path", f"deberta={checkpoints['deberta']}", "--blimp", str(toy["root"] / "pairs.jsonl"),
            "--batch-size", "16", "--json", str(out), *map(str, extra)]
    assert eval_main(argv) == 0
    return json.loads(out.read_text())


def test_blimp_scores_encoder_checkpoints(toy, checkpoints):
    trees = toy["root"] / "pairs.conllu"
    report = _blimp(toy, checkpoints, "gold", "--trees", trees)
    assert report["models"] == ["roberta", "deberta"]
    assert report["overall"]["pairs"] == N_PAIRS and report["overall"]["skipped"] == 0
    assert set(report["paradigms"]) == set(tg.PAIR_UIDS)
    # roberta sees no tags: the same with no trees and with the joint score
    plain = _blimp(toy, checkpoints, "none", "--parser", "none")
    joint = _blimp(toy, checkpoints, "joint", "--trees", trees, "--score", "joint")
    for uid in tg.PAIR_UIDS:
        assert plain["paradigms"][uid]["correct"]["roberta"] == report["paradigms"][uid]["correct"]["roberta"]
        assert joint["paradigms"][uid]["correct"]["roberta"] == report["paradigms"][uid]["correct"]["roberta"]

    # the loaded checkpoints: <mask> appended to dict.txt; the PLL is the one-mask-per-pass sum, and
    # the accuracies (lm and joint) are those of the one-mask-per-pass reference on the gold-tree encodings
    d = toy["enc"].dictionary
    pair_encoded, uids = [], []
    for good, i, bad_form, uid in tg.minimal_pair_trees(N_PAIRS, seed=7):
        bad_words = good.words[:i] + [bad_form] + good.words[i + 1:]
        pair_encoded += [toy["enc"].encode(good.words, good.heads)[:3], toy["enc"].encode(bad_words, good.heads)[:3]]
        uids.append(uid)
    for name in ("roberta", "deberta"):
        model, task = load(str(checkpoints[name]), str(toy["data"]))
        for rep, joint_score in ((report, False), (joint, True)):
            ref = [r.sum().item() for r in one_at_a_time(model, pair_encoded, d, joint=joint_score)]
            want = {u: sum(ref[2 * k] > ref[2 * k + 1] for k, uk in enumerate(uids) if uk == u) for u in tg.PAIR_UIDS}
            assert {u: rep["paradigms"][u]["correct"][name] for u in tg.PAIR_UIDS} == want, (name, joint_score)
            assert rep["overall"]["accuracy"][name] == pytest.approx(100.0 * sum(want.values()) / N_PAIRS)
        assert masked_lm(model)
        assert task.source_dictionary.index("<mask>") == len(d) == len(task.source_dictionary) - 1
        ref = [r.sum().item() for r in one_at_a_time(model, toy["encoded"], d)]
        assert pll.pll_sentence_scores(model, toy["encoded"], d, batch_size=7) == pytest.approx(ref, rel=1e-5, abs=1e-4)
    # perplexity and the left-to-right structure engine refuse encoders instead of misreading their logits
    with pytest.raises(ValueError, match="masked-LM encoder"):
        score_split(model, task, "valid")
    with pytest.raises(ValueError, match="masked-LM encoder"):
        score_encoded(model, toy["encoded"], "given", d)

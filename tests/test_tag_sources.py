"""Tag sources in every scorer (issue 12, section 3): ``fairseq-eval-lm --inference-tags self``,
``sipe-eval blimp|syntaxgym|report --tags``, and the SyntaxGym count of items whose given prefix
tags differ between conditions.

One tiny ``position`` decoder trained for a few updates on the toy grammar (W_E initialised large,
``--sipe-proj-init-std 0.5``, so that the tags change the scores). The independent
computation for ``self``: the tags the structure engine (:mod:`sipe_fairseq.structure`) chooses are put into
the sentence and scored by one ordinary full forward (``reference_ops.full_forward_logprobs``, float32); as the
tags depend on the prefix only, that forward gives the exact per-token ``log q`` the step-wise
search computed (float64): they must agree to 1e-4.
"""
import json
import math
import os
import sys
from pathlib import Path

import pytest
import launcher
import torch

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from sipe_fairseq.cli.eval import main as eval_main  # noqa: E402
from sipe_fairseq.data import toy_grammar as tg  # noqa: E402
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID  # noqa: E402
from sipe_fairseq.eval import blimp  # noqa: E402
from sipe_fairseq.eval import syntaxgym as sg  # noqa: E402
from sipe_fairseq.eval.prefix_scores import markdown_tag_sources, score_split_sources  # noqa: E402
from sipe_fairseq.structure.family import StructureOptions  # noqa: E402
from sipe_fairseq.structure.scoring import score_encoded  # noqa: E402
from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS  # noqa: E402
from sipe_fairseq.parsing import PARSERS, register_parser  # noqa: E402
from reference_ops import full_forward_logprobs  # noqa: E402

BIN = Path(sys.executable).parent
PLUGIN = str(Path(sipe_fairseq.__file__).parent)
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
N_PAIRS = 12
LN2 = math.log(2)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("tagsrc")
    tg.make_corpus(root / "toy", n_train=200, n_valid=10, n_test=12, seed=4)
    data = root / "data"
    from sipe_fairseq.cli.preprocess import main as preprocess_main
    assert preprocess_main(["--train", str(root / "toy/train.conllu"), "--valid", str(root / "toy/valid.conllu"),
                            "--test", str(root / "toy/test.conllu"), "--destdir", str(data), "--spm-vocab-size", "200"]) == 0
    save = root / "ck"
    cmd = [BIN / "fairseq-train", data, "--user-dir", PLUGIN, "--task", "hexatag_lm", "--criterion", "hexatag_lm",
           "--arch", "sipe_txl_tiny", "--sipe-injection", "position", "--sipe-proj-init-std", "0.5", "--optimizer", "adam",
           "--lr", "0.003", "--max-tokens", "1024", "--max-update", "4", "--seed", "1", "--save-dir", save,
           "--no-epoch-checkpoints", "--disable-validation", "--num-workers", "0", "--tokens-per-sample", "128",
           "--sample-break-mode", "complete"]
    proc = launcher.run(cmd, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pairs = root / "pairs"
    pairs.mkdir()
    toy_pairs = tg.minimal_pairs(N_PAIRS, seed=7)
    for uid in tg.PAIR_UIDS:
        tg.write_jsonl([p for p in toy_pairs if p["UID"] == uid], pairs / f"{uid}.jsonl")
    trees = []
    for good, i, bad_form, _ in tg.minimal_pair_trees(N_PAIRS, seed=7):
        trees += [good, tg.ToySentence(good.words[:i] + [bad_form] + good.words[i + 1:], good.lemmas, good.upos,
                                       good.feats, good.heads, good.deprels)]
    tg.write_conllu(trees, root / "trees.conllu")
    return {"root": root, "data": data, "ck": save / "checkpoint_last.pt", "pairs": pairs, "trees": root / "trees.conllu",
            "results": {}}


def load(toy):
    from sipe_fairseq.checkpoints import load_lm
    return load_lm(str(toy["ck"]), str(toy["data"]))


def chosen_tags_logprobs(model, encoded, scores, d):
    """Independent per-token log-probs: each sentence's chosen tags (``score.tags``) written on its
    word starts and the sentence scored by one full forward (``reference_ops.full_forward_logprobs``)."""
    retagged = []
    for (t, a, _), s in zip(encoded, scores):
        starts = (a >= FIRST_TAG_ID).nonzero().flatten().tolist() or \
            [q for q in range(len(t) - 1) if d[int(t[q])].startswith("\u2581")]
        assert len(starts) == len(s.tags)
        terms, nts = torch.full_like(t, NOTAG_ID), torch.full_like(t, NOTAG_ID)
        for q, (tt, nt) in zip(starts, s.tags):
            terms[q], nts[q] = FIRST_TAG_ID + TERMINALS.index(tt), FIRST_TAG_ID + NONTERMINALS.index(nt)
        retagged.append((t, terms, nts))
    return full_forward_logprobs(model, retagged, d.eos())


# ----------------------------------------------------------------------------- fairseq-eval-lm
def fairseq_eval_lm(toy, *extra):
    from fairseq import options
    from fairseq_cli.eval_lm import main

    parser = options.get_eval_lm_parser()
    args = options.parse_args_and_arch(parser, [str(toy["data"]), "--path", str(toy["ck"]), "--user-dir", PLUGIN,
                                                "--task", "hexatag_lm", "--gen-subset", "test", "--tokens-per-sample", "128",
                                                "--max-tokens", "2048", "--cpu", "--num-workers", "0", *extra])
    return main(args)


def test_fairseq_eval_lm_inference_tags_self_equals_sipe_eval_lm_self(toy):
    """``fairseq-eval-lm --task hexatag_lm --inference-tags self --sample-break-mode eos`` (every
    sentence its own block) prints the perplexity ``sipe-eval-lm --tags self`` computes; the default
    (given) stays the conditional one; other break modes are refused."""
    from sipe_fairseq.tasks.sipe_data import EvaluationError

    model, task = load(toy)
    ours = score_split_sources(model, task, "test", ["given", "self"])
    assert ours["self"]["sentences"] == ours["self"]["split_sentences"] == 12
    # the position-type breakdown of each row adds up to its NLL; the joint bound's tag cost is in word-initial
    for row in ours.values():
        parts = sum(row[f"tokens.{k}"] * row[f"bits.{k}"] * LN2 for k in ("eos", "word_initial", "continuation"))
        assert parts == pytest.approx(row["nll"], rel=1e-9)
    g, j = ours["given"], ours["given-joint"]
    assert (j["bits.eos"], j["bits.continuation"]) == (g["bits.eos"], g["bits.continuation"])
    tag_bits = (j["bits.word_initial"] - g["bits.word_initial"]) * j["tokens.word_initial"]
    assert tag_bits == pytest.approx(j["bits.tags_per_word"] * (j["words"] - j["sentences"]), rel=1e-9) and tag_bits > 0

    md = markdown_tag_sources({"pos": ours})
    assert "| pos | self: exact q(x) | " in md and "| pos | given: joint bound p(x,tags) | " in md
    assert list(ours) == ["given", "given-joint", "self"]  # side by side, one column per source in this order
    assert "| ppl per token | " + " | ".join(f"{r['ppl']:.2f}" for r in ours.values()) + " |" in md
    given = fairseq_eval_lm(toy, "--sample-break-mode", "eos")
    honest = fairseq_eval_lm(toy, "--sample-break-mode", "eos", "--inference-tags", "self")
    assert honest["perplexity"] == pytest.approx(ours["self"]["ppl"], rel=1e-4)
    assert given["perplexity"] == pytest.approx(ours["given"]["ppl"], rel=1e-4)
    assert abs(math.log(honest["perplexity"]) - math.log(given["perplexity"])) > 1e-4  # the tags do differ
    toy["results"]["self_ppl"] = float(honest["perplexity"])
    with pytest.raises(EvaluationError, match="sample-break-mode eos"):
        fairseq_eval_lm(toy, "--sample-break-mode", "none", "--inference-tags", "self")


# ----------------------------------------------------------------------------- BLiMP
def test_blimp_tag_sources_match_prefix_scores(toy):
    """``sipe-eval blimp --tags given,self,beam:2``: one column per source; the ``[self]`` column's
    correct pairs are those whose good sentence has the higher exact log q(x), recomputed by a full
    forward with the chosen tags."""
    out = toy["root"] / "blimp.json"
    md = toy["root"] / "blimp.md"
    assert eval_main(["blimp", "--data", str(toy["data"]), "--path", f"pos={toy['ck']}", "--blimp", str(toy["pairs"]),
                      "--trees", str(toy["trees"]), "--tags", "given,self,beam:2", "--json", str(out),
                      "--markdown", str(md), "--batch-size", "8"]) == 0
    report = json.loads(out.read_text())
    assert report["models"] == ["pos", "pos [self]", "pos [beam:2]"] and report["tags"] == ["given", "self", "beam:2"]
    assert "pos [self]" in md.read_text() and "`[self]`" in md.read_text()

    model, task = load(toy)
    from sipe_fairseq.data.encode import SentenceEncoder
    from sipe_fairseq.parsing.sources import ConlluTrees

    enc = SentenceEncoder(str(toy["data"]))
    pairs = blimp.read_blimp([toy["pairs"]])
    prepared = blimp.prepare(pairs, ConlluTrees(str(toy["trees"])), enc)
    assert not prepared.skipped
    texts = list(prepared.encoded)
    encoded = [prepared.encoded[t] for t in texts]
    d = enc.dictionary
    scores = score_encoded(model, encoded, "self", d, StructureOptions(placement=str(task.args.tag_head_placement)))
    full = chosen_tags_logprobs(model, encoded, scores, d)
    for s, lp in zip(scores, full):
        assert s.logprob == pytest.approx(float(lp.sum()), abs=1e-4)
    total = {t: float(lp.sum()) for t, lp in zip(texts, full)}
    correct = sum(total[p.good] > total[p.bad] for p in pairs)
    assert report["overall"]["correct"]["pos [self]"] == correct
    assert report["overall"]["accuracy"]["pos [self]"] == pytest.approx(100.0 * correct / N_PAIRS)
    toy["results"]["blimp_self"] = report["overall"]["accuracy"]["pos [self]"]


# ----------------------------------------------------------------------------- SyntaxGym
class LaterWordsParser:
    """Fake parser whose tags depend on later words: a sentence ending in a word ending in "s" is
    a chain (word 1 the root), any other has every word attached to the last one."""

    def __init__(self, arg=""):
        self.spec = "test-later"

    def parse_words(self, sentences):
        return [list(range(len(w))) if w[-1].endswith("s") else [len(w)] * (len(w) - 1) + [0] for w in sentences]

    def parse_text(self, sentences):
        raise NotImplementedError


@pytest.fixture
def later_parser():
    register_parser("test-later")(LaterWordsParser)
    yield
    PARSERS.pop("test-later", None)


def test_syntaxgym_tag_sources_and_prefix_differences(toy, later_parser, tmp_path):
    """Hand-made suite, critical region 3: item 1's conditions share "the cat sees" but end in
    "dog"/"dogs", so the fake parser tags the shared prefix differently (counted); item 2's share
    the prefix and its tags (compared, equal); item 3's prefixes differ in words (not compared).
    ``[self]`` region surprisals are the sums of independently recomputed per-token log-probs."""
    suite = tmp_path / "s.json"
    items = [{"a": ["the cat", "sees", "the dog"], "b": ["the cat", "sees", "the dogs"]},
             {"a": ["the cat", "sees", "a dog"], "b": ["the cat", "sees", "the dog"]},
             {"a": ["the cats", "see", "the dog"], "b": ["the cat", "sees", "the dog"]}]
    data = {"meta": {"name": "toy", "metric": "sum"}, "region_meta": {},
            "predictions": [{"type": "formula", "formula": "(3;%a%) < (3;%b%)"}],
            "items": [{"item_number": i + 1, "conditions": [
                {"condition_name": c, "regions": [{"region_number": k + 1, "content": t} for k, t in enumerate(regs)]}
                for c, regs in conds.items()]} for i, conds in enumerate(items)]}
    suite.write_text(json.dumps(data))
    out, md = tmp_path / "sg.json", tmp_path / "sg.md"
    assert eval_main(["syntaxgym", "--data", str(toy["data"]), "--path", f"pos={toy['ck']}", "--suites", str(suite),
                      "--parser", "test-later", "--tags", "given,self", "--json", str(out), "--markdown", str(md)]) == 0
    report = json.loads(out.read_text())
    assert report["models"] == ["pos", "pos [self]"]
    diff = report["prefix_tag_differences"]
    assert (diff["items"], diff["compared"], diff["differ"], diff["not_compared"]) == (3, 2, 1, 1)
    assert diff["suites"]["toy"]["critical_region"] == 3 and diff["common_prefix_differ"] == 1
    assert [(d["item"], d["conditions"], d["first_differing_word"]) for d in diff["list"]] == [(1, ["a", "b"], 1)]
    assert "1 of 2 items" in md.read_text()

    # the [self] column against an independent recomputation
    from sipe_fairseq.data.encode import SentenceEncoder

    model, task = load(toy)
    enc = SentenceEncoder(str(toy["data"]))
    suites, sentences = sg.read_suites([suite])
    sg.tree_and_encode(sentences, LaterWordsParser(), enc)
    d = enc.dictionary
    encoded = [s.encoded[:3] for s in sentences]
    scores = score_encoded(model, encoded, "self", d, StructureOptions(placement=str(task.args.tag_head_placement)))
    full = chosen_tags_logprobs(model, encoded, scores, d)
    checked = 0
    for s, lp in zip(sentences, full):
        item = next(i for i in report["items"] if i["item"] == s.item)
        got = item["results"]["pos [self]"]["surprisals"][s.condition.name]
        for num, a, b in sg.region_token_spans(s):
            assert got[str(num)] == pytest.approx(-float(lp[a:b].sum()) / LN2, abs=1e-4)
            checked += 1
    assert checked == 18

    # the same prefix differences found directly, and none without a critical region
    assert sg.prefix_tag_differences(suites, sentences)["differ"] == 1
    suites[0].predictions = [sg.Prediction("(*;%a%) > 0", sg.parse_formula("(*;%a%) > 0"))]
    assert sg.prefix_tag_differences(suites, sentences)["not_compared"] == 3


# ----------------------------------------------------------------------------- report
def test_report_has_a_column_group_per_tag_source(toy):
    """``sipe-eval report --tags given,self``: Table 2's columns plus a [self] group whose PPL is
    fairseq-eval-lm --inference-tags self's and whose BLiMP is sipe-eval blimp --tags self's; the
    saved sub-reports give the same group again without re-scoring."""
    if "self_ppl" not in toy["results"] or "blimp_self" not in toy["results"]:
        pytest.skip("needs the fairseq-eval-lm and BLiMP tests of this module")
    root = toy["root"]
    out = {k: root / f"rep-{k}.json" for k in ("report", "blimp", "ppl", "again")}
    assert eval_main(["report", "--data", str(toy["data"]), "--path", f"pos={toy['ck']}", "--blimp", str(toy["pairs"]),
                      "--trees", str(toy["trees"]), "--split", "test", "--tags", "given,self", "--json", str(out["report"]),
                      "--blimp-out", str(out["blimp"]), "--ppl-out", str(out["ppl"])]) == 0
    report = json.loads(out["report"].read_text())
    labels = [c["label"] for c in report["columns"]]
    for label in ("BLiMP", "PPL/word", "BLiMP [self]", "PPL/word [self]", "SyntaxGym [self]", "PPL/token [self]"):
        assert label in labels
    row = report["rows"][0]
    assert row["ppl@self"] == pytest.approx(toy["results"]["self_ppl"], rel=1e-4)
    assert row["blimp@self"] == pytest.approx(toy["results"]["blimp_self"])
    assert row["ppl_word@self"] > row["ppl@self"] and row["syntaxgym@self"] is None
    assert eval_main(["report", "--blimp-json", str(out["blimp"]), "--ppl-json", str(out["ppl"]),
                      "--json", str(out["again"])]) == 0
    again = json.loads(out["again"].read_text())
    assert [c["label"] for c in again["columns"]] == labels
    for key in ("blimp", "ppl", "blimp@self", "ppl@self", "ppl_word@self"):
        assert again["rows"][0][key] == pytest.approx(row[key], rel=1e-12), key


# ----------------------------------------------------------------------------- --tags-mass
def test_tags_mass_in_eval_lm_and_blimp(toy, capsys):
    """``--tags-mass P``: ``sipe-eval-lm`` reports the setting, the live hypotheses per word (at most K,
    fewer than at P = 1) and the decoder positions per token (1 for given); ``sipe-eval blimp``'s
    ``[mix:2]`` column is the pairs whose good sentence has the higher log q under the same options
    (scored again through the engine); P outside (0, 1] exits 2."""
    from sipe_fairseq.cli.eval_lm import main as eval_lm_main

    rows = {}
    for mass in ("1", "0.5"):
        out = toy["root"] / f"mass{mass}.json"
        assert eval_lm_main([str(toy["data"]), "--path", f"pos={toy['ck']}", "--gen-subset", "test", "--tags",
                             "given,mix:4", "--tags-mass", mass, "--json", str(out), "--no-progress"]) == 0
        rows[mass] = json.loads(out.read_text())["pos"]["tag_sources"]
    printed = capsys.readouterr().out
    assert "live hyp/word" in printed and "share of the prefix mass reaches 0.5" in printed
    full, half = rows["1"]["mix:4"], rows["0.5"]["mix:4"]
    assert rows["1"]["given"]["positions_per_token"] == 1.0 and rows["1"]["given"]["live_per_word"] == 1.0
    assert half["mass"] == 0.5 and "mass" not in full
    assert 1.0 <= half["live_per_word"] < full["live_per_word"] <= 4.0
    assert half["positions_per_token"] < full["positions_per_token"]
    for bad in ("0", "1.5", "x"):
        with pytest.raises(SystemExit) as e:
            eval_lm_main([str(toy["data"]), "--path", f"pos={toy['ck']}", "--tags", "mix:4", "--tags-mass", bad])
        assert e.value.code == 2
    assert "--tags-mass" in capsys.readouterr().err

    out, md = toy["root"] / "blimp_mass.json", toy["root"] / "blimp_mass.md"
    assert eval_main(["blimp", "--data", str(toy["data"]), "--path", f"pos={toy['ck']}", "--blimp", str(toy["pairs"]),
                      "--trees", str(toy["trees"]), "--tags", "mix:2", "--tags-mass", "0.5", "--tags-top-pairs", "3",
                      "--json", str(out), "--markdown", str(md), "--batch-size", "8"]) == 0
    report = json.loads(out.read_text())
    assert report["tag_width"] == {"mass": 0.5, "top_pairs": 3} and "reaches 0.5 (--tags-mass)" in md.read_text()
    model, task = load(toy)
    from sipe_fairseq.data.encode import SentenceEncoder
    from sipe_fairseq.parsing.sources import ConlluTrees

    enc = SentenceEncoder(str(toy["data"]))
    pairs = blimp.read_blimp([toy["pairs"]])
    prepared = blimp.prepare(pairs, ConlluTrees(str(toy["trees"])), enc)
    texts = list(prepared.encoded)
    options = StructureOptions(placement=str(task.args.tag_head_placement), mass=0.5, top_pairs=3)
    scores = score_encoded(model, [prepared.encoded[t] for t in texts], "mix:2", enc.dictionary, options)
    total = {t: s.logprob for t, s in zip(texts, scores)}
    assert report["overall"]["correct"]["pos [mix:2]"] == sum(total[p.good] > total[p.bad] for p in pairs)

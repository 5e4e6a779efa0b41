"""GLUE: TSV reading, sipe-glue-preprocess, the hexatag_sentence_prediction task, decoder
classification heads, fine-tuning end to end, GLUE metrics. A fake parser (registered here) stands
in for spaCy, so nothing here needs spaCy."""
import json
import logging
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq
from fairseq import checkpoint_utils
from fairseq.data import Dictionary, data_utils

sipe_fairseq.register()

from sipe_fairseq.cli.glue_preprocess import main as glue_main  # noqa: E402
from sipe_fairseq.data.encode import SentenceEncoder  # noqa: E402
from sipe_fairseq.data.glue import (  # noqa: E402
    GLUE_TASKS, GluePreprocessError, GluePreprocessOptions, glue_split_files, glue_task, preprocess_glue, read_glue_tsv,
)
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID  # noqa: E402
from sipe_fairseq.checkpoints.model_flags import model_flags  # noqa: E402
from sipe_fairseq.eval import glue as glue_eval  # noqa: E402
from sipe_fairseq.parsing import ParseError, register_parser  # noqa: E402
from sipe_fairseq.hexatag import encode_tree  # noqa: E402
from sipe_fairseq.models.classification import last_positions  # noqa: E402

import launcher
from conftest import BIN, ENV, PLUGIN, run, shared_path, txl  # noqa: E402,F401 (test_glue_encoders imports them from here)


# ----------------------------------------------------------------------------- fake parser


def fake_heads(n):
    """Each word attached to the previous one (word 1 is the root): a projective chain."""
    return [0] + list(range(1, n))


@register_parser("glue-fake")
class FakeParser:
    """Whitespace words, chain trees; ``UNPARSABLE`` raises ParseError, ``CYCLE`` gives a cycle."""

    def __init__(self, arg=""):
        self.spec = "glue-fake"

    def parse_text(self, sentences):
        out = []
        for k, s in enumerate(sentences):
            if "UNPARSABLE" in s:
                raise ParseError("fake failure", k)
            w = s.split()
            out.append((w, [2, 1] + list(range(2, len(w))) if "CYCLE" in s else fake_heads(len(w))))
        return out

    def parse_words(self, sentences):
        return [fake_heads(len(w)) for w in sentences]


# ----------------------------------------------------------------------------- inline GLUE files

COLA = ("gj04\t1\t\tthe door is old .\n"
        "gj04\t0\t*\tthe door are old .\n"
        "gj04\t1\t\tthe bell to the door is old .\n"
        "gj04\t0\t*\told the is door .\n")
RTE = ("index\tsentence1\tsentence2\tlabel\n"
       "0\tthe door is old .\tthe door is old .\tentailment\n"
       "1\tthe door is old . the bell is new .\tthe bell is old .\tnot_entailment\n"
       "2\tUNPARSABLE door\tthe door\tentailment\n"
       "3\ttoo few fields\n"
       "4\tthe bell\tthe door\tmaybe\n"
       "5\tCYCLE the  door\t\"the\" bell .\tnot_entailment\n")
STSB = ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
        "0\tmain\tf\t2012\t1\tnone\tnone\tthe door is old .\tthe door is old .\t5.000\n"
        "1\tmain\tf\t2012\t2\tnone\tnone\tthe door is old .\tthe bell is new .\t1.5\n"
        "2\tmain\tf\t2012\t3\tnone\tnone\tthe bell is old .\tthe bell is new .\t3.2\n"
        "3\tmain\tf\t2012\t4\tnone\tnone\tthe bell\tthe door\t0.4\n"
        "4\tmain\tf\t2012\t5\tnone\tnone\tthe bell\tthe door\tn/a\n")


def synthetic_cola(n=300, seed=0):
    """CoLA-format rows whose label is decided by the 2nd/3rd word ("old" -> 1, "new" -> 0), far
    from the final token the decoder classifies from. Returns (train text, dev text)."""
    import random

    rnd = random.Random(seed)
    rows = []
    for _ in range(n):
        subj, adj = rnd.choice(["the door", "the bell", "the dog", "a cat"]), rnd.choice(["old", "new"])
        filler = " ".join(rnd.choice(["very", "quite", "so"]) for _ in range(rnd.randint(0, 3)))
        rows.append(f"src\t{int(adj == 'old')}\t\t{subj} {adj} is {filler} there .\n")
    return "".join(rows[: n * 5 // 6]), "".join(rows[n * 5 // 6:])


def write_task(root: Path, folder: str, train: str, dev: str = None) -> Path:
    d = root / folder
    d.mkdir(parents=True, exist_ok=True)
    (d / "train.tsv").write_text(train, encoding="utf-8")
    (d / "dev.tsv").write_text(dev if dev is not None else train, encoding="utf-8")
    return d


# ----------------------------------------------------------------------------- reading


def test_read_cola_and_rte_inline(tmp_path, caplog):
    cola = read_glue_tsv(str(write_task(tmp_path, "CoLA", COLA) / "train.tsv"), "cola")
    assert [(e.line, e.texts, e.label) for e in cola.examples[:2]] == [
        (1, ("the door is old .",), "1"), (2, ("the door are old .",), "0")]
    assert cola.labelled and not cola.refused and len(cola.examples) == 4
    with caplog.at_level(logging.WARNING):
        rte = read_glue_tsv(str(write_task(tmp_path, "RTE", RTE) / "train.tsv"), "RTE")
    assert [e.line for e in rte.examples] == [2, 3, 4, 7]  # 1-based file lines; line 1 is the header
    assert rte.examples[1].texts == ("the door is old . the bell is new .", "the bell is old .")
    assert rte.examples[3].texts[1] == '"the" bell .'  # quotes are text (no CSV quoting)
    assert dict(rte.refused) == {"malformed-row": 1, "bad-label": 1} and rte.rows_read == 6
    assert "train.tsv:5" in caplog.text and "train.tsv:6" in caplog.text  # refusals name file:line
    # CoLA's unlabelled test file has a header
    (tmp_path / "CoLA" / "test.tsv").write_text("index\tsentence\n0\tthe door is old .\n")
    test = read_glue_tsv(str(tmp_path / "CoLA" / "test.tsv"), "cola")
    assert not test.labelled and test.examples[0].texts == ("the door is old .",) and test.examples[0].label is None


def test_read_shared_sample():
    root = shared_path("data", "glue-sample")
    counts = {}
    for folder, name, split in (("CoLA", "cola", "train"), ("CoLA", "cola", "dev"),
                                ("RTE", "rte", "train"), ("RTE", "rte", "dev")):
        d = read_glue_tsv(str(root / folder / f"{split}.tsv"), name)
        assert not d.refused, (folder, split, d.refused)
        labels = [e.label for e in d.examples]
        counts[folder, split] = (len(labels), *[labels.count(x) for x in glue_task(name).labels])
        assert all(t.strip() for e in d.examples for t in e.texts)
    # PROVENANCE.md: CoLA 8551 (6023 acceptable / 2528) and 1043 (721/322); RTE 2490 (1249/1241), dev 277
    assert counts["CoLA", "train"] == (8551, 2528, 6023) and counts["CoLA", "dev"] == (1043, 322, 721)
    assert counts["RTE", "train"] == (2490, 1249, 1241) and counts["RTE", "dev"][0] == 277


@pytest.mark.parametrize("name,header,row,texts,label", [
    ("sst-2", "sentence\tlabel", "a fine film \t1", ("a fine film ",), "1"),
    ("mrpc", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t7\t8\tA b .\tA c .", ("A b .", "A c ."), "1"),
    ("qqp", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "5\t1\t2\tWhy?\tHow?\t0", ("Why?", "How?"), "0"),
    ("sts-b", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
     "0\tg\tf\ty\t1\ts\ts\tA .\tB .\t3.800", ("A .", "B ."), "3.800"),
    ("mnli", "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
             "sentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
     "0\t1\t2\tg\t(a)\t(b)\t(A)\t(B)\tP .\tH .\tneutral\tneutral\tentailment\tneutral\tneutral\tneutral",
     ("P .", "H ."), "neutral"),
    ("qnli", "index\tquestion\tsentence\tlabel", "0\tWho?\tHe .\tnot_entailment", ("Who?", "He ."), "not_entailment"),
    ("wnli", "index\tsentence1\tsentence2\tlabel", "0\tA .\tB .\t1", ("A .", "B ."), "1"),
])
def test_official_layouts(tmp_path, name, header, row, texts, label):
    """Every task is read by its official header names; its test file (no label column) too."""
    p = tmp_path / "x.tsv"
    p.write_text(f"{header}\n{row}\n", encoding="utf-8")
    d = read_glue_tsv(str(p), name)
    assert d.labelled and [(e.texts, e.label) for e in d.examples] == [(texts, label)], d
    cols = header.split("\t")
    keep = [i for i, c in enumerate(cols) if c != glue_task(name).label and not c.startswith("label")]
    p.write_text("\t".join(cols[i] for i in keep) + "\n" + "\t".join(row.split("\t")[i] for i in keep) + "\n")
    d = read_glue_tsv(str(p), name)
    assert not d.labelled and d.examples[0].texts == texts


def test_split_files_and_task_names(tmp_path):
    for f in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv", "test_matched.tsv"):
        (tmp_path / f).write_text("")
    assert [s for s, _ in glue_split_files(str(tmp_path), "mnli")] == ["train", "valid", "valid1", "test"]
    assert [s for s, _ in glue_split_files(str(tmp_path), "mnli", ["dev_mismatched"])] == ["valid1"]
    with pytest.raises(GluePreprocessError, match="no test1 split"):
        glue_split_files(str(tmp_path), "mnli", ["test1"])
    assert glue_task("STS-B") is glue_task("stsb") is GLUE_TASKS["sts-b"] and glue_task("SST2").name == "sst-2"
    with pytest.raises(ValueError, match="unknown GLUE task"):
        glue_task("squad")
    assert {t.metric for t in GLUE_TASKS.values()} == {"mcc", "accuracy", "acc_and_f1", "pearson_and_spearman"}


# ----------------------------------------------------------------------------- metrics


def test_metrics_hand_computed():
    preds, labels = [1, 1, 0, 0, 1], [1, 0, 0, 0, 1]  # TP 2, FP 1, TN 2, FN 0
    assert glue_eval.matthews_corr(preds, labels) == pytest.approx(4 / 6)  # (2*2 - 1*0) / sqrt(3*2*2*3)
    assert glue_eval.f1(preds, labels) == pytest.approx(0.8)  # 2*2 / (2*2 + 1 + 0)
    assert glue_eval.accuracy(preds, labels) == pytest.approx(0.8)
    assert glue_eval.f1(preds, labels, positive=0) == pytest.approx(0.8)  # TP 2, FP 0, FN 1
    assert glue_eval.matthews_corr([1, 1, 1], [1, 0, 1]) == 0.0  # constant prediction: undefined -> 0
    assert glue_eval.matthews_corr([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)
    # Pearson of (1,2,3) vs (1,2,4): 3 / sqrt(2 * 14/3); Spearman 1 (same order)
    assert glue_eval.pearson([1, 2, 3], [1, 2, 4]) == pytest.approx(3 / np.sqrt(28 / 3))
    assert glue_eval.spearman([1, 2, 3], [1, 2, 4]) == pytest.approx(1.0)
    # ties get average ranks: (1, 2.5, 2.5, 4) vs (1, 3, 2, 4) -> 4.5 / sqrt(4.5 * 5)
    assert glue_eval.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / np.sqrt(22.5))
    row = glue_eval.glue_metrics("acc_and_f1", preds, labels)
    assert row == pytest.approx({"f1": 80.0, "accuracy": 80.0, "acc_and_f1": 80.0})
    assert set(glue_eval.glue_metrics("mcc", preds, labels)) == {"mcc", "accuracy"}
    assert set(glue_eval.glue_metrics("pearson_and_spearman", [1, 2, 3], [1, 2, 4])) == {"pearson", "spearman", "corr"}


def test_metrics_match_sklearn_and_scipy():
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

    rng = np.random.default_rng(0)
    for _ in range(5):
        y, p = rng.integers(0, 2, 50), rng.integers(0, 2, 50)
        assert glue_eval.matthews_corr(p, y) == pytest.approx(matthews_corrcoef(y, p))
        assert glue_eval.f1(p, y) == pytest.approx(f1_score(y, p))
        y3, p3 = rng.integers(0, 3, 60), rng.integers(0, 3, 60)
        assert glue_eval.matthews_corr(p3, y3) == pytest.approx(matthews_corrcoef(y3, p3))
        a, b = rng.normal(size=40), rng.integers(0, 6, 40).astype(float)  # b has ties
        assert glue_eval.pearson(a, b) == pytest.approx(pearsonr(a, b)[0])
        assert glue_eval.spearman(a, b) == pytest.approx(spearmanr(a, b)[0])


def test_last_positions():
    pad = 1
    t = torch.tensor([[5, 6, 7, 2], [5, 2, pad, pad], [pad, pad, 5, 2]])
    assert last_positions(t, pad).tolist() == [3, 1, 3]


# ----------------------------------------------------------------------------- data directories


@pytest.fixture(scope="module")
def lm(tmp_path_factory, toy_data, train_checkpoint):
    """The toy sipe-preprocess directory and a sipe_txl_tiny (position) LM trained for a few updates."""
    return {"root": tmp_path_factory.mktemp("glue"), "data": toy_data, "ckpt": train_checkpoint(txl("position"))}


@pytest.fixture(scope="module")
def glue_dirs(lm):
    """CoLA, RTE and STS-B (inline TSVs) preprocessed with the fake parser through the CLI."""
    root = lm["root"]
    out = {}
    syn_train, syn_dev = synthetic_cola()
    for key, name, folder, text, dev in (("cola", "cola", "CoLA", COLA, None), ("rte", "rte", "RTE", RTE, None),
                                         ("stsb", "stsb", "STS-B", STSB, None), ("syn", "cola", "SYN", syn_train, syn_dev)):
        src = write_task(root / "glue", folder, text, dev)
        out[key] = root / f"bin-{key}"
        assert glue_main(["--task-name", name, "--glue-dir", str(src), "--pretrain-data", str(lm["data"]),
                          "--destdir", str(out[key]), "--parser", "glue-fake"]) == 0
    return out


def _stream(path, dictionary=None):
    ds = data_utils.load_indexed_dataset(str(path), dictionary)
    return [ds[i].long() for i in range(len(ds))]


def test_preprocess_pair_task_aligned(lm, glue_dirs):
    """Binarized tokens and tags equal the pre-training SentenceEncoder's for every sentence; a
    failed parse is kept with <notag> tags and counted; refused rows are counted."""
    out = glue_dirs["rte"]
    info = json.loads((out / "glue.json").read_text())
    assert info["task"] == "rte" and info["pair"] and info["num_classes"] == 2 and info["metric"] == "accuracy"
    st = info["splits"]["train"]
    assert st["examples"] == 4 and st["rows_refused"] == 2 and st["refused"]["malformed-row"] == 1
    assert st["parse_failed"] == 2 and st["parse_failed_parse-error"] == 1 and st["parse_failed_invalid-tree"] == 1
    assert (out / "input0" / "dict.txt").read_bytes() == (lm["data"] / "dict.txt").read_bytes()
    assert (out / "input1" / "dict.txt").read_bytes() == (lm["data"] / "dict.txt").read_bytes()
    enc = SentenceEncoder(str(lm["data"]))
    rows = read_glue_tsv(str(lm["root"] / "glue" / "RTE" / "train.tsv"), "rte").examples
    for k in (0, 1):
        toks = _stream(out / f"input{k}" / "train", enc.dictionary)
        terms, nts = _stream(out / f"input{k}" / "train.terminal"), _stream(out / f"input{k}" / "train.nonterminal")
        assert len(toks) == len(rows) == 4
        for i, ex in enumerate(rows):
            text = " ".join(ex.texts[k].split())
            failed = "UNPARSABLE" in text or "CYCLE" in text
            words = text.split() if not failed else None
            if failed:
                from sipe_fairseq.parsing import split_words
                words = split_words(text)
            e_tok, e_t, e_n, firsts = enc.encode(words, None if failed else fake_heads(len(words)))
            assert torch.equal(toks[i], e_tok) and torch.equal(terms[i], e_t) and torch.equal(nts[i], e_n), (k, i)
            if failed:
                assert terms[i].eq(NOTAG_ID).all() and nts[i].eq(NOTAG_ID).all()
            else:
                assert (terms[i] >= FIRST_TAG_ID).nonzero().view(-1).tolist() == firsts
                tags, _, _ = encode_tree(fake_heads(len(words)))
                assert nts[i][firsts[-1]] == FIRST_TAG_ID + 4  # the last word's EOS non-terminal
                assert len(tags) == len(firsts)
    labels = Dictionary.load(str(out / "label" / "dict.txt"))
    assert labels.symbols[labels.nspecial:] == ["entailment", "not_entailment"]
    assert (out / "label" / "train.label").read_text().split() == [e.label for e in rows]
    lab = _stream(out / "label" / "train", labels)
    assert [labels[int(x[0])] for x in lab] == [e.label for e in rows] and all(x[1] == labels.eos() for x in lab)


def test_preprocess_regression_and_errors(lm, glue_dirs, tmp_path):
    stsb = glue_dirs["stsb"]
    assert (stsb / "label" / "valid.label").read_text().split() == ["1", "0.3", "0.64", "0.08"]  # score / 5
    assert not (stsb / "label" / "dict.txt").exists()
    src = lm["root"] / "glue" / "RTE"
    opts = GluePreprocessOptions("rte", str(src), str(lm["data"]), str(tmp_path / "x"), fail_on_parse_error=True)
    with pytest.raises(GluePreprocessError, match="could not be parsed"):
        preprocess_glue(opts, FakeParser())
    opts = GluePreprocessOptions("rte", str(src), str(lm["data"]), str(tmp_path / "x"), fail_on_refusal=True)
    with pytest.raises(GluePreprocessError, match="refused rows"):
        preprocess_glue(opts, FakeParser())
    assert not (tmp_path / "x").exists()  # nothing written
    with pytest.raises(FileExistsError):
        preprocess_glue(GluePreprocessOptions("rte", str(src), str(lm["data"]), str(glue_dirs["rte"])), FakeParser())
    assert glue_main(["--task-name", "rte", "--glue-dir", str(src), "--pretrain-data", str(tmp_path),
                      "--destdir", str(tmp_path / "y"), "--parser", "glue-fake"]) == 1  # no dict.txt there
    # --parser none: no trees, every tag <notag>, nothing counted as failed
    assert glue_main(["--task-name", "cola", "--glue-dir", str(lm["root"] / "glue" / "CoLA"), "--pretrain-data",
                      str(lm["data"]), "--destdir", str(tmp_path / "none"), "--parser", "none", "--splits", "valid"]) == 0
    assert not (tmp_path / "none" / "input0" / "train.bin").exists()
    assert all(t.eq(NOTAG_ID).all() for t in _stream(tmp_path / "none" / "input0" / "valid.terminal"))
    assert json.loads((tmp_path / "none" / "glue.json").read_text())["splits"]["valid"]["parse_failed"] == 0


# ----------------------------------------------------------------------------- task


def make_task(data, **overrides):
    from omegaconf import OmegaConf

    from sipe_fairseq.tasks.hexatag_sentence_prediction import HexatagSentencePredictionConfig, HexatagSentencePredictionTask

    cfg = OmegaConf.structured(HexatagSentencePredictionConfig)
    OmegaConf.set_struct(cfg, False)
    cfg.data, cfg.seed, cfg.regression_target = str(data), 1, False
    cfg.classification_head_name = "sentence_classification_head"
    for k, v in overrides.items():
        cfg[k] = v
    return HexatagSentencePredictionTask.setup_task(cfg)


@pytest.mark.parametrize("init,sep", [(None, None), (2, None), (0, 2)])
def test_task_batches_keep_tags_in_step(lm, glue_dirs, init, sep):
    """src_terminals/src_nonterminals equal, position by position, the concatenation of the
    SentenceEncoder's tags: [init] s1 </s> [sep] s2 </s>, with <notag> on init/sep/</s>."""
    task = make_task(glue_dirs["rte"], init_token=init, separator_token=sep)
    assert task.cfg.num_classes == 2  # from glue.json
    task.load_dataset("train")
    ds = task.dataset("train")
    b = ds.collater([ds[i] for i in range(len(ds))])
    net = b["net_input"]
    toks0, toks1 = _stream(glue_dirs["rte"] / "input0/train"), _stream(glue_dirs["rte"] / "input1/train")
    tags = {k: [_stream(glue_dirs["rte"] / f"input{j}/train.{k}") for j in (0, 1)] for k in ("terminal", "nonterminal")}
    pad = task.source_dictionary.pad()
    for r, i in enumerate(b["id"].tolist()):
        pre = [init] if init is not None else []
        mid = [sep] if sep is not None else []
        n = len(pre) + len(toks0[i]) + len(mid) + len(toks1[i])
        want = torch.tensor(pre + toks0[i].tolist() + mid + toks1[i].tolist())
        assert torch.equal(net["src_tokens"][r, :n], want) and net["src_tokens"][r, n:].eq(pad).all()
        assert net["src_tokens"][r, len(pre) + len(toks0[i]) - 1] == task.source_dictionary.eos()  # s1 </s> s2 </s>
        for kind, key in (("terminal", "src_terminals"), ("nonterminal", "src_nonterminals")):
            t0, t1 = tags[kind][0][i].tolist(), tags[kind][1][i].tolist()
            want = torch.tensor([NOTAG_ID] * len(pre) + t0 + [NOTAG_ID] * len(mid) + t1)
            assert torch.equal(net[key][r, :n], want), (kind, r)
            assert net[key][r, n:].lt(FIRST_TAG_ID).all()
        assert net["src_lengths"][r] == n
    assert sorted(b["target"].view(-1).tolist()) == [0, 0, 1, 1]  # entailment=0, not_entailment=1


def test_task_truncation_cuts_tags_alike(glue_dirs):
    task = make_task(glue_dirs["rte"], shorten_method="truncate", max_positions=7)
    task.load_dataset("train")
    ds = task.dataset("train")
    full = make_task(glue_dirs["rte"])
    full.load_dataset("train")
    for i in range(len(ds)):
        s, f = ds.collater([ds[i]])["net_input"], full.dataset("train").collater([full.dataset("train")[i]])["net_input"]
        assert s["src_tokens"].size(1) == min(7, f["src_tokens"].size(1))
        for key in ("src_tokens", "src_terminals", "src_nonterminals"):
            assert torch.equal(s[key][0], f[key][0, :7])  # a prefix of the same example, tags alike


def test_task_checks_classes_and_regression(glue_dirs):
    with pytest.raises(ValueError, match="regression-target"):
        make_task(glue_dirs["stsb"])
    with pytest.raises(ValueError, match="num-classes 3"):
        make_task(glue_dirs["cola"], num_classes=3)
    task = make_task(glue_dirs["stsb"], regression_target=True)
    assert task.cfg.num_classes == 1
    task.load_dataset("valid")
    ds = task.dataset("valid")
    assert sorted(float(ds[i]["target"][0]) for i in range(len(ds))) == pytest.approx([0.08, 0.3, 0.64, 1.0])


@pytest.mark.parametrize("name,flag", [("cola", "report_mcc"), ("rte", None), ("stsb", "report_pearson_and_spearman")])
def test_criterion_reports_the_task_metric(glue_dirs, name, flag):
    from fairseq.criterions.sentence_prediction import SentencePredictionConfig
    from omegaconf import OmegaConf

    task = make_task(glue_dirs[name], regression_target=name == "stsb")
    cfg = OmegaConf.structured(SentencePredictionConfig)
    cfg._name, cfg.regression_target = "sentence_prediction", name == "stsb"
    OmegaConf.set_struct(cfg, True)
    crit = task.build_criterion(cfg)
    flags = {f: getattr(crit, f) for f in ("report_mcc", "report_acc_and_f1", "report_pearson_and_spearman")}
    assert flags == {f: f == flag for f in flags}


# ----------------------------------------------------------------------------- model


def test_lm_checkpoint_loads_into_classifier(lm, glue_dirs, caplog):
    """Every LM weight lands in the classifier unchanged; only the head is fresh (and logged)."""
    state = checkpoint_utils.load_checkpoint_to_cpu(str(lm["ckpt"]))
    task = make_task(glue_dirs["rte"])
    from omegaconf import OmegaConf

    mcfg = OmegaConf.create(OmegaConf.to_container(state["cfg"], resolve=True)["model"])
    model = task.build_model(mcfg)
    assert "sentence_classification_head" in model.classification_heads
    lm_state = {k: v.clone() for k, v in state["model"].items()}
    with caplog.at_level(logging.INFO):
        model.load_state_dict(state["model"], strict=True, model_cfg=mcfg)
    assert "initialized fresh" in caplog.text and "classification_heads.sentence_classification_head.dense.weight" in caplog.text
    own = model.state_dict()
    assert set(own) - set(lm_state) == {k for k in own if k.startswith("classification_heads.")}
    assert all(torch.equal(own[k], v) for k, v in lm_state.items())
    # a body that does not match the checkpoint still fails (strictness is only relaxed for the head)
    mcfg.sipe_injection = "none"
    with pytest.raises(RuntimeError, match="Unexpected key|size mismatch|Missing key"):
        task.build_model(mcfg).load_state_dict(checkpoint_utils.load_checkpoint_to_cpu(str(lm["ckpt"]))["model"],
                                               strict=True, model_cfg=mcfg)
    # classification reads the last non-pad position: padding never changes a row's logits
    model.eval()
    task.load_dataset("valid")
    ds = task.dataset("valid")
    b = ds.collater([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        logits, _ = model(**b["net_input"], features_only=True, classification_head_name="sentence_classification_head")
        for r in range(len(ds)):
            one = ds.collater([ds[int(b["id"][r])]])
            alone, _ = model(**one["net_input"], classification_head_name="sentence_classification_head")
            assert torch.allclose(alone[0], logits[r], atol=1e-5)
    # the LM path is untouched
    out, extra = model(b["net_input"]["src_tokens"], src_terminals=b["net_input"]["src_terminals"],
                       src_nonterminals=b["net_input"]["src_nonterminals"])
    assert out.size(-1) == len(task.source_dictionary) and "terminal_logits" in extra


# ----------------------------------------------------------------------------- end to end


FINETUNE = {  # name -> (extra args, metric logged by fairseq's criterion, key of our evaluation)
    "cola": (["--max-update", "4"], "mcc", "mcc"),
    "rte": (["--max-update", "4", "--init-token", "2", "--sipe-tag-heads", "off"], "accuracy", "accuracy"),
    "stsb": (["--max-update", "4", "--regression-target"], "pearson", "pearson"),
    "syn": (["--max-epoch", "6", "--init-token", "2", "--batch-size", "16"], "mcc", "mcc"),
}


def test_finetune_end_to_end(lm, glue_dirs):
    """fairseq-train --task hexatag_sentence_prediction from the LM checkpoint (--finetune-from-model)
    for a few updates per task (in parallel); each logs its GLUE metric on valid, and
    ``sipe-eval glue`` recomputes the same number from the last checkpoint. On a
    synthetic CoLA-format task (label decided by an early word) a few epochs reach ~100%."""
    root = lm["root"]
    body = model_flags(str(lm["ckpt"]))  # the LM's architecture, as saved
    assert body[:2] == ["--arch", "sipe_txl_tiny"] and "--sipe-injection" in body
    procs = {}
    for name, (extra, _, _) in FINETUNE.items():
        cmd = [BIN / "fairseq-train", glue_dirs[name], "--user-dir", PLUGIN, "--task", "hexatag_sentence_prediction",
               "--criterion", "sentence_prediction", *body,
               "--finetune-from-model", lm["ckpt"], "--optimizer", "adam", "--adam-betas", "(0.9,0.999)",
               "--adam-eps", "1e-6", "--weight-decay", "0.1", "--lr", "0.001", "--batch-size", "2", "--seed", "1",
               "--save-dir", root / f"ck-{name}", "--no-epoch-checkpoints", "--num-workers", "0", "--log-format", "simple",
               *extra]  # last: overrides
        procs[name] = launcher.popen(cmd, cwd=root, env=ENV)
    logs, rows = {}, {}
    for name, p in procs.items():
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out[-4000:]
        logs[name] = out
    for name, (_, logged, ours) in FINETUNE.items():
        log = logs[name]
        assert "loading pretrained model from" in log and "initialized fresh" in log
        valid = re.findall(rf"valid on 'valid' subset \|.* \| {logged} ([-\d.]+) \|", log)
        assert valid, log[-3000:]
        rows[name] = row = glue_eval.evaluate_glue(str(root / f"ck-{name}" / "checkpoint_last.pt"), str(glue_dirs[name]), "valid")
        assert row["task"] == glue_task("cola" if name == "syn" else name).name and row["n"] == (50 if name == "syn" else 4)
        assert abs(row[ours] - float(valid[-1])) <= 0.051, (name, row, valid)  # fairseq rounds to 0.1
    # the classifier learns a label decided by a word far from the final position it reads
    assert rows["syn"]["mcc"] > 90 and rows["syn"]["accuracy"] > 95, rows["syn"]
    assert "dropped the LM's terminal_head weights" in logs["rte"]
    out = run([sys.executable, "-m", "sipe_fairseq.cli.eval", "glue", "--data", glue_dirs["cola"], "--path",
               root / "ck-cola" / "checkpoint_last.pt", "--split", "valid"], root)
    assert re.search(r"cola valid \(n=4\): mcc [-\d.]+ \| accuracy [\d.]+", out), out

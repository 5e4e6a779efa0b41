"""``sipe_fairseq.hub``: load a checkpoint, score, parse and generate from Python.

On the session's tiny checkpoints (conftest cache: a SiPE ``position`` decoder, a ``none`` decoder and a
GiLT decoder, all on the standard toy data). The independent computations: ``sipe-eval-lm --tags`` on the
same sentences (the test split, whose CoNLL-U trees the hub is given) for the totals, ``sipe-generate`` for
generation, the input trees for the structure of ``given``.
"""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

import fairseq  # noqa: F401
from conftest import PLUGIN, ROOT, STOCK_LM, txl
from sipe_fairseq import hub
from sipe_fairseq.checkpoints import CheckpointError
from sipe_fairseq.cli.eval_lm import main as eval_lm_main
from sipe_fairseq.hexatag.conllu_io import read_conllu

GILT = ["--user-dir", PLUGIN, "--task", "gilt_lm", "--criterion", "gilt_lm", "--arch", "gilt_txl_tiny",
        "--tokens-per-sample", "64", "--sample-break-mode", "complete"]  # test_gilt_generate's checkpoint
LN2 = math.log(2)


@pytest.fixture(scope="module")
def checkpoints(train_checkpoint):
    pos, none, gilt, stock = train_checkpoint.many([txl("position"), txl("none"), GILT, STOCK_LM])
    return {"pos": pos, "none": none, "gilt": gilt, "stock": stock}


@pytest.fixture(scope="module")
def models(checkpoints):
    return {name: hub.load(ck) for name, ck in checkpoints.items()}  # data: the directory saved in the checkpoint


@pytest.fixture(scope="module")
def test_trees(toy_corpus):
    return [(s.words, s.heads) for s in read_conllu(toy_corpus / "test.conllu")]


def eval_lm_nll(checkpoint, data, tags, tmp_path):
    out = tmp_path / "eval_lm.json"
    assert eval_lm_main([str(data), "--path", f"m={checkpoint}", "--gen-subset", "test", "--tags", tags, "--json",
                         str(out), "--no-progress"]) == 0
    return {source: row["nll"] for source, row in json.loads(out.read_text())["m"]["tag_sources"].items()}


@pytest.mark.parametrize("name,tags", [("pos", "given,self,mix:4"), ("none", "given,self"), ("gilt", "self"),
                                       ("stock", "given")])
def test_score_totals_equal_sipe_eval_lm(models, checkpoints, toy_data, test_trees, tmp_path, name, tags):
    """The summed log-probabilities of the test split's sentences (words and trees from its CoNLL-U) equal
    ``sipe-eval-lm --tags`` on the preprocessed split, source by source."""
    expected = eval_lm_nll(checkpoints[name], toy_data, tags, tmp_path)
    for source in tags.split(","):
        results = models[name].score(test_trees, tags=source)
        assert len(results) == len(test_trees)
        assert -sum(r.logprob for r in results) == pytest.approx(expected[source], rel=1e-6)


@pytest.mark.parametrize("source,kind", [("given", "conditional"), ("self", "exact"), ("mix:4", "exact"),
                                         ("beam:2", "bound"), ("untagged", "exact")])
def test_surprisals_add_up_and_say_what_they_are(models, test_trees, source, kind):
    """Token surprisals (bits) sum to -logprob, word surprisals to the same less </s>'s, one per word; given
    reads the input trees (their hexatags decode back to the heads)."""
    results = models["pos"].score(test_trees[:6], tags=source)
    for r, (words, heads) in zip(results, test_trees):
        assert r.kind == kind and r.source == source and r.words == words
        assert r.tokens[-1] == "</s>" and len(r.tokens) == len(r.token_surprisal) == len(r.token_logprobs)
        assert sum(r.token_surprisal) * LN2 == pytest.approx(-r.logprob, rel=1e-9)
        assert len(r.word_surprisal) == len(words)
        assert sum(r.word_surprisal_sum) == pytest.approx(sum(r.token_surprisal) - r.token_surprisal[-1], rel=1e-9)
        assert all(s >= 0 for s in r.token_surprisal) or kind == "bound"
        if source == "given":
            assert r.structure["heads"] == heads
        elif source == "untagged":
            assert r.structure is None
        else:
            assert len(r.structure["tags"]) == len(words)


def test_models_without_structure_and_gilt(models, test_trees):
    """``none`` and a stock ``transformer_lm``: exact under every source, no structure; GiLT ``given`` reads the
    tree as arcs (one head per word, the input's)."""
    words, heads = test_trees[0]
    for name in ("none", "stock"):
        [plain] = models[name].score([(words, heads)], tags="given")
        assert plain.kind == "exact" and plain.structure is None
    [graph] = models["gilt"].score([(words, heads)], tags="given")
    assert graph.kind == "conditional" and graph.structure["heads"] == heads
    assert sorted(graph.structure["arcs"]) == sorted((h, d) for d, h in enumerate(heads, 1))


def test_inputs_raw_words_and_trees_agree(models, test_trees):
    """A raw sentence, its word list and its tree give the same tokens and the same self scores."""
    words, heads = test_trees[1]
    raw, listed, tree = (models["pos"].score([x], tags="self")[0] for x in (" ".join(words), words, (words, heads)))
    assert raw.tokens == listed.tokens == tree.tokens
    assert raw.logprob == pytest.approx(listed.logprob, abs=1e-9) and listed.logprob == pytest.approx(tree.logprob, abs=1e-9)


def test_parse_gives_the_self_structure(models, test_trees):
    """``parse`` is the structure ``score(tags="self")`` reads, as heads and CoNLL-U rows."""
    sentences = [" ".join(w) for w, _ in test_trees[:4]]
    parsed = models["pos"].parse(sentences)
    scored = models["pos"].score(sentences, tags="self")
    for p, s in zip(parsed, scored):
        assert p.tags == s.structure["tags"] and p.heads == s.structure["heads"]
        rows = [line.split("\t") for line in p.conllu().splitlines() if line and not line.startswith("#")]
        assert [r[1] for r in rows] == p.words
        assert [r[9] for r in rows] == [f"Hexatag={t},{n}" for t, n in p.tags]
    with pytest.raises(ValueError, match="reads no structure"):
        models["none"].parse(sentences)


def test_generate_equals_sipe_generate(models, checkpoints, toy_data, tmp_path):
    """``generate(seed=s)`` draws what ``sipe-generate --seed s`` prints, block for block."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the dog\nsome owls near the\n")
    out = subprocess_output([sys.executable, "-m", "sipe_fairseq.cli.generate", "--path", checkpoints["pos"], "--data",
                             toy_data, prompts, "--sampling", "--beam", "3", "--nbest", "2", "--max-len", "12",
                             "--seed", "5"], tmp_path)
    got = models["pos"].generate(["the dog", "some owls near the"], max_new_tokens=12, sampling=True, beam=3, nbest=2,
                                 seed=5)
    assert [len(g) for g in got] == [2, 2]
    assert "".join(c.conllu() for per_prompt in got for c in per_prompt) == out
    for per_prompt, prompt in zip(got, ["the dog", "some owls near the"]):
        for c in per_prompt:
            assert c.words[:len(prompt.split())] == prompt.split() and c.heads is not None


def subprocess_output(cmd, cwd):
    import launcher

    proc = launcher.run([str(c) for c in cmd], cwd=cwd, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_import_load_score_generate_print_nothing(checkpoints, tmp_path):
    """In a fresh interpreter: importing the package and the hub, loading, scoring and generating write
    nothing to stdout and leave ``sys.excepthook`` as it was; importing the hub imports no torch."""
    script = f"""
import sys
hook = sys.excepthook
import sipe_fairseq, sipe_fairseq.hub as hub
assert "torch" not in sys.modules and "fairseq" not in sys.modules
lm = hub.load({str(checkpoints['pos'])!r})
lm.score(["the dog sleeps ."], tags="self")
lm.score([(["the", "dog", "sleeps", "."], [2, 3, 0, 3])], tags="given")
lm.generate(["the dog"], max_new_tokens=4)
assert sys.excepthook is hook, sys.excepthook
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == ""


# ---------------------------------------------------------------------- bad input
def test_bad_input(models):
    lm = models["pos"]
    assert lm.score([], tags="self") == []
    with pytest.raises(ValueError, match=r"sentence 2 \(''\): empty"):
        lm.score(["the dog .", ""], tags="self")
    with pytest.raises(ValueError, match=r"sentence 2 \(.*\): \d+ tokens with </s>, more than the model's 64 positions; "
                                         "sentences are never cut"):
        lm.score(["the dog .", " ".join(["the dogs"] * 40)], tags="self")
    with pytest.raises(ValueError, match="expected given, self, untagged, beam:K or mix:K"):
        lm.score(["the dog ."], tags="greedy")
    with pytest.raises(ValueError, match="3 heads for 2 words"):
        lm.score([(["the", "dog"], [2, 0, 2])], tags="given")


def test_unknown_words_are_scored_and_counted(models):
    """A word of pieces outside the vocabulary is scored through <unk>, as the commands encode it, and counted."""
    [r] = models["pos"].score(["the \u0436\u0436 dog ."], tags="self")
    assert r.unknown_words == 1 and "<unk>" in r.tokens and math.isfinite(r.logprob)
    [known] = models["pos"].score(["the dog ."], tags="self")
    assert known.unknown_words == 0


def test_checkpoint_errors_are_one_line(checkpoints, toy_data, tmp_path):
    """A checkpoint whose saved data directory is gone needs ``data``; a data directory of another dictionary is
    the one line ``sipe-eval-lm`` gives too; a missing file is CheckpointError."""
    with pytest.raises(CheckpointError, match="no such file"):
        hub.load(tmp_path / "missing.pt")
    state = torch.load(checkpoints["pos"], weights_only=False)
    state["cfg"]["task"]["data"] = str(tmp_path / "gone")
    moved = tmp_path / "moved.pt"
    torch.save(state, moved)
    with pytest.raises(CheckpointError, match=rf"its data directory {tmp_path / 'gone'} \(saved in the checkpoint\) "
                                              "has no dict.txt here: pass"):
        hub.load(moved)
    assert hub.load(moved, data=toy_data).score(["the dog ."], tags="self")[0].tokens[-1] == "</s>"
    other = tmp_path / "other"
    other.mkdir()
    for name in ("dict.txt", "spm.model", "dict.terminal.txt", "dict.nonterminal.txt"):
        (other / name).write_bytes((toy_data / name).read_bytes())
    with open(other / "dict.txt", "a") as f:
        f.write("\n".join(f"extra{i} 1" for i in range(3)) + "\n")
    with pytest.raises(CheckpointError) as e:
        hub.load(checkpoints["pos"], data=other)
    line = str(e.value)
    assert "\n" not in line and "does not fit the data directory" in line
    proc = run_cli([sys.executable, "-m", "sipe_fairseq.cli.eval_lm", other, "--path", checkpoints["pos"]], tmp_path)
    assert proc.returncode == 3 and proc.stderr.strip().splitlines()[-1].endswith(line)


def run_cli(cmd, cwd):
    import launcher

    return launcher.run([str(c) for c in cmd], cwd=cwd, timeout=600)


@pytest.mark.parametrize("model", ["sipe_lm.SiPETransformerXLModel", "sipe_lm.SiPERopeModel",
                                   "sipe_transformer_lm.SiPETransformerLanguageModel", "gilt_lm.GiltLanguageModel",
                                   "gilt_transformer_lm.GiltTransformerLanguageModel"])
def test_fairseq_from_pretrained_refuses_in_one_line(checkpoints, toy_data, model):
    """fairseq's ``Model.from_pretrained(model_dir, checkpoint_file, data)`` names ``sipe_fairseq.hub.load`` (before,
    it failed with "Could not infer task type")."""
    import importlib

    module, cls = model.split(".")
    model_cls = getattr(importlib.import_module(f"sipe_fairseq.models.{module}"), cls)
    ck = checkpoints["pos"]
    with pytest.raises(CheckpointError) as e:
        model_cls.from_pretrained(str(ck.parent), ck.name, str(toy_data))
    assert "\n" not in str(e.value)
    assert f"use sipe_fairseq.hub.load({str(ck)!r}, data=" in str(e.value)


def test_python_doc_runs_as_written(checkpoints, toy_data, capsys):
    """Every ``python`` block of docs/python.md, in order, in one namespace, with its two placeholder paths
    (``ck/checkpoint_best.pt``, ``data-bin``) replaced by the SiPE test checkpoint and its data directory."""
    import re

    from sipe_fairseq.parsing import spacy_available

    reason = spacy_available()
    if reason:
        pytest.skip(reason)  # the page scores raw text under given: the default spaCy parser
    text = (ROOT / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 8
    namespace = {}
    for block in blocks:
        assert "ck/checkpoint_best.pt" in block or "data-bin" not in block
        code = block.replace('"ck/checkpoint_best.pt"', repr(str(checkpoints["pos"]))).replace('"data-bin"',
                                                                                              repr(str(toy_data)))
        exec(compile(code, "docs/python.md", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "hexatags"
    assert [line.split()[0] for line in out.splitlines()[1:4]] == ["given", "self", "mix:16"]
    assert "# text = the dogs near the cat sleep ." in out

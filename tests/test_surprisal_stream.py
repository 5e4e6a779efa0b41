"""``sipe-surprisal`` scores in chunks and writes as it goes (issue 48): across chunk boundaries the sentence ids run
on, the TSV has one header, ``--json`` is the same document ``json.dumps(records, indent=1)`` wrote when everything
was held (every sentence under the first source, then the next), and the numbers are those of one chunk. The
checks before scoring name a sentence by its number in the whole input, not in its chunk."""
import json
import sys

import pytest

import launcher
from conftest import txl


@pytest.fixture(scope="module")
def checkpoint(train_checkpoint):
    return train_checkpoint(txl("position"))


def surprisal(args, cwd, stdin=None):
    proc = launcher.run([sys.executable, "-m", "sipe_fairseq.cli.surprisal", *map(str, args)], cwd=cwd, input=stdin,
                        timeout=600)
    return proc


@pytest.fixture(scope="module")
def conllu(toy_corpus):
    blocks = (toy_corpus / "test.conllu").read_text(encoding="utf-8").strip().split("\n\n")[:10]
    return "\n\n".join(blocks) + "\n\n"


def test_chunks_join_as_one(checkpoint, conllu, tmp_path):
    """``--tags-batch-sentences 1``: chunks of 4 sentences (3 chunks for 10), against one chunk of all 10."""
    common = ["--path", checkpoint, "--tags", "given,self", "--format", "conllu", "-"]
    small = surprisal([*common, "--tags-batch-sentences", "1"], tmp_path, conllu)
    whole = surprisal(common, tmp_path, conllu)
    assert small.returncode == whole.returncode == 0, small.stderr + whole.stderr
    rows, ref = [r.split("\t") for r in small.stdout.split("\n")[:-1]], [r.split("\t") for r in whole.stdout.split("\n")[:-1]]
    assert rows[0] == ["sentence_id", "token_id", "token", "surprisal[given]", "surprisal[self]", "kind[given]",
                       "kind[self]"]
    assert [r[:3] for r in rows] == [r[:3] for r in ref] and sum(r[0] == "sentence_id" for r in rows) == 1
    assert sorted({int(r[0]) for r in rows[1:]}) == list(range(1, 11))
    for r, q in zip(rows[1:], ref[1:]):
        assert [float(x) for x in r[3:5]] == pytest.approx([float(x) for x in q[3:5]], abs=1e-4) and r[5:] == q[5:]
    js = surprisal([*common, "--tags-batch-sentences", "1", "--json"], tmp_path, conllu)
    assert js.returncode == 0, js.stderr
    records = json.loads(js.stdout)
    assert js.stdout == json.dumps(records, indent=1) + "\n"  # the document the whole list gave
    assert [(r["source"], r["sentence_id"]) for r in records] == [(s, i) for s in ("given", "self") for i in range(1, 11)]


def test_checks_name_the_sentence_in_the_whole_input(checkpoint, tmp_path):
    """A sentence too long for the model in the third chunk: named by its number in the input (9), before anything
    is written (``--output`` absent, stdout empty)."""
    lines = ["the dog sleeps ."] * 8 + ["the dogs " * 40] + ["the cat ."]
    out = tmp_path / "out.tsv"
    proc = surprisal(["--path", checkpoint, "--tags-batch-sentences", "1", "--tags", "self", "--output", out, "-"],
                     tmp_path, "\n".join(lines) + "\n")
    assert proc.returncode == 2 and proc.stdout == "" and not out.exists()
    assert "<stdin>: sentence 9 ('the dogs the dogs" in proc.stderr.strip().splitlines()[-1], proc.stderr

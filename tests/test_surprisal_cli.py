"""``sipe-surprisal``: lm-zoo's TSV layout (``sentence_id token_id token surprisal``, 1-based, bits) per token
or word, one column per tag source, ``--json``, and its exit statuses. The independent computation: the
summed log-probabilities of ``sipe-eval-lm --tags`` (test_hub.py checks the library against it), here the
TSV's columns read back against the Python interface and the per-sentence totals."""
import csv
import io
import json
import math
import sys

import pytest

import launcher
from conftest import txl

LN2 = math.log(2)
SENTENCES = "the dog sleeps .\nsome owls near the cat sing .\nthe nurses see a \u0436 dog .\n"


@pytest.fixture(scope="module")
def checkpoint(train_checkpoint):
    return train_checkpoint(txl("position"))


def surprisal(args, cwd, stdin=None):
    return launcher.run([sys.executable, "-m", "sipe_fairseq.cli.surprisal", *map(str, args)], cwd=cwd, input=stdin,
                        timeout=600)


def read_tsv(text):
    return list(csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))


def test_tsv_round_trip(checkpoint, tmp_path):
    """Three sentences, token level: the header and 1-based ids of lm-zoo, one row per token with </s>, the
    surprisals of ``score`` (6 decimals); word level: one row per word, ``score``'s word surprisals (their sum: the
    sentence's total less </s>'s and the boundary terms, docs/python.md); the unknown word still scored."""
    from sipe_fairseq import hub

    path = tmp_path / "s.txt"
    path.write_text(SENTENCES)
    proc = surprisal(["--path", checkpoint, "--tags", "self", path], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = read_tsv(proc.stdout)
    assert rows[0] == ["sentence_id", "token_id", "token", "surprisal", "kind"]
    expected = hub.load(checkpoint).score(SENTENCES.splitlines(), tags="self")
    body = rows[1:]
    assert len(body) == sum(len(r.tokens) for r in expected)
    k = 0
    for sid, r in enumerate(expected, 1):
        for tid, (token, s) in enumerate(zip(r.tokens, r.token_surprisal), 1):
            assert body[k][:3] == [str(sid), str(tid), token]
            assert float(body[k][3]) == pytest.approx(s, abs=1e-6)
            k += 1
        assert body[k - 1][2] == "</s>"
    words = surprisal(["--path", checkpoint, "--tags", "self", "--level", "word", "--output", tmp_path / "w.tsv", path],
                      tmp_path)
    assert words.returncode == 0 and words.stdout == ""
    wrows = read_tsv((tmp_path / "w.tsv").read_text())[1:]
    assert [r[2] for r in wrows] == [w for r in expected for w in r.words]
    for sid, r in enumerate(expected, 1):
        total = sum(float(x[3]) for x in wrows if x[0] == str(sid))
        assert total == pytest.approx(-r.logprob / LN2 - r.end_surprisal - r.boundary_surprisal[0], abs=1e-5)
        assert [int(x[1]) for x in wrows if x[0] == str(sid)] == list(range(1, len(r.words) + 1))
    assert expected[2].unknown_words == 1


def test_sources_as_columns_and_json_from_conllu(checkpoint, toy_corpus, tmp_path):
    """CoNLL-U input (its trees are given's structure) on stdin with ``--format conllu``: one column per source;
    ``--json`` holds every field, its totals those of the columns."""
    blocks = (toy_corpus / "test.conllu").read_text().strip().split("\n\n")[:3]
    conllu = "\n\n".join(blocks) + "\n\n"
    proc = surprisal(["--path", checkpoint, "--tags", "given,mix:2", "--format", "conllu", "-"], tmp_path, stdin=conllu)
    assert proc.returncode == 0, proc.stderr
    rows = read_tsv(proc.stdout)
    assert rows[0] == ["sentence_id", "token_id", "token", "surprisal[given]", "surprisal[mix:2]", "kind[given]",
                       "kind[mix:2]"]
    assert sorted({r[0] for r in rows[1:]}) == ["1", "2", "3"]
    js = surprisal(["--path", checkpoint, "--tags", "given,mix:2", "--format", "conllu", "--json", "-"], tmp_path,
                   stdin=conllu)
    records = json.loads(js.stdout)
    assert [(r["source"], r["sentence_id"]) for r in records] == [(s, i) for s in ("given", "mix:2") for i in (1, 2, 3)]
    for r in records:
        column = 3 if r["source"] == "given" else 4
        total = sum(float(x[column]) for x in rows[1:] if x[0] == str(r["sentence_id"]))
        assert total == pytest.approx(-r["logprob"] / LN2, abs=1e-4)
        assert r["kind"] == ("conditional" if r["source"] == "given" else "exact")
        assert set(r) >= {"tokens", "token_surprisal", "words", "word_surprisal", "logprob", "structure"}
    gold_heads = [[int(line.split("\t")[6]) for line in b.splitlines() if not line.startswith("#")] for b in blocks]
    assert [r["structure"]["heads"] for r in records if r["source"] == "given"] == gold_heads


def test_exit_statuses(checkpoint, tmp_path):
    """An empty line (named, 2), a sentence longer than the positions (2), a bad source (2), a missing checkpoint
    (3): one line on stderr, nothing on stdout."""
    cases = [(["--path", checkpoint, "-"], "the dog .\n\nthe cat .\n", 2, "<stdin>:2: empty line"),
             (["--path", checkpoint, "--tags", "self", "-"], "the dog .\n" + "the dogs " * 40 + "\n", 2,
              "sentence 2 ("),
             (["--path", checkpoint, "--tags", "greedy", "-"], "the dog .\n", 2, "--tags: tag source 'greedy'"),
             (["--path", tmp_path / "missing.pt", "-"], "the dog .\n", 3, "missing.pt: no such file")]
    for args, stdin, status, message in cases:
        proc = surprisal(args, tmp_path, stdin=stdin)
        assert proc.returncode == status, (args, proc.stderr)
        assert proc.stdout == "" and message in proc.stderr.strip().splitlines()[-1] and "Traceback" not in proc.stderr

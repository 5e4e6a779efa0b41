"""Shards of ``sipe-surprisal`` (issue 49, item 2): ``--num-shards N --shard-id I`` scores the sentences (with
``--documents``: the documents, each whole) whose 0-based index is ``I`` mod ``N`` and writes a shard file to
``--output``; ``sipe-eval merge SHARD... --output OUT`` joins the shards into the output one run would have
written. On a tiny checkpoint, with every sentence in a batch of its own (``--tags-batch-sentences 1``,
``--workers 1`` and test_shards.py's ``alone``: a shard's batches are then the run's, docs/scaling.md), the merged
TSV (or ``--json`` records) equals the unsharded output byte for byte, sentence ids included. Refused with exit
status 2 and one line: a missing shard, shards of different options, an overlapping shard, ``--shard-id`` >=
``--num-shards``, a shard without ``--output``, ``--json`` for a merge of sipe-surprisal's shards."""
import json
import logging

import pytest

from conftest import txl
from test_shards import alone  # noqa: F401  (a fixture)

from sipe_fairseq.cli.eval import main as eval_main
from sipe_fairseq.cli.surprisal import main as surprisal_main

SENTENCES = ["the dog sleeps .", "some owls near the cat sing .", "the nurses see a dog .", "a cat runs .",
             "the dog sees the owls .", "some cats sing .", "the owl near a dog sleeps ."]
DOCUMENTS = [SENTENCES[:3], SENTENCES[3:4], SENTENCES[4:6], SENTENCES[6:]]
ONE_BATCH = ["--tags-batch-sentences", "1", "--workers", "1"]


@pytest.fixture(scope="module")
def checkpoint(train_checkpoint):
    return str(train_checkpoint(txl("position")))


def shards_and_merge(argv, tmp_path, n, name="s"):
    """``argv`` as ``n`` shards, merged (shards given in reverse order); the merged output's text and the shards."""
    paths = [tmp_path / f"{name}.{n}.{i}.json" for i in range(n)]
    for i, path in enumerate(paths):
        assert surprisal_main([*argv, "--num-shards", str(n), "--shard-id", str(i), "--output", str(path)]) == 0
        shard = json.loads(path.read_text())
        assert shard["format"] == "sipe-shard/1" and shard["command"] == "surprisal"
        assert (shard["shard"]["id"], shard["shard"]["of"]) == (i, n)
    merged = tmp_path / f"{name}.{n}.merged"
    assert eval_main(["merge", *map(str, paths[::-1]), "--output", str(merged)]) == 0
    return merged.read_text(), paths


def unsharded(argv, tmp_path, name="whole"):
    out = tmp_path / name
    assert surprisal_main([*argv, "--output", str(out)]) == 0
    return out.read_text()


def merge_fails(paths, tmp_path, caplog, *match, extra=()):
    caplog.clear()
    out = tmp_path / "refused.tsv"
    with caplog.at_level(logging.ERROR):
        assert eval_main(["merge", *map(str, paths), "--output", str(out), *extra]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    for m in match:
        assert m in errors[0], errors[0]
    assert not out.exists()


def test_shards_merge_to_the_unsharded_tsv(checkpoint, tmp_path, caplog, capsys, alone):  # noqa: F811
    """Token level under two sources, N = 2 and N = 3 (7 sentences: shares of 4 and 3, of 3, 2 and 2): the merged
    TSV is the unsharded one byte for byte; each shard holds its share under the global sentence ids."""
    path = tmp_path / "s.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    argv = ["--path", checkpoint, "--tags", "self,mix:2", *ONE_BATCH, str(path)]
    whole = unsharded(argv, tmp_path)
    assert len({line.split("\t")[0] for line in whole.splitlines()[1:]}) == len(SENTENCES)
    for n in (2, 3):
        merged, paths = shards_and_merge(argv, tmp_path, n)
        assert merged == whole
    capsys.readouterr()
    assert eval_main(["merge", *map(str, paths)]) == 0  # no --output: stdout, as sipe-surprisal
    assert capsys.readouterr().out == whole
    shard = json.loads(paths[1].read_text())
    assert [sid for sid, _ in shard["sentences"]] == [2, 5]  # 0-based 1 and 4: i % 3 == 1
    assert shard["shard"]["items"] == 2 and shard["shard"]["total"] == len(SENTENCES)
    assert all(line.split("\t")[0] == str(sid) for sid, rows in shard["sentences"] for line in rows.splitlines())

    # refusals (exit status 2, one line, nothing written)
    merge_fails(paths[:2], tmp_path, caplog, "shard 2 of 3 missing")
    merge_fails([paths[0], paths[1], paths[1], paths[2]], tmp_path, caplog, "overlaps")
    other = tmp_path / "other.json"  # another option (--level word): the fingerprints differ
    assert surprisal_main([*argv[:-1], "--level", "word", "--num-shards", "3", "--shard-id", "2",
                           "--output", str(other), argv[-1]]) == 0
    merge_fails([paths[0], paths[1], other], tmp_path, caplog, "different runs", "options", "level")
    merge_fails(paths, tmp_path, caplog, "--json", "--output", extra=["--json", str(tmp_path / "r.json")])


def test_word_level_from_stdin_and_json_records(checkpoint, tmp_path, monkeypatch, alone):  # noqa: F811
    """``--level word --measures surprisal,structure`` on stdin, and ``--json`` records (every sentence under the
    first source, then the next): the merge writes each as one run does."""
    import io
    import sys

    text = "\n".join(SENTENCES) + "\n"
    for extra, name in ((["--level", "word", "--measures", "surprisal,structure"], "words"), (["--json"], "records")):
        argv = ["--path", checkpoint, "--tags", "self,mix:2", *ONE_BATCH, *extra, "-"]
        outputs = []
        for shard in (None, 0, 1):
            monkeypatch.setattr(sys, "stdin", io.StringIO(text))
            out = tmp_path / f"{name}.{shard}"
            sharding = [] if shard is None else ["--num-shards", "2", "--shard-id", str(shard)]
            assert surprisal_main([*argv[:-1], *sharding, "--output", str(out), "-"]) == 0
            outputs.append(out)
        merged = tmp_path / f"{name}.merged"
        assert eval_main(["merge", str(outputs[1]), str(outputs[2]), "--output", str(merged)]) == 0
        assert merged.read_text() == outputs[0].read_text()
        assert json.loads(outputs[1].read_text())["shard"]["fingerprint"]["inputs"][0][0] == "<stdin>"
    records = json.loads((tmp_path / "records.merged").read_text())
    assert [(r["source"], r["sentence_id"]) for r in records] == \
        [(s, i) for s in ("self", "mix:2") for i in range(1, len(SENTENCES) + 1)]


def test_documents_are_shared_whole(checkpoint, tmp_path, caplog, alone):  # noqa: F811
    """``--documents``: the shards share the documents (4: shares of 2 and 2), each sentence scored after its
    document's earlier ones as in one run; the merged TSV (document_id, global sentence ids, context_dropped) is
    the unsharded one byte for byte. Shards of another ``--level`` are refused."""
    path = tmp_path / "docs.txt"
    path.write_text("\n\n".join("\n".join(doc) for doc in DOCUMENTS) + "\n")
    argv = ["--path", checkpoint, "--tags", "self", "--documents", "--level", "word", *ONE_BATCH, str(path)]
    whole = unsharded(argv, tmp_path)
    merged, paths = shards_and_merge(argv, tmp_path, 2, "docs")
    assert merged == whole
    shards = [json.loads(p.read_text()) for p in paths]
    assert [s["shard"]["items"] for s in shards] == [2, 2] and shards[0]["shard"]["total"] == len(DOCUMENTS)
    assert [sid for sid, _ in shards[0]["sentences"]] == [1, 2, 3, 5, 6]  # documents 1 and 3
    assert [sid for sid, _ in shards[1]["sentences"]] == [4, 7]  # documents 2 and 4
    doc_ids = {line.split("\t")[0] for sid, rows in shards[1]["sentences"] for line in rows.splitlines()}
    assert doc_ids == {"2", "4"}
    tokens = tmp_path / "tokens.json"  # shard 1 at --level token: another option
    assert surprisal_main([*argv[:-1], "--level", "token", "--num-shards", "2", "--shard-id", "1",
                           "--output", str(tokens), str(path)]) == 0
    merge_fails([paths[0], tokens], tmp_path, caplog, "different runs", "level")


@pytest.mark.parametrize("args, message", [
    (["--num-shards", "2", "--shard-id", "2", "--output", "o.json"], "--shard-id 2: expected 0 <= --shard-id"),
    (["--num-shards", "0", "--shard-id", "0", "--output", "o.json"], "--num-shards 0: expected an integer >= 1"),
    (["--num-shards", "2", "--output", "o.json"], "--num-shards and --shard-id go together"),
    (["--num-shards", "2", "--shard-id", "1"], "a shard needs --output"),
])
def test_bad_shard_options_exit_2(tmp_path, caplog, monkeypatch, args, message):
    """Checked before any input is read or checkpoint loaded (a checkpoint that does not exist is not reached)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.txt").write_text("the dog .\n")
    with caplog.at_level(logging.ERROR):
        assert surprisal_main(["--path", str(tmp_path / "missing.pt"), *args, "s.txt"]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and message in errors[0], errors
    assert not (tmp_path / "o.json").exists()


def test_default_batches_agree_to_float32_rounding(checkpoint, tmp_path):
    """At the default batch size a shard's batches are not the run's: the ids, tokens and kinds are equal, the
    surprisals agree to float32's rounding (the TSV's sixth decimal, docs/scaling.md)."""
    path = tmp_path / "s.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    argv = ["--path", checkpoint, "--tags", "self,mix:2", str(path)]
    whole = [line.split("\t") for line in unsharded(argv, tmp_path).splitlines()]
    merged, _ = shards_and_merge(argv, tmp_path, 3)
    merged = [line.split("\t") for line in merged.splitlines()]
    assert len(merged) == len(whole) and merged[0] == whole[0]
    for a, b in zip(merged[1:], whole[1:]):
        assert a[:3] + a[5:] == b[:3] + b[5:]
        assert [float(x) for x in a[3:5]] == pytest.approx([float(x) for x in b[3:5]], abs=1e-5)

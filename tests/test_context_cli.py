"""Issue 50: ``sipe-surprisal --documents`` and ``--measures surprisal,structure``: the command's code after loading
(:func:`write_tsv`, :func:`write_json`) on the tiny in-process models of ``test_context_hub``, against
``LanguageModel.score(context=...)`` called on each sentence with its document's earlier sentences; the usage
errors through ``main`` (found before any checkpoint is loaded)."""
import io
import json

import pytest

from sipe_fairseq.cli import surprisal as cli
from sipe_fairseq.hexatag.lines import LineInput
from test_context_hub import lms  # noqa: F401

DOCUMENTS = [["the dog sees a cat", "a cat runs", "the bell is old ."], ["the door is old .", "a dog runs"]]


def write_documents(path, gaps=("\n\n",)):
    path.write_text(gaps[0].join("\n".join(doc) for doc in DOCUMENTS) + "\n")
    return path


def table(text):
    rows = [line.split("\t") for line in text.splitlines()]
    return rows[0], rows[1:]


@pytest.mark.parametrize("name,tags", [("sipe", "self"), ("gilt", "mix:4"), ("none", "untagged")])
def test_documents_equal_score_in_context(lms, tmp_path, name, tags):  # noqa: F811
    lm = lms[name]
    path = write_documents(tmp_path / "docs.txt", ("\n\n\n",))
    out = io.StringIO()
    with LineInput(str(path)) as source:  # chunks of 2 sentences: a document crosses chunks
        cli.write_tsv(out, lm, source, cli.DOCUMENTS, [tags], 2, "word", ("surprisal", "structure"))
    header, rows = table(out.getvalue())
    assert header == ["document_id", "sentence_id", "token_id", "word", "surprisal", *cli.STRUCTURE_COLUMNS, "kind",
                      "context_dropped"]
    sid = 0
    for d, doc in enumerate(DOCUMENTS, 1):
        for k, sentence in enumerate(doc):
            sid += 1
            want = lm.score([sentence], tags, context=[tuple(doc[:k])])[0]
            got = [r for r in rows if r[1] == str(sid)]
            assert [r[3] for r in got] == want.words and all(r[0] == str(d) and r[-1] == "0" for r in got)
            assert max(abs(float(r[4]) - x) for r, x in zip(got, want.word_surprisal)) <= 5e-7
            for c, column in enumerate(cli.STRUCTURE_COLUMNS, 5):
                values = getattr(want, column)
                if values is None:
                    assert all(r[c] == "" for r in got)
                else:
                    assert max(abs(float(r[c]) - x) for r, x in zip(got, values)) <= 5e-7
    assert sid == len({r[1] for r in rows})


def test_documents_json_and_token_level(lms, tmp_path):  # noqa: F811
    lm = lms["sipe"]
    path = write_documents(tmp_path / "docs.txt")
    out = io.StringIO()
    with LineInput(str(path)) as source:
        cli.write_json(out, lm, source, cli.DOCUMENTS, ["mix:4"], 3, "token")
    records = json.loads(out.getvalue())
    assert [r["document_id"] for r in records] == [1, 1, 1, 2, 2]
    assert [r["context_tokens"] > 0 for r in records] == [False, True, True, False, True]
    want = lm.score([DOCUMENTS[0][2]], "mix:4", context=[tuple(DOCUMENTS[0][:2])])[0]
    assert abs(records[2]["logprob"] - want.logprob) < 1e-9
    out = io.StringIO()
    with LineInput(str(path)) as source:
        cli.write_tsv(out, lm, source, cli.DOCUMENTS, ["self", "mix:4"], 8, "token")
    header, rows = table(out.getvalue())
    assert header[:3] == ["document_id", "sentence_id", "token_id"] and header[-1] == "context_dropped"
    assert len(rows) == sum(len(r.tokens) for doc in DOCUMENTS for r in lm.score(doc))


def test_older_sentences_are_counted(lms, tmp_path, monkeypatch):  # noqa: F811
    """Sentences left out before they reach the model (at most CONTEXT_SENTENCES kept) are counted too."""
    monkeypatch.setattr(cli, "CONTEXT_SENTENCES", 1)
    lm = lms["sipe"]
    path = write_documents(tmp_path / "docs.txt")
    out = io.StringIO()
    with LineInput(str(path)) as source:
        cli.write_tsv(out, lm, source, cli.DOCUMENTS, ["self"], 8, "word")
    _, rows = table(out.getvalue())
    dropped = {r[1]: r[-1] for r in rows}
    assert dropped == {"1": "0", "2": "0", "3": "1", "4": "0", "5": "0"}
    want = lm.score([DOCUMENTS[0][2]], "self", context=[(DOCUMENTS[0][1],)])[0]
    got = [float(r[4]) for r in rows if r[1] == "3"]
    assert max(abs(a - b) for a, b in zip(got, want.word_surprisal)) <= 5e-7


@pytest.mark.parametrize("args,message", [
    (["--measures", "structure"], "use --level word"),
    (["--measures", "surprisal,depth", "--level", "word"], "depth is not one of"),
])
def test_usage_errors(tmp_path, caplog, args, message):
    path = write_documents(tmp_path / "docs.txt")
    assert cli.main(["--path", str(tmp_path / "none.pt"), *args, str(path)]) == 2
    assert message in caplog.text


def test_documents_refuse_conllu(tmp_path, caplog):
    path = tmp_path / "t.conllu"
    path.write_text("1\tthe\t_\t_\t_\t_\t0\troot\t_\t_\n\n")
    assert cli.main(["--path", str(tmp_path / "none.pt"), "--documents", str(path)]) == 2
    assert "not CoNLL-U" in caplog.text

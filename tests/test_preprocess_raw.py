"""sipe-preprocess on raw corpora: sentence segmentation by the backend, document breaks as empty
sentences (fairseq --sample-break-mode complete_doc), WikiText headings dropped, root fixes counted,
the backend's labels in the saved CoNLL-U."""
import json

import pytest

from sipe_fairseq import parsing
from sipe_fairseq.cli.preprocess import main as preprocess_main
from sipe_fairseq.hexatag.conllu_io import parse_sentence, sentence_blocks
from sipe_fairseq.parsing import DEFAULT_SPACY_MODEL, ParsedSentence, ParseError, spacy_available


class SegmentingParser:
    """No model: a sentence ends after each "." word; every word depends on the next (the last is
    the root); labels are "lab<i>", UPOS "X". A sentence with ROOTS reports 2 extra roots (as a
    backend that attached them would)."""

    def __init__(self, arg=""):
        self.spec = f"seg:{arg}"

    def parse_words(self, sentences):
        return [s[0].heads for s in self.analyze(sentences, True, False)]

    def parse_text(self, sentences):
        return [(s[0].words, s[0].heads) for s in self.analyze(sentences, False, False)]

    def analyze(self, items, pretokenized=False, segment=False):
        out = []
        for k, item in enumerate(items):
            words = list(item) if pretokenized else item.split()
            if not words:
                raise ParseError("empty", k)
            groups, cur = [], []
            for w in words:
                cur.append(w)
                if segment and w == ".":
                    groups.append(cur)
                    cur = []
            if cur:
                groups.append(cur)
            out.append([ParsedSentence(g, list(range(2, len(g) + 1)) + [0], [f"lab{i}" for i in range(len(g))],
                                       ["X"] * len(g), None, 2 if "ROOTS" in g else 0) for g in groups])
        return out


@pytest.fixture
def seg(monkeypatch):
    monkeypatch.setitem(parsing.PARSERS, "seg", SegmentingParser)


WIKI = [" = Doc A = ", " ", " First sentence . Second ROOTS one . ", " ", " = = Section = = ", "",
        " Third line . ", "", " = Doc B = ", "", " Fourth sentence here . "]


def _run(tmp_path, lines, *extra):
    src = tmp_path / "train.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dest, parsed = tmp_path / "bin", tmp_path / "parsed"
    status = preprocess_main(["--input-format", "tokenized", "--parser", "seg", "--train", str(src), "--destdir", str(dest),
                              "--save-conllu", str(parsed), "--no-split", "--keep-text", "--deprel", "--no-progress", *extra])
    assert status == 0
    manifest = json.loads((dest / "manifest.json").read_text())
    return manifest["splits"]["train"], dest, (parsed / "train.conllu").read_text(encoding="utf-8")


def test_wikitext_documents_segmented(seg, tmp_path):
    st, dest, conllu = _run(tmp_path, WIKI, "--segment-sentences", "--documents", "wikitext", "--drop-headings")
    assert (st["lines_read"], st["empty_lines_skipped"], st["headings_dropped"], st["lines_parsed"]) == (11, 5, 3, 3)
    assert st["lines_read"] == st["empty_lines_skipped"] + st["headings_dropped"] + st["lines_parsed"]
    assert (st["sentences"], st["document_breaks"], st["documents"]) == (4, 1, 2)
    assert (st["root_fixed_sentences"], st["extra_roots"]) == (1, 2)
    # the subword text: one line per sentence, the document break an empty line (as fairseq-preprocess reads it)
    tok = (dest / "train.tok").read_text(encoding="utf-8").split("\n")[:-1]
    assert tok == ["First sentence .", "Second ROOTS one .", "Third line .", "", "Fourth sentence here ."]
    from fairseq.data import Dictionary, data_utils

    d = Dictionary.load(str(dest / "dict.txt"))
    ds = data_utils.load_indexed_dataset(str(dest / "train"), d, "mmap")
    assert ds.sizes.tolist() == [4, 5, 4, 1, 5] and ds[3].tolist() == [d.eos()]
    for kind in ("terminal", "nonterminal", "deprel"):
        tags = data_utils.load_indexed_dataset(str(dest / f"train.{kind}"), None, "mmap")
        assert tags.sizes.tolist() == ds.sizes.tolist() and len(tags[3]) == 1  # </s> only: <notag>
    blocks = list(sentence_blocks(conllu.splitlines(True)))
    assert [b[1][0] for b in blocks].count("# newdoc") == 2
    ids = [next(x for x in b if x.startswith("# sent_id")) for _, b in blocks]
    assert ids == ["# sent_id = 3-1", "# sent_id = 3-2", "# sent_id = 7-1", "# sent_id = 11-1"]
    sent = parse_sentence(blocks[1][1], "train.conllu", blocks[1][0])
    assert sent.words == ["Second", "ROOTS", "one", "."] and sent.deprels == ["lab0", "lab1", "lab2", "root"]
    assert [line.split("\t")[3] for line in blocks[1][1] if line[:1].isdigit()] == ["X"] * 4


def test_blank_line_documents(seg, tmp_path):
    lines = ["a b .", "c d .", "", "", "e f .", "   ", "g ."]
    st, dest, conllu = _run(tmp_path, lines, "--documents", "blank-lines")
    assert (st["sentences"], st["document_breaks"], st["documents"], st["empty_lines_skipped"]) == (4, 2, 3, 3)
    assert (dest / "train.tok").read_text(encoding="utf-8") == "a b .\nc d .\n\ne f .\n\ng .\n"
    assert conllu.count("# newdoc") == 3


def test_raw_options_need_text_input(tmp_path):
    conllu = tmp_path / "t.conllu"
    conllu.write_text("1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        preprocess_main(["--train", str(conllu), "--destdir", str(tmp_path / "o"), "--segment-sentences"])


NO_SPACY = spacy_available(DEFAULT_SPACY_MODEL)


@pytest.mark.skipif(NO_SPACY is not None, reason=str(NO_SPACY))
def test_spacy_segments_and_labels(tmp_path):
    from sipe_fairseq.cli.tag import main as tag_main

    src = tmp_path / "in.txt"
    src.write_text("The cat sat on the mat. It was happy.\n", encoding="utf-8")
    out = tmp_path / "out.conllu"
    assert tag_main([str(src), "-o", str(out), "--segment-sentences", "--no-progress"]) == 0
    blocks = list(sentence_blocks(out.read_text(encoding="utf-8").splitlines(True)))
    sents = [parse_sentence(b, "out.conllu", s) for s, b in blocks]
    assert [s.words for s in sents] == [["The", "cat", "sat", "on", "the", "mat", "."], ["It", "was", "happy", "."]]
    assert [s.heads.count(0) for s in sents] == [1, 1]
    assert all(d != "dep" for s in sents for d in s.deprels)  # the parser's labels, not the placeholder
    upos = [line.split("\t")[3] for _, b in blocks for line in b if line[:1].isdigit()]
    assert "_" not in upos and upos[:2] == ["DET", "NOUN"]
    assert [sent.sent_id for sent in sents] == ["1-1", "1-2"]

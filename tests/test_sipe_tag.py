"""``sipe-tag`` with the spaCy backend: one output per input line, CoNLL-U and tags agree."""
import pytest

from sipe_fairseq.parsing import DEFAULT_SPACY_MODEL, spacy_available
from sipe_fairseq.hexatag import decode, encode_tree, format_tags, parse_tags
from sipe_fairseq.hexatag.conllu_io import parse_sentence, sentence_blocks

NO_SPACY = spacy_available(DEFAULT_SPACY_MODEL)
pytestmark = pytest.mark.skipif(NO_SPACY is not None, reason=str(NO_SPACY))

LINES = ["The cat sat on the mat.", "", "   \t ", "Hello", "!!! ??? ...", "She said that he left early.",
         "a", "Colorless green ideas sleep furiously"]


def run_tag(tmp_path, lines, *extra):
    from sipe_fairseq.cli.tag import main

    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    conllu, tags = tmp_path / "out.conllu", tmp_path / "out.tags"
    status = main([str(src), "-o", str(conllu), "--tags-out", str(tags), "--no-progress", *extra])
    blocks = list(sentence_blocks(conllu.read_text(encoding="utf-8").splitlines(True)))
    return status, blocks, tags.read_text(encoding="utf-8").split("\n")[:-1]


def check(lines, blocks, tag_lines, pretokenized=False):
    assert len(tag_lines) == len(lines) == len(blocks)
    for k, (line, (start, block), tag_line) in enumerate(zip(lines, blocks, tag_lines), 1):
        assert block[0] == f"# sent_id = {k}"
        empty = not line.strip()
        assert (tag_line == "") == empty
        if empty:
            assert all(x.startswith("#") for x in block) and any("sipe_tag_error" in x for x in block)
            continue
        sent = parse_sentence(block, "out.conllu", start)
        if pretokenized:
            assert sent.words == line.split()
        tags, _, _ = encode_tree(sent.heads)
        assert tag_line == format_tags(tags)
        assert decode(parse_tags(tag_line)) == sent.heads  # spaCy parses are projective


def test_raw_lines_kept(tmp_path, capsys):
    status, blocks, tag_lines = run_tag(tmp_path, LINES)
    assert status == 1  # two empty lines failed
    check(LINES, blocks, tag_lines)
    err = capsys.readouterr().err
    assert ":2: empty line" in err and ":3: empty line" in err and "failed: 2" in err


def test_pretokenized_and_workers(tmp_path):
    lines = ["The cat sat on the mat .", "", "Hello", "She said that he left early ."] * 2
    status, blocks, tag_lines = run_tag(tmp_path, lines, "--pretokenized", "--workers", "2", "--batch-size", "3")
    assert status == 1
    check(lines, blocks, tag_lines, pretokenized=True)
    assert tag_lines[:4] == tag_lines[4:]  # order kept across workers


def test_all_good_is_status_0(tmp_path):
    status, blocks, tag_lines = run_tag(tmp_path, ["Dogs bark.", "It rains."])
    assert status == 0 and all(tag_lines)

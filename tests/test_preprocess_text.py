"""sipe-preprocess --input-format text|tokenized: text -> parses -> data directory in one command,
equal to sipe-tag followed by sipe-preprocess on its CoNLL-U."""
import json

import pytest

from sipe_fairseq.cli.preprocess import main as preprocess_main
from sipe_fairseq.cli.tag import main as tag_main
from sipe_fairseq.data.preprocess import PreprocessError, PreprocessOptions, preprocess
from sipe_fairseq import parsing as parsers
from sipe_fairseq.parsing import DEFAULT_SPACY_MODEL, ParseError, spacy_available, split_words


class FakeParser:
    """No model: every word depends on the next one (the last is the root); a sentence with the
    word CROSS gets crossing arcs (non-projective), one with FAIL is refused."""

    def __init__(self, arg=""):
        self.spec = f"fake:{arg}"

    def parse_words(self, sentences):
        out = []
        for k, words in enumerate(sentences):
            if "FAIL" in words:
                raise ParseError("fake backend refuses FAIL", k)
            heads = list(range(2, len(words) + 1)) + [0]
            if "CROSS" in words and len(words) >= 4:
                heads[:4] = [3, 4, 0, 3]  # 1->3 and 2->4 cross
                heads[4:] = [3] * (len(words) - 4)
            out.append(heads)
        return out

    def parse_text(self, sentences):
        words = [split_words(s) for s in sentences]
        return list(zip(words, self.parse_words(words)))


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setitem(parsers.PARSERS, "fake", FakeParser)


TRAIN = ["The linguists analysed complicated constructions carefully.", "", "Dogs bark, cats don't.",
         "   \t", "We CROSS the river today.", "This one will FAIL to parse.", "Transformers learn representations."]
VALID = ["Dogs learn.", "", "Cats analysed the river?"]

DATA_FILES = ("dict.txt", "dict.terminal.txt", "dict.nonterminal.txt", "spm.model", "spm.vocab")


def _write(tmp, name, lines):
    path = tmp / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _two_ways(tmp, backend, fmt="text", extra=(), tag_extra=()):
    """(one command, sipe-tag + sipe-preprocess): both data directories and the saved CoNLL-U dir."""
    train, valid = _write(tmp, "train.txt", TRAIN), _write(tmp, "valid.txt", VALID)
    for split, src in (("train", train), ("valid", valid)):
        status = tag_main([str(src), "-o", str(tmp / f"{split}.conllu"), "--backend", backend, "--no-progress",
                           *(["--pretokenized"] if fmt == "tokenized" else []), *tag_extra])
        assert status == 1  # empty (and failed) lines
    common = ["--spm-vocab-size", "60", "--deprel", "--keep-text", "--no-progress", *extra]
    assert preprocess_main(["--train", str(tmp / "train.conllu"), "--valid", str(tmp / "valid.conllu"),
                            "--destdir", str(tmp / "two"), *common]) == 0
    assert preprocess_main(["--input-format", fmt, "--parser", backend, "--train", str(train), "--valid", str(valid),
                            "--destdir", str(tmp / "one"), "--save-conllu", str(tmp / "parsed"), *common]) == 0
    return tmp / "one", tmp / "two", tmp / "parsed"


def _assert_same_data(one, two):
    names = sorted(p.name for p in two.iterdir() if p.name != "manifest.json")
    assert names == sorted(p.name for p in one.iterdir() if p.name != "manifest.json")
    assert set(DATA_FILES) | {"train.bin", "train.idx", "valid.deprel.bin", "valid.deprel.idx"} <= set(names)
    for name in names:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


@pytest.mark.parametrize("fmt", ["text", "tokenized"])
def test_one_command_equals_sipe_tag_then_preprocess(fake, tmp_path, caplog, fmt):
    caplog.set_level("WARNING")
    one, two, parsed = _two_ways(tmp_path, "fake", fmt)
    _assert_same_data(one, two)
    for split in ("train", "valid"):  # the kept parse is what sipe-tag writes
        assert (parsed / f"{split}.conllu").read_bytes() == (tmp_path / f"{split}.conllu").read_bytes()
    m = json.loads((one / "manifest.json").read_text())
    assert m["settings"]["input_format"] == fmt and m["settings"]["backend"] == "fake"
    assert m["inputs"]["train"]["path"] == str(tmp_path / "train.txt")
    tr, va = m["splits"]["train"], m["splits"]["valid"]
    assert (tr["lines_read"], tr["empty_lines_skipped"], tr["sentences_read"]) == (7, 2, 5)
    assert (tr["sentences"], tr["sentences_refused"], tr["refused"]["parse-failed"]) == (4, 1, 1)
    assert tr["trees_lifted"] == 1 and (va["lines_read"], va["empty_lines_skipped"], va["sentences"]) == (3, 1, 2)
    # the two-step manifest saw the same sentences (its empty/failed blocks are "malformed")
    m2 = json.loads((two / "manifest.json").read_text())
    assert m2["settings"]["input_format"] == "conllu" and "backend" not in m2["settings"]
    assert m2["splits"]["train"]["sentences"] == 4 and m2["splits"]["train"]["refused"]["malformed"] == 3
    text = caplog.text
    for where in ("train.txt:2: empty line", "train.txt:4: empty line", "valid.txt:2: empty line",
                  "refused (parse-failed): " + str(tmp_path / "train.txt") + ":6: fake backend refuses FAIL"):
        assert where in text, where


def test_refusals_name_the_text_line(fake, tmp_path, caplog):
    train = _write(tmp_path, "train.txt", TRAIN)
    opts = dict(train=str(train), input_format="text", backend="fake", no_split=True, progress=False)
    manifest = preprocess(PreprocessOptions(destdir=str(tmp_path / "strict"), strict=True, **opts))
    tr = manifest["splits"]["train"]
    assert tr["refused"]["non-projective"] == 1 and tr["refused"]["parse-failed"] == 1 and tr["sentences"] == 3
    assert f"{train}:5 (sent_id 5)" in caplog.text
    dest = tmp_path / "fail"
    with pytest.raises(PreprocessError, match="parse-failed"):
        preprocess(PreprocessOptions(destdir=str(dest), fail_on_refusal=True, **opts))
    assert not dest.exists()


def test_all_lines_empty_or_failed(fake, tmp_path):
    train = _write(tmp_path, "train.txt", ["", "FAIL here", " "])
    with pytest.raises(PreprocessError, match="no usable training sentence"):
        preprocess(PreprocessOptions(train=str(train), destdir=str(tmp_path / "d"), input_format="text",
                                     backend="fake", progress=False))


def test_usage_errors(tmp_path, capsys, caplog):
    conllu = tmp_path / "train.conllu"
    conllu.write_text("1\tHi\t_\t_\t_\t_\t0\troot\t_\t_\n\n")
    with pytest.raises(SystemExit) as e:
        preprocess_main(["--train", str(conllu), "--destdir", str(tmp_path / "d"), "--parser", "spacy"])
    assert e.value.code == 2 and "--backend: only with --input-format text" in capsys.readouterr().err
    with pytest.raises(PreprocessError, match="need --input-format"):
        preprocess(PreprocessOptions(train=str(conllu), destdir=str(tmp_path / "d"), save_conllu=str(tmp_path / "c")))
    text = _write(tmp_path, "train.txt", ["Hi there"])
    status = preprocess_main(["--train", str(text), "--destdir", str(tmp_path / "d"), "--input-format", "text",
                              "--parser", "nosuchparser", "--no-progress"])
    assert status == 1 and "unknown parser 'nosuchparser'" in caplog.text
    assert not (tmp_path / "d").exists()


@pytest.mark.skipif(spacy_available(DEFAULT_SPACY_MODEL) is not None, reason=str(spacy_available(DEFAULT_SPACY_MODEL)))
def test_spacy_one_command_equals_sipe_tag_then_preprocess(tmp_path):
    one, two, parsed = _two_ways(tmp_path, "spacy", extra=("--workers", "2", "--batch-size", "2"))
    _assert_same_data(one, two)
    assert (parsed / "train.conllu").read_bytes() == (tmp_path / "train.conllu").read_bytes()
    tr = json.loads((one / "manifest.json").read_text())["splits"]["train"]
    assert (tr["lines_read"], tr["empty_lines_skipped"], tr["sentences"], tr["sentences_refused"]) == (7, 2, 5, 0)

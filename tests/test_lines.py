"""The one reader of line-based input (``sipe_fairseq/hexatag/lines.py``): lines end at ``\\n`` only (one ``\\r``
before it dropped), strict UTF-8 named ``FILE:LINE`` with the byte's column, a BOM dropped, empty lines refused on
request, streaming, stdin read twice through a temporary copy; and the readers built on it (CoNLL-U, the parse
cache, BLiMP, SyntaxGym suites)."""
import io
import json
import os
import pickle
import sys

import pytest

from sipe_fairseq.hexatag.conllu_io import read_conllu
from sipe_fairseq.hexatag.errors import ConlluError, InputError
from sipe_fairseq.hexatag.lines import (LineInput, check_lines, iter_lines, read_lines, read_text, undecodable)

# every character str.splitlines() ends a line at, inside lines here: none of them may split one
INSIDE = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"]


def test_lines_end_at_newline_only(tmp_path):
    """A form feed, NEL, U+2028 (and every other splitlines break, a lone CR included) stays inside its line, so the
    line after it keeps its number; CRLF reads as LF; the last line needs no line break."""
    text = "".join(f"a{c}b\n" for c in INSIDE) + "crlf\r\nlast"
    path = tmp_path / "s.txt"
    path.write_bytes(text.encode("utf-8"))
    assert len(text.splitlines()) > len(INSIDE) + 2  # what the old reading did
    got = list(iter_lines(path))
    assert got == [(k, f"a{c}b") for k, c in enumerate(INSIDE, 1)] + [(len(INSIDE) + 1, "crlf"),
                                                                       (len(INSIDE) + 2, "last")]
    assert read_lines(path) == [t for _, t in got] and check_lines(path) == len(got)


def test_one_cr_dropped_bom_dropped_empty_file(tmp_path):
    path = tmp_path / "s.txt"
    path.write_bytes(b"\xef\xbb\xbfone\r\r\ntwo\r\n\xef\xbb\xbfthree\n")
    assert read_lines(path) == ["one\r", "two", "\ufeffthree"]  # the BOM of the input's start only
    path.write_bytes(b"")
    assert read_lines(path) == [] and check_lines(path) == 0
    path.write_bytes(b"\n")
    assert read_lines(path) == [""]


def test_not_utf8_named_by_file_line_and_byte_column(tmp_path):
    """The byte's 1-based column counts bytes (the two of é before it); the error pickles with its fields."""
    path = tmp_path / "latin1.txt"
    path.write_bytes("ok\ncafé ".encode("utf-8") + b"\xff bar\nnever read\n")
    with pytest.raises(InputError) as info:
        read_lines(path)
    assert str(info.value) == f"{path}:2: not UTF-8 (byte 0xff at column 7)"
    assert (info.value.path, info.value.line, info.value.reason) == (str(path), 2, "not UTF-8 (byte 0xff at column 7)")
    assert isinstance(info.value, ValueError) and str(pickle.loads(pickle.dumps(info.value))) == str(info.value)
    kept = list(iter_lines(path, errors="surrogateescape"))  # for readers that refuse a sentence, not the file
    assert len(kept) == 3 and undecodable(kept[1][1]) == "not UTF-8 (byte 0xff at column 7)"


def test_streaming_yields_the_lines_before_a_bad_one(tmp_path):
    path = tmp_path / "s.txt"
    path.write_bytes(b"a\nb\n\xe9\n")
    seen = []
    with pytest.raises(InputError, match=r"s\.txt:3: not UTF-8 \(byte 0xe9 at column 1\)"):
        for _, text in iter_lines(path):
            seen.append(text)
    assert seen == ["a", "b"]


def test_empty_lines_refused_on_request(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("a\n \x0c\t\nb\n", encoding="utf-8")
    assert read_lines(path) == ["a", " \x0c\t", "b"]
    with pytest.raises(InputError, match=r"s\.txt:2: empty line$"):
        read_lines(path, empty="empty line")


def test_stdin_bytes_text_and_twice(monkeypatch, tmp_path):
    """``-`` reads stdin's bytes (a text stream without bytes: its text, by the same rules), named ``<stdin>``;
    :class:`LineInput` reads it twice through a temporary copy, removed on exit."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x\x0cy\r\nz\xff\n"), encoding="utf-8"))
    with pytest.raises(InputError, match=r"^<stdin>:2: not UTF-8 \(byte 0xff at column 2\)$"):
        read_lines("-")
    monkeypatch.setattr(sys, "stdin", io.StringIO("p\u2028q\nr\n"))
    assert read_lines("-") == ["p\u2028q", "r"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("one\x85\ntwo\n".encode()), encoding="utf-8"))
    with LineInput("-") as source:
        assert source.name == "<stdin>"
        first, second = list(source.lines()), list(source.texts())
        spool = source._spool
        assert os.path.exists(spool)
    assert first == [(1, "one\x85"), (2, "two")] and second == ["one\x85", "two"] and not os.path.exists(spool)


def test_read_text_names_the_line(tmp_path):
    path = tmp_path / "suite.json"
    path.write_bytes(b'\xef\xbb\xbf{"a":\n "b\xe9"}')
    with pytest.raises(InputError, match=r"suite\.json:2: not UTF-8 \(byte 0xe9 at column 4\)"):
        read_text(path)
    path.write_bytes(b'\xef\xbb\xbf{"a": "\xe2\x80\xa8"}')
    assert json.loads(read_text(path)) == {"a": "\u2028"}


def conllu(*rows):
    return "".join("\t".join([str(i), form, "_", "_", "_", "_", str(head), "dep", "_", "_"]) + "\n"
                   for i, form, head in rows)


def test_conllu_keeps_a_lone_cr_and_names_a_bad_byte(tmp_path):
    """A lone CR inside a FORM (universal newlines split the line there) stays in the word; a byte that is not UTF-8
    fails its sentence with file:line (a :class:`ConlluError`, which is an :class:`InputError`)."""
    path = tmp_path / "t.conllu"
    path.write_bytes((conllu((1, "a\rb", 2), (2, "c", 0)) + "\n" + conllu((1, "d", 0))).encode("utf-8"))
    first, second = read_conllu(path)
    assert first.words == ["a\rb", "c"] and second.line == 4
    path.write_bytes(b"# text = x\n" + conllu((1, "ok", 0)).encode() + b"\n" + conllu((1, "X", 0)).encode()
                     .replace(b"X", b"\xe9"))
    with pytest.raises(ConlluError, match=r"t\.conllu:4: not UTF-8 \(byte 0xe9 at column 3\)") as info:
        list(read_conllu(path))
    assert isinstance(info.value, InputError)


def test_parse_cache_and_blimp_name_the_line(tmp_path):
    from sipe_fairseq.eval.blimp import BlimpError, read_blimp
    from sipe_fairseq.parsing.cache import CachedParser

    class Parser:
        spec = "fake"

    cache = tmp_path / "cache.jsonl"
    entry = {"parser": "fake", "input_kind": "text", "input": "a\u2028b", "words": ["a", "b"], "heads": [0, 1]}
    cache.write_bytes((json.dumps(entry, ensure_ascii=False) + "\n").encode() + b"\xff\n")
    with pytest.raises(InputError, match=r"cache\.jsonl:2: not UTF-8 \(byte 0xff at column 1\)"):
        CachedParser(Parser(), cache)
    cache.write_text(json.dumps(entry, ensure_ascii=False) + "\n", encoding="utf-8")
    assert len(CachedParser(Parser(), cache)) == 1  # U+2028 inside the entry: one line
    pairs = tmp_path / "p.jsonl"
    good = json.dumps({"sentence_good": "a\u2028b", "sentence_bad": "b\x85a"}, ensure_ascii=False)
    pairs.write_text(good + "\r\n" + good.replace("a\u2028b", "c") + "\n", encoding="utf-8")
    assert [p.location for p in read_blimp([pairs])] == [f"{pairs}:1", f"{pairs}:2"]
    pairs.write_bytes(good.encode() + b"\n\xff\n")
    with pytest.raises(BlimpError, match=r"p\.jsonl:2: not UTF-8 \(byte 0xff at column 1\)"):
        read_blimp([pairs])


def test_line_input_reads_a_fifo_twice(tmp_path):
    """A path that is no regular file (a FIFO, a shell's ``<(...)``) is copied once, so the second reading sees the
    same lines; a regular file is read where it is; a missing one fails at the first reading, not on entry."""
    import threading

    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as f:
            f.write("a\x0cb\nc\n".encode())

    writer = threading.Thread(target=feed)
    writer.start()
    with LineInput(str(fifo)) as source:
        assert list(source.texts()) == list(source.texts()) == ["a\x0cb", "c"] and source.name == str(fifo)
    writer.join()
    regular = tmp_path / "r.txt"
    regular.write_text("x\n")
    with LineInput(regular) as source:
        assert source._spool is None and list(source.texts()) == ["x"]
    with LineInput(tmp_path / "missing.txt") as source:
        with pytest.raises(FileNotFoundError):
            list(source.lines())

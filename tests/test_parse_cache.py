"""Issue 49: the suites parse through a default cache, so one parse of a suite serves every checkpoint and run.

Where it lives (``SIPE_CACHE_DIR``, ``XDG_CACHE_HOME``, ``~/.cache``), how it is invalidated (a file per parser
spec and version), that a second run parses nothing, that ``--no-cache`` and ``SIPE_CACHE_DIR=off`` parse
without one, and that processes appending to one cache at once never interleave their lines."""
import argparse
import json
import multiprocessing

import pytest

from sipe_fairseq.parsing.cache import CachedParser, default_cache_path
from sipe_fairseq.parsing.registry import register_parser
from sipe_fairseq.parsing.sources import add_tree_arguments, tree_source_from_args


class CountingParser:
    """Word ``i`` of a sentence headed by word ``i - 1`` (word 1 the root); counts the sentences it parses."""
    parsed = 0

    def __init__(self, arg: str = ""):
        self.spec, self.version = f"counting:{arg}", "v1"

    def parse_text(self, sentences):
        CountingParser.parsed += len(sentences)
        out = []
        for s in sentences:
            words = s.split()
            out.append((words, list(range(len(words)))))
        return out

    def parse_words(self, sentences):
        CountingParser.parsed += len(sentences)
        return [list(range(len(w))) for w in sentences]


register_parser("counting")(CountingParser)


def _source(argv):
    p = argparse.ArgumentParser()
    add_tree_arguments(p, "counting:x")
    return tree_source_from_args(p.parse_args(argv))


def test_where_the_cache_lives(tmp_path, monkeypatch):
    parser = CountingParser("a")
    monkeypatch.setenv("SIPE_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_path(parser) == tmp_path / "c/parses/counting_a-v1.jsonl"
    monkeypatch.setenv("SIPE_CACHE_DIR", "off")
    assert default_cache_path(parser) is None
    monkeypatch.delenv("SIPE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path(parser) == tmp_path / "xdg/sipe_fairseq/parses/counting_a-v1.jsonl"
    parser.version = "v2"  # a new backend version: a new file, the old one never read
    assert default_cache_path(parser).name == "counting_a-v2.jsonl"


def test_a_second_run_parses_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SIPE_CACHE_DIR", str(tmp_path))
    texts = [f"w{i} runs to x{i % 7}" for i in range(50)]
    CountingParser.parsed = 0
    first = _source([])
    assert isinstance(first, CachedParser) and first.parse_text(texts)
    assert CountingParser.parsed == 50
    again = _source([])
    assert again.parse_text(texts + ["one new sentence"]) and CountingParser.parsed == 51  # only the new one
    assert again.stats["hits"] == 50 and again.stats["misses"] == 1
    assert again.path == str(default_cache_path(CountingParser("x")))
    none = _source(["--no-cache"])
    assert not isinstance(none, CachedParser)
    none.parse_text(texts)
    assert CountingParser.parsed == 101
    explicit = _source(["--cache", str(tmp_path / "mine.jsonl")])
    assert explicit.path == str(tmp_path / "mine.jsonl")
    with pytest.raises(SystemExit):
        _source(["--cache", "x.jsonl", "--no-cache"])


def _append_many(path, worker):
    cache = CachedParser(CountingParser("p"), path)
    for batch in range(40):
        cache.parse_text([f"worker {worker} batch {batch} sentence {i} " + "pad " * 300 for i in range(5)])


def test_processes_appending_at_once_never_interleave(tmp_path):
    """Four processes append 200 parses each (lines of about 1.5 KB, batches of 7.5 KB) to one cache: every line
    is whole JSON and each parse is there once."""
    path = tmp_path / "shared.jsonl"
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    procs = [ctx.Process(target=_append_many, args=(str(path), w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = path.read_text(encoding="utf-8").splitlines()
    entries = [json.loads(line) for line in lines]
    assert len(entries) == 4 * 40 * 5 and len({e["input"] for e in entries}) == len(entries)
    assert len(CachedParser(CountingParser("p"), path)) == len(entries)


def test_spacy_version_names_the_file():
    from sipe_fairseq.parsing.spacy_backend import SpacyParser

    pytest.importorskip("spacy")
    import spacy

    version = SpacyParser().version
    assert version.startswith(f"spacy{spacy.__version__}-")

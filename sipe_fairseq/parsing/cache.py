"""The parse cache: a parser wrapped with a JSON-lines file, so a re-run does not parse again."""
import json
import logging
import os
from collections import Counter
from typing import Dict, List, Sequence, Tuple, Union

from ..hexatag import check_tree
from ..hexatag.lines import iter_lines
from .base import Parse, Parser, ParseError, normalize_text

logger = logging.getLogger(__name__)


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
            with open(self.path, "a", encoding="utf-8", newline="\n") as f:
                for k, (words, heads), n_extra in zip(todo, fresh, extra):
                    entry = {"words": list(words), "heads": list(heads), "extra_roots": int(n_extra)}
                    self._entries[k] = entry
                    f.write(json.dumps({"parser": self.spec, "input_kind": k[0], "input": _input_of(k), **entry},
                                       ensure_ascii=False) + "\n")
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


def _input_of(key: Tuple[str, str]):
    kind, value = key
    return json.loads(value) if kind == "words" else value

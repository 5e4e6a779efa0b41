"""The parser interface: what a backend returns and raises.

A parser maps raw sentences or pre-tokenized word lists to ``(words, heads)`` (heads 1-based,
0 = root, exactly one root per sentence). A backend that cannot handle one sentence (e.g. an empty
one) raises :class:`ParseError` with the sentence's index in the batch; :func:`parse_each` turns
that into a per-sentence result so a caller can report and skip exactly that sentence. Backends are
chosen by name in :mod:`~sipe_fairseq.parsing.registry`.
"""
import logging
from dataclasses import dataclass
from typing import List, Optional, Protocol, Sequence, Tuple, Union

logger = logging.getLogger(__name__)

Parse = Tuple[List[str], List[int]]


class ParseError(ValueError):
    """A sentence a parser cannot handle; ``index`` is its position in the batch (if known)."""

    def __init__(self, message: str, index: Optional[int] = None):
        super().__init__(message)
        self.index = index

    def __reduce__(self):  # from a worker process (hexatag.pool) with its index
        return type(self), (self.args[0] if self.args else "", self.index)


class BackendLoadError(RuntimeError):
    """A parser backend that cannot be loaded (a spaCy pipeline not installed, a checkpoint that is
    missing or refused); the message names the backend (and the checkpoint)."""


@dataclass
class ParsedSentence:
    """One sentence with the backend's labels (``None``: the backend gives none); ``extra_roots``:
    roots beyond the first that were attached to it."""

    words: List[str]
    heads: List[int]
    deprels: Optional[List[str]] = None
    upos: Optional[List[str]] = None
    xpos: Optional[List[str]] = None
    extra_roots: int = 0


class Parser(Protocol):
    spec: str

    def parse_words(self, sentences: Sequence[Sequence[str]]) -> List[List[int]]:
        """Heads for pre-tokenized sentences (one root each)."""

    def parse_text(self, sentences: Sequence[str]) -> List[Parse]:
        """Tokenize and parse raw sentences."""

    # optional: ``analyze(items, pretokenized, segment) -> List[List[ParsedSentence]]`` (labels, and
    # sentence segmentation with ``segment``), as :class:`~sipe_fairseq.parsing.spacy_backend.SpacyParser`


def normalize_text(text: str) -> str:
    """Collapse runs of whitespace to one space and strip (what every tree source parses)."""
    return " ".join(text.split())


def attach_extra_roots(heads: Sequence[int]) -> Tuple[List[int], int]:
    """Attach every root after the first to the first root; returns ``(heads, extra roots)``."""
    heads = list(heads)
    roots = [i for i, h in enumerate(heads, 1) if h == 0]
    for r in roots[1:]:
        heads[r - 1] = roots[0]
    return heads, max(len(roots) - 1, 0)


def parse_each(parser, sentences: Sequence[str], batch_size: int = 1024) -> List[Union[Parse, ParseError]]:
    """``parser.parse_text`` in batches; a batch that raises :class:`ParseError` is redone one
    sentence at a time, so only the offending sentences come back as their ``ParseError``."""
    out: List[Union[Parse, ParseError]] = []
    for start in range(0, len(sentences), batch_size):
        chunk = list(sentences[start:start + batch_size])
        try:
            out.extend(parser.parse_text(chunk))
        except ParseError:
            for text in chunk:
                try:
                    out.extend(parser.parse_text([text]))
                except ParseError as e:
                    e.index = None
                    out.append(e)
    return out



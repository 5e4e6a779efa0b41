"""Tree sources for evaluation (:func:`tree_source_from_args`, shared by the ``sipe-eval``
subcommands and ``sipe-glue-preprocess``): a parser (optionally through the parse cache), gold trees
from a CoNLL-U file (:class:`ConlluTrees`, sentences matched by their text or words), or no trees at
all (:class:`NoTrees`: the rule-based tokenizer :func:`~sipe_fairseq.parsing.tokenize.split_words`,
every tag ``<notag>``).
"""
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Dict, List, Sequence, Tuple, Union

from ..hexatag import read_conllu
from .base import Parse, ParseError, normalize_text
from .cache import CachedParser, default_cache_path
from .parallel import ParserWorkers
from .registry import DEFAULT_BACKEND, make_parser, registered_parsers
from .tokenize import split_words

logger = logging.getLogger(__name__)


class NoTrees:
    """No parse: words from :func:`~sipe_fairseq.parsing.tokenize.split_words`, no heads (every tag ``<notag>``)."""

    spec = "none"

    def __init__(self):
        self.stats = Counter()

    def parse_text(self, sentences: Sequence[str]) -> List[Tuple[List[str], None]]:
        out = []
        for k, text in enumerate(sentences):
            words = split_words(text)
            if not words:
                raise ParseError(f"empty sentence {text!r}", k)
            out.append((words, None))
        return out


class ConlluTrees:
    """Gold trees from a CoNLL-U file, looked up by sentence.

    A sentence matches a CoNLL-U sentence whose ``# text`` (whitespace-normalized) or whose
    space-joined words equal it; failing both, the sentence with all whitespace removed is
    compared with the words concatenated (``dog.`` matches words ``dog`` ``.``). Pre-tokenized
    input matches the words exactly. A sentence with no tree raises ``KeyError`` naming it (and
    the file); :meth:`parse_text` raises :class:`ParseError` for it (``missing_ok``) or ``KeyError``."""

    def __init__(self, path: Union[str, os.PathLike], missing_ok: bool = False):
        self.path = str(path)
        self.spec = f"conllu:{self.path}"
        self.missing_ok = missing_ok
        self.stats = Counter()
        self._by_text: Dict[str, Parse] = {}
        self._by_words: Dict[str, Parse] = {}
        self._by_chars: Dict[str, Parse] = {}
        n = 0
        for sent in read_conllu(self.path):
            n += 1
            parse = (list(sent.words), list(sent.heads))
            joined = " ".join(sent.words)
            if sent.text:
                self._by_text.setdefault(normalize_text(sent.text), parse)
            self._by_words.setdefault(joined, parse)
            self._by_chars.setdefault("".join(joined.split()), parse)
        if not n:
            raise ValueError(f"{self.path}: no sentences")
        logger.info("gold trees: %d sentences from %s", n, self.path)

    def lookup(self, text: str) -> Parse:
        t = normalize_text(text)
        parse = self._by_text.get(t) or self._by_words.get(t) or self._by_chars.get("".join(t.split()))
        if parse is None:
            raise KeyError(f"no tree for sentence {text!r} in {self.path}")
        self.stats["found"] += 1
        return list(parse[0]), list(parse[1])

    def parse_text(self, sentences: Sequence[str]) -> List[Parse]:
        out = []
        for k, text in enumerate(sentences):
            try:
                out.append(self.lookup(text))
            except KeyError as e:
                if self.missing_ok:
                    raise ParseError(e.args[0], k) from None
                raise
        return out

    def parse_words(self, sentences: Sequence[Sequence[str]]) -> List[List[int]]:
        out = []
        for words in sentences:
            parse = self._by_words.get(" ".join(words))
            if parse is None:
                raise KeyError(f"no tree for words {' '.join(words)!r} in {self.path}")
            out.append(list(parse[1]))
        return out


def add_tree_arguments(p, default_parser: str = DEFAULT_BACKEND) -> None:
    """``--parser`` / ``--trees`` / ``--cache`` options (shared by the ``sipe-eval`` subcommands)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--parser", default=None, metavar="SPEC",
                   help=f"parser giving each sentence its tree: NAME[:ARG] from {registered_parsers()}, or 'none' "
                        f"(rule-based tokenization, no tags: every tag <notag>) (default: {default_parser})")
    g.add_argument("--trees", metavar="FILE.conllu",
                   help="take the trees from this CoNLL-U file instead of parsing (sentences matched by text/words; "
                        "a missing sentence is an error naming it)")
    c = p.add_mutually_exclusive_group()
    c.add_argument("--cache", metavar="FILE.jsonl",
                   help="parse cache (JSON lines keyed by parser spec + sentence): a re-run does not parse again "
                        "(default: the user's cache, $SIPE_CACHE_DIR/parses/, else ~/.cache/sipe_fairseq/parses/, one "
                        "file per parser and version: sipe_fairseq/parsing/cache.py)")
    c.add_argument("--no-cache", action="store_true", help="parse without a cache")
    p.set_defaults(default_parser=default_parser)


def tree_source_from_args(args):
    """The tree source chosen by :func:`add_tree_arguments`'s options. A parser is run by the command's ``--workers``
    processes when it has that option (:class:`~.parallel.ParserWorkers`, 0: the cores available; under the cache,
    so that only its misses are parsed there): :func:`release_workers` ends them when the parse is done."""
    if args.trees:
        if args.cache:
            logger.warning("--cache is ignored with --trees (nothing is parsed)")
        return ConlluTrees(args.trees)
    spec = args.parser or args.default_parser
    if spec == "none":
        return NoTrees()
    parser = make_parser(spec)
    workers = getattr(args, "workers", None)
    if workers is not None and workers != 1:
        parser = ParserWorkers(parser, workers)
    path = args.cache or (None if getattr(args, "no_cache", False) else default_cache_path(parser))
    if path is None:
        return parser
    if not args.cache:
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # an unwritable home: parse without the cache, and say so
            logger.warning("no parse cache (%s: %s); parsing without one", Path(path).parent, e.strerror)
            return parser
    return CachedParser(parser, path)


def release_workers(source) -> None:
    """Ends the worker processes of a tree source's parser (:func:`tree_source_from_args`), if it has any."""
    for inner in (source, getattr(source, "parser", None)):
        if isinstance(inner, ParserWorkers):
            inner.close()


def tree_source_stats(source) -> Dict[str, object]:
    """Counts to report: cache hits/misses and root fixes (from the cache or the parser)."""
    out: Dict[str, object] = {"spec": source.spec}
    stats = Counter(getattr(source, "stats", {}))
    inner = source.parser if isinstance(source, CachedParser) else None
    if inner is not None:
        out["cache"] = source.path
        out["inner_parser_sentences"] = int(getattr(inner, "stats", {}).get("sentences", 0))
    out.update({k: int(v) for k, v in stats.items()})
    return out

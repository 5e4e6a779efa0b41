"""The predictors of a zone's reading time, and the words kept for the regression.

Per zone (a word as the readers saw it, :mod:`.corpus`):

* ``length``: its characters, without the punctuation around it (``England,`` -> 7);
* ``logfreq``: its log unigram probability in the training data: the natural log of ``(count + 1) / (tokens +
  types + 1)`` (add-one), words lowercased, summed over the zone's model words that hold a letter or digit
  (``It's`` -> ``it`` + ``'s``); the counts are the words of the checkpoint's training split, as
  :class:`UnigramCounts` states (``sipe-eval reading-times``: the first checkpoint's data directory, or ``--data``);
* ``position``: its place in its sentence (1-based);
* ``surprisal``: the sum of its model words' surprisals (bits; the interface's ``word_surprisal``);
* ``structure_surprisal`` (summed) and ``structure_entropy`` (at its last model word: what is uncertain once
  the zone is read), when the scores carry them per word.

Spill-over: ``length``, ``logfreq`` and ``surprisal`` at the words t-1 and t-2 of the story (``surprisal_1``,
``surprisal_2``, ...; across sentence boundaries: the story is read as one text), the structural ones at t-1.

Exclusions, counted in this order, each word under the first that applies (:data:`EXCLUSIONS`): the first and
last word of each story; a word with punctuation (any character of a Unicode punctuation category, except a
hyphen or an apostrophe between two letters or digits: ``long-bearded`` and ``don't`` are kept, ``'Do``,
``England,`` are not); a mean reading time outside 100-3000 ms; a word that is not aligned (:mod:`.align`) or
not scored; a word whose t-1 or t-2 is not aligned (its spill-over values are unknown).
"""
import math
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

RT_RANGE = (100.0, 3000.0)
EXCLUSIONS = ("first or last word of a story", "punctuation", "reading time outside 100-3000 ms", "unaligned or unscored",
              "t-1 or t-2 missing or unaligned")
BASELINE = ("length", "logfreq", "length_1", "logfreq_1", "length_2", "logfreq_2", "position")
SURPRISAL = ("surprisal", "surprisal_1", "surprisal_2")
STRUCTURAL = ("structure_surprisal", "structure_surprisal_1", "structure_entropy", "structure_entropy_1")
STRUCTURE_FIELDS = ("structure_surprisal", "structure_entropy")
INNER = {"-", "'", "\u2019"}  # punctuation kept between two letters or digits


def has_punctuation(text: str) -> bool:
    for i, c in enumerate(text):
        if not unicodedata.category(c).startswith("P"):
            continue
        inner = 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
        if not (c in INNER and inner):
            return True
    return False


def word_length(text: str) -> int:
    """Characters of ``text`` without the punctuation and symbols before and after it."""
    def edge(c):
        return unicodedata.category(c)[0] in "PS"
    a, b = 0, len(text)
    while a < b and edge(text[a]):
        a += 1
    while b > a and edge(text[b - 1]):
        b -= 1
    return b - a if b > a else len(text)


@dataclass
class UnigramCounts:
    """Lowercased word counts of a training text; ``source`` says which (path, split, how the words were read)."""
    counts: Mapping[str, int]
    source: str

    def __post_init__(self):
        self.tokens = int(sum(self.counts.values()))
        self.types = len(self.counts)

    @classmethod
    def from_words(cls, words: Iterable[str], source: str) -> "UnigramCounts":
        return cls(Counter(w.lower() for w in words), source)

    def logprob(self, word: str) -> float:
        return math.log((self.counts.get(word.lower(), 0) + 1) / (self.tokens + self.types + 1))

    def zone_logprob(self, words: Sequence[str]) -> float:
        lexical = [w for w in words if any(c.isalnum() for c in w)] or list(words)
        return sum(self.logprob(w) for w in lexical)

    def describe(self) -> dict:
        return {"source": self.source, "tokens": self.tokens, "types": self.types,
                "formula": "ln((count + 1) / (tokens + types + 1)), lowercased, summed over the zone's lexical model words"}


@dataclass
class ZoneScore:
    """A zone's values under one model and source (None: unaligned or unscored)."""
    surprisal: float
    words: List[str]
    structure_surprisal: Optional[float] = None
    structure_entropy: Optional[float] = None


@dataclass
class Table:
    """The words kept: ``columns[name]`` (one value per kept word), ``story`` and ``zone`` of each, and the
    exclusions counted per reason (:data:`EXCLUSIONS`), overall and per story."""
    columns: Dict[str, np.ndarray]
    rt: np.ndarray
    story: np.ndarray
    zone: np.ndarray
    excluded: Dict[str, int] = field(default_factory=dict)
    excluded_per_story: Dict[int, Dict[str, int]] = field(default_factory=dict)

    def __len__(self):
        return len(self.rt)


def _reason(i, zones, scores, structural) -> Optional[str]:
    z = zones[i]
    if i == 0 or i == len(zones) - 1:
        return EXCLUSIONS[0]
    if has_punctuation(z.word):
        return EXCLUSIONS[1]
    if not RT_RANGE[0] <= z.rt <= RT_RANGE[1]:
        return EXCLUSIONS[2]

    def missing(k):
        s = scores.get((zones[k].item, zones[k].zone))
        return s is None or (structural and (s.structure_surprisal is None or s.structure_entropy is None))
    if missing(i):
        return EXCLUSIONS[3]
    if i < 2 or missing(i - 1) or missing(i - 2):
        return EXCLUSIONS[4]
    return None


def build_table(stories: Mapping[int, Sequence], scores: Mapping[Tuple[int, int], ZoneScore], counts: UnigramCounts,
                structural: bool = False) -> Table:
    """The predictors of every kept word of ``stories`` (``{item: [Zone, ...]}``) from ``scores`` (by
    ``(item, zone)``)."""
    names = BASELINE + SURPRISAL + (STRUCTURAL if structural else ())
    cols: Dict[str, List[float]] = {n: [] for n in names}
    rt, story, zone = [], [], []
    excluded = Counter()
    per_story = {}
    for item, zones in stories.items():
        per = per_story.setdefault(item, Counter())
        for i, z in enumerate(zones):
            why = _reason(i, zones, scores, structural)
            if why:
                excluded[why] += 1
                per[why] += 1
                continue
            prev = [scores[(zones[i - k].item, zones[i - k].zone)] for k in range(3)]
            for k, suffix in enumerate(("", "_1", "_2")):
                cols["length" + suffix].append(word_length(zones[i - k].word))
                cols["logfreq" + suffix].append(counts.zone_logprob(prev[k].words))
                cols["surprisal" + suffix].append(prev[k].surprisal)
            cols["position"].append(z.position)
            if structural:
                for k, suffix in enumerate(("", "_1")):
                    cols["structure_surprisal" + suffix].append(prev[k].structure_surprisal)
                    cols["structure_entropy" + suffix].append(prev[k].structure_entropy)
            rt.append(z.rt)
            story.append(item)
            zone.append(z.zone)
    return Table({n: np.asarray(v, dtype=float) for n, v in cols.items()}, np.asarray(rt, dtype=float),
                 np.asarray(story), np.asarray(zone), {r: excluded.get(r, 0) for r in EXCLUSIONS},
                 {k: {r: v.get(r, 0) for r in EXCLUSIONS} for k, v in per_story.items()})

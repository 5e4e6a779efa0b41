"""Aligning the model's words to the corpus's words (zones), by their characters.

A model reads a sentence as words (``England`` ``,``; ``It`` ``'s``; ``"`` ``fog`` ``"`` ``.``) while the readers
saw zones (``England,``; ``It's``; ``'fog'.``). Both sides are written as one string of characters without
whitespace, with every quote (````` ``''`` ``"`` ``'`` and the typographic ones) read as one quote character, and
the model's characters are matched to the zones' (equal strings: one to one; otherwise the longest matching
blocks, :class:`difflib.SequenceMatcher`). Then:

* a model word is *aligned* to a zone when all its characters are matched and all fall in that zone;
* a zone is *aligned* when all its characters are matched by aligned model words (then its values are its
  model words': surprisal summed, see :mod:`.predictors`).

Every other word is *unaligned* and counted, on both sides: a model word whose characters are unmatched
(``<unk>``) or fall in two zones; a zone with unmatched characters or touched by a model word that crosses
zones. Nothing is dropped silently: the counts are reported per story, and more than :data:`MAX_UNALIGNED`
of the zones unaligned is an error (``sipe-eval reading-times``: exit status 1, the first failures named).
"""
import difflib
from dataclasses import dataclass, field
from typing import Dict, Hashable, List, Optional, Sequence, Tuple

MAX_UNALIGNED = 0.01  # the largest fraction of zones that may be unaligned
QUOTES = {"`": '"', "'": '"', "\u2018": '"', "\u2019": '"', "\u201c": '"', "\u201d": '"', "\u00b4": '"'}


def normalize(text: str) -> str:
    """``text`` without whitespace, every quote one ``"`` (````` and ``''`` are one quote, not two)."""
    text = "".join(text.split()).replace("``", '"').replace("''", '"')
    return "".join(QUOTES.get(c, c) for c in text)


@dataclass
class Alignment:
    """``word_zone[i]``: the zone of model word i (None: unaligned); ``zone_words[key]``: the model words of an
    aligned zone, in order; ``unaligned_zones``/``unaligned_words``: ``(key or index, text, reason)``."""
    word_zone: List[Optional[Hashable]]
    zone_words: Dict[Hashable, List[int]] = field(default_factory=dict)
    unaligned_zones: List[Tuple[Hashable, str, str]] = field(default_factory=list)
    unaligned_words: List[Tuple[int, str, str]] = field(default_factory=list)


def _owners(pieces: Sequence[str]) -> Tuple[str, List[int]]:
    chars, owner = [], []
    for k, piece in enumerate(pieces):
        norm = normalize(piece)
        chars.append(norm)
        owner.extend([k] * len(norm))
    return "".join(chars), owner


def align(zones: Sequence[Tuple[Hashable, str]], words: Sequence[str]) -> Alignment:
    """Align the model ``words`` (one sentence, or a whole story) to ``zones`` (``(key, text)`` in order)."""
    ztext, zowner = _owners([t for _, t in zones])
    wtext, wowner = _owners(words)
    match = [None] * len(wtext)  # model character -> zone character
    if ztext == wtext:
        match = list(range(len(wtext)))
    else:
        sm = difflib.SequenceMatcher(None, wtext, ztext, autojunk=False)
        for a, b, size in sm.get_matching_blocks():
            match[a:a + size] = range(b, b + size)
    n_words = len(words)
    word_chars: List[List[Optional[int]]] = [[] for _ in range(n_words)]
    for i, j in enumerate(match):
        word_chars[wowner[i]].append(None if j is None else zowner[j])
    out = Alignment([None] * n_words)
    crossed = set()
    for w, owners in enumerate(word_chars):
        if not owners or any(o is None for o in owners):
            out.unaligned_words.append((w, words[w], "unmatched characters"))
            crossed.update(o for o in owners if o is not None)
        elif len(set(owners)) > 1:
            out.unaligned_words.append((w, words[w], "crosses zones"))
            crossed.update(owners)
        else:
            out.word_zone[w] = owners[0]
    covered = [0] * len(zones)
    for i, j in enumerate(match):
        if j is not None and out.word_zone[wowner[i]] is not None:
            covered[zowner[j]] += 1
    zlen = [len(normalize(t)) for _, t in zones]
    for z, (key, text) in enumerate(zones):
        if z in crossed:
            out.unaligned_zones.append((key, text, "a model word crosses it or is partly unmatched"))
        elif covered[z] != zlen[z] or zlen[z] == 0:
            out.unaligned_zones.append((key, text, "characters no model word matches"))
    bad = {k for k, _, _ in out.unaligned_zones}
    for w, z in enumerate(out.word_zone):
        if z is None:
            continue
        key = zones[z][0]
        if key in bad:
            out.word_zone[w] = None
            out.unaligned_words.append((w, words[w], "its zone is unaligned"))
            continue
        out.word_zone[w] = key
        out.zone_words.setdefault(key, []).append(w)
    return out

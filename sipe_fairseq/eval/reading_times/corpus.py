"""Reading the Natural Stories corpus (Futrell et al. 2021; languageMIT/naturalstories) as this evaluation needs it.

Two files of a corpus folder (``scripts/get_naturalstories.py`` writes them, in the repository's layout):

* ``naturalstories_RTS/processed_wordinfo.tsv``: one row per word as it was shown to the readers (a *zone*:
  the whitespace-delimited word with its punctuation, ``England,``), with the columns ``word``, ``zone``
  (its number in the story), ``item`` (the story) and ``meanItemRT`` (the mean self-paced reading time over
  readers, ms); other columns are kept out;
* ``parses/ud/stories-aligned.conllx``: the stories' UD parses, 485 sentences; each token's tenth column is
  ``TokenId=ITEM.ZONE[.SUB]``, so every zone falls in exactly one sentence, in order (``England`` ``,`` are
  ``1.10.1`` and ``1.10.2``).

The sentences are what the models read: their UD tokens (PTB quotes ````` and ``''`` written ``"`` and
brackets ``-LRB-`` ``-RRB-`` written ``(`` ``)``, as the training data writes them) and heads (the structure
for ``given``). A missing file, a malformed line, a zone the parses do not hold or a parse token whose zone
has no reading time is :class:`ReadingTimesError`: one line naming the file and line (``sipe-eval
reading-times``: exit status 2).
"""
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

from ...hexatag.errors import InputError
from ...hexatag.lines import iter_lines

WORDINFO = "naturalstories_RTS/processed_wordinfo.tsv"
PARSES = "parses/ud/stories-aligned.conllx"
WORDINFO_COLUMNS = ("word", "zone", "item", "meanItemRT")
# the parses' PTB quotes and brackets, as the models' training data (UD EWT) writes them
PTB_QUOTES = {"``": '"', "''": '"', "-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}


class ReadingTimesError(ValueError):
    """Bad input to the reading-time evaluation: one line naming the file (and line)."""


@dataclass
class Zone:
    """One word as the readers saw it: story ``item``, number ``zone`` in the story, its text and mean RT (ms);
    ``sentence``: the index of the sentence that holds it, ``position``: its 1-based place in that sentence."""
    item: int
    zone: int
    word: str
    rt: float
    sentence: int = -1
    position: int = 0


@dataclass
class Sentence:
    """One parsed sentence: the words the models read, their heads (1-based, 0 = root) and each word's zone."""
    item: int
    words: List[str]
    heads: List[int]
    zones: List[Tuple[int, int]]
    lines: Tuple[int, int] = (0, 0)


@dataclass
class Corpus:
    """The stories' zones in order (``stories[item]``) and the sentences in corpus order."""
    root: str
    stories: Dict[int, List[Zone]] = field(default_factory=dict)
    sentences: List[Sentence] = field(default_factory=list)

    def zone_count(self) -> int:
        return sum(len(z) for z in self.stories.values())

    def story_sentences(self, item: int) -> List[int]:
        return [i for i, s in enumerate(self.sentences) if s.item == item]


def _fail(path, lineno, message):
    raise ReadingTimesError(f"{path}:{lineno}: {message}" if lineno else f"{path}: {message}")


def _lines(path: Path):
    """``(number, text)`` of every line, by the commands' one line reader (:func:`~sipe_fairseq.hexatag.lines.iter_lines`:
    lines end at ``\n`` only; a line that is not UTF-8 is named ``FILE:LINE``)."""
    try:
        yield from iter_lines(str(path))
    except InputError as e:
        raise ReadingTimesError(str(e)) from None
    except OSError as e:
        _fail(path, 0, f"cannot read it ({e.strerror or e})")


def read_wordinfo(path: Path) -> Dict[Tuple[int, int], Zone]:
    """The zones of ``processed_wordinfo.tsv`` by ``(item, zone)``."""
    if not path.is_file():
        _fail(path, 0, f"no such file (a Natural Stories folder holds {WORDINFO}: scripts/get_naturalstories.py)")
    zones, header = {}, None
    for lineno, line in _lines(path):
        row = line.split("\t")
        if header is None:
            header = row
            missing = [c for c in WORDINFO_COLUMNS if c not in header]
            if missing:
                _fail(path, 1, f"not a processed_wordinfo.tsv header: no column {', '.join(missing)}")
            col = {c: header.index(c) for c in WORDINFO_COLUMNS}
            continue
        if row == [""]:
            continue
        if len(row) != len(header):
            _fail(path, lineno, f"{len(row)} fields, expected {len(header)}")
        try:
            item, zone, rt = int(row[col["item"]]), int(row[col["zone"]]), float(row[col["meanItemRT"]])
        except ValueError:
            _fail(path, lineno, "item and zone must be whole numbers and meanItemRT a number")
        if not math.isfinite(rt) or not row[col["word"]].strip():
            _fail(path, lineno, "an empty word or a reading time that is not finite")
        if (item, zone) in zones:
            _fail(path, lineno, f"story {item} zone {zone} a second time")
        zones[item, zone] = Zone(item, zone, row[col["word"]], rt)
    if header is None:
        _fail(path, 1, f"not a processed_wordinfo.tsv header: no column {', '.join(WORDINFO_COLUMNS)}")
    if not zones:
        _fail(path, 0, "no reading times")
    return zones


def _token_id(value: str, path, lineno) -> Tuple[int, int]:
    for part in value.split("|"):
        if part.startswith("TokenId="):
            bits = part[len("TokenId="):].split(".")
            if len(bits) >= 2 and bits[0].isdigit() and bits[1].isdigit():
                return int(bits[0]), int(bits[1])
    _fail(path, lineno, f"no TokenId=ITEM.ZONE in the tenth column ({value!r})")


def read_parses(path: Path) -> List[Sentence]:
    """The sentences of ``stories-aligned.conllx`` (blank-line separated CoNLL-X blocks)."""
    if not path.is_file():
        _fail(path, 0, f"no such file (a Natural Stories folder holds {PARSES}: scripts/get_naturalstories.py)")
    sentences, cur, first = [], [], 0
    numbered = list(_lines(path))
    for lineno, line in numbered + [(len(numbered) + 1, "")]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                sentences.append(_sentence(cur, path, first, lineno - 1))
            cur = []
            continue
        cols = line.split("\t")
        if len(cols) != 10 or not cols[0].isdigit() or not cols[6].isdigit() or not cols[1]:
            _fail(path, lineno, "not a CoNLL-X token line (10 tab-separated fields, ID and HEAD whole numbers)")
        if int(cols[0]) != len(cur) + 1:
            _fail(path, lineno, f"token ID {cols[0]}, expected {len(cur) + 1}")
        if not cur:
            first = lineno
        cur.append((cols[1], int(cols[6]), _token_id(cols[9], path, lineno), lineno))
    if not sentences:
        _fail(path, 0, "no sentences")
    return sentences


def _sentence(tokens, path, first, last) -> Sentence:
    items = {t[2][0] for t in tokens}
    if len(items) != 1:
        _fail(path, first, f"a sentence across stories {sorted(items)}")
    n = len(tokens)
    for _, head, _, lineno in tokens:
        if head > n:
            _fail(path, lineno, f"head {head} beyond the sentence's {n} tokens")
    return Sentence(items.pop(), [PTB_QUOTES.get(t[0], t[0]) for t in tokens], [t[1] for t in tokens],
                    [t[2] for t in tokens], (first, last))


def read_corpus(root) -> Corpus:
    """The corpus folder ``root``: zones with reading times, in story order, each placed in its sentence."""
    root = Path(root)
    if not root.is_dir():
        raise ReadingTimesError(f"{root}: no such directory (a Natural Stories folder: scripts/get_naturalstories.py)")
    zones = read_wordinfo(root / WORDINFO)
    sentences = read_parses(root / PARSES)
    parses = root / PARSES
    seen = {}
    for k, s in enumerate(sentences):
        for j, key in enumerate(s.zones):
            if key not in zones:
                _fail(parses, s.lines[0] + j, f"story {key[0]} zone {key[1]} has no reading time in {WORDINFO}")
            prev = seen.setdefault(key, k)
            if prev != k:
                _fail(parses, s.lines[0] + j, f"story {key[0]} zone {key[1]} in two sentences ({prev + 1} and {k + 1})")
            z = zones[key]
            if z.sentence < 0:
                z.sentence = k
                z.position = 1 + len({zz for zz in s.zones[:j]})
    missing = sorted(set(zones) - set(seen))
    if missing:
        _fail(parses, 0, f"{len(missing)} zones with reading times are in no sentence (first: story {missing[0][0]} zone "
                         f"{missing[0][1]})")
    corpus = Corpus(str(root))
    for key in sorted(zones):
        corpus.stories.setdefault(key[0], []).append(zones[key])
    order = [key for s in sentences for key in dict.fromkeys(s.zones)]
    if order != sorted(order):
        bad = next(i for i in range(1, len(order)) if order[i] < order[i - 1])
        _fail(parses, 0, f"the sentences do not follow the stories' order (story {order[bad][0]} zone {order[bad][1]})")
    corpus.sentences = sentences
    return corpus

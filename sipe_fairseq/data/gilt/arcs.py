"""GiLT arc streams: every word's arcs to earlier words (both directions, root included), encoded
per sentence (pure Python; GiLT, arXiv 2605.15562, docs/gilt-reference.md section 1).

Nodes are numbered as in CoNLL-U: 0 is the root, words are 1..n. An arc (h, d) (head h, dependent
d) *belongs to its later endpoint* max(h, d), the word at whose arrival it enters the graph: word
w owns its heads among 0..w-1 (root included) and its dependents among 1..w-1. A word's arcs to
itself do not exist (a self loop is refused).

Encoding of one sentence (one item of ``{split}.arcs.bin/.idx``, one item per sentence, the same
number of items as the token stream): for w = 1..n in order, ``[n_heads, heads.., n_deps, deps..]``
(heads ascending, then deps ascending). The words are anchored to the token stream at their first
subword (the positions whose terminal tag is not ``<notag>``), so decoding a sentence needs its word
count, which the loader takes from the tag stream and checks: an item that does not decode to
exactly that many words is out of step (:class:`ArcError`).
"""
from typing import Iterable, List, Sequence, Set, Tuple

Arc = Tuple[int, int]  # (head, dependent), 0 = root


class ArcError(ValueError):
    """An arc list or an encoded item that is inconsistent with its sentence."""


def tree_arcs(heads: Sequence[int]) -> List[Arc]:
    """CoNLL-U HEAD column (``heads[w-1]`` is word w's head, 0 = root) -> arcs ``(head, w)``."""
    return [(h, w) for w, h in enumerate(heads, 1)]


def parse_deps(value: str, word: int) -> Tuple[List[int], int]:
    """A DEPS cell (``"2:nsubj|4:nsubj:xsubj"``) of ``word`` -> (integer heads, number of heads that
    are empty nodes like ``8.1``, which the graph does not hold: counted by the caller). ``_`` -> no heads."""
    if value in ("", "_"):
        return [], 0
    heads, empty = [], 0
    for part in value.split("|"):
        head = part.split(":", 1)[0]
        if "." in head:
            empty += 1
            continue
        try:
            heads.append(int(head))
        except ValueError:
            raise ArcError(f"word {word}: DEPS entry {part!r} has no integer head") from None
    return heads, empty


def deps_arcs(lines: Sequence[str]) -> Tuple[List[Arc], int]:
    """Enhanced graph from a CoNLL-U block's DEPS column (column 9): ``(arcs, heads on empty nodes
    skipped)``. Only syntactic-word lines (integer IDs) count, as in the basic tree; a word with
    ``_`` has no enhanced heads (it then has no head arc in the graph)."""
    arcs, skipped, word = set(), 0, 0
    for line in lines:
        if not line or line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 10 or not cols[0].isdigit():
            continue
        word += 1
        heads, empty = parse_deps(cols[8], word)
        skipped += empty
        arcs.update((h, word) for h in heads)
    return sorted(arcs, key=lambda a: (a[1], a[0])), skipped


def check_arcs(arcs: Iterable[Arc], n: int) -> Set[Arc]:
    """The arcs as a set, refusing nodes outside 0..n, root as a dependent and self loops."""
    out = set()
    for h, d in arcs:
        if not (0 <= h <= n and 1 <= d <= n):
            raise ArcError(f"arc {h}->{d} outside a sentence of {n} words")
        if h == d:
            raise ArcError(f"self loop on word {d}")
        out.add((h, d))
    return out


def per_word(arcs: Iterable[Arc], n: int) -> List[Tuple[List[int], List[int]]]:
    """For w = 1..n: (w's heads among 0..w-1, w's dependents among 1..w-1), ascending."""
    heads: List[List[int]] = [[] for _ in range(n + 1)]
    deps: List[List[int]] = [[] for _ in range(n + 1)]
    for h, d in sorted(check_arcs(arcs, n)):
        if h < d:
            heads[d].append(h)
        else:
            deps[h].append(d)
    return [(sorted(heads[w]), sorted(deps[w])) for w in range(1, n + 1)]


def encode_arcs(arcs: Iterable[Arc], n: int) -> List[int]:
    """Arcs of an n-word sentence -> the flat item (module docstring)."""
    out: List[int] = []
    for heads, deps in per_word(arcs, n):
        out += [len(heads), *heads, len(deps), *deps]
    return out


def decode_words(item: Sequence[int], n: int) -> List[Tuple[List[int], List[int]]]:
    """Flat item -> per word (heads, dependents), checking that it holds exactly ``n`` words whose
    arcs go to earlier nodes only."""
    out, pos = [], 0
    item = [int(v) for v in item]
    for w in range(1, n + 1):
        lists = []
        for kind, low in (("heads", 0), ("dependents", 1)):
            if pos >= len(item):
                raise ArcError(f"arc item ends inside word {w} of {n}")
            k = item[pos]
            vals = item[pos + 1: pos + 1 + k]
            if len(vals) != k:
                raise ArcError(f"arc item ends inside word {w} of {n}")
            if any(not low <= v < w for v in vals):
                raise ArcError(f"word {w}: {kind} {vals} not among earlier nodes {low}..{w - 1} (an arc belongs to "
                              "its later word)")
            lists.append(vals)
            pos += 1 + k
        out.append((lists[0], lists[1]))
    if pos != len(item):
        raise ArcError(f"arc item holds {len(item) - pos} values after its {n} words")
    return out


def decode_arcs(item: Sequence[int], n: int) -> List[Arc]:
    """Flat item -> the sentence's arcs ``(head, dependent)``, sorted by (dependent, head)."""
    arcs = []
    for w, (heads, deps) in enumerate(decode_words(item, n), 1):
        arcs += [(h, w) for h in heads] + [(w, d) for d in deps]
    return sorted(arcs, key=lambda a: (a[1], a[0]))


def arc_counts(item: Sequence[int], n: int) -> List[int]:
    """Number of arcs each word owns (heads among earlier nodes + dependents among earlier words)."""
    return [len(h) + len(d) for h, d in decode_words(item, n)]


def arc_matches(pred: Iterable[Iterable[Arc]], gold: Iterable[Iterable[Arc]]) -> Tuple[int, int, int]:
    """(true positives, predicted arcs, gold arcs) of predicted arc lists against gold arcs, one list per
    sentence (each sentence's arcs taken as a set), summed over sentences."""
    tp = n_pred = n_gold = 0
    for p, g in zip(pred, gold):
        p, g = set(p), set(g)
        tp, n_pred, n_gold = tp + len(p & g), n_pred + len(p), n_gold + len(g)
    return tp, n_pred, n_gold


def arc_f1(tp: int, n_pred: int, n_gold: int) -> Tuple[float, float, float]:
    """Arc (precision, recall, F1), as fractions, from the counts of :func:`arc_matches` (a ratio over no
    arc is 0)."""
    p, r = tp / max(n_pred, 1), tp / max(n_gold, 1)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)

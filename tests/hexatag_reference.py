"""Reference (test-only) implementations of lifting and encoding: the code ``sipe_fairseq.hexatag``
used before the near-linear versions. Slow on purpose (about cubic in the sentence length for a
non-projective tree); tests and ``scripts/bench_hexatag.py`` compare the library with it.

Heads are 1-based, 0 marks the root: ``heads[i - 1]`` is the head of word ``i``.
"""
from typing import List, Sequence, Tuple

from sipe_fairseq.hexatag.errors import NonProjectiveError, TreeError
from sipe_fairseq.hexatag.tags import EOS


def check_tree(heads: Sequence[int]) -> None:
    """Raise :class:`TreeError` unless ``heads`` is a tree: heads in range, one root, no cycle."""
    n = len(heads)
    if n == 0:
        raise TreeError("empty sentence")
    for i, h in enumerate(heads, 1):
        if not isinstance(h, int) or h < 0 or h > n:
            raise TreeError(f"word {i}: head {h!r} out of range 0..{n}")
        if h == i:
            raise TreeError(f"word {i} is its own head")
    roots = [i for i, h in enumerate(heads, 1) if h == 0]
    if len(roots) != 1:
        raise TreeError(f"expected exactly one root, found {len(roots)} (words {roots})")
    # every word must reach the root; a word on a cycle never does
    state = [0] * (n + 1)  # 0 unknown, 1 on current path, 2 reaches root
    state[0] = 2
    for start in range(1, n + 1):
        path, i = [], start
        while state[i] == 0:
            state[i] = 1
            path.append(i)
            i = heads[i - 1]
        if state[i] == 1:
            raise TreeError(f"cycle through word {i}")
        for j in path:
            state[j] = 2


def _dominated(heads: Sequence[int], ancestor: int, word: int) -> bool:
    while word != 0:
        if word == ancestor:
            return True
        word = heads[word - 1]
    return False


def spans(heads: Sequence[int]) -> Tuple[List[int], List[int], List[int]]:
    """``(lo, hi, size)`` of each word's subtree (index 0 unused), in O(n); ``heads`` must be a tree."""
    n = len(heads)
    children = [[] for _ in range(n + 1)]
    for d, h in enumerate(heads, 1):
        children[h].append(d)
    order, k = [0], 0  # breadth-first: heads before their dependents
    while k < len(order):
        order.extend(children[order[k]])
        k += 1
    lo, hi, size = list(range(n + 1)), list(range(n + 1)), [1] * (n + 1)
    for w in reversed(order[1:]):
        h = heads[w - 1]
        if h:
            lo[h], hi[h], size[h] = min(lo[h], lo[w]), max(hi[h], hi[w]), size[h] + size[w]
    return lo, hi, size


def _projective(heads: Sequence[int]) -> bool:
    lo, hi, size = spans(heads)
    return all(hi[w] - lo[w] + 1 == size[w] for w in range(1, len(heads) + 1))


def _nonprojective_arcs(heads: Sequence[int]) -> List[int]:
    bad = []
    for d, h in enumerate(heads, 1):
        if h == 0:
            continue
        lo, hi = min(h, d), max(h, d)
        if any(not _dominated(heads, h, k) for k in range(lo + 1, hi)):
            bad.append(d)
    return bad


def nonprojective_arcs(heads: Sequence[int]) -> List[int]:
    check_tree(heads)
    return _nonprojective_arcs(heads)


def is_projective(heads: Sequence[int]) -> bool:
    check_tree(heads)
    return _projective(heads)


def projectivize(heads: Sequence[int], strict: bool = False) -> Tuple[List[int], int]:
    """Lifting (Nivre & Nilsson 2005): while a non-projective arc exists, the shortest one (ties:
    the smaller dependent) is lifted, i.e. its dependent is re-attached to its head's head; every
    non-projective arc is recomputed from scratch after each lift."""
    check_tree(heads)
    heads = list(heads)
    lifts = 0
    while True:
        bad = [] if _projective(heads) else _nonprojective_arcs(heads)
        if not bad:
            return heads, lifts
        if strict:
            raise NonProjectiveError(f"non-projective arcs into words {bad}")
        d = min(bad, key=lambda w: (abs(heads[w - 1] - w), w))
        heads[d - 1] = heads[heads[d - 1] - 1]
        lifts += 1


def encode(heads: Sequence[int]) -> List[Tuple[str, str]]:
    """Projective tree -> one ``(terminal, non-terminal)`` pair per word (left-first binarization)."""
    check_tree(heads)
    n = len(heads)
    lo, hi, size = spans(heads)
    if any(hi[w] - lo[w] + 1 != size[w] for w in range(1, n + 1)):
        raise NonProjectiveError("tree is not projective; projectivize() it before encoding")
    left = [[] for _ in range(n + 1)]
    right = [[] for _ in range(n + 1)]
    for d, h in enumerate(heads, 1):
        (left if d < h else right)[h].append(d)
    side = [""] * (n + 1)
    for d, h in enumerate(heads, 1):
        side[d] = "L" if (h == 0 or d < h) else "R"
    term = [""] * (n + 1)
    nonterm = [EOS] * (n + 1)
    for h in range(1, n + 1):
        deps = sorted(left[h], reverse=True)
        rdeps = sorted(right[h])
        chain = [(hi[d], 1) for d in deps] + [(lo[d] - 1, 0) for d in rdeps]
        if not chain:
            term[h] = side[h].lower()
            continue
        term[h] = "r" if deps else "l"
        for k, (gap, bit) in enumerate(chain):
            if k + 1 < len(chain):
                node_side = "R" if chain[k + 1][1] == 1 else "L"
            else:
                node_side = side[h]
            nonterm[gap] = f"{node_side}{bit}"
    return [(term[i], nonterm[i]) for i in range(1, n + 1)]


def encode_tree(heads: Sequence[int], strict: bool = False):
    """The reference of :func:`sipe_fairseq.hexatag.encode_tree`: ``(tags, heads_used, n_lifts)``."""
    proj, lifts = projectivize(heads, strict=strict)
    return encode(proj), proj, lifts

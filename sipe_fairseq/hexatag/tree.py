"""Dependency-tree checks and projectivization (pure Python).

Heads are 1-based, 0 marks the root: ``heads[i - 1]`` is the head of word ``i``.

Projectivity is read off each head's *run*: the longest block of consecutive words around the head
that it dominates. An arc ``h -> d`` is projective exactly when ``d`` lies in the run of ``h`` (every
word between them is then dominated by ``h``). Runs come from two pre-order numberings of the tree
(children visited left to right, then right to left): ``k`` is dominated by ``h`` exactly when ``k``
comes after ``h`` in both, so a run ends at the nearest word numbered lower than ``h`` in either
order, a nearest-smaller-value scan, O(n) for all heads at once.
"""
import heapq
from bisect import bisect_left, bisect_right, insort
from operator import eq
from typing import List, Sequence, Tuple

from .errors import NonProjectiveError, TreeError


def check_tree(heads: Sequence[int]) -> None:
    """Raise :class:`TreeError` unless ``heads`` is a tree: heads in range, one root, no cycle."""
    _checked(heads)


def _checked(heads: Sequence[int]) -> Tuple[List[List[int]], List[int]]:
    """:func:`check_tree`, returning what it built: ``(children, order)``, the dependents of each word
    (see :func:`_children`) and the words breadth-first from the root word 0 (heads before dependents)."""
    n = len(heads)
    if n == 0:
        raise TreeError("empty sentence")
    plain = set(map(type, heads)) == {int}  # the common case, checked without a Python-level loop
    if not plain or min(heads) < 0 or max(heads) > n or any(map(eq, heads, range(1, n + 1))):
        for i, h in enumerate(heads, 1):
            if not isinstance(h, int) or h < 0 or h > n:
                raise TreeError(f"word {i}: head {h!r} out of range 0..{n}")
            if h == i:
                raise TreeError(f"word {i} is its own head")
    if heads.count(0) != 1:
        roots = [i for i, h in enumerate(heads, 1) if h == 0]
        raise TreeError(f"expected exactly one root, found {len(roots)} (words {roots})")
    # every word must reach the root: a breadth-first walk down from it meets every word unless some
    # words lie on a cycle (and what hangs below them)
    children = _children(heads)
    order = [0]
    for v in order:
        order.extend(children[v])
    if len(order) == n + 1:
        return children, order
    state = [0] * (n + 1)  # 0 unknown, 1 on current path, 2 reaches root
    for v in order:
        state[v] = 2
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
    raise AssertionError("unreachable: a word that does not reach the root lies on or below a cycle")


def _children(heads: Sequence[int]) -> List[List[int]]:
    """Dependents of each word (index 0: the root word), in increasing order."""
    children = [[] for _ in range(len(heads) + 1)]
    for d, h in enumerate(heads, 1):
        children[h].append(d)
    return children


def _spans(heads: Sequence[int], order: List[int]) -> Tuple[List[int], List[int], bool]:
    """``(lo, hi, projective)``: the first and last word of each subtree (index 0: the whole
    sentence), and whether every subtree is contiguous; O(n), given the breadth-first ``order``
    of :func:`_checked`."""
    n = len(heads)
    lo, hi, size = list(range(n + 1)), list(range(n + 1)), [1] * (n + 1)
    for w in order[:0:-1]:  # dependents before heads, the root word 0 left out
        h = heads[w - 1]
        if lo[w] < lo[h]:
            lo[h] = lo[w]
        if hi[w] > hi[h]:
            hi[h] = hi[w]
        size[h] += size[w]
    projective = all(hi[w] - lo[w] + 1 == size[w] for w in range(1, n + 1))
    return lo, hi, projective


def _preorder(children: List[List[int]], left_first: bool) -> List[int]:
    """Pre-order number of each word (the root word 0 first)."""
    number = [0] * len(children)
    stack, k = [0], 0
    while stack:
        v = stack.pop()
        number[v] = k
        k += 1
        stack.extend(reversed(children[v]) if left_first else children[v])
    return number


def _runs(children: List[List[int]]) -> Tuple[List[int], List[int]]:
    """``(first, last)``: the run of each word ``h``, the longest block ``first[h]..last[h]`` of
    consecutive words around ``h`` that ``h`` dominates (itself included). O(n)."""
    n = len(children) - 1
    first, last = [1] * (n + 1), [n] * (n + 1)
    for number in (_preorder(children, True), _preorder(children, False)):
        stack = []
        for j in range(1, n + 1):  # nearest word after h numbered lower than h
            t = number[j]
            while stack and number[stack[-1]] > t:
                h = stack.pop()
                if j - 1 < last[h]:
                    last[h] = j - 1
            stack.append(j)
        stack = []
        for j in range(n, 0, -1):  # nearest word before h numbered lower than h
            t = number[j]
            while stack and number[stack[-1]] > t:
                h = stack.pop()
                if j + 1 > first[h]:
                    first[h] = j + 1
            stack.append(j)
    return first, last


def _nonprojective_arcs(heads: Sequence[int], children: List[List[int]]) -> List[int]:
    first, last = _runs(children)
    return [d for d, h in enumerate(heads, 1) if h and not first[h] <= d <= last[h]]


def nonprojective_arcs(heads: Sequence[int]) -> List[int]:
    """Dependents ``d`` whose arc ``heads[d] -> d`` is crossed (some word strictly between
    head and dependent is not dominated by the head). Raises :class:`TreeError` for a non-tree."""
    return _nonprojective_arcs(heads, _checked(heads)[0])


def is_projective(heads: Sequence[int]) -> bool:
    """True when every subtree covers a contiguous span. Raises :class:`TreeError` for a non-tree."""
    return _spans(heads, _checked(heads)[1])[2]


def projectivize(heads: Sequence[int], strict: bool = False) -> Tuple[List[int], int]:
    """Return ``(projective_heads, n_lifts)``.

    Lifting (Nivre & Nilsson 2005): while a non-projective arc exists, the shortest one (ties: the
    smaller dependent) is lifted, i.e. its dependent is re-attached to its head's head. In
    ``strict`` mode a non-projective tree raises :class:`NonProjectiveError` instead.
    """
    children, order = _checked(heads)
    if _spans(heads, order)[2]:
        return list(heads), 0
    return _lift(heads, children, strict)


def _lift(heads: Sequence[int], children: List[List[int]], strict: bool) -> Tuple[List[int], int]:
    """Lifting of a checked tree (``children`` of :func:`_children`, updated in place), each arc's
    projectivity kept up to date instead of recomputed.

    Lifting ``d`` off ``h`` (to ``g``, the head of ``h``) takes ``d``'s subtree away from ``h`` and
    from no other word, so ``h``'s run is the only one that changes: it now ends before the
    nearest word of that subtree on either side of ``h``. Dependents of ``h`` left outside the
    shortened run become non-projective, and stay so until lifted, as domination never grows back;
    the new arc ``g -> d`` is projective or not by ``g``'s run. A heap keyed like the choice of the
    shortest arc, ``(length, dependent)``, holds every non-projective arc (entries whose dependent
    has moved on are skipped). While the new arc is non-projective and comes before every arc in
    the heap, it would be the next one chosen, so ``d`` goes on up at once (a climb: one sort of its
    subtree's words, then per level a binary search for the run update). Cost: O(n log n), plus
    O(log n) per lift and O(s log s) per climb of a subtree of s words. The number of lifts is the
    reference's, natural and random trees need about one or two per word; a contrived tree can
    need Θ(n²) (n/2 words hung below the deepest word of an n/2-word chain climb it all).
    """
    head = [0, *heads]
    first, last = _runs(children)
    heap = [(abs(h - d), d, h) for d, h in enumerate(heads, 1) if h and not first[h] <= d <= last[h]]
    if strict and heap:
        raise NonProjectiveError(f"non-projective arcs into words {[d for _, d, _ in heap]}")
    heapq.heapify(heap)
    push = heapq.heappush
    lifts = 0
    while heap:
        _, d, h = heapq.heappop(heap)
        if head[d] != h:
            continue  # lifted already
        deps = children[h]
        del deps[bisect_left(deps, d)]
        words, todo = [], [d]
        while todo:  # d's subtree
            v = todo.pop()
            words.append(v)
            todo.extend(children[v])
        words.sort()
        while True:  # lift d off h, to g
            g = head[h]  # h is not the root word: the root word dominates every word
            lifts += 1
            a, b = first[h], last[h]
            k = bisect_left(words, h)  # words[k - 1] < h < words[k]: the subtree's nearest words around h
            if k < len(words) and words[k] <= b:
                new_b = last[h] = words[k] - 1
                deps = children[h]
                for y in deps[bisect_right(deps, new_b):bisect_right(deps, b)]:
                    push(heap, (y - h, y, h))
            if k and words[k - 1] >= a:
                new_a = first[h] = words[k - 1] + 1
                deps = children[h]
                for y in deps[bisect_left(deps, a):bisect_left(deps, new_a)]:
                    push(heap, (h - y, y, h))
            if first[g] <= d <= last[g]:
                break  # g -> d is projective
            key = (abs(g - d), d)
            if heap and heap[0] < key:
                push(heap, (*key, g))
                break  # another arc comes first
            h = g
        head[d] = g
        insort(children[g], d)
    return head[1:], lifts

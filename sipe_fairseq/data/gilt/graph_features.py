"""GiLT's feature tape (arXiv 2605.15562; docs/gilt-reference.md section 3): three integer features of every
node of an incrementally built dependency graph, recomputed when each word arrives.

Nodes: 0 is the root, words 1..n. When word w arrives, its arcs to earlier nodes (:mod:`.arcs`:
heads among 0..w-1, dependents among 1..w-1) join the graph, and row w of the tape holds, for every
node v = 0..w (later nodes: 0):

* **degree** = 10 * out-degree + 1 * in-degree (m_out = 10, m_in = 1, Fig. 1); a root arc counts as
  an in-arc of its dependent (and an out-arc of node 0);
* **depth** = undirected hop distance from the root + 1 (the root itself 1); 0 when v is not
  connected to the root ("easydepth");
* **distance** = directed weighted shortest path from the newest word w to v, going head ->
  dependent costs 10 and dependent -> head costs 1, paths may pass through the root; 0 for v = w
  and for unreachable v. Two words u < w with arcs both ways (u -> w and w -> u), rule ``two_way``:
  ``later-head`` (default, the authors' code: the arc w -> u alone sets the pair's costs, w -> u 10
  and u -> w 1, as its adjacency entries are written after those of u -> w) or ``cheaper`` (both
  arcs are edges: 1 each way).

Every value is clipped to [0, 150] (:data:`MAX_VALUE`, the tables have 151 rows). The graph may have
several heads per word and cycles (no tree constraint). Shortest paths are kept for all pairs and
updated in O(n^2) per word (a new node only adds paths through itself), so a sentence's tape costs
O(n^3) numpy work instead of n Dijkstra runs.
"""
from typing import List, Sequence, Tuple

import numpy as np

MAX_VALUE = 150
N_FEATURES = 3  # degree, depth, distance (this order)
HEAD_TO_DEP, DEP_TO_HEAD = 10, 1  # distance costs
TWO_WAY_RULES = ("later-head", "cheaper")  # distance of a pair with arcs both ways (module docstring)
M_OUT, M_IN = 10, 1  # degree weights
_INF = np.inf


class GraphTape:
    """The graph of one sentence as its words arrive; :meth:`add_word` returns the new tape row."""

    def __init__(self, capacity: int = 8, two_way: str = TWO_WAY_RULES[0]):
        if two_way not in TWO_WAY_RULES:
            raise ValueError(f"unknown two-way distance rule {two_way!r} (expected one of {TWO_WAY_RULES})")
        self.two_way = two_way
        self.n = 0  # words so far; nodes 0..n
        self._alloc(max(capacity, 1) + 1)
        self.out_deg[:] = 0
        self.in_deg[:] = 0

    def _alloc(self, size: int):
        old = getattr(self, "directed", None)
        directed = np.full((size, size), _INF)
        undirected = np.full((size, size), _INF)
        np.fill_diagonal(directed, 0.0)
        np.fill_diagonal(undirected, 0.0)
        out_deg, in_deg = np.zeros(size, np.int64), np.zeros(size, np.int64)
        if old is not None:
            k = old.shape[0]
            directed[:k, :k], undirected[:k, :k] = old, self.undirected
            out_deg[:k], in_deg[:k] = self.out_deg, self.in_deg
        self.directed, self.undirected, self.out_deg, self.in_deg = directed, undirected, out_deg, in_deg

    def copy(self) -> "GraphTape":
        other = GraphTape.__new__(GraphTape)
        other.n, other.two_way = self.n, self.two_way
        for name in ("directed", "undirected", "out_deg", "in_deg"):
            setattr(other, name, getattr(self, name).copy())
        return other

    def add_word(self, heads: Sequence[int], deps: Sequence[int]) -> np.ndarray:
        """Word n+1 arrives with its heads (among 0..n) and dependents (among 1..n); returns its
        tape row, int64 (3, n+2): degree, depth, distance of nodes 0..n+1."""
        w = self.n + 1
        if w + 1 > self.directed.shape[0]:
            self._alloc(2 * self.directed.shape[0])
        for h in heads:
            if not 0 <= h < w:
                raise ValueError(f"word {w}: head {h} is not an earlier node")
        for d in deps:
            if not 1 <= d < w:
                raise ValueError(f"word {w}: dependent {d} is not an earlier word")
        # directed costs of the new edges: into w (from u) and out of w (to u); later-head: a head of w
        # that is also w's dependent is an edge of the arc w -> u only
        both = set(heads) & set(deps) if self.two_way == "later-head" else set()
        dist_heads = [h for h in heads if h not in both]
        into = [(h, HEAD_TO_DEP) for h in dist_heads] + [(d, DEP_TO_HEAD) for d in deps]
        out = [(h, DEP_TO_HEAD) for h in dist_heads] + [(d, HEAD_TO_DEP) for d in deps]
        self._add_node(self.directed, w, into, out)
        nbrs = [(u, 1) for u in set(heads) | set(deps)]
        self._add_node(self.undirected, w, nbrs, nbrs)
        for h in heads:
            self.out_deg[h] += 1
            self.in_deg[w] += 1
        for d in deps:
            self.out_deg[w] += 1
            self.in_deg[d] += 1
        self.n = w
        return self.row()

    @staticmethod
    def _add_node(dist: np.ndarray, w: int, into: List[Tuple[int, int]], out: List[Tuple[int, int]]) -> None:
        """Shortest paths after adding node w with edges u -> w (``into``) and w -> u (``out``):
        a new path goes through w once, D[x, y] = min(D[x, y], D[x, w] + D[w, y])."""
        old = dist[:w, :w]
        to_w = np.full(w, _INF)
        for u, c in into:
            to_w = np.minimum(to_w, old[:, u] + c)
        from_w = np.full(w, _INF)
        for u, c in out:
            from_w = np.minimum(from_w, old[u, :] + c)
        np.minimum(old, to_w[:, None] + from_w[None, :], out=old)
        dist[:w, w] = to_w
        dist[w, :w] = from_w
        dist[w, w] = 0.0

    def row(self) -> np.ndarray:
        """The tape row of the newest word: (3, n+1) int64 over nodes 0..n, clipped to [0, 150]."""
        n = self.n
        degree = M_OUT * self.out_deg[: n + 1] + M_IN * self.in_deg[: n + 1]
        hops = self.undirected[0, : n + 1]
        depth = np.where(np.isfinite(hops), hops + 1, 0)
        reach = self.directed[n, : n + 1] if n > 0 else np.zeros(1)
        distance = np.where(np.isfinite(reach), reach, 0)  # self: 0 already
        return np.clip(np.stack([degree, depth, distance]).astype(np.int64), 0, MAX_VALUE)


def sentence_tape(words: Sequence[Tuple[Sequence[int], Sequence[int]]], two_way: str = TWO_WAY_RULES[0]) -> np.ndarray:
    """Per-word (heads, dependents) of a sentence (:func:`.arcs.decode_words`) -> the tape
    (n, n+1, 3) uint8: [w-1, v] = features of node v (0 = root) when word w has arrived (0 for v > w).
    ``two_way``: the distance rule of a pair with arcs both ways (module docstring)."""
    n = len(words)
    tape = np.zeros((n, n + 1, N_FEATURES), dtype=np.uint8)
    g = GraphTape(n, two_way)
    for w, (heads, deps) in enumerate(words, 1):
        tape[w - 1, : w + 1] = g.add_word(heads, deps).T
    return tape


def pair_features(tape: np.ndarray) -> np.ndarray:
    """Word-level attention features of one sentence: (n+1, n+1, 3) uint8, [a, b] for a query in
    word a and a key in word b (words 1..n; index 0 = a position of no word, e.g. ``<s>``/``</s>``:
    all 0): the features of b in tape row a when b <= a, else 0 (a later word does not exist yet)."""
    n = tape.shape[0]
    out = np.zeros((n + 1, n + 1, N_FEATURES), dtype=np.uint8)
    out[1:, 1:] = tape[:, 1:]
    out[1:, 1:] *= np.tril(np.ones((n, n), dtype=np.uint8))[:, :, None]
    return out

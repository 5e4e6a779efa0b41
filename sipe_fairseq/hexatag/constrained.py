"""Constrained hexatag decoding: the best tag sequence that :func:`~.tags.decode` accepts.

Pure Python (no numpy, torch or fairseq). In SiPE's word-aligned form word ``i`` carries
``(t_i, n_i)``; :func:`~.tags.decode` reads ``t1 n1 t2 ... tN`` with a stack whose items below
the top are always open nodes, and whose top is finished after every terminal and open after every
non-terminal. The whole state is therefore the stack depth ``d``:

* ``t1`` must be ``l`` (``d = 1``); for ``i > 1``: ``l`` pushes (``d + 1``), ``r`` completes the
  open top (``d`` unchanged; the top is always open after a non-terminal);
* ``n_i`` (``i < N``): ``L0``/``L1`` keep ``d``; ``R0``/``R1`` pop (``d - 1``) and need ``d >= 2``;
  ``EOS`` is not allowed before the last word;
* ``n_N`` is ``EOS`` and the depth after ``t_N`` must be 1 (one finished tree).

:func:`constrained_decode` maximizes the summed scores over exactly this set by a Viterbi pass over
depths, ``O(N^2)``. ``tests/test_constrained.py`` checks that the set equals what ``decode``
accepts for every sequence with ``N <= 5``.

The same automaton read one word at a time (:func:`advance`, :func:`allowed_pairs`,
:func:`prefix_state`) is the incremental prefix check used when a model chooses each word's tags
from the prefix alone (``sipe_fairseq/structure/hexatags.py``): which next pairs can still complete
to a sequence that ``decode`` accepts, and which of them end one (``EOS``).
"""
from typing import List, Sequence, Tuple

from .tags import EOS, NONTERMINALS, TERMINALS

_L = TERMINALS.index("l")
_R = TERMINALS.index("r")
_NT_KEEP = tuple(NONTERMINALS.index(x) for x in ("L0", "L1"))
_NT_POP = tuple(NONTERMINALS.index(x) for x in ("R0", "R1"))
_EOS = NONTERMINALS.index(EOS)


def _rows(scores, width: int, name: str) -> List[List[float]]:
    if hasattr(scores, "tolist"):  # numpy array or torch tensor
        scores = scores.tolist()
    rows = [[float(x) for x in row] for row in scores]
    for k, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"{name}: row {k} has {len(row)} scores, expected {width}")
    return rows


def is_valid(tags: Sequence[Tuple[str, str]]) -> bool:
    """Whether ``tags`` lies in the automaton's language (equivalently: ``decode`` accepts it)."""
    n, d = len(tags), 0
    if n == 0:
        return False
    for i, pair in enumerate(tags):
        if len(pair) != 2:
            return False
        t, nt = pair
        if t == "l":
            d += 1
        elif t != "r" or i == 0:
            return False
        if i == n - 1:
            return nt == EOS and d == 1
        if nt in ("R0", "R1"):
            if d < 2:
                return False
            d -= 1
        elif nt not in ("L0", "L1"):
            return False
    return False  # unreachable


def constrained_decode_with_score(terminal_logprobs, nonterminal_logprobs) -> Tuple[List[Tuple[str, str]], float]:
    """``(N x 2, N x 5)`` scores (lists, numpy arrays or tensors; columns in the order of
    ``TERMINALS`` / ``NONTERMINALS``) -> ``(best valid tags, their summed score)``.

    Ties are broken towards the lower tag index. Raises ``ValueError`` for ``N = 0`` or mismatched
    shapes. Scores of ``-inf`` forbid a tag; if every valid sequence scores ``-inf`` the result is
    still a valid sequence (with score ``-inf``).
    """
    term = _rows(terminal_logprobs, len(TERMINALS), "terminal_logprobs")
    nont = _rows(nonterminal_logprobs, len(NONTERMINALS), "nonterminal_logprobs")
    n = len(term)
    if n == 0:
        raise ValueError("empty sentence: no tags to decode")
    if len(nont) != n:
        raise ValueError(f"{n} terminal rows but {len(nont)} non-terminal rows")

    # Viterbi over depths. For word i (0-based): a[d] = best score with depth d after t_i,
    # b[d] = best score with depth d after n_i; None marks an unreachable state (a score of -inf
    # is still a reachable state, so that a valid sequence is always returned).
    # Depth after t_i is at most min(i + 1, n - i), after n_i at most min(i + 1, n - 1 - i):
    # the remaining words must be able to pop back to depth 1.
    back = []  # per word i < n - 1: {depth after n_i: (terminal, non-terminal, depth after n_{i-1})}
    b = {0: 0.0}  # before the first word: empty stack
    for i in range(n):
        sl, sr = term[i][_L], term[i][_R]
        a = {}  # depth after t_i -> (score, terminal, depth before)
        top = min(i + 1, n - i)
        for d, v in b.items():
            if d + 1 <= top:
                _offer(a, d + 1, v + sl, (_L, d))
            if d >= 1 and d <= top:  # r completes the open top: needs a non-empty stack
                _offer(a, d, v + sr, (_R, d))
        if i == n - 1:
            score, (t, d) = a[1][0], a[1][1]
            tags = [(t, _EOS)]
            for j in range(n - 2, -1, -1):
                t, nt, d = back[j][d]
                tags.append((t, nt))
            tags.reverse()
            return [(TERMINALS[t], NONTERMINALS[nt]) for t, nt in tags], score + nont[i][_EOS]
        row = nont[i]
        keep = max(_NT_KEEP, key=lambda k: (row[k], -k))
        pop = max(_NT_POP, key=lambda k: (row[k], -k))
        top = min(i + 1, n - 1 - i)
        nb = {}
        for d, (v, (t, d0)) in a.items():
            if d <= top:
                _offer(nb, d, v + row[keep], (t, keep, d0))
            if 2 <= d <= top + 1:
                _offer(nb, d - 1, v + row[pop], (t, pop, d0))
        b = {d: v for d, (v, _) in nb.items()}
        back.append({d: bpt for d, (_, bpt) in nb.items()})
    raise AssertionError("unreachable")


def _offer(table, d, score, pointer) -> None:
    """Keep the better of ``table[d]`` and ``(score, pointer)``; the first offer wins ties."""
    cur = table.get(d)
    if cur is None or score > cur[0]:
        table[d] = (score, pointer)


def constrained_decode(terminal_logprobs, nonterminal_logprobs) -> List[Tuple[str, str]]:
    """The highest-scoring tag sequence that :func:`~.tags.decode` accepts (see module docstring)."""
    return constrained_decode_with_score(terminal_logprobs, nonterminal_logprobs)[0]


# ------------------------------------------------------------------ incremental prefix check
# The automaton above, read one word at a time. A prefix state is the stack depth after the last
# word's non-terminal (START = 0 before the first word), or CLOSED after a word tagged EOS (a
# finished tree: no further word can follow). Every open state (depth >= 1, or START) can still be
# completed: ``d`` words tagged (r, R*) ... (r, EOS) close it, so without a length bound a pair is
# allowed iff the automaton can take it.
START = 0
CLOSED = -1
PAIRS: Tuple[Tuple[str, str], ...] = tuple((t, n) for t in TERMINALS for n in NONTERMINALS)


def advance(state: int, pair: Tuple[str, str]):
    """The prefix state after one more word tagged ``pair``, or ``None`` if no valid sequence
    continues that way (the automaton of the module docstring, one word at a time)."""
    if state == CLOSED or len(pair) != 2:
        return None
    t, nt = pair
    if t == "l":
        d = state + 1
    elif t == "r" and state >= 1:  # the top is open after every non-terminal
        d = state
    else:
        return None
    if nt == EOS:
        return CLOSED if d == 1 else None
    if nt in ("L0", "L1"):
        return d
    if nt in ("R0", "R1") and d >= 2:
        return d - 1
    return None


def allowed_pairs(state: int, words_left=None) -> Tuple[Tuple[str, str], ...]:
    """The pairs (in :data:`PAIRS` order) that the next word can carry after prefix state ``state``
    such that the sequence can still end as one valid tree. ``words_left``: how many words may
    follow that next word at most (``None``: unbounded); with a bound, a pair is allowed only if
    the depth it leaves can be closed in time (depth ``d`` needs ``d`` more words), and
    ``words_left=0`` allows exactly the pairs that end a valid sequence (``EOS`` at depth 1)."""
    out = []
    for pair in PAIRS:
        nxt = advance(state, pair)
        if nxt is None:
            continue
        if words_left is not None and nxt != CLOSED and nxt > words_left:
            continue
        out.append(pair)
    return tuple(out)


def prefix_state(tags: Sequence[Tuple[str, str]]):
    """The prefix state after ``tags`` (:data:`START` for none), or ``None`` when ``tags`` is
    not the prefix of any valid sequence. ``prefix_state(tags) == CLOSED`` iff ``is_valid(tags)``."""
    state = START
    for pair in tags:
        state = advance(state, pair)
        if state is None:
            return None
    return state

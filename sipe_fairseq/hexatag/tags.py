"""Hexatags (Amini et al. 2023) in SiPE's word-aligned form (paper section 2, appendix A.1).

Binarization is left-first: a head takes its left dependents nearest first, then its right
dependents nearest first, so ``l1 l2 h r1 r2`` gives ``X0[X0[X1[l1, X1[l2, h]], r1], r2]``
(digit = head bit: 0 the lexical head is in the left child, 1 in the right child).

The in-order traversal ``t1 n1 t2 ... n(N-1) tN`` of that binary head tree (BHT) gives, per
word, a terminal tag (``l``/``r``: the leaf is a left/right child) and, per gap between words,
the non-terminal spanning it (``L``/``R``: the node is a left/right child, the root counting as
left, followed by the head bit). SiPE's left shift puts ``n_i`` on word ``i`` and ``EOS`` on
the last word, so every word carries one pair ``(t_i, n_i)``.
"""
from bisect import bisect_left
from typing import List, Sequence, Tuple

from .errors import HexatagError, NonProjectiveError
from .tree import _checked, _lift, _spans

TERMINALS: Tuple[str, ...] = ("l", "r")
NONTERMINALS: Tuple[str, ...] = ("L0", "L1", "R0", "R1", "EOS")
EOS = "EOS"

Tag = Tuple[str, str]


def encode(heads: Sequence[int]) -> List[Tag]:
    """Projective tree (1-based heads, 0 = root) -> one ``(terminal, non-terminal)`` pair per word.

    Raises :class:`NonProjectiveError` for a non-projective tree (projectivize it first): the
    BHT of a non-projective tree would put tags on the wrong words.
    """
    children, order = _checked(heads)
    lo, hi, projective = _spans(heads, order)
    if not projective:
        raise NonProjectiveError("tree is not projective; projectivize() it before encoding")
    return _encode(heads, children, lo, hi)


def encode_tree(heads: Sequence[int], strict: bool = False) -> Tuple[List[Tag], List[int], int]:
    """Check, projectivize (unless ``strict``: :class:`NonProjectiveError`) and encode a tree:
    returns ``(tags, heads_used, n_lifts)``, as ``projectivize`` then ``encode`` but checking once."""
    children, order = _checked(heads)
    lo, hi, projective = _spans(heads, order)
    if projective:
        return _encode(heads, children, lo, hi), list(heads), 0
    heads, lifts = _lift(heads, children, strict)
    children, order = _checked(heads)
    lo, hi, _ = _spans(heads, order)
    return _encode(heads, children, lo, hi), heads, lifts


def _encode(heads: Sequence[int], children: List[List[int]], lo: List[int], hi: List[int]) -> List[Tag]:
    """:func:`encode` of a checked projective tree, given its dependents and subtree spans; O(n).

    The chain of internal nodes of head ``h``, bottom-up: its left dependents nearest first (head
    bit 1; the node sits on the gap just after the dependent's span), then its right dependents
    nearest first (head bit 0; the gap just before the span). A node is the right child of the next
    node when that one takes a left dependent, else its left child; the top node takes the side of
    ``h``'s own subtree in its parent ("L" for the sentence root).
    """
    n = len(heads)
    term = [""] * (n + 1)
    nonterm = [EOS] * (n + 1)
    for h in range(1, n + 1):
        p = heads[h - 1]
        side = "L" if p == 0 or h < p else "R"
        deps = children[h]
        if not deps:
            term[h] = "l" if side == "L" else "r"
            continue
        k = bisect_left(deps, h)  # deps[:k] left of h, deps[k:] right of h
        if k:
            term[h] = "r"
            for j in range(k - 1, 0, -1):  # the next node takes a left dependent too
                nonterm[hi[deps[j]]] = "R1"
            nonterm[hi[deps[0]]] = "L1" if k < len(deps) else side + "1"
        else:
            term[h] = "l"
        if k < len(deps):
            for j in range(k, len(deps) - 1):
                nonterm[lo[deps[j]] - 1] = "L0"
            nonterm[lo[deps[-1]] - 1] = side + "0"
    return list(zip(term[1:], nonterm[1:]))


class _Node:
    __slots__ = ("left", "right", "bit", "word")

    def __init__(self, left=None, bit=0, word=0):
        self.left, self.right, self.bit, self.word = left, None, bit, word


def decode(tags: Sequence[Tag]) -> List[int]:
    """Inverse of :func:`encode`: tag pairs -> 1-based heads (0 = root).

    Runs the hexatag transition system over ``t1 n1 ... tN``: ``l`` pushes a finished subtree,
    ``r`` completes the open node on top, ``L*`` opens a node over the finished top subtree,
    ``R*`` does the same and hangs it as right child of the open node below (one item fewer).
    Raises :class:`HexatagError` (naming the word) when the sequence encodes no tree.
    """
    n = len(tags)
    if n == 0:
        raise HexatagError("empty tag sequence")
    stack = []  # items: [root_node, open_node_or_None]
    for i, pair in enumerate(tags, 1):
        if len(pair) != 2:
            raise HexatagError(f"word {i}: expected a (terminal, non-terminal) pair, got {pair!r}")
        t, nt = pair
        leaf = _Node(word=i)
        if t == "l":
            stack.append([leaf, None])
        elif t == "r":
            if not stack or stack[-1][1] is None:
                raise HexatagError(f"word {i}: terminal 'r' but no open node awaits a right child")
            stack[-1][1].right = leaf
            stack[-1][1] = None
        else:
            raise HexatagError(f"word {i}: unknown terminal tag {t!r} (expected one of {TERMINALS})")
        if nt == EOS:
            if i != n:
                raise HexatagError(f"word {i}: EOS before the last word ({n})")
            continue
        if i == n:
            raise HexatagError(f"word {i}: the last word must carry EOS, got {nt!r}")
        if nt not in NONTERMINALS:
            raise HexatagError(f"word {i}: unknown non-terminal tag {nt!r} (expected one of {NONTERMINALS})")
        if stack[-1][1] is not None:
            raise HexatagError(f"word {i}: non-terminal {nt!r} but the left subtree is unfinished")
        node = _Node(left=stack.pop()[0], bit=int(nt[1]))
        if nt[0] == "L":
            stack.append([node, node])
        else:
            if not stack or stack[-1][1] is None:
                raise HexatagError(f"word {i}: non-terminal {nt!r} is a right child but no open node awaits it")
            stack[-1][1].right = node
            stack[-1][1] = node
    if len(stack) != 1 or stack[0][1] is not None:
        raise HexatagError(f"tags end with {len(stack)} subtrees (open node: {stack[-1][1] is not None}); "
                           "expected one finished tree")
    heads = [0] * n
    _attach(stack[0][0], heads)
    return heads


def _attach(root: _Node, heads: List[int]) -> int:
    """Fill ``heads`` from a BHT; return the lexical head of ``root`` (iterative post-order)."""
    lex = {}
    todo = [(root, False)]
    while todo:
        node, done = todo.pop()
        if node.word:
            lex[id(node)] = node.word
            continue
        if not done:
            todo.append((node, True))
            todo.append((node.right, False))
            todo.append((node.left, False))
            continue
        lh, rh = lex[id(node.left)], lex[id(node.right)]
        head, dep = (rh, lh) if node.bit else (lh, rh)
        heads[dep - 1] = head
        lex[id(node)] = head
    return lex[id(root)]

"""When each word's hexatags enter a decoder (``--tag-timing``): the one rule of which tags the
input of word ``w`` carries, which of them the tag heads choose there, and the prefix automaton
read in those units.

Word ``w`` carries ``(t_w, n_w)`` in the paper's layout (appendix A.1). Its non-terminal ``n_w``
describes the boundary between word ``w`` and word ``w+1`` (``EOS`` at the last word), so a decoder
that must choose it from the prefix guesses something about the *next* word. The timings:

* ``paper``: word ``w`` carries ``(t_w, n_w)``; the heads choose that pair (the default).
* ``nt-delay``: word ``w`` carries ``(t_w, n_{w-1})``: its terminal enters with it, the
  non-terminal of the boundary before it enters once the word after that boundary is there. Word 1
  carries ``(t_1, EOS)``: ``EOS`` stands for "nothing open before" (a start marker, not a choice).
  The last word's ``EOS`` never enters, so ``</s>`` is predicted from the text alone.
* ``delay``: word ``w`` carries word ``w-1``'s pair (both tags one word late); word 1 carries
  none, and the last word's pair never enters. The comparison for ``nt-delay``.

What the heads choose at word ``w`` (a *unit*) is exactly what word ``w`` carries, except for the
fixed parts: word 1's ``EOS`` under ``nt-delay`` (its terminal alone is chosen) and word 1 under
``delay`` (nothing is chosen). A unit is written as a pair ``(t, n)`` of the fed tags, so every
timing chooses among the same 10 :data:`~.constrained.PAIRS`.

The prefix automaton in units (:func:`advance_unit`) is the one of :mod:`.constrained` read in
another order. Its state is a stack depth (``START`` = 0 before the first word). In ``paper`` the
depth is taken after ``n_w``, as :func:`~.constrained.advance` does. In ``nt-delay`` it is taken
after ``t_w`` (a unit applies ``n_{w-1}`` then ``t_w``). In ``delay`` it is taken after word
``w-1``'s non-terminal. A unit that chooses a boundary knows a word follows it, so it may not be
``EOS`` (that boundary is not the sentence end). The sentence end is implicit under
``nt-delay`` and ``delay``: :func:`can_end` tells whether the last word's ``EOS`` (and, under
``delay``, a last pair) can close the tree.
"""
from typing import List, Optional, Sequence, Tuple

from .constrained import CLOSED, START, advance
from .tags import EOS

TIMINGS = ("paper", "nt-delay", "delay")
NONE_PAIR: Tuple[None, None] = (None, None)  # a word that carries no tags (delay: word 1)


def check_timing(timing: str) -> str:
    if timing not in TIMINGS:
        raise ValueError(f"unknown tag timing {timing!r} (expected one of {TIMINGS})")
    return timing


def timed_pairs(pairs: Sequence[Tuple[str, str]], timing: str) -> List[Tuple[Optional[str], Optional[str]]]:
    """The tags each word carries as input under ``timing``, from the sentence's word-aligned pairs
    (``(None, None)``: the word carries none)."""
    check_timing(timing)
    pairs = [tuple(p) for p in pairs]
    if timing == "paper" or not pairs:
        return pairs
    if timing == "nt-delay":
        return [(pairs[0][0], EOS)] + [(pairs[w][0], pairs[w - 1][1]) for w in range(1, len(pairs))]
    return [NONE_PAIR] + pairs[:-1]


def untimed_pairs(units: Sequence[Tuple[Optional[str], Optional[str]]], timing: str
                  ) -> List[Tuple[Optional[str], Optional[str]]]:
    """The inverse of :func:`timed_pairs`: each word's pair from what the words carried. What never
    entered is filled in where it is fixed (the last non-terminal under ``nt-delay`` is ``EOS``)
    and left ``None`` where it is not (the last pair under ``delay``)."""
    check_timing(timing)
    units = [tuple(u) for u in units]
    if timing == "paper" or not units:
        return units
    if timing == "nt-delay":
        return [(units[w][0], units[w + 1][1]) for w in range(len(units) - 1)] + [(units[-1][0], EOS)]
    return units[1:] + [NONE_PAIR]


def advance_unit(state: int, unit: Tuple[str, str], timing: str):
    """The prefix state after one more unit, or ``None`` if no valid sequence continues that way
    (see the module docstring for what the state is under each timing). ``paper`` is
    :func:`~.constrained.advance`; the other timings never close the tree (``CLOSED`` is not
    reached: the end is implicit)."""
    if timing == "paper":
        return advance(state, unit)
    t, n = unit
    if timing == "nt-delay":
        if state == START:  # word 1: EOS marks the start, the terminal opens the tree
            return 1 if (n == EOS and t == "l") else None
        if n in ("L0", "L1"):
            d = state
        elif n in ("R0", "R1") and state >= 2:
            d = state - 1
        else:  # EOS: the boundary before a word is not the sentence end
            return None
        return d + 1 if t == "l" else (d if t == "r" else None)
    check_timing(timing)
    nxt = advance(state, unit)  # delay: word w-1's pair, and word w follows it
    return None if nxt in (None, CLOSED) else nxt


def can_end(state: int, timing: str, words: int) -> bool:
    """Whether a sentence of ``words`` words whose units left ``state`` is one valid tree once its end
    fills in what never entered."""
    if timing == "paper":
        return state == CLOSED
    if timing == "nt-delay":
        return state == 1
    check_timing(timing)
    if words == 1:
        return state == START  # the one word is (l, EOS)
    return state == 1  # the last word is (r, EOS)

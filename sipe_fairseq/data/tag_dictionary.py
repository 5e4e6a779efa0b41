"""Tag dictionaries: the id layout that SiPE models rely on.

A tag dictionary is a plain fairseq :class:`~fairseq.data.Dictionary` (so ``Dictionary.load``
reads it back) laid out as::

    0 <s>   1 <pad>   2 </s>   3 <unk>   4 <notag>   5.. tags

``<notag>`` marks positions that carry no tag (continuation subwords, the appended ``</s>``).
Terminal and non-terminal tags follow in the canonical order of
:data:`~sipe_fairseq.hexatag.TERMINALS` / :data:`~sipe_fairseq.hexatag.NONTERMINALS` (never
sorted by frequency): ``l``=5 ``r``=6; ``L0``=5 ``L1``=6 ``R0``=7 ``R1``=8 ``EOS``=9. Models treat
every id below :data:`FIRST_TAG_ID` as "no tag" and classify over ``id - FIRST_TAG_ID``.
This module is the one place of that layout: the ids, the tag kinds and the tag heads' sizes
(:data:`TAG_HEADS`); the heads themselves and their log-probabilities are in
:mod:`sipe_fairseq.modules.tag_heads`.
The deprel dictionary (``--deprel``) has the same first five entries, then deprels by frequency.
"""
import os
from typing import Mapping, Optional, Tuple

from fairseq.data import Dictionary

from ..hexatag import NONTERMINALS, TERMINALS
from .dictionary import load_dictionary

NOTAG = "<notag>"
NOTAG_ID = 4
FIRST_TAG_ID = 5
TAG_KINDS: Tuple[str, ...] = ("terminal", "nonterminal")
_CLASSES = {"terminal": TERMINALS, "nonterminal": NONTERMINALS}
N_TERMINALS = len(TERMINALS)  # 2: the terminal head's classes
N_NONTERMINALS = len(NONTERMINALS)  # 5: the non-terminal head's classes
# (kind, number of classes) of each tag head, in stream order; class c is dictionary id FIRST_TAG_ID + c
TAG_HEADS: Tuple[Tuple[str, int], ...] = (("terminal", N_TERMINALS), ("nonterminal", N_NONTERMINALS))


def tag_names(kind: str) -> Tuple[str, ...]:
    """The tag strings of ``kind`` ("terminal" or "nonterminal") in id order."""
    try:
        return tuple(_CLASSES[kind])
    except KeyError:
        raise ValueError(f"unknown tag kind {kind!r} (expected one of {TAG_KINDS})") from None


def build_tag_dictionary(kind: str, counts: Optional[Mapping[str, int]] = None) -> Dictionary:
    """Dictionary for ``kind`` in the fixed layout; ``counts`` (tag or NOTAG -> n) only sets counts."""
    counts = counts or {}
    d = Dictionary()
    for sym in (NOTAG,) + tag_names(kind):
        d.add_symbol(sym, n=int(counts.get(sym, 0)))
    return d


def build_label_dictionary(counts: Mapping[str, int], notag_count: int = 0, threshold: int = -1) -> Dictionary:
    """Dictionary for free-form labels (deprels): specials, ``<notag>``, then labels sorted by
    frequency with fairseq's ``finalize`` (ties by label; no padding)."""
    ranked = Dictionary()
    for label, n in sorted(counts.items()):
        ranked.add_symbol(label, n)
    ranked.finalize(threshold=threshold, padding_factor=1)
    d = Dictionary()
    d.add_symbol(NOTAG, n=notag_count)
    for i in range(ranked.nspecial, len(ranked)):
        d.add_symbol(ranked.symbols[i], n=ranked.count[i])
    return d


def load_tag_dictionary(path: str, kind: Optional[str] = None) -> Dictionary:
    """Load a tag dictionary and verify its layout.

    ``kind`` defaults to the ``X`` of a ``dict.X.txt`` file name. For "terminal"/"nonterminal"
    the exact tag list is checked; for other kinds (e.g. "deprel") only the first five entries.
    Raises ``ValueError`` naming the file when the layout is wrong.
    """
    if kind is None:
        name = os.path.basename(path)
        if name.startswith("dict.") and name.endswith(".txt"):
            kind = name[len("dict."):-len(".txt")]
    d = load_dictionary(path)  # a malformed line: DataError (a ValueError) naming the file and line
    found = tuple(d.symbols[: FIRST_TAG_ID])
    expected = ("<s>", "<pad>", "</s>", "<unk>", NOTAG)
    if kind in _CLASSES:
        found, expected = tuple(d.symbols), expected + tag_names(kind)
    if found != expected:
        raise ValueError(
            f"{path}: not a {kind or 'tag'} dictionary in SiPE layout: expected symbols {list(expected)}, "
            f"found {list(found)}; rebuild the data directory with sipe-preprocess"
        )
    return d

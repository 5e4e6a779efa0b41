"""A sentence as the structure engine reads it: its targets, its word starts and the structure a
parse of the whole sentence gives (``given``).

Targets are ``x_1 .. x_n </s>``; the decoder's input is ``</s> x_1 .. x_{n-1}``. A word's first
subword at target index ``q`` is the input at position ``q + 1``: that input carries the word's
structure (SiPE: its tag pair; GiLT: the features of its new graph). Word starts come from the
given tag stream (a word starts where it has a tag), else from sentencepiece's U+2581 mark; with
both, a sentence where they disagree is flagged (``mismatch``: its segmentation is then not a
function of the prefix).
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch

from ..data.tag_dictionary import FIRST_TAG_ID
from ..data.words import starts_word
from ..hexatag.constrained import PAIRS
from ..hexatag.tags import NONTERMINALS, TERMINALS

PAIR_INDEX = {p: i for i, p in enumerate(PAIRS)}
WordArcs = Tuple[Sequence[int], Sequence[int]]  # per word: heads among 0..w-1, dependents among 1..w-1


@dataclass
class Sentence:
    tokens: torch.Tensor  # (n,) long: x_1 .. x_n </s>
    starts: List[int]  # target index of each word's first subword (starts[0] == 0)
    pairs: Optional[List[int]] = None  # SiPE given: pair index (hexatag.constrained.PAIRS) per word
    arcs: Optional[List[WordArcs]] = None  # GiLT given: per word (heads, dependents)
    mismatch: bool = False  # the tag stream's word starts differ from the U+2581 marks

    @property
    def n(self) -> int:
        return len(self.tokens)

    def words(self) -> List[List[int]]:
        """Token ids per word (first subword first)."""
        ids = self.tokens.tolist()[:-1]
        bounds = list(self.starts) + [len(ids)]
        return [ids[a:b] for a, b in zip(bounds, bounds[1:])]


def word_starts(tokens: torch.Tensor, terminals: Optional[torch.Tensor] = None, dictionary=None) -> List[int]:
    """Target indices of each word's first subword (``tokens`` = ``x_1 .. x_n </s>``): where the
    given tag stream has a tag, else where the piece carries U+2581. ``ValueError`` when the
    sentence does not start with a word."""
    n = len(tokens) - 1
    if terminals is not None and bool((terminals[:n] >= FIRST_TAG_ID).any()):
        starts = (terminals[:n] >= FIRST_TAG_ID).nonzero().squeeze(-1).tolist()
    elif dictionary is not None:
        starts = [i for i in range(n) if starts_word(dictionary[int(tokens[i])])]
    else:
        raise ValueError("no tags and no dictionary: cannot find word starts")
    if n < 1 or not starts or starts[0] != 0:
        raise ValueError(f"sentence of {n} tokens does not start with a word (word starts {starts[:5]})")
    return starts


def given_pairs(terminals: torch.Tensor, nonterminals: torch.Tensor, starts: Sequence[int]) -> List[int]:
    """The given pair index of each word from aligned tag-id streams."""
    return [PAIR_INDEX[(TERMINALS[int(terminals[q]) - FIRST_TAG_ID], NONTERMINALS[int(nonterminals[q]) - FIRST_TAG_ID])]
            for q in starts]


def sentence_of(index: int, tokens: torch.Tensor, terminals=None, nonterminals=None, dictionary=None, eos: int = 2,
            arcs: Optional[List[WordArcs]] = None) -> Sentence:
    """One :class:`Sentence` from ``(tokens, terminals, nonterminals)`` (tags may be None when
    ``dictionary`` marks word starts); ``arcs``: GiLT's given graph. ``ValueError`` naming the
    sentence for a malformed one."""
    tokens = tokens.long()
    n = len(tokens)
    if n < 2 or int(tokens[-1]) != eos:
        raise ValueError(f"sentence {index}: expected tokens x_1 .. x_n </s> with n >= 1, got {tokens.tolist()[:12]}")
    try:
        starts = word_starts(tokens, terminals, dictionary)
    except ValueError as e:
        raise ValueError(f"sentence {index}: {e}") from e
    start_set = set(starts)
    mismatch = terminals is not None and dictionary is not None and any(
        starts_word(dictionary[int(tokens[q])]) != (q in start_set) for q in range(n - 1))
    pairs = None
    if terminals is not None and nonterminals is not None and bool((terminals[:n - 1] >= FIRST_TAG_ID).any()):
        pairs = given_pairs(terminals, nonterminals, starts)
    if arcs is not None and len(arcs) != len(starts):
        raise ValueError(f"sentence {index}: a graph of {len(arcs)} words for {len(starts)} encoded words")
    return Sentence(tokens, starts, pairs, None if arcs is None else [(list(h), list(d)) for h, d in arcs], mismatch)


def max_positions(model) -> Optional[int]:
    """The positions rule, the one place it is written: the most positions ``model`` accepts (the smallest of
    what its ``max_positions()`` returns, a number or a tuple), or None when it declares no limit."""
    try:
        limit = model.max_positions()
    except (AttributeError, NotImplementedError):  # a model (or a wrapper) that declares nothing
        return None
    if isinstance(limit, (tuple, list)):
        limit = min((x for x in limit if x is not None), default=None)
    return int(limit) if limit else None


def too_long(model, positions: int) -> Optional[str]:
    """Why ``model`` cannot score a sentence of ``positions`` input positions in one pass (more than
    :func:`max_positions`), or None. A decoder's sentence ``x_1 .. x_n </s>`` takes ``n + 1`` positions, a
    masked-LM encoder's ``n + 2`` (``<s> x_1 .. x_n </s>``)."""
    limit = max_positions(model)
    if limit is not None and positions > limit:
        return f"too long: {positions} tokens > the model's {limit} positions"
    return None

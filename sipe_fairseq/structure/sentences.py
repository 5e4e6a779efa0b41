"""A sentence as the structure engine reads it: its targets, its word starts and the structure a
parse of the whole sentence gives (``given``).

Targets are ``x_1 .. x_n </s>``; the decoder's input is ``</s> x_1 .. x_{n-1}``. A word's first
subword at target index ``q`` is the input at position ``q + 1``: that input carries the word's
structure (SiPE: its tag pair; GiLT: the features of its new graph). Word starts come from the
given tag stream (a word starts where it has a tag), else from sentencepiece's U+2581 mark; with
both, a sentence where they disagree is flagged (``mismatch``: its segmentation is then not a
function of the prefix).

A sentence may carry a context (:func:`with_context`): whole sentences before it, fed but not counted.
Its ``tokens`` are then the context's sentences and the text, each ending in ``</s>``, as the training
blocks of ``--sample-break-mode complete`` hold several sentences joined by ``</s>``; ``context_end``
is the target index of the text's first token, and ``counted_from`` the first target counted (the same,
or 0 to count the context too). The structure starts afresh at every inner ``</s>``, as
training gave every sentence its own structure (SiPE: each sentence's own hexatags, the heads at the
``</s>`` before a sentence predict its first word's tags, the prefix automaton restarts from the empty
prefix without counting a restart; GiLT: each sentence its own graph with its own root, earlier
sentences' positions carry no graph features, as positions of another sentence in a training block).
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch

from ..data.tag_dictionary import FIRST_TAG_ID
from ..data.words import starts_word
from ..hexatag.constrained import PAIRS
from ..hexatag.tags import NONTERMINALS, TERMINALS

PAIR_INDEX = {p: i for i, p in enumerate(PAIRS)}
CONTEXT_SOURCES = ("a sentence with a context (or an uncounted prefix) is scored under self or mix:K (the structure "
                   "chosen from the whole prefix), or by a model without structure")
WordArcs = Tuple[Sequence[int], Sequence[int]]  # per word: heads among 0..w-1, dependents among 1..w-1


@dataclass
class Sentence:
    tokens: torch.Tensor  # (n,) long: x_1 .. x_n </s>
    starts: List[int]  # target index of each word's first subword (starts[0] == 0)
    pairs: Optional[List[int]] = None  # SiPE given: pair index (hexatag.constrained.PAIRS) per word
    arcs: Optional[List[WordArcs]] = None  # GiLT given: per word (heads, dependents)
    mismatch: bool = False  # the tag stream's word starts differ from the U+2581 marks
    counted_from: int = 0  # target index of the first counted target: those before are fed, not counted
    context_dropped: int = 0  # context sentences left out to fit the model's positions (:func:`with_context`)
    context_end: int = 0  # target index after the context's last </s>: its </s> before it end sentences (docstring)

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def first_word(self) -> int:
        """Index (0-based) of the text's first word: the number of the context's words."""
        return sum(1 for q in self.starts if q < self.counted_from)

    @property
    def context_sentences(self) -> int:
        """Sentences of the context that are fed (each ends in ``</s>``)."""
        if not self.context_end:
            return 0
        eos = int(self.tokens[-1])
        return int((self.tokens[: self.context_end] == eos).sum())

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


def with_context(text: Sentence, context: Sequence[Sentence], limit: Optional[int] = None,
                 count_context: bool = False) -> Sentence:
    """``text`` after the whole sentences ``context`` (oldest first), fed but not counted (module docstring).
    ``limit``: the model's positions (:func:`max_positions`; a decoder feeds ``</s>`` and every target but
    the last, as many positions as tokens): the most recent whole context sentences that fit with the text
    are kept, the others left out and counted in ``context_dropped`` (never a cut inside a sentence); a text
    alone longer than ``limit`` is a ``ValueError`` (sentences are never cut). An empty context is no context:
    ``text`` itself. The combined sentence holds no given structure (a context is scored under the sources
    that choose the structure from the prefix). ``count_context``: the context's tokens are counted too (the
    whole ``log p(context + text)``, sentence by sentence as one input)."""
    if limit is not None and text.n > limit:
        raise ValueError(f"too long: {text.n} tokens > the model's {limit} positions; sentences are never cut")
    if text.context_end:
        raise ValueError("the text already has a context")
    eos = int(text.tokens[-1])
    kept: List[Sentence] = []
    total = text.n
    for c in reversed(list(context)):
        if c.context_end or c.n < 2 or int(c.tokens[-1]) != eos or (c.tokens[:-1] == eos).any():
            raise ValueError("a context sentence must be one sentence x_1 .. x_n </s> without a context of its own")
        if limit is not None and total + c.n > limit:
            break
        kept.append(c)
        total += c.n
    kept.reverse()
    dropped = len(context) - len(kept)
    if not kept:
        return text if not dropped else Sentence(text.tokens, list(text.starts), text.pairs, text.arcs, text.mismatch,
                                                 context_dropped=dropped)
    tokens, starts, offset = [], [], 0
    for s in kept + [text]:
        tokens.append(s.tokens.long())
        starts += [q + offset for q in s.starts]
        offset += s.n
    end = offset - text.n
    return Sentence(torch.cat(tokens), starts, None, None, any(s.mismatch for s in kept + [text]),
                    counted_from=0 if count_context else end, context_dropped=dropped, context_end=end)


def after_prefix(continuation: Sentence, prefix: Sentence, limit: Optional[int] = None) -> Sentence:
    """One sentence: the words of ``prefix`` then those of ``continuation`` (each given as a sentence ``.. </s>``;
    the prefix's ``</s>`` dropped), only the continuation's targets counted (``counted_from``; no inner ``</s>``, so
    the structure runs on through the prefix's words). ``ValueError`` when the whole is longer than ``limit``
    (never cut). A prefix of no words is no prefix."""
    if prefix is None or prefix.n < 2:
        return continuation
    if prefix.context_end or prefix.counted_from or continuation.context_end or continuation.counted_from:
        raise ValueError("a prefix and its continuation are plain sentences")
    tokens = torch.cat([prefix.tokens[:-1].long(), continuation.tokens.long()])
    if limit is not None and len(tokens) > limit:
        raise ValueError(f"too long: a prefix and its continuation of {len(tokens)} tokens > the model's {limit} "
                         "positions; sentences are never cut")
    m = prefix.n - 1
    return Sentence(tokens, list(prefix.starts) + [q + m for q in continuation.starts], None, None,
                    prefix.mismatch or continuation.mismatch, counted_from=m)

"""The structure engine's next-token distributions, for the Python interface (docs/python.md): rank and entropy of
every scored token, the word-boundary mass of the beginning-of-word correction, and the next-token distribution
after a prefix (``predict``).

:func:`run_engine` scores sentences through the engine's entry point
:func:`~sipe_fairseq.structure.scoring.score_sentences` with an observer that reads, through the engine's hooks
(:attr:`.policy.StructurePolicy.distribution_sink`, :attr:`.search._Search.observe`, ``plain_scores(observe=)``),
the full log-softmax that each target's log-probability is gathered from; the returned numbers are the engine's
own (a worker's observations are sent back with its batch's scores). Under ``mix:K`` the distribution at target ``t`` is
the mixture ``q_K(. | x_<t) = sum_S w_S p(. | x_<t, S)``, ``w_S`` the live hypotheses' posterior given the
prefix (:mod:`.search`), so that its entry at ``x_t`` is the target's probability.

The word-boundary mass at target ``t`` is ``B_t = P(x_t is word-initial or </s> | x_<t)``: the symbols that start
a word are :func:`~sipe_fairseq.data.words.word_start_mask`'s without the specials (a piece with SentencePiece's
U+2581 mark; every symbol of ``--no-split`` data), ``</s>`` added; ``<unk>`` starts no word.
"""
import heapq
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch

from ..structure.policy import scatter_logsumexp
from ..structure.scoring import score_sentences
from ..structure.sentences import Sentence

LN2 = math.log(2)
MEASURES = ("rank", "entropy")


@dataclass
class Observed:
    """What the engine's distributions said of one sentence, per target (None where not computed):
    ``log_boundary`` (natural log of ``B_t``), ``entropy`` (bits), ``rank`` (1 + the number of symbols more
    probable than the target), ``last``: the whole distribution (log-probs, (V,) float64) at the last target."""
    log_boundary: List[Optional[float]]
    entropy: List[Optional[float]]
    rank: List[Optional[int]]
    last: Optional[torch.Tensor] = None


@dataclass
class _Wanted:
    boundary: torch.Tensor  # (V,) bool: word-initial symbols and </s>
    measures: Sequence[str] = ()
    keep_last: bool = False


class _Observer:
    """Collects :class:`Observed` per sentence from the engine's three paths, a batch of distributions at a time."""

    def __init__(self, sentences: Sequence[Sentence], wanted: _Wanted):
        self.wanted = wanted
        self.index = {id(s): i for i, s in enumerate(sentences)}
        self.out = [Observed([None] * s.n, [None] * s.n, [None] * s.n) for s in sentences]
        self.every = bool(wanted.measures)

    def collect(self, indices: Sequence[int]) -> List[Observed]:
        """What was read of the sentences ``indices`` (a worker's batch, sent back to the parent)."""
        return [self.out[i] for i in indices]

    def merge(self, indices: Sequence[int], observed: Sequence[Observed]) -> None:
        """A worker's :meth:`collect` in this process's observer."""
        for i, o in zip(indices, observed):
            self.out[i] = o

    def _targets(self, s: Sentence) -> List[int]:
        """The targets of ``s`` to observe: every one with measures, else those that open a word and ``</s>``."""
        return list(range(s.n)) if self.every else sorted(set(s.starts) | {s.n - 1})

    def record(self, sentences: Sequence[Sentence], ts: Sequence[int], targets: torch.Tensor, lp: torch.Tensor) -> None:
        """``lp``: (M, V) float64 log-probs of target ``ts[m]`` (the symbol ``targets[m]``) of ``sentences[m]``."""
        log_b = torch.logsumexp(lp[:, self.wanted.boundary.to(lp.device)], 1).tolist()
        entropy = rank = None
        if "entropy" in self.wanted.measures:
            p = lp.exp()
            entropy = (-torch.where(p > 0, p * lp, torch.zeros_like(p)).sum(1) / LN2).tolist()
        if "rank" in self.wanted.measures:
            picked = lp.gather(1, targets.to(lp.device)[:, None])
            rank = (1 + (lp > picked).sum(1)).tolist()
        for m, (s, t) in enumerate(zip(sentences, ts)):
            obs = self.out[self.index[id(s)]]
            obs.log_boundary[t] = log_b[m]
            if entropy is not None:
                obs.entropy[t] = entropy[m]
            if rank is not None:
                obs.rank[t] = int(rank[m])
            if self.wanted.keep_last and t == s.n - 1:
                obs.last = lp[m].detach().cpu().clone()

    # -------------------------------------------------------------- the three paths
    def on_search(self, searcher, t: int, lprobs: torch.Tensor) -> None:
        """Every row's log-softmax at target ``t``; a beam's sentences get the mixture over their rows."""
        mask = getattr(searcher, "toolkit_targets", None)  # (S, T) bool: the targets to observe, made once a search
        if mask is None:
            mask = torch.zeros(searcher.S, searcher.T, dtype=torch.bool)
            for i, s in enumerate(searcher.batch):
                mask[i, self._targets(s)] = True
            searcher.toolkit_targets = mask
        row_sent = searcher.row_sent
        wanted = mask[:, t].clone()
        live = torch.zeros(searcher.S, dtype=torch.bool)
        live[row_sent] = True
        sents = (wanted & live).nonzero().squeeze(1)
        if not len(sents):
            return
        rows = wanted[row_sent].nonzero().squeeze(1)
        lp = lprobs[rows.to(lprobs.device)].double().cpu()
        if searcher.branch:  # q_K(. | x_<t): the rows' predictions weighted by their share of the prefix mass
            weight = searcher.score - scatter_logsumexp(searcher.score, row_sent, searcher.S)[row_sent]
            mixed = torch.zeros(searcher.S, lp.size(1), dtype=torch.float64)
            mixed.index_add_(0, row_sent[rows], (lp + weight[rows][:, None]).exp())
            dist = mixed[sents].log()
        else:  # one row per sentence
            at = torch.full((searcher.S,), -1, dtype=torch.long)
            at[row_sent[rows]] = torch.arange(len(rows))
            dist = lp[at[sents]]
        self.record([searcher.batch[s] for s in sents.tolist()], [t] * len(sents), searcher.tgt[sents, t], dist)

    def on_rows(self, batch: Sequence[Sentence], lprobs: torch.Tensor) -> None:
        """Full forwards: (B, T, V) log-probs, row ``i`` sentence ``batch[i]``'s targets."""
        for i, s in enumerate(batch):
            ts = self._targets(s)
            self.record([s] * len(ts), ts, s.tokens[ts], lprobs[i, ts].double().cpu())


def run_engine(model, sentences: Sequence[Sentence], source, options, eos: int, pad: int, boundary: torch.Tensor,
               measures: Sequence[str] = (), keep_last: bool = False):
    """``(scores, observed)``: each sentence's :class:`~sipe_fairseq.structure.record.SentenceScore` under
    ``source`` from the engine's entry point (:func:`~sipe_fairseq.structure.scoring.score_sentences`, with this
    module's observer), and its :class:`Observed` (``boundary``: (V,) bool, the symbols that end the
    word before them; ``measures``: of :data:`MEASURES`; ``keep_last``: the whole distribution at the last target)."""
    observer = _Observer(sentences, _Wanted(boundary, tuple(measures), keep_last))
    scores = score_sentences(model, sentences, source, options, eos, pad, options.batch_sentences, observer=observer)
    return scores, observer.out


def bow_word_logprobs(token_logprobs: Sequence[float], starts: Sequence[int], log_boundary: Sequence[float]):
    """The beginning-of-word correction (Pimentel & Meister 2024, "How to compute the probability of a word",
    eq. for beginning-of-word marking tokenizers; Oh & Schuler 2024): word ``i`` of pieces ``s_i`` after the
    context ``C_{i-1}`` (the pieces of words ``1 .. i-1``) has

        log p(w_i | C_{i-1}) = log p(s_i | C_{i-1}) + log B(C_i) - log B(C_{i-1}),

    ``B(C) = P(next token is word-initial or </s> | C)`` (the word ends only where the next token opens a word or
    the sentence ends); ``B(C_0)`` is the first target's (the model's distribution after ``</s>``, its BOS), so
    every position's words and ``</s>`` sum to at most one; the end of the sentence is an outcome of the last
    context, ``log p(</s> | C_n) - log B(C_n)``. Returns ``(word log-probs, end log-prob, log B(C_0) .. log B(C_n))``;
    ``sum(words) + end + log B(C_0) == sum(token_logprobs)`` (the telescoping product)."""
    n = len(token_logprobs)
    bounds = list(starts) + [n - 1]
    logb = [float(log_boundary[b]) for b in bounds]
    words = [math.fsum(token_logprobs[a:b]) + logb[i + 1] - logb[i] for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    return words, float(token_logprobs[n - 1]) - logb[-1], logb


def next_words(extend, first: torch.Tensor, log_b0: float, word_initial: torch.Tensor, continuation: torch.Tensor,
               k: int, budget: int):
    """The ``k`` most probable next words after a context whose next-token log-probs are ``first`` (V,), exact by
    best-first search over their pieces: a word is a word-initial piece then pieces that are not (``continuation``),
    of probability ``p(pieces) B(context + pieces) / B(context)`` (:func:`bow_word_logprobs`); every word that
    extends pieces ``s`` has at most ``p(s) / B(context)``, so the search stops once the ``k``-th word found beats
    every open ``s``. ``extend(list of piece-id lists)`` -> per list ``(log B after it, (V,) next-token log-probs)``.
    Returns ``(words [(piece ids, log-prob)], exact)``: ``exact`` False when ``budget`` expansions were not
    enough (the words are then the best found)."""
    if budget <= 0:
        return [], False
    ids = word_initial.nonzero().squeeze(1)
    heap = [(-lp, (a,)) for a, lp in zip(ids.tolist(), first[ids].tolist()) if math.isfinite(lp)]
    heapq.heapify(heap)
    found: List[tuple] = []  # (log-prob, pieces), kept sorted best first, at most k
    expanded = 0
    cont_ids = continuation.nonzero().squeeze(1)
    while heap:
        bound = -heap[0][0] - log_b0
        if len(found) == k and found[-1][0] >= bound:
            return [(list(p), lp) for lp, p in found], True
        if expanded >= budget:
            return [(list(p), lp) for lp, p in found], False
        batch = [heapq.heappop(heap) for _ in range(min(len(heap), 16))]
        expanded += len(batch)
        for (neg, pieces), (log_b, dist) in zip(batch, extend([list(p) for _, p in batch])):
            word = -neg + log_b - log_b0
            found.append((word, pieces))
            found.sort(key=lambda x: -x[0])
            del found[k:]
            floor = found[-1][0] + log_b0 if len(found) == k else -math.inf
            for c, lp_c in zip(cont_ids.tolist(), dist[cont_ids].tolist()):
                lp = -neg + lp_c
                if lp > floor and math.isfinite(lp):
                    heapq.heappush(heap, (-lp, pieces + (c,)))
    return [(list(p), lp) for lp, p in found], True

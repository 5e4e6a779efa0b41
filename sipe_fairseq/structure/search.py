"""The one word-synchronous search over structures from the prefix, for every family, a batch of
sentences at a time.

Every live hypothesis ("row") of every sentence of the batch goes through one decoder call per
input position, through the KV cache; fairseq's ``reorder_incremental_state`` follows the rows as
they branch, are pruned and finish (a sentence's rows leave the batch after its ``</s>``). At the
input that is word ``w``'s first subword, each row of that sentence gets word ``w``'s structure
(:meth:`~.policy.StructurePolicy.expand`):

* ``given``: the forced path (the parse's structure); ``self``: the policy's best candidate (a
  function of the prefix: the perplexity is exact); ``beam:K``: every candidate, ranked as the
  family ranks (``prune_before``: SiPE keeps the top K of a word's hypotheses when the next word
  starts, after the look-ahead of every position that reads the word's tags, and drops a
  hypothesis whose tree is closed when another word follows; GiLT keeps the top K children by
  score plus ``log pi(c)`` when they are made). The final hypotheses are ranked once more after
  ``</s>``;
  ``mix:K``: the same beam, read as a language model: target ``t``'s probability is the mixture of
  the live hypotheses' predictions, each weighted by its share of their summed ``p(x_<t, S)``
  (the word-synchronous beam's prefix probability ratio). The beam is a function of the prefix and
  every mixture sums to one over the vocabulary, so the product is a normalized ``q_K(x)``: its
  perplexity is exact and comparable with a model without structure; with K covering every
  structure it is the marginal ``sum_S p(x, S)``.

The policy's ``mass`` P < 1 (``--tags-mass``) makes every ranking adaptive: per sentence the best
hypotheses until their share of the ranked ones' summed ``p(x_<t, S)`` reaches P, at least one, at
most K (:func:`~.policy.top_per_group`); the ranking still reads only the prefix, so ``mix:K`` stays
normalized. Each result's ``extra`` counts the work: ``positions`` (decoder positions run: its rows,
summed over steps) and ``live_hypotheses`` (the hypotheses kept at each word's ranking, summed over
its words: SiPE ranks word w's at word w+1's first subword or after ``</s>``, GiLT when they are made).

A row's score is ``log p(x_<=t | S) + sum of its structure costs``. For ``beam:K``, the per-token
numbers are the increments of the running bound ``log Z_t`` (``Z_t`` = the summed ``p(x_<=t, S)``
of the live hypotheses after target ``t``; mass pruned at a word is charged to the target before
it), so they sum to the sentence's bound ``log sum_beam p(x, S)``.
"""
from typing import List, Optional, Sequence

import torch

from .policy import StructurePolicy, scatter_logsumexp, top_per_group
from .record import SentenceScore, position_types
from .sentences import Sentence
from .sources import Source


def _prefix_logp(per_token: Sequence[float], types: Sequence[str]) -> List[float]:
    """The prefix log-probability after each word (before the next word's first subword) and after ``</s>``."""
    cum = torch.tensor(per_token, dtype=torch.float64).cumsum(0).tolist()
    n = len(types)
    return [cum[t] for t in range(n) if t + 1 < n and types[t + 1] in ("word_initial", "eos")] + [cum[-1]]


@torch.no_grad()
def search(policy: StructurePolicy, batch: Sequence[Sentence], source: Source, eos: int,
           keep_trace: bool = False) -> List[SentenceScore]:
    """Score ``batch`` under ``source`` (module docstring); one :class:`SentenceScore` per sentence."""
    # longest first: the sentences that finish are the last rows, which a reorder drops without a copy
    desc = sorted(range(len(batch)), key=lambda i: -batch[i].n)
    out = _Search(policy, [batch[i] for i in desc], source, eos, keep_trace).run()
    back: List[Optional[SentenceScore]] = [None] * len(batch)
    for j, i in enumerate(desc):
        back[i] = out[j]
    return back


class _Search:
    """The state of one batch's search: per sentence (S) its inputs and running numbers, per row
    (hypothesis) its sentence, score, per-target LM log-probs and per-word structure costs. The
    methods advance it one input position at a time (:meth:`run`)."""

    def __init__(self, policy: StructurePolicy, batch: Sequence[Sentence], source: Source, eos: int, keep_trace: bool):
        self.policy, self.batch, self.source, self.keep_trace = policy, batch, source, keep_trace
        self.mode, self.k = source.mode, source.k
        self.branch = source.branches
        self.mass = float(getattr(policy, "mass", 1.0)) if self.branch else 1.0
        S = self.S = len(batch)
        self.n = torch.tensor([s.n for s in batch])
        self.T, W = int(self.n.max()), max(len(s.starts) for s in batch)
        self.tgt = torch.full((S, self.T), eos, dtype=torch.long)
        self.word_at = torch.zeros(S, self.T + 1, dtype=torch.long)  # word number (1-based) whose first subword is input t
        for i, s in enumerate(batch):
            self.tgt[i, :s.n] = s.tokens
            self.word_at[i, torch.tensor(s.starts) + 1] = torch.arange(1, len(s.starts) + 1)
        self.inp = torch.cat([torch.full((S, 1), eos, dtype=torch.long), self.tgt[:, :-1]], 1)
        policy.begin(S, self.T, W, [policy.given_of(s) for s in batch])
        # per row (reordered with the rows)
        self.row_sent = torch.arange(S)
        self.score = torch.zeros(S, dtype=torch.float64)
        self.lm = torch.zeros(S, self.T, dtype=torch.float64)
        self.cost = torch.zeros(S, W, dtype=torch.float64)
        # per sentence
        self.z_last = torch.zeros(S, dtype=torch.float64)
        self.running = torch.zeros(S, self.T, dtype=torch.float64)
        self.mixed = torch.zeros(S, self.T, dtype=torch.float64)  # mix:K, log q_K(x_t | x_<t)
        self.positions = torch.zeros(S, dtype=torch.long)  # decoder positions run (its rows, summed over steps)
        self.live = torch.zeros(S, dtype=torch.long)  # hypotheses kept at each word's ranking, summed over words
        self.traces: List[list] = [[] for _ in range(S)]
        self.results: List[Optional[SentenceScore]] = [None] * S

    def run(self) -> List[SentenceScore]:
        for t in range(self.T):
            self.start_words(t)
            self.advance(t)
            self.finish(t)
        return self.results

    # ---------------------------------------------------------------- the rows
    def reorder(self, order: torch.Tensor) -> None:
        """The rows become ``order`` (indices into the current rows), here and in the policy (nothing to do
        when every row keeps its place: ``given`` and ``self``, one child per row)."""
        if len(order) == len(self.row_sent) and bool((order == torch.arange(len(order))).all()):
            return
        self.row_sent, self.score, self.lm, self.cost = (
            self.row_sent[order], self.score[order], self.lm[order], self.cost[order])
        self.policy.reorder(order.to(self.policy.device))

    def record(self, rows: torch.Tensor, values: torch.Tensor, target: int) -> None:
        """The running bound of the sentences of ``rows`` after ``target``, from the rows' scores ``values``."""
        sents = torch.unique(self.row_sent[rows])
        z = scatter_logsumexp(values, self.row_sent[rows], self.S)[sents]
        self.running[sents, target] = z - self.z_last[sents]
        self.z_last[sents] = z
        if self.keep_trace:
            by = {}
            for r, v in zip(rows.tolist(), values.tolist()):
                by.setdefault(int(self.row_sent[r]), []).append((self.policy.labels(r), v))
            for s_, entries in by.items():
                self.traces[s_].append(entries)

    def rank(self, rows: torch.Tensor, values: torch.Tensor, target: int, counted: Optional[torch.Tensor]) -> torch.Tensor:
        """Positions in ``rows`` of the hypotheses a beam keeps (per sentence the best, at most K, until
        their share of the sentence's summed ``exp(values)`` reaches the mass P), recorded in the running
        bound after ``target``; ``counted`` (S,) bool: the sentences whose kept hypotheses count as a
        word's live hypotheses (None: none)."""
        keep = top_per_group(self.row_sent[rows], values, self.k, self.mass)
        self.record(rows[keep], values[keep], target)
        if counted is not None:
            self.live += torch.bincount(self.row_sent[rows[keep]], minlength=self.S) * counted
        return keep

    # ---------------------------------------------------------------- one input position
    def start_words(self, t: int) -> None:
        """Input ``t`` is a word's first subword in some sentences: their rows branch (or take their
        structure) for that word, ranked before (SiPE) or after (GiLT) the branching."""
        policy, word_at, row_sent = self.policy, self.word_at[:, t], self.row_sent
        events = (self.n > t) & (word_at > 0)
        if not bool(events.any()):
            return
        is_ev = events[row_sent]
        ev_rows = is_ev.nonzero().squeeze(1)
        if self.branch and policy.prune_before:  # rank the previous word's hypotheses (none before word 1)
            closed = policy.closed(ev_rows)
            if closed is not None:  # a closed tree cannot take the next word; unless nothing else is left
                open_count = torch.zeros(self.S, dtype=torch.long).index_add_(0, row_sent[ev_rows], (~closed).long())
                ev_rows = ev_rows[~closed | (open_count[row_sent[ev_rows]] == 0)]
            ev_rows = ev_rows[self.rank(ev_rows, self.score[ev_rows], t - 1, word_at > 1)]
        parent, c, payload = policy.expand(ev_rows, word_at[row_sent[ev_rows]], t, self.inp[row_sent[ev_rows], : t + 1],
                                           self.mode)
        child = ev_rows[parent]
        pick = torch.arange(len(child))
        if self.branch and not policy.prune_before:
            pick = self.rank(child, self.score[child] + c, t - 1, events)
        rest = (~is_ev).nonzero().squeeze(1)
        src = torch.cat([rest, child[pick]])
        perm = torch.sort(row_sent[src], stable=True).indices  # rows stay grouped by sentence
        self.reorder(src[perm])
        new = (perm >= len(rest)).nonzero().squeeze(1)  # the children's new rows
        chosen = pick[perm[new] - len(rest)]
        self.cost[new, word_at[self.row_sent[new]] - 1] = c[chosen]
        self.score[new] += c[chosen]
        policy.apply(new, payload, chosen, t)

    def advance(self, t: int) -> None:
        """Every row runs input ``t`` and scores target ``t``; for a beam, the running bound and the mixture."""
        row_sent, live = self.row_sent, self.n > t
        step = self.policy.step(t, self.inp[row_sent, : t + 1].to(self.policy.device), self.word_at[row_sent, t] > 0,
                                self.tgt[row_sent, t])
        self.positions += torch.bincount(row_sent, minlength=self.S)
        if self.branch:  # the mixture over the live rows, weighted by their scores (every current row is live)
            before = scatter_logsumexp(self.score, row_sent, self.S)
            self.mixed[live, t] = (scatter_logsumexp(self.score + step, row_sent, self.S) - before)[live]
        self.lm[:, t] = step
        self.score += step
        if self.branch:
            later = live & (self.n - 1 > t) & (self.word_at[:, t + 1] == 0)  # no ranking before the next target
            rows = later[row_sent].nonzero().squeeze(1)
            if len(rows):
                self.record(rows, self.score[rows], t)

    def finish(self, t: int) -> None:
        """The sentences whose ``</s>`` was target ``t``: their final hypotheses ranked once more, their
        results made, their rows dropped."""
        ending = (self.n > t) & (self.n - 1 == t)
        if not bool(ending.any()):
            return
        end_rows = ending[self.row_sent].nonzero().squeeze(1)
        if self.branch:  # SiPE: the last word's ranking; GiLT ranked it when it was made
            end_rows = end_rows[self.rank(end_rows, self.score[end_rows], t, ending if self.policy.prune_before else None)]
        groups = {}
        for r in end_rows.tolist():
            groups.setdefault(int(self.row_sent[r]), []).append(r)
        for s_, rows_s in groups.items():
            result = _result(self.policy, self.batch[s_], self.source, rows_s, self.lm, self.cost, self.score,
                             self.running[s_], self.z_last[s_], self.traces[s_] if self.keep_trace else None,
                             self.mixed[s_])
            words = len(self.batch[s_].starts)
            result.extra.update(positions=int(self.positions[s_]),
                                live_hypotheses=int(self.live[s_]) if self.branch else words)
            self.results[s_] = result
        keep = (~ending[self.row_sent]).nonzero().squeeze(1)
        if len(keep) < len(self.row_sent):
            self.reorder(keep)


def _result(policy, sentence: Sentence, source: Source, rows: List[int], lm, cost, score, running, z, trace, mixed):
    best = rows[0]
    n, words = sentence.n, len(sentence.starts)
    lm_best = lm[best, :n].tolist()
    costs = cost[best, :words].tolist()
    types = position_types(n, sentence.starts)
    info = policy.result(best, words)
    extra = dict(info.get("extra", {}))
    logprob, per_token = source.read(lm_best, running[:n].tolist(), mixed[:n].tolist(), float(z))
    if source.branches:
        extra["hypotheses"] = len(rows)
        extra["beam"] = [(policy.labels(r), float(score[r])) for r in rows]
        extra["best_lm"] = lm_best
        if trace is not None:
            extra["trace"] = trace[1:] if policy.prune_before else trace
    else:
        extra["hypotheses"] = 1
    extra["prefix_logp"] = _prefix_logp(per_token, types)
    extra["word_start_mismatch"] = sentence.mismatch
    return SentenceScore(str(source), logprob, list(per_token), types, info.get("tags", []), costs, info["complete"],
                         sum(lm_best) + sum(costs), info.get("restarts", 0), extra)


def plain_scores(model, batch: Sequence[Sentence], source: Source, eos: int, pad: int, max_tokens: int = 8192
                 ) -> List[SentenceScore]:
    """A model without structure: one full forward per chunk of sentences, the same under every source."""
    out = []
    decoder = getattr(model, "decoder", model)
    for chunk in _chunks(batch, max_tokens):
        width = max(s.n for s in chunk)
        src = torch.full((len(chunk), width), pad, dtype=torch.long)
        for i, s in enumerate(chunk):
            src[i, 0] = eos
            src[i, 1:s.n] = s.tokens[:-1]
        dev = next(model.parameters()).device
        logits, extra = model(src.to(dev))
        targets = torch.cat([src[:, 1:], torch.full((len(chunk), 1), pad, dtype=torch.long)], 1)
        for i, s in enumerate(chunk):
            targets[i, s.n - 1] = s.tokens[-1]
        if getattr(decoder, "adaptive_softmax", None) is None:
            picked = logits.gather(-1, targets[..., None].to(logits.device)).squeeze(-1)
            lprobs = (picked.double() - torch.logsumexp(logits, -1).double()).cpu()
        else:
            lprobs = model.get_normalized_probs((logits, extra), log_probs=True).double()
            lprobs = lprobs.gather(-1, targets[..., None].to(lprobs.device)).squeeze(-1).cpu()
        for i, s in enumerate(chunk):
            lm = lprobs[i, : s.n].tolist()
            out.append(SentenceScore(str(source), sum(lm), lm, position_types(s.n, s.starts), [], [], False, sum(lm),
                                     extra={"hypotheses": 1, "word_start_mismatch": s.mismatch, "positions": s.n,
                                            "live_hypotheses": len(s.starts),
                                            "prefix_logp": _prefix_logp(lm, position_types(s.n, s.starts))}))
    return out


def _chunks(batch: Sequence[Sentence], max_tokens: int):
    i = 0
    while i < len(batch):
        width, j = batch[i].n, i + 1
        while j < len(batch) and (j + 1 - i) * max(width, batch[j].n) <= max_tokens:
            width = max(width, batch[j].n)
            j += 1
        yield batch[i:j]
        i = j



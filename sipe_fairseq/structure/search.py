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
normalized. SiPE's ``pair_mass`` Q < 1 (``--tags-pair-mass``) prunes the children a word's expansion
makes the same way (:func:`keep_by_mass`): per sentence the best children by ``p(x_<t, S)`` times their
pair's probability, until their share of the sentence's children's summed mass reaches Q, at least one, in
place of (or after) a fixed M pairs per hypothesis (``--tags-top-pairs``); it reads the prefix only too and
is not recorded in the running bound (``beam:K`` charges the pruned mass to the word's first target, with
the pairs' costs). Each result's ``extra`` counts the work: ``positions`` (decoder positions run: its rows,
summed over steps) and ``live_hypotheses`` (the hypotheses kept at each word's ranking, summed over
its words: SiPE ranks word w's at word w+1's first subword or after ``</s>``, GiLT when they are made).

A row's score is ``log p(x_<=t | S) + sum of its structure costs``. For ``beam:K``, the per-token
numbers are the increments of the running bound ``log Z_t`` (``Z_t`` = the summed ``p(x_<=t, S)``
of the live hypotheses after target ``t``; mass pruned at a word is charged to the target before
it), so they sum to the sentence's bound ``log sum_beam p(x, S)``.

A sentence with a context (:func:`~.sentences.with_context`) is searched whole; at each of the context's inner
``</s>`` inputs its rows start a new structure (:meth:`~.policy.StructurePolicy.boundary`, and the ``</s>`` is an
anchor as a sentence start is), and its result counts the targets from ``counted_from`` on (``self`` and
``mix:K`` only: ``ValueError`` otherwise). Under ``self`` and ``mix:K`` every word's structure step is measured
(``extra``: ``structure_surprisal``, ``structure_entropy``, ``posterior_entropy``, ``lexical_surprisal``,
docs/evaluation.md): the step's log ratio of the sentence's summed ``p(x_<=t, S)`` (its ranking, closed trees
dropped and the candidates' costs), and the entropies of the live hypotheses' shares and of their mixed decision.
"""
import math
from typing import List, Optional, Sequence

import torch

from .policy import StructurePolicy, scatter_logsumexp, top_per_group
from .record import SentenceScore, position_types
from .sentences import CONTEXT_SOURCES, Sentence
from .sources import Source

LN2 = math.log(2)


def _prefix_logp(per_token: Sequence[float], types: Sequence[str]) -> List[float]:
    """The prefix log-probability after each word (before the next word's first subword) and after ``</s>``."""
    cum = torch.tensor(per_token, dtype=torch.float64).cumsum(0).tolist()
    n = len(types)
    return [cum[t] for t in range(n) if t + 1 < n and types[t + 1] in ("word_initial", "eos")] + [cum[-1]]


@torch.no_grad()
def search(policy: StructurePolicy, batch: Sequence[Sentence], source: Source, eos: int,
           keep_trace: bool = False, observe=None, share: Optional[str] = None) -> List[SentenceScore]:
    """Score ``batch`` under ``source`` (module docstring); one :class:`SentenceScore` per sentence.
    ``observe``: the toolkit's hook (:mod:`sipe_fairseq.hub.distributions`), see :attr:`_Search.observe`.
    ``share``: sentences that begin alike share their rows until they differ (:func:`shared_forks`; sources
    that choose the structure from the prefix only): ``"all"``, as far as they are alike; ``"contexts"``, at most
    a sentence's context (:func:`~.sentences.with_context`); None: nothing is shared."""
    # longest first: the sentences that finish are the last rows, which a reorder drops without a copy
    desc = sorted(range(len(batch)), key=lambda i: -batch[i].n)
    searcher = _Search(policy, [batch[i] for i in desc], source, eos, keep_trace,
                       share=share if source.chooses else None, observed=observe is not None)
    searcher.observe = observe
    try:
        out = searcher.run()
    finally:
        policy.end()  # the batch's KV cache is freed here, not at the next batch's begin
    back: List[Optional[SentenceScore]] = [None] * len(batch)
    for j, i in enumerate(desc):
        back[i] = out[j]
    return back


class _Search:
    """The state of one batch's search: per sentence (S) its inputs and running numbers, per row
    (hypothesis) its sentence, score, per-target LM log-probs and per-word structure costs. The
    methods advance it one input position at a time (:meth:`run`)."""

    # the toolkit's hook (sipe_fairseq.hub.distributions): when set, called as ``observe(search, t, lprobs)`` at
    # every target ``t`` with every row's full next-token log-softmax (R, V) (:attr:`.policy.StructurePolicy
    # .distribution_sink`), before the rows' scores take target ``t``; nothing the search computes changes
    observe = None

    def __init__(self, policy: StructurePolicy, batch: Sequence[Sentence], source: Source, eos: int, keep_trace: bool,
                 share: Optional[str] = None, observed: bool = False):
        self.policy, self.batch, self.source, self.keep_trace = policy, batch, source, keep_trace
        self.mode, self.k = source.mode, source.k
        self.branch = source.branches
        self.mass = float(getattr(policy, "mass", 1.0)) if self.branch else 1.0
        self.pair_mass = float(getattr(policy, "pair_mass", 1.0)) if self.branch and policy.prune_before else 1.0
        S = self.S = len(batch)
        self.n = torch.tensor([s.n for s in batch])
        self.T, W = int(self.n.max()), max(len(s.starts) for s in batch)
        self.tgt = torch.full((S, self.T), eos, dtype=torch.long)
        self.word_at = torch.zeros(S, self.T + 1, dtype=torch.long)  # word number (1-based) whose first subword is input t
        for i, s in enumerate(batch):
            self.tgt[i, :s.n] = s.tokens
            self.word_at[i, torch.tensor(s.starts) + 1] = torch.arange(1, len(s.starts) + 1)
        self.inp = torch.cat([torch.full((S, 1), eos, dtype=torch.long), self.tgt[:, :-1]], 1)
        # a context's inner </s> inputs (sentences.with_context): the number (1-based) of the word that starts
        # the next sentence there, 0 elsewhere
        self.next_word = torch.zeros(S, self.T + 1, dtype=torch.long)
        for i, s in enumerate(batch):
            if s.context_end:
                ends = (s.tokens[: s.context_end] == eos).nonzero().squeeze(1)  # targets of the context's </s>
                self.next_word[i, ends + 1] = torch.searchsorted(torch.tensor(s.starts), ends + 1) + 1
        # self and mix:K: the structure's own surprisal per word (module docstring)
        self.measure = source.chooses and source.number == "exact"
        if not self.measure and any(s.context_end or s.counted_from for s in batch):
            raise ValueError(CONTEXT_SOURCES)
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
        # per sentence and word (nats): the log mass ratio of the word's structure step, the entropy of the
        # (mixture's) decision, the posterior entropy of the live hypotheses; the last ranking's log mass ratio
        self.struct_step = torch.zeros(S, W, dtype=torch.float64)
        self.struct_entropy = torch.zeros(S, W, dtype=torch.float64)
        self.posterior_entropy = torch.zeros(S, W, dtype=torch.float64)
        self.end_step = torch.zeros(S, dtype=torch.float64)
        self.traces: List[list] = [[] for _ in range(S)]
        self.results: List[Optional[SentenceScore]] = [None] * S
        # shared prefixes: a sentence's rows are its leader's, copied at input ``fork`` (0: its own from the start)
        caps = [_fork_cap(s, share, observed) for s in batch]
        self.fork, self.leader = shared_forks(self.inp, self.word_at, self.next_word, self.n, caps) if share else (
            torch.zeros(S, dtype=torch.long), torch.full((S,), -1, dtype=torch.long))
        self.shared = torch.zeros(S, dtype=torch.long)  # positions a sentence took from its leader
        # the rows are grouped by sentence in the order of their slots: a sentence's index, a follower's after
        # every sentence there is when its rows are made (so that its copies are appended, not interleaved)
        self.slot, self.next_slot = torch.arange(S), S
        if bool((self.fork > 0).any()):
            self.reorder((self.fork == 0).nonzero().squeeze(1))  # the followers have no rows yet

    def run(self) -> List[SentenceScore]:
        for t in range(self.T):
            self.spawn(t)
            self.boundaries(t)
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
    def spawn(self, t: int) -> None:
        """The sentences whose rows start at input ``t`` (:func:`shared_forks`) take copies of their leaders' rows
        (the same hypotheses, scores and KV cache: every input before ``t`` and every target before ``t - 1``
        alike) and of their leaders' per-sentence numbers so far."""
        if not t:
            return
        new = (self.fork == t).nonzero().squeeze(1).tolist()
        if not new:
            return
        src, sent = [torch.arange(len(self.row_sent))], [self.row_sent]
        for i in new:
            j = int(self.leader[i])
            rows = (self.row_sent == j).nonzero().squeeze(1)
            src.append(rows)
            sent.append(torch.full((len(rows),), i, dtype=torch.long))
            for per in (self.z_last, self.running, self.mixed, self.positions, self.live, self.struct_step,
                        self.struct_entropy, self.posterior_entropy):
                per[i] = per[j]
            self.traces[i] = list(self.traces[j])
            self.shared[i] = self.positions[j]
        for i in new:  # the new sentences' rows come after every row (the cache appends their copies)
            self.slot[i] = self.next_slot
            self.next_slot += 1
        order = torch.cat(src)
        self.score, self.lm, self.cost = self.score[order], self.lm[order], self.cost[order]
        self.row_sent = torch.cat(sent)
        self.policy.reorder(order.to(self.policy.device))

    def boundaries(self, t: int) -> None:
        """Input ``t`` is a context's inner ``</s>`` in some sentences: their rows start a new structure."""
        at = self.next_word[self.row_sent, t]
        rows = (at > 0).nonzero().squeeze(1)
        if len(rows):
            self.policy.boundary(rows, at[rows])

    def start_words(self, t: int) -> None:
        """Input ``t`` is a word's first subword in some sentences: their rows branch (or take their
        structure) for that word, ranked before (SiPE) or after (GiLT) the branching."""
        policy, word_at, row_sent = self.policy, self.word_at[:, t], self.row_sent
        events = (self.n > t) & (word_at > 0)
        if not bool(events.any()):
            return
        is_ev = events[row_sent]
        ev_rows = is_ev.nonzero().squeeze(1)
        before = scatter_logsumexp(self.score, row_sent, self.S) if self.measure and self.branch else None
        if self.branch and policy.prune_before:  # rank the previous word's hypotheses (none before word 1)
            closed = policy.closed(ev_rows)
            if closed is not None:  # a closed tree cannot take the next word; unless nothing else is left
                open_count = torch.zeros(self.S, dtype=torch.long).index_add_(0, row_sent[ev_rows], (~closed).long())
                ev_rows = ev_rows[~closed | (open_count[row_sent[ev_rows]] == 0)]
            ev_rows = ev_rows[self.rank(ev_rows, self.score[ev_rows], t - 1, word_at > 1)]
        policy.decision = None
        parent, c, payload = policy.expand(ev_rows, word_at[row_sent[ev_rows]], t, self.inp[row_sent[ev_rows], : t + 1],
                                           self.mode)
        if self.measure and policy.decision is not None:
            self.decision_entropy(ev_rows, policy.decision, word_at, events)
        child = ev_rows[parent]
        pick = torch.arange(len(child))
        if self.branch and not policy.prune_before:
            pick = self.rank(child, self.score[child] + c, t - 1, events)
        elif self.pair_mass < 1.0:  # SiPE: the children by their share of the sentence's children's mass
            pick = keep_by_mass(row_sent[child], self.score[child] + c, self.pair_mass)
        rest = (~is_ev).nonzero().squeeze(1)
        src = torch.cat([rest, child[pick]])
        perm = torch.sort(self.slot[row_sent[src]], stable=True).indices  # rows stay grouped by sentence
        self.reorder(src[perm])
        new = (perm >= len(rest)).nonzero().squeeze(1)  # the children's new rows
        chosen = pick[perm[new] - len(rest)]
        self.cost[new, word_at[self.row_sent[new]] - 1] = c[chosen]
        self.score[new] += c[chosen]
        policy.apply(new, payload, chosen, t)
        if self.measure and self.branch:  # the structure step's log mass ratio (ranking, closed trees dropped, costs)
            sents = events.nonzero().squeeze(1)
            after = scatter_logsumexp(self.score, self.row_sent, self.S)
            self.struct_step[sents, word_at[sents] - 1] = (after - before)[sents]
        elif self.measure:  # one row per sentence: the ratio is the chosen candidate's probability
            sents = self.row_sent[new]
            self.struct_step[sents, word_at[sents] - 1] = c[chosen]

    def decision_entropy(self, rows: torch.Tensor, decision: torch.Tensor, word_at: torch.Tensor,
                         events: torch.Tensor) -> None:
        """The entropies of the structure decision that ``rows`` (the live hypotheses, grouped by sentence) make
        for the word that starts (``decision`` (E, D): each row's log-probabilities): of the mixture
        ``sum_h pi_h p(d | h)`` (``pi``: the rows' shares of their sentence's summed ``p(x_<t, S)``) and of ``pi``."""
        sent = self.row_sent[rows]
        if not self.branch:  # one row per sentence: its own decision, no posterior
            self.struct_entropy[sent, word_at[sent] - 1] = _entropy(decision.to(self.score))
            return
        values = self.score[rows]
        log_pi = values - scatter_logsumexp(values, sent, self.S)[sent]
        sents = events.nonzero().squeeze(1)  # each keeps a live row
        w = word_at[sents] - 1
        self.posterior_entropy[sents, w] = _entropy_by(log_pi, sent, self.S)[sents]
        self.struct_entropy[sents, w] = _entropy(_logsumexp_by(log_pi[:, None] + decision.to(log_pi), sent, self.S)[sents])

    def advance(self, t: int) -> None:
        """Every row runs input ``t`` and scores target ``t``; for a beam, the running bound and the mixture."""
        row_sent, live = self.row_sent, self.n > t
        seen = []
        if self.observe is not None:
            self.policy.distribution_sink = seen.append
        try:
            step = self.policy.step(t, self.inp[row_sent, : t + 1].to(self.policy.device),
                                    (self.word_at[row_sent, t] > 0) | (self.next_word[row_sent, t] > 0),
                                    self.tgt[row_sent, t])
        finally:
            self.policy.distribution_sink = None
        if self.observe is not None:
            self.observe(self, t, seen[-1].reshape(len(row_sent), -1))
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
            before = scatter_logsumexp(self.score[end_rows], self.row_sent[end_rows], self.S)
            end_rows = end_rows[self.rank(end_rows, self.score[end_rows], t, ending if self.policy.prune_before else None)]
            after = scatter_logsumexp(self.score[end_rows], self.row_sent[end_rows], self.S)
            self.end_step[ending] = (after - before)[ending]
        groups = {}
        for r in end_rows.tolist():
            groups.setdefault(int(self.row_sent[r]), []).append(r)
        for s_, rows_s in groups.items():
            result = _result(self.policy, self.batch[s_], self.source, rows_s, self.lm, self.cost, self.score,
                             self.running[s_], self.z_last[s_], self.traces[s_] if self.keep_trace else None,
                             self.mixed[s_], (self.struct_step[s_], self.struct_entropy[s_],
                                              self.posterior_entropy[s_], self.end_step[s_]) if self.measure else None)
            words = len(self.batch[s_].starts)
            result.extra.update(positions=int(self.positions[s_]),
                                live_hypotheses=int(self.live[s_]) if self.branch else words)
            if self.shared[s_]:
                result.extra["shared_positions"] = int(self.shared[s_])
            self.results[s_] = result
        self.drop_finished(t)

    def drop_finished(self, t: int) -> None:
        """The rows of the sentences that have ended by target ``t`` leave the batch: the last rows at once (the cache
        keeps the first rows as views, no copy); rows elsewhere (a shared prefix's copies come after the sentences
        that were there, :meth:`spawn`, and may outlive them) stay, their results made and nothing read from them,
        until they are more than :data:`DEAD_ROWS` of the rows: a reorder that drops them copies every other row's
        cache, which costs about what a decoder step over them does."""
        dead = (self.n - 1 <= t)[self.row_sent]
        count = int(dead.sum())
        if not count:
            return
        rows = len(self.row_sent)
        trailing = rows - int((~dead).nonzero().max()) - 1 if count < rows else rows
        if count > DEAD_ROWS * rows:
            self.reorder((~dead).nonzero().squeeze(1))
        elif trailing:
            self.reorder(torch.arange(rows - trailing))


def keep_by_mass(group: torch.Tensor, value: torch.Tensor, q: float) -> torch.Tensor:
    """The pair-mass pruning (``--tags-pair-mass`` Q): positions of the entries kept, in their given order (a
    word's children stay grouped by parent), when each ``group`` (a sentence) keeps its best ``value`` (log
    ``p(x_<t, S)`` of a child, its pair's cost included) until their share of the group's summed
    ``exp(value)`` reaches ``q``, at least one (:func:`~.policy.top_per_group` with no cap on the count)."""
    return torch.sort(top_per_group(group, value, len(value), q)).values


DEAD_ROWS = 0.25  # _Search.drop_finished: the share of rows of ended sentences a batch carries before it drops them
MIN_SHARED = 2  # a sentence shares its leader's rows when they begin with at least this many identical inputs


def _fork_cap(sentence: Sentence, share: Optional[str], observed: bool) -> Optional[int]:
    """The latest input a sentence may take from another (:func:`shared_forks`): under ``"contexts"`` its context's
    end; with the toolkit's observer its first counted target (the observer reads every counted target from the
    sentence's own rows); None: no limit."""
    caps = ([sentence.context_end] if share == "contexts" else []) + ([sentence.counted_from] if observed else [])
    return min(caps) if caps else None


def shared_forks(inp: torch.Tensor, word_at: torch.Tensor, next_word: torch.Tensor, n: torch.Tensor,
                 caps: Sequence[Optional[int]]):
    """``(fork, leader)`` (S,) long: sentence ``i`` of a batch (in the search's order) begins with the same inputs,
    word starts and sentence ends as an earlier one, ``leader[i]``, up to input ``fork[i]``; it then takes copies
    of its leader's rows before input ``fork[i]`` (:meth:`_Search.spawn`) instead of running those inputs again
    (0, -1: its own rows from the start). Under a source that chooses the structure from the prefix, every
    number made before input ``f`` (the rows' hypotheses and scores, every target up to ``f - 1``, the running
    bound and the mixture) reads only inputs ``0 .. f`` and word starts ``0 .. f``: two sentences alike there
    have the same rows. The leader is the earlier sentence alike for the most inputs (ties: the first), and
    one whose own rows exist by then (else its leader, alike at least as far). ``caps``: per sentence the
    latest fork allowed (None: no limit; the toolkit's observer reads every counted target from the sentence's
    own rows). A context before several texts (:func:`~.sentences.with_context`) is run once per batch; so is
    the prefix two sentences of a minimal pair share."""
    S, T = inp.shape
    fork = torch.zeros(S, dtype=torch.long)
    leader = torch.full((S,), -1, dtype=torch.long)
    key = torch.stack([inp, word_at[:, :T], next_word[:, :T]], -1)  # (S, T, 3)
    for i in range(1, S):
        alike = (key[:i] == key[i]).all(-1).long().cumprod(1).sum(1)  # inputs alike from the start
        f = torch.minimum(alike, torch.minimum(n[:i], n[i])) - 1  # every input 0 .. f alike, both live through f - 1
        if caps[i] is not None:
            f = f.clamp(max=caps[i])
        best = int(f.max())
        if best < MIN_SHARED:
            continue
        j = int(f.argmax())
        while int(fork[j]) >= best:  # j's rows start at or after the fork: its leader's are alike as far
            j = int(leader[j])
        fork[i], leader[i] = best, j
    return fork, leader


def _result(policy, sentence: Sentence, source: Source, rows: List[int], lm, cost, score, running, z, trace, mixed,
            measures=None):
    best = rows[0]
    n, words = sentence.n, len(sentence.starts)
    c, first = sentence.counted_from, sentence.first_word  # a context: its targets and words are not counted
    lm_best = lm[best, :n].tolist()
    logprob, per_token = source.read(lm_best, running[:n].tolist(), mixed[:n].tolist(), float(z))
    costs = cost[best, first:words].tolist()
    starts = [q - c for q in sentence.starts[first:]]
    types = _types(sentence, starts)
    info = policy.result(best, words, first) if first else policy.result(best, words)
    extra = dict(info.get("extra", {}))
    if c or sentence.context_end or sentence.context_dropped:
        extra.update(context_logprob=float(sum(per_token[:c])), context_tokens=c,
                     context_sentences=sentence.context_sentences, context_dropped=sentence.context_dropped)
    if c:
        lm_best, per_token = lm_best[c:], list(per_token[c:])
        logprob = float(sum(per_token))
    if measures is not None:
        extra.update(_structure_measures(per_token, starts, first, words, *measures))
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


def _types(sentence: Sentence, starts: Sequence[int]) -> List[str]:
    """The position types of the counted targets (word starts ``starts`` among them); an inner ``</s>`` of a
    counted context is ``eos`` too."""
    c = sentence.counted_from
    types = position_types(sentence.n - c, starts)
    if c < sentence.context_end:
        eos = int(sentence.tokens[-1])
        for q in (sentence.tokens[c: sentence.context_end] == eos).nonzero().squeeze(1).tolist():
            types[q] = "eos"
    return types


def _structure_measures(per_token, starts, first, words, step, entropy, posterior, end) -> dict:
    """Per word of the text (bits): ``structure_surprisal`` (minus the log mass ratio of the word's structure
    step), ``structure_entropy`` (of the decision: the mixture's under ``mix:K``), ``posterior_entropy`` (of
    the live hypotheses' shares; 0 under ``self``), ``lexical_surprisal`` (the word's tokens under the
    source's per-token numbers); ``end_structure_surprisal``: the last ranking's, after ``</s>``
    (docs/evaluation.md, "The structure's own surprisal")."""
    bounds = list(starts) + [len(per_token) - 1]
    return {"structure_surprisal": [-float(x) / LN2 for x in step[first:words].tolist()],
            "structure_entropy": [max(0.0, float(x) / LN2) for x in entropy[first:words].tolist()],
            "posterior_entropy": [max(0.0, float(x) / LN2) for x in posterior[first:words].tolist()],
            "lexical_surprisal": [-sum(per_token[a:b]) / LN2 for a, b in zip(bounds, bounds[1:])],
            "end_structure_surprisal": -float(end) / LN2}


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    """Per row of log-probabilities (..., D): the entropy in nats (``-inf`` entries count 0)."""
    return -torch.where(torch.isfinite(logp), logp.exp() * logp, torch.zeros_like(logp)).sum(-1)


def _logsumexp_by(values: torch.Tensor, group: torch.Tensor, size: int) -> torch.Tensor:
    """(size, D) ``logsumexp`` of the rows of ``values`` (E, D) grouped by ``group`` (E,) (an empty group: -inf)."""
    peak = torch.full((size, values.shape[1]), -torch.inf, dtype=values.dtype).scatter_reduce(
        0, group[:, None].expand_as(values), values, "amax")
    safe = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    total = torch.zeros(size, values.shape[1], dtype=values.dtype).index_add_(0, group, (values - safe[group]).exp())
    return safe + total.log()


def _entropy_by(logp: torch.Tensor, group: torch.Tensor, size: int) -> torch.Tensor:
    """(size,) entropy in nats of each group's distribution ``logp`` (its entries, grouped by ``group``)."""
    terms = torch.where(torch.isfinite(logp), logp.exp() * logp, torch.zeros_like(logp))
    return -torch.zeros(size, dtype=logp.dtype).index_add_(0, group, terms)


def plain_scores(model, batch: Sequence[Sentence], source: Source, eos: int, pad: int, max_tokens: int = 8192,
                 observe=None) -> List[SentenceScore]:
    """A model without structure: one full forward per chunk of sentences, the same under every source.
    ``observe``: the toolkit's hook (:mod:`sipe_fairseq.hub.distributions`), called as ``observe(chunk, logits,
    extra)`` after each chunk's forward (input ``</s> x_1 ..``, padded); nothing computed here changes."""
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
        if observe is not None:
            observe(chunk, logits, extra)
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
            c = s.counted_from  # a context (sentences.with_context): fed, not counted
            context = {}
            if c or s.context_end or s.context_dropped:
                context = dict(context_logprob=float(sum(lm[:c])), context_tokens=c,
                               context_sentences=s.context_sentences, context_dropped=s.context_dropped)
            lm, starts = lm[c:], [q - c for q in s.starts[s.first_word:]]
            types = _types(s, starts)
            out.append(SentenceScore(str(source), sum(lm), lm, types, [], [], False, sum(lm),
                                     extra={"hypotheses": 1, "word_start_mismatch": s.mismatch, "positions": s.n,
                                            "live_hypotheses": len(s.starts),
                                            "prefix_logp": _prefix_logp(lm, types), **context}))
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



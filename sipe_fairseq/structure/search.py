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

A row's score is ``log p(x_<=t | S) + sum of its structure costs``. For ``beam:K``, the per-token
numbers are the increments of the running bound ``log Z_t`` (``Z_t`` = the summed ``p(x_<=t, S)``
of the live hypotheses after target ``t``; mass pruned at a word is charged to the target before
it), so they sum to the sentence's bound ``log sum_beam p(x, S)``.
"""
from typing import List, Optional, Sequence

import torch

from .policy import BRANCH, FORCED, GREEDY, StructurePolicy, scatter_logsumexp, top_per_group
from .record import SentenceScore, position_types
from .sentences import Sentence
from .sources import Source

MODES = {"given": FORCED, "self": GREEDY, "beam": BRANCH, "mix": BRANCH}


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
    if desc != list(range(len(batch))):
        out = search(policy, [batch[i] for i in desc], source, eos, keep_trace)
        back: List[Optional[SentenceScore]] = [None] * len(batch)
        for j, i in enumerate(desc):
            back[i] = out[j]
        return back
    mode, k = MODES[source.kind], source.k
    branch = mode == BRANCH
    S = len(batch)
    n = torch.tensor([s.n for s in batch])
    T, W = int(n.max()), max(len(s.starts) for s in batch)
    tgt = torch.full((S, T), eos, dtype=torch.long)
    word_at = torch.zeros(S, T + 1, dtype=torch.long)  # word number (1-based) whose first subword is input t
    for i, s in enumerate(batch):
        tgt[i, :s.n] = s.tokens
        word_at[i, torch.tensor(s.starts) + 1] = torch.arange(1, len(s.starts) + 1)
    inp = torch.cat([torch.full((S, 1), eos, dtype=torch.long), tgt[:, :-1]], 1)
    device = policy.device
    policy.begin(S, T, W, [policy.given_of(s) for s in batch])
    row_sent = torch.arange(S)
    score = torch.zeros(S, dtype=torch.float64)
    lm = torch.zeros(S, T, dtype=torch.float64)
    cost = torch.zeros(S, W, dtype=torch.float64)
    z_last = torch.zeros(S, dtype=torch.float64)
    running = torch.zeros(S, T, dtype=torch.float64)
    mixed = torch.zeros(S, T, dtype=torch.float64)  # mix:K, log q_K(x_t | x_<t)
    positions = torch.zeros(S, dtype=torch.long)  # decoder positions run per sentence (its rows, summed over steps)
    traces: List[list] = [[] for _ in range(S)]
    results: List[Optional[SentenceScore]] = [None] * S

    def record(rows: torch.Tensor, values: torch.Tensor, target: int) -> None:
        """The running bound of the sentences of ``rows`` after ``target``, from the rows' scores ``values``."""
        sents = torch.unique(row_sent[rows])
        z = scatter_logsumexp(values, row_sent[rows], S)[sents]
        running[sents, target] = z - z_last[sents]
        z_last[sents] = z
        if keep_trace:
            by = {}
            for r, v in zip(rows.tolist(), values.tolist()):
                by.setdefault(int(row_sent[r]), []).append((policy.labels(r), v))
            for s_, entries in by.items():
                traces[s_].append(entries)

    def reorder(order: torch.Tensor) -> None:
        nonlocal row_sent, score, lm, cost
        row_sent, score, lm, cost = row_sent[order], score[order], lm[order], cost[order]
        policy.reorder(order.to(device))

    for t in range(T):
        live = n > t
        events = live & (word_at[:, t] > 0)
        if bool(events.any()):
            is_ev = events[row_sent]
            ev_rows = is_ev.nonzero().squeeze(1)
            if branch and policy.prune_before:
                closed = policy.closed(ev_rows)
                if closed is not None:  # a closed tree cannot take the next word; unless nothing else is left
                    open_count = torch.zeros(S, dtype=torch.long).index_add_(0, row_sent[ev_rows], (~closed).long())
                    ev_rows = ev_rows[~closed | (open_count[row_sent[ev_rows]] == 0)]
                ev_rows = ev_rows[top_per_group(row_sent[ev_rows], score[ev_rows], k)]
                record(ev_rows, score[ev_rows], t - 1)
            parent, c, payload = policy.expand(ev_rows, word_at[row_sent[ev_rows], t], t, inp[row_sent[ev_rows], : t + 1],
                                               mode)
            child = ev_rows[parent]
            child_score = score[child] + c
            pick = torch.arange(len(child))
            if branch and not policy.prune_before:
                pick = top_per_group(row_sent[child], child_score, k)
                record(child[pick], child_score[pick], t - 1)
            rest = (~is_ev).nonzero().squeeze(1)
            src = torch.cat([rest, child[pick]])
            perm = torch.sort(row_sent[src], stable=True).indices  # rows stay grouped by sentence
            reorder(src[perm])
            new = (perm >= len(rest)).nonzero().squeeze(1)  # the children's new rows
            chosen = pick[perm[new] - len(rest)]
            words = word_at[row_sent[new], t] - 1
            cost[new, words] = c[chosen]
            score[new] += c[chosen]
            policy.apply(new, payload, chosen, t)
        step = policy.step(t, inp[row_sent, : t + 1].to(device), word_at[row_sent, t] > 0, tgt[row_sent, t])
        positions += torch.bincount(row_sent, minlength=S)
        if branch:  # the mixture over the live rows, weighted by their scores (every current row is live)
            mixed[live, t] = (scatter_logsumexp(score + step, row_sent, S) - scatter_logsumexp(score, row_sent, S))[live]
        lm[:, t] = step
        score += step
        if branch:
            later = live & (n - 1 > t) & (word_at[:, t + 1] == 0)  # no ranking before the next target
            rows = later[row_sent].nonzero().squeeze(1)
            if len(rows):
                record(rows, score[rows], t)
        ending = live & (n - 1 == t)
        if bool(ending.any()):
            end_rows = ending[row_sent].nonzero().squeeze(1)
            if branch:
                end_rows = end_rows[top_per_group(row_sent[end_rows], score[end_rows], k)]
                record(end_rows, score[end_rows], t)
            groups = {}
            for r in end_rows.tolist():
                groups.setdefault(int(row_sent[r]), []).append(r)
            for s_, rows_s in groups.items():
                results[s_] = _result(policy, batch[s_], source, rows_s, lm, cost, score, running[s_], z_last[s_],
                                      traces[s_] if keep_trace else None, mixed[s_])
                results[s_].extra["positions"] = int(positions[s_])
            keep = (~ending[row_sent]).nonzero().squeeze(1)
            if len(keep) < len(row_sent):
                reorder(keep)
    return results


def _result(policy, sentence: Sentence, source: Source, rows: List[int], lm, cost, score, running, z, trace, mixed):
    best = rows[0]
    n, words = sentence.n, len(sentence.starts)
    lm_best = lm[best, :n].tolist()
    costs = cost[best, :words].tolist()
    types = position_types(n, sentence.starts)
    info = policy.result(best, words)
    extra = dict(info.get("extra", {}))
    if source.kind in ("beam", "mix"):
        if source.kind == "beam":
            logprob, per_token = float(z), running[:n].tolist()
        else:
            per_token = mixed[:n].tolist()
            logprob = float(mixed[:n].sum())
        extra["hypotheses"] = len(rows)
        extra["beam"] = [(policy.labels(r), float(score[r])) for r in rows]
        extra["best_lm"] = lm_best
        if trace is not None:
            extra["trace"] = trace[1:] if policy.prune_before else trace
    else:
        logprob, per_token = sum(lm_best), lm_best
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
                                     extra={"hypotheses": 1, "word_start_mismatch": s.mismatch,
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



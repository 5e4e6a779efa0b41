"""Sentences in, :class:`~.record.SentenceScore` out under a structure source: the structure engine's one
entry point, :func:`score_sentences` (:func:`score_encoded` for sentences already encoded). Every surface
calls it directly: ``sipe-eval-lm --tags`` (:mod:`sipe_fairseq.eval.prefix_scores`), BLiMP, SyntaxGym and
the minimal pairs, the Python interface and ``sipe-surprisal`` (:mod:`sipe_fairseq.hub`),
``fairseq-eval-lm --inference-tags`` (:mod:`.inference`). The one other road is masked-LM
pseudo-log-likelihood (:mod:`sipe_fairseq.eval.pll`).

Sentences are sorted by length and scored ``batch_sentences`` at a time (:func:`.search.search`: every
hypothesis of every sentence of a batch through one decoder call per position). A larger batch runs
fewer, larger decoder calls (faster) and holds a KV cache of ``rows x length`` positions per layer
(rows = sentences for ``self``, up to K x candidates per word, about 7 K on EWT, for ``beam:K``), so
memory grows with it; a beam's batch is capped at :data:`BEAM_ROWS` / (8 K) sentences. ``given`` for a
SiPE decoder runs full forwards of at most :data:`GIVEN_POSITIONS` positions (the tags are known).
The numbers do not depend on the batch (tests/test_prefix_tags.py, tests/test_gilt_scoring.py).
"""
import logging
import math
from typing import List, Optional, Sequence, Tuple

import torch

from ..hexatag.errors import NonFiniteScoreError
from .family import StructureOptions, masked_lm, policy_for, structure_of
from .arcs import gold_graph
from .options import BATCH_SENTENCES
from .memory import BatchPlan, HeapGuard, MemoryBudgetError, budget_from, model_size, plan_batches
from .record import SentenceScore, position_types
from .search import _prefix_logp, plain_scores, search
from .sentences import Sentence, max_positions, sentence_of
from .sources import parse_source
from .workers import run_batches, worker_count

logger = logging.getLogger(__name__)
BEAM_ROWS = 4096  # hypotheses a beam's batch is sized for (8 per sentence and unit of K; 4096 ran mix:16 8-10% faster
# than 8192 on BLiMP and EWT, docs/benchmarks.md)
GIVEN_POSITIONS = 1024  # positions per full forward of given (small forwards are the fastest on a CPU)


def score_sentences(model, sentences: Sequence[Sentence], source, options: Optional[StructureOptions] = None,
                    eos: int = 2, pad: int = 1, batch_sentences: int = BATCH_SENTENCES, keep_trace: bool = False,
                    force_incremental: bool = False, progress=None, observer=None) -> List[SentenceScore]:
    """The engine's entry point: every sentence scored alone under ``source`` (a spec such as ``"mix:16"`` or a
    :class:`~.sources.Source`), in input order, for every decoder family (the family is decided here, once:
    :func:`~.family.structure_of`). ``given`` of a SiPE decoder (and ``untagged``, and every source of a model
    without structure) runs in full forwards; every other source through the search. ``force_incremental``:
    ``given`` through the search's forced path (one position at a time through the cache) even where full
    forwards would do (tests). ``progress``: called with the number of sentences of each finished batch.
    ``observer``: reads the full next-token distributions the scores are gathered from (the Python interface's
    ranks, entropies and word-boundary masses, :mod:`sipe_fairseq.hub.distributions`): ``on_search(search, t,
    lprobs)`` at each step of the search, ``on_rows(batch, lprobs)`` with a full forward's (B, T, V) log-probs, and
    ``collect(indices)`` / ``merge(indices, collected)``, which carry what it read of a batch's sentences back from a
    worker process (an observer without them keeps the batches in this process). Masked-LM encoders are
    not scored here: their road is pseudo-log-likelihood (:mod:`sipe_fairseq.eval.pll`)."""
    src = parse_source(source)
    options = options or StructureOptions()
    if batch_sentences < 1:
        raise ValueError(f"batch of {batch_sentences} sentences: expected >= 1")
    if masked_lm(model):
        raise ValueError(f"{type(model).__name__} is a masked-LM encoder: it is scored by pseudo-log-likelihood "
                         "(given tags only), not left to right")
    model.eval()
    kind = structure_of(model)
    refusal = src.applies_to(kind)
    if refusal:
        raise ValueError(refusal)
    policy = None if kind == "none" else policy_for(model, options, needs_heads=src.chooses)
    full = policy is None or (src.full_forward and hasattr(policy, "forced_full") and not force_incremental)
    share = sharing(options, src, full, sentences)
    order = batch_order(sentences, share)
    planned, workers = plan_workers(model, sentences, src, options, batch_sentences, order)
    out: List[Optional[SentenceScore]] = [None] * len(sentences)
    if full:
        planned = BatchPlan(_full_batches(order, sentences))
        workers = worker_count(options.workers, len(planned))
    if observer is not None and not hasattr(observer, "merge"):
        workers = 1

    guard = heap_guard(options, workers, full or policy is None)

    def score_batch(idx: List[int]) -> Tuple[List[SentenceScore], object]:
        batch = [sentences[i] for i in idx]
        guard.before(planned.peak_of(idx))  # the previous batch's heap given back if keeping it could pass the budget
        with torch.no_grad():
            if policy is None:
                scores = plain_scores(model, batch, src, eos, pad, GIVEN_POSITIONS, observe=_plain_observer(model, observer))
            elif full:
                scores = _given_full(policy, batch, src, eos, pad, observer)
            else:
                scores = search(policy, batch, src, eos, keep_trace, observe=observer.on_search if observer else None,
                                share=share)
        return scores, (observer.collect(idx) if observer is not None and workers > 1 else None)

    for idx, (scores, observed) in run_batches(score_batch, planned, workers, lambda b: sum(sentences[i].n for i in b)):
        if observed is not None:
            observer.merge(idx, observed)
        for i, s in zip(idx, scores):
            check_finite(s, i, src)
            out[i] = s
        if progress is not None:
            progress(len(idx))
    return out


def sharing(options: StructureOptions, source, full: bool = False, sentences: Sequence[Sentence] = ()) -> Optional[str]:
    """What a search shares (:func:`~.search.shared_forks`): ``"contexts"`` (the positions of a context fed before
    texts, when ``sentences`` has any) or ``"all"`` (any common beginning), under a source that chooses the
    structure from the prefix and runs through the search (``--tags-share-prefixes``); None: nothing."""
    mode = options.share_prefixes
    if mode == "none" or full or not parse_source(source).chooses:
        return None
    if mode == "contexts" and sentences and not any(s.context_end for s in sentences):
        return None
    return mode


def batch_order(sentences: Sequence[Sentence], share: Optional[str]) -> List[int]:
    """The order the sentences are cut into batches in: shortest first. When the search shares prefixes, sentences
    that begin alike (:func:`alike`) are neighbours, so in one batch (a context and its texts, a document's sentences,
    under ``"all"`` the two sentences of a minimal pair): groups of them, shortest longest sentence first."""
    by_length = sorted(range(len(sentences)), key=lambda i: sentences[i].n)
    if not share or not sentences:
        return by_length
    lex = sorted(range(len(sentences)), key=lambda i: sentences[i].tokens.tolist())
    groups, current = [], [lex[0]]
    for a, b in zip(lex, lex[1:]):
        if alike(sentences[a], sentences[b], share):
            current.append(b)
        else:
            groups.append(current)
            current = [b]
    groups.append(current)
    groups.sort(key=lambda g: max(sentences[i].n for i in g))
    return [i for g in groups for i in g]


def alike(a: Sentence, b: Sentence, share: str) -> bool:
    """Whether two sentences begin alike enough to share a batch (:func:`batch_order`): under ``"contexts"`` their
    common tokens cover the shorter of their contexts (texts after one context, a document's sentences); under
    ``"all"`` at least half of the shorter sentence (a minimal pair)."""
    m = min(a.n, b.n)
    differ = (a.tokens[:m] != b.tokens[:m]).nonzero()
    common = int(differ[0]) if len(differ) else m
    if share == "contexts":
        context = min(a.context_end, b.context_end)
        return context > 0 and common >= context
    return 2 * common >= m


def check_finite(score: SentenceScore, index: int, source) -> None:
    """The output boundary of every score: :class:`~sipe_fairseq.hexatag.errors.NonFiniteScoreError` naming the
    sentence (``index``, 0-based, in the caller's order) and the source when its log-probability, a token's or
    its joint score is NaN or infinite (finite weights can overflow in the forward pass), so that no surface
    writes, averages or counts it."""
    values = [("log-probability", score.logprob), ("joint score", score.joint)]
    values += [(f"token {t + 1}", x) for t, x in enumerate(score.token_logprobs)]
    for what, x in values:
        if not math.isfinite(x):
            detail = (f"under {source}: {what} is {x} (a non-finite score: the model's forward pass overflows; "
                      "nothing is written)")
            raise NonFiniteScoreError(f"sentence {index + 1} {detail}", index, str(source), detail)


def beyond_positions(model, lengths: Sequence[int]) -> Tuple[int, Optional[int], Optional[str]]:
    """``(count, limit, refusal)`` for sentences of ``lengths`` positions: how many are longer than the model's
    positions (``limit``, :func:`~.sentences.max_positions`; None: no limit). Such a sentence is scored whole, in
    one pass, as every sentence (``--tags`` and ``--inference-tags`` alike), by a model whose positions extend
    (relative, rotary, sinusoidal); one with learned absolute positions has no row for them: ``refusal`` is
    the line that says so (None when nothing is refused)."""
    limit = max_positions(model)
    count = sum(1 for n in lengths if limit is not None and n > limit)
    learned = isinstance(getattr(getattr(model, "decoder", model), "embed_positions", None), torch.nn.Embedding)
    refusal = None
    if count and learned:
        refusal = (f"{count} sentences are longer than the model's {limit} learned positions (longest {max(lengths)} "
                   "tokens): it cannot score them whole")
    return count, limit, refusal


def plan(model, sentences: Sequence[Sentence], source, options: Optional[StructureOptions] = None,
         batch_sentences: int = BATCH_SENTENCES, order: Optional[Sequence[int]] = None, workers: int = 1) -> BatchPlan:
    """The batches (sentence indices, shortest first) :func:`score_sentences` runs ``source`` in: at most
    ``batch_sentences`` each (a beam's at most :data:`BEAM_ROWS` / (8 K): the source's ``batch_cap``), each
    within the memory budget (:mod:`.memory`), or within its share when ``workers`` processes score batches at
    once. Planned before anything is allocated: :class:`~.memory.MemoryBudgetError` when one sentence alone
    does not fit (callers check every source before they score any)."""
    src, options = parse_source(source), options or StructureOptions()
    if order is None:
        order = sorted(range(len(sentences)), key=lambda i: sentences[i].n)
    batch_sentences = src.batch_cap(batch_sentences, BEAM_ROWS)
    budget = budget_from(options.max_memory)
    if budget is not None:
        budget //= max(1, workers)
    shared = sharing(options, src, False, sentences) is not None
    return plan_batches(order, sentences, src, model_size(model), structure_of(model), budget, batch_sentences,
                        options.top_pairs, options.count_beam, shared)


def plan_workers(model, sentences: Sequence[Sentence], source, options: StructureOptions, batch_sentences: int = BATCH_SENTENCES,
                 order: Optional[Sequence[int]] = None) -> Tuple[List[List[int]], int]:
    """The batches and the worker count of a search (:mod:`.workers`). The plan of one process comes first (it
    refuses a sentence that does not fit the whole budget); ``N`` workers (``options.workers``, 0: the cores
    available; no more than its batches) score its batches when each fits ``budget / N``: the same batches, the
    same numbers. Otherwise the sentences are planned again within ``budget / N`` (other batches: the numbers
    differ as any two batchings do, in float32's last digits), ``N`` lowered until every sentence fits its share."""
    src = parse_source(source)
    single = plan(model, sentences, src, options, batch_sentences, order)
    n = worker_count(options.workers, len(single))
    budget = budget_from(options.max_memory)
    if n == 1 or budget is None:
        return single, n
    largest = single.largest  # each batch's estimate, made while planning
    while n > 1:
        if largest <= budget // n:
            return single, n
        try:
            batches = plan(model, sentences, src, options, batch_sentences, order, n)
            return batches, min(n, len(batches))
        except MemoryBudgetError:
            n -= 1
    return single, 1


def heap_guard(options: StructureOptions, workers: int, full: bool) -> HeapGuard:
    """The :class:`~.memory.HeapGuard` of a search's batches: each process's share of the budget (full forwards are
    not planned by the estimate: no bound is kept for them)."""
    budget = budget_from(options.max_memory)
    if budget is None or full:
        return HeapGuard(None)
    return HeapGuard(budget // max(1, workers))


def _full_batches(order, sentences):
    """Index lists of consecutive sentences of ``order`` for full forwards: as many as fit in
    :data:`GIVEN_POSITIONS` padded positions."""
    i = 0
    while i < len(order):
        j = i + 1
        while j < len(order) and (j + 1 - i) * sentences[order[j]].n <= GIVEN_POSITIONS:
            j += 1
        yield order[i:j]
        i = j


def _plain_observer(model, observer):
    """``plain_scores``' hook for ``observer`` (its logits normalized as the scores are), None without one."""
    if observer is None:
        return None
    decoder = getattr(model, "decoder", model)

    def observe(chunk, logits, extra):
        if getattr(decoder, "adaptive_softmax", None) is None:
            lprobs = torch.log_softmax(logits.double(), -1)
        else:
            lprobs = model.get_normalized_probs((logits, extra), log_probs=True).double()
        observer.on_rows(chunk, lprobs)
    return observe


def _given_full(policy, batch, src, eos, pad, observer=None) -> List[SentenceScore]:
    seen = []
    if observer is not None:
        policy.distribution_sink = seen.append
    try:
        forced = policy.forced_full(batch, eos, pad, untagged=src.untagged)
    finally:
        policy.distribution_sink = None
    if observer is not None:
        observer.on_rows(batch, seen[-1])
    out = []
    for s, (lm, cost, info) in zip(batch, forced):
        types = position_types(s.n, s.starts)
        out.append(SentenceScore(str(src), sum(lm), lm, types, info["tags"], cost, info["complete"], sum(lm) + sum(cost),
                                 0, {"hypotheses": 1, "word_start_mismatch": s.mismatch, "positions": s.n,
                                     "live_hypotheses": len(s.starts),
                                     "prefix_logp": _prefix_logp(lm, types)}))
    return out


def sentences_from_encoded(encoded, dictionary, eos: int, heads=None) -> List[Sentence]:
    """``(tokens, terminals, nonterminals)`` per sentence (tags may be None) -> :class:`Sentence`;
    ``heads``: each sentence's tree (HEAD column) or None, a GiLT model's given graph."""
    out = []
    for i, e in enumerate(encoded):
        tokens, terminals, nonterminals = (tuple(e[:3]) + (None, None))[:3]
        arcs = gold_graph(heads[i]) if heads is not None and heads[i] is not None else None
        out.append(sentence_of(i, tokens, terminals, nonterminals, dictionary, eos, arcs))
    return out


def score_encoded(model, encoded, source, dictionary, options: Optional[StructureOptions] = None, heads=None,
                  batch_sentences: int = BATCH_SENTENCES, **kwargs) -> List[SentenceScore]:
    """:func:`score_sentences` over ``(tokens, terminals, nonterminals)`` sentences as
    :class:`~sipe_fairseq.data.encode.SentenceEncoder` encodes them (BLiMP, SyntaxGym, minimal pairs);
    ``heads``: each sentence's tree (a GiLT model's given graph), or None."""
    graphs = heads if structure_of(model) == "arcs" else None  # only a graph-reading model takes the tree as given
    sentences = sentences_from_encoded(encoded, dictionary, dictionary.eos(), graphs)
    return score_sentences(model, sentences, source, options, dictionary.eos(), dictionary.pad(), batch_sentences,
                           **kwargs)

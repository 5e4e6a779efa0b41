"""Sentences in, :class:`~.record.SentenceScore` out: every caller's entry to the structure engine.

Sentences are sorted by length and scored ``batch_sentences`` at a time (:func:`.search.search`: every
hypothesis of every sentence of a batch through one decoder call per position). A larger batch runs
fewer, larger decoder calls (faster) and holds a KV cache of ``rows x length`` positions per layer
(rows = sentences for ``given``/``self``, up to K x candidates per word for ``beam:K``), so memory
grows with it. ``given`` for a SiPE decoder is one full forward per batch (the tags are known).
"""
import logging
from typing import List, Optional, Sequence

import torch

from .family import StructureOptions, policy_for, structure_of
from .arcs import gold_graph
from .record import SentenceScore
from .search import plain_scores, search
from .sentences import Sentence, prepare
from .sources import parse_source

logger = logging.getLogger(__name__)


def score_sentences(model, sentences: Sequence[Sentence], source: str, options: Optional[StructureOptions] = None,
                    eos: int = 2, pad: int = 1, batch_sentences: int = 64, keep_trace: bool = False,
                    force_incremental: bool = False, progress=None) -> List[SentenceScore]:
    """Every sentence scored alone under ``source`` (``given``, ``self``, ``beam:K``), in input order.
    ``force_incremental``: ``given`` through the search's forced path (one position at a time through
    the cache) even where one full forward would do (tests)."""
    src = parse_source(source)
    options = options or StructureOptions()
    if batch_sentences < 1:
        raise ValueError(f"batch of {batch_sentences} sentences: expected >= 1")
    model.eval()
    kind = structure_of(model)
    policy = None if kind == "none" else policy_for(model, options, needs_heads=src.kind != "given")
    order = sorted(range(len(sentences)), key=lambda i: sentences[i].n)
    out: List[Optional[SentenceScore]] = [None] * len(sentences)
    for b in range(0, len(order), batch_sentences):
        idx = order[b:b + batch_sentences]
        batch = [sentences[i] for i in idx]
        with torch.no_grad():
            if policy is None:
                scores = plain_scores(model, batch, src, eos, pad)
            elif src.kind == "given" and hasattr(policy, "forced_full") and not force_incremental:
                scores = _given_full(policy, batch, src, eos, pad)
            else:
                scores = search(policy, batch, src, eos, keep_trace)
        for i, s in zip(idx, scores):
            out[i] = s
        if progress is not None:
            progress(len(idx))
    return out


def _given_full(policy, batch, src, eos, pad) -> List[SentenceScore]:
    from .record import position_types
    from .search import _prefix_logp

    out = []
    for s, (lm, cost, info) in zip(batch, policy.forced_full(batch, eos, pad)):
        types = position_types(s.n, s.starts)
        out.append(SentenceScore(str(src), sum(lm), lm, types, info["tags"], cost, info["complete"], sum(lm) + sum(cost),
                                 0, {"hypotheses": 1, "word_start_mismatch": s.mismatch,
                                     "prefix_logp": _prefix_logp(lm, types)}))
    return out


def sentences_from_encoded(encoded, dictionary, eos: int, heads=None) -> List[Sentence]:
    """``(tokens, terminals, nonterminals)`` per sentence (tags may be None) -> :class:`Sentence`;
    ``heads``: each sentence's tree (HEAD column) or None, a GiLT model's given graph."""
    out = []
    for i, e in enumerate(encoded):
        tokens, terminals, nonterminals = (tuple(e[:3]) + (None, None))[:3]
        arcs = gold_graph(heads[i]) if heads is not None and heads[i] is not None else None
        out.append(prepare(i, tokens, terminals, nonterminals, dictionary, eos, arcs))
    return out


def score_encoded(model, encoded, source: str, dictionary, options: Optional[StructureOptions] = None, heads=None,
                  batch_sentences: int = 64, **kwargs) -> List[SentenceScore]:
    """:func:`score_sentences` over ``(tokens, terminals, nonterminals)`` sentences (BLiMP, SyntaxGym)."""
    sentences = sentences_from_encoded(encoded, dictionary, dictionary.eos(), heads)
    return score_sentences(model, sentences, source, options, dictionary.eos(), dictionary.pad(), batch_sentences,
                           **kwargs)

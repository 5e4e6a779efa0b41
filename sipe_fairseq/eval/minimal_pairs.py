"""Minimal-pair accuracy (BLiMP protocol: the good sentence must get the higher total
log-likelihood) for sentences whose trees are known, e.g. the toy grammar's agreement pairs.

Both members of a pair get the good sentence's tags: the pairs differ in one word's number, which
leaves the dependency tree unchanged. Scored by the structure engine under ``given``
(:func:`~sipe_fairseq.structure.scoring.score_encoded`).
"""
from collections import defaultdict
from typing import Dict, Iterable, Optional, Sequence, Tuple

from ..data.encode import SentenceEncoder
from ..structure.options import StructureOptions
from ..structure.scoring import score_encoded


def pair_accuracy(model, encoder: SentenceEncoder, pairs: Iterable[Tuple[Sequence[str], Sequence[str], Sequence[int], str]],
                  batch_size: int = 32, options: Optional[StructureOptions] = None) -> Dict[str, Dict[str, float]]:
    """``pairs``: (good words, bad words, heads, uid). Returns {uid: {"correct", "total", "accuracy"}}
    plus an ``"overall"`` row. ``options``: with the checkpoint's own ``placement`` (its task's
    ``--tag-head-placement``; word-aware heads need ``last_subword``)."""
    pairs = list(pairs)
    encoded = []
    for good, bad, heads, _ in pairs:
        encoded.append(encoder.encode(good, heads)[:3])
        encoded.append(encoder.encode(bad, heads)[:3])
    d = encoder.dictionary
    scores = [s.logprob for s in score_encoded(model, encoded, "given", d, options, batch_sentences=batch_size)]
    table = defaultdict(lambda: {"correct": 0, "total": 0})
    for k, (_, _, _, uid) in enumerate(pairs):
        ok = scores[2 * k] > scores[2 * k + 1]
        for key in (uid, "overall"):
            table[key]["correct"] += int(ok)
            table[key]["total"] += 1
    for row in table.values():
        row["accuracy"] = 100.0 * row["correct"] / row["total"]
    return dict(table)

"""ΔLL over seeds, by the paired rule of ``sipe-eval seeds`` (:mod:`sipe_fairseq.eval.reports.paired`).

Rows named ``NAME-sSEED`` form a group per name and source. Two questions get the same treatment:

* *a group against a baseline group* (``--baseline NAME``): per seed, the ΔLL of surprisal over the baseline
  predictors of the row minus the baseline's (seed s with seed s); is its p(x) a better fit of reading times?
* *a group alone*: per seed, the ΔLL of the structural predictors over baseline + surprisal; do they add?

The per-seed numbers are computed on the words both sides keep (and every seed keeps), with the same folds.
The mean over seeds gets two 95% intervals: over items, a bootstrap whose every replicate draws the stories,
then the words within them (:func:`~.regression.story_word_weights`) once and applies the draw to every seed of
both sides; over seeds, Student's t of the per-seed numbers. The verdict is "better" or "worse" only with two
seeds or more and when both intervals exclude 0 on the same side (higher ΔLL is better), else "no difference
shown", with the equivalence bound (the largest difference the data exclude) of the paired rule.
"""
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..reports.paired import combined_verdict, equivalence_bound, seed_interval
from .regression import _Moments, delta_ll, fold_ids, interval, story_word_weights


@dataclass
class Design:
    """One row's regression data: ``X`` (intercept first), ``y``, each word's story and ``(story, zone)`` key."""
    X: np.ndarray
    y: np.ndarray
    story: np.ndarray
    keys: List[Tuple[int, int]]


def group_of(name: str, suffix: str = r"-s(\d+)$") -> Tuple[str, Optional[int]]:
    """``("none", 2)`` for ``none-s2``; ``(name, None)`` without a seed suffix."""
    m = re.search(suffix, name)
    return (name[:m.start()], int(m.group(1))) if m else (name, None)


def _restricted(designs: Sequence[Design]):
    """Each design on the words every one of them keeps, in one order; and those words' stories."""
    common = set(designs[0].keys)
    for d in designs[1:]:
        common &= set(d.keys)
    order = sorted(common)
    out = []
    for d in designs:
        where = {k: i for i, k in enumerate(d.keys)}
        idx = np.array([where[k] for k in order], dtype=int)
        out.append((d.X[idx], d.y[idx]))
    return out, np.array([k[0] for k in order]), len(order)


def paired(rows: Dict[int, Design], base: Optional[Dict[int, Design]], small: Sequence[int], large: Sequence[int],
           replicates: int, seed: int = 0, folds: int = 10, chunk: int = 250) -> dict:
    """The mean over seeds of (ΔLL of ``large`` over ``small`` columns in ``rows[s]``) minus the same in
    ``base[s]`` (None: minus nothing), its intervals over items and over seeds, the verdict and the bound."""
    seeds = sorted(rows) if base is None else sorted(set(rows) & set(base))
    if not seeds:
        return {"seeds": [], "error": "no seed in common with the baseline"}
    sides = [rows[s] for s in seeds] + ([base[s] for s in seeds] if base is not None else [])
    data, story, n = _restricted(sides)
    fid = fold_ids(n, folds, seed)
    point = [delta_ll(X[:, list(small)], X[:, list(large)], y, fid)[0] for X, y in data]
    k = len(seeds)
    per_seed = [point[i] - (point[k + i] if base is not None else 0.0) for i in range(k)]
    moments = [_Moments(X, y, fid) for X, y in data]
    rng = np.random.default_rng(seed)
    draws, done = [], 0
    while done < replicates:
        w = story_word_weights(story, min(chunk, replicates - done), rng).astype(float)
        vals = [m.delta(*m.sums(w), small, large) for m in moments]  # the same draw for every seed of both sides
        diff = [vals[i] - (vals[k + i] if base is not None else 0.0) for i in range(k)]
        draws.append(np.mean(diff, axis=0))
        done += len(w)
    reps = np.concatenate(draws) if draws else np.zeros(0)
    items = interval(reps)
    lo90 = interval(reps, 0.90)
    seeds_ci = seed_interval(per_seed)
    out = {"seeds": seeds, "words": n, "per_seed": dict(zip(map(str, seeds), per_seed)), "mean": float(np.mean(per_seed)),
           "ci95_items": items, "ci95_seeds": None if seeds_ci[0] is None else list(seeds_ci)}
    out["verdict"] = combined_verdict("accuracy", items, seeds_ci) if items else "no difference shown"
    if out["verdict"] == "no difference shown" and lo90:
        out["equivalence_bound"] = equivalence_bound(per_seed, (lo90[1] - lo90[0]) / 2)
    return out

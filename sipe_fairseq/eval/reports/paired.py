"""Paired comparisons of a row with a baseline over seeds, with a bootstrap interval over items.

A verdict about a model ("better than ``none``") needs more than the mean of each side: the same items
(test sentences, BLiMP pairs, SyntaxGym items) are scored by both, and seeds are paired (seed 1 of the
row with seed 1 of the baseline). For one score, :func:`paired_difference` reports

* the difference per seed on all items, and its mean over seeds (the point estimate);
* a percentile bootstrap 95% interval of that mean: each replicate draws the items with replacement
  (within each stratum: SyntaxGym suites, so that every suite keeps its item count) once, applies the
  same draw to every seed of both sides, and recomputes the mean over seeds of the differences;
* a seed interval: the mean over seeds +- Student's t (95%, n - 1 degrees of freedom) x the standard
  error of the per-seed differences, with two seeds or more. The bootstrap draws items, not trainings:
  it cannot see how much a score moves from seed to seed, which at the walkthrough's size is as large as
  the effects measured (a ``none`` 3% wider than ``none`` came out "better" at one seed on 2,077
  sentences);
* a verdict: "better" or "worse" only with two seeds or more and when both intervals exclude 0 on the
  same side, otherwise "no difference shown";
* an equivalence bound E (two one-sided tests, 95% each; two seeds or more): the largest difference the data
  exclude. E = |mean| + sqrt(h_seeds^2 + h_items^2), with h_seeds = t(0.95, n - 1) x the standard error of the
  per-seed differences and h_items half the width of the bootstrap's 90% percentile interval (5th to 95th).
  The two noises add (a test set is one draw of items, shared by every seed; a seed is one draw of a
  training), so their one-sided half-widths are added in quadrature; each seed's item noise is counted in
  both, which errs on the wide side. The promise: whatever the true difference D, |D| <= E in at least 95% of
  repetitions of the protocol (new seeds, new test items). "No difference shown" with bound E says: a
  difference larger than E is excluded, one smaller than E is neither shown nor excluded.

Items come as :class:`Items`: per item a key, a numerator, a denominator and a stratum. The statistic of
a set of items is, per kind:

* ``ppl``: ``exp(sum numerators / sum denominators)`` with negative log-likelihoods over token counts
  (perplexity per token; lower is better);
* ``accuracy``: ``100 x`` the mean over strata of ``sum numerators / sum denominators`` (BLiMP: one
  stratum, accuracy over pairs; SyntaxGym: the mean over suites of the fraction of items that pass;
  higher is better).
"""
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

KINDS = ("ppl", "accuracy")
# Student's t, two-sided 95%, by degrees of freedom (1-30); beyond 30 the normal's 1.96
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# Student's t, one-sided 95% (two-sided 90%), by degrees of freedom (1-30); beyond 30 the normal's 1.645
T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
       1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697)
LOWER_IS_BETTER = {"ppl": True, "accuracy": False}
REPLICATES = 10000  # bootstrap replicates of the item interval: the default of every caller and of --bootstrap


@dataclass
class Items:
    kind: str  # one of KINDS
    keys: List[str]
    num: List[float]
    den: List[float]
    strata: List[str]

    def aligned(self, keys: Sequence[str]) -> "Items":
        """The items in the order of ``keys`` (every key must be present)."""
        at = {k: i for i, k in enumerate(self.keys)}
        idx = [at[k] for k in keys]
        return Items(self.kind, list(keys), [self.num[i] for i in idx], [self.den[i] for i in idx],
                     [self.strata[i] for i in idx])

    def to_json(self) -> dict:
        return {"kind": self.kind, "keys": self.keys, "num": self.num, "den": self.den, "strata": self.strata}

    @staticmethod
    def from_json(d: dict) -> "Items":
        return Items(d["kind"], list(d["keys"]), list(d["num"]), list(d["den"]), list(d["strata"]))


def statistic(kind: str, num: np.ndarray, den: np.ndarray, strata_index: Sequence[np.ndarray],
              weights: Optional[np.ndarray] = None) -> np.ndarray:
    """The statistic of items under ``weights`` (replicate x item counts; None: each item once)."""
    w = np.ones((1, len(num))) if weights is None else weights
    if kind == "ppl":
        return np.exp((w @ num) / (w @ den))
    per_stratum = [(w[:, idx] @ num[idx]) / (w[:, idx] @ den[idx]) for idx in strata_index]
    return 100.0 * np.mean(per_stratum, axis=0)


def _strata_index(strata: Sequence[str]) -> List[np.ndarray]:
    order: Dict[str, List[int]] = {}
    for i, s in enumerate(strata):
        order.setdefault(s, []).append(i)
    return [np.asarray(v) for v in order.values()]


def _draw(rng: np.random.Generator, strata_index: Sequence[np.ndarray], n: int, size: int) -> np.ndarray:
    """Replicate x item counts: the items of each stratum drawn with replacement, as many as it holds."""
    counts = np.zeros((size, n))
    for idx in strata_index:
        counts[:, idx] = rng.multinomial(len(idx), np.full(len(idx), 1.0 / len(idx)), size=size)
    return counts


def paired_difference(row: Dict[str, Items], base: Dict[str, Items], replicates: int = REPLICATES, seed: int = 0,
                      chunk: int = 100) -> dict:
    """Row minus baseline for the seeds both have (``{seed: Items}`` each; the same kind). The items are
    those both sides scored at every paired seed. ``{"seeds", "per_seed", "base_per_seed", "mean", "low", "high",
    "items", "verdict", "kind", "bound", ...}`` (``base_per_seed``: the baseline's statistic per seed on those
    items; ``bound``: :func:`equivalence_bound`, None with one seed); ``ValueError`` when no seed or no item is
    shared."""
    seeds = sorted(set(row) & set(base), key=str)
    if not seeds:
        raise ValueError("no seed in common with the baseline")
    kind = row[seeds[0]].kind
    if any(x[s].kind != kind for s in seeds for x in (row, base)):
        raise ValueError("items of different kinds")
    keys = set(row[seeds[0]].keys)
    for s in seeds:
        keys &= set(row[s].keys) & set(base[s].keys)
    keys = [k for k in row[seeds[0]].keys if k in keys]
    if not keys:
        raise ValueError("no item in common with the baseline")
    sides = [(row[s].aligned(keys), base[s].aligned(keys)) for s in seeds]
    strata_index = _strata_index(sides[0][0].strata)
    arrays = [tuple((np.asarray(x.num, dtype=np.float64), np.asarray(x.den, dtype=np.float64)) for x in pair)
              for pair in sides]
    base_per_seed = [float(statistic(kind, b[0], b[1], strata_index)[0]) for _, b in arrays]
    per_seed = [float(statistic(kind, a[0], a[1], strata_index)[0]) - base for (a, _), base in zip(arrays, base_per_seed)]
    rng = np.random.default_rng(seed)
    reps = []
    for start in range(0, replicates, chunk):
        w = _draw(rng, strata_index, len(keys), min(chunk, replicates - start))
        diff = np.mean([statistic(kind, a[0], a[1], strata_index, w) - statistic(kind, b[0], b[1], strata_index, w)
                        for a, b in arrays], axis=0)
        reps.append(diff)
    reps = np.concatenate(reps)
    low, high, low90, high90 = (float(x) for x in np.percentile(reps, [2.5, 97.5, 5.0, 95.0]))
    seed_low, seed_high = seed_interval(per_seed)
    return {"kind": kind, "seeds": [str(s) for s in seeds], "per_seed": per_seed, "base_per_seed": base_per_seed,
            "mean": float(np.mean(per_seed)),
            "low": low, "high": high, "seed_low": seed_low, "seed_high": seed_high, "items": len(keys),
            "replicates": replicates, "verdict": combined_verdict(kind, (low, high), (seed_low, seed_high)),
            "low90": low90, "high90": high90, "bound": equivalence_bound(per_seed, (high90 - low90) / 2.0)}


def _t(table: Sequence[float], df: int, normal: float) -> float:
    return table[df - 1] if df <= len(table) else normal


def equivalence_bound(per_seed: Sequence[float], item_half: float) -> Optional[float]:
    """The largest difference the data exclude at 95% (two one-sided tests; module docstring): |mean| +
    sqrt(h_seeds^2 + item_half^2), h_seeds = t(0.95, n - 1) x sd / sqrt(n) over the per-seed differences,
    ``item_half`` half the bootstrap's 90% interval over items; None with fewer than two seeds (the training
    noise is not measured)."""
    n = len(per_seed)
    if n < 2:
        return None
    seed_half = _t(T95, n - 1, 1.645) * float(np.std(per_seed, ddof=1)) / np.sqrt(n)
    return abs(float(np.mean(per_seed))) + float(np.hypot(seed_half, item_half))


def seed_interval(per_seed: Sequence[float]):
    """The 95% t interval of the mean of the per-seed differences; (None, None) with fewer than two seeds."""
    n = len(per_seed)
    if n < 2:
        return None, None
    half = _t(T975, n - 1, 1.96) * float(np.std(per_seed, ddof=1)) / np.sqrt(n)
    mean = float(np.mean(per_seed))
    return mean - half, mean + half


def combined_verdict(kind: str, items: Sequence[float], seeds: Sequence[Optional[float]]) -> str:
    """:func:`verdict` when the item interval and the seed interval agree on it, else "no difference shown"
    (also with one seed: no seed interval)."""
    if seeds[0] is None:
        return "no difference shown"
    a, b = verdict(kind, *items), verdict(kind, *seeds)
    return a if a == b else "no difference shown"


def verdict(kind: str, low: float, high: float) -> str:
    """"better" / "worse" when the interval excludes 0 (the direction by ``kind``), else "no difference shown"."""
    if low <= 0.0 <= high:
        return "no difference shown"
    lower = high < 0.0
    return "better" if lower == LOWER_IS_BETTER[kind] else "worse"

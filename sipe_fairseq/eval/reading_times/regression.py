"""Ordinary least squares of reading times, the gain in log-likelihood per word, and its bootstrap interval.

*The fit.* A model is a set of predictors with an intercept, fitted by ordinary least squares
(:func:`numpy.linalg.lstsq`). Its log-likelihood is Gaussian: each word's residual r under the variance of the
residuals s^2 gives ``-ln(2 pi s^2) / 2 - r^2 / (2 s^2)``.

*Held out.* The log-likelihood is measured on words the fit did not see: the words are dealt into ``folds``
(10, a seeded shuffle), each fold is predicted by the fit on the others with their residual variance, and the
log-likelihood per word is the mean over all words (Wilcox et al. 2020). A predictor that carries nothing then
gains nothing on average (in-sample, any predictor gains about 1/(2n) per word): ``folds=1`` fits and measures
on all words (the in-sample log-likelihood).

*ΔLL per word* of a model over a nested one: the difference of their log-likelihoods per word (nats).

*The interval* (:func:`bootstrap`): a replicate draws the stories with replacement, then within each drawn story
its words with replacement (as many as it has; a story drawn twice has its words drawn twice), which gives each
word a weight (:func:`story_word_weights`); the same held-out ΔLL is computed with the weights (the folds stay
the words' own, so a word drawn twice is never both fitted and predicted), from each fold's weighted sums of
squares and cross-products (the normal equations: the same least squares, solved for every replicate at
once). The 95% interval is the 2.5th and 97.5th percentiles of the replicates.
"""
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

FOLDS = 10
REPLICATES = 10000
_RIDGE = 1e-9  # on standardized predictors: keeps the normal equations solvable, far below any real effect


def design(columns: Dict[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    """``[1, columns[names[0]], ...]`` as an (n, 1 + len(names)) matrix."""
    n = len(next(iter(columns.values()))) if columns else 0
    return np.column_stack([np.ones(n)] + [np.asarray(columns[k], dtype=float) for k in names])


def ols(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    return beta


def gaussian_loglik(residuals: np.ndarray, variance: Optional[float] = None) -> np.ndarray:
    """Each residual's Gaussian log-likelihood (variance: the residuals' own mean square by default)."""
    r = np.asarray(residuals, dtype=float)
    var = float(np.mean(r ** 2)) if variance is None else float(variance)
    return -0.5 * np.log(2 * np.pi * var) - r ** 2 / (2 * var)


def fold_ids(n: int, folds: int = FOLDS, seed: int = 0) -> np.ndarray:
    """Each of ``n`` words' fold: a seeded shuffle dealt round-robin (fold sizes differ by at most one)."""
    out = np.empty(n, dtype=int)
    out[np.random.default_rng(seed).permutation(n)] = np.arange(n) % max(1, folds)
    return out


def loglik_per_word(X: np.ndarray, y: np.ndarray, folds: np.ndarray) -> np.ndarray:
    """Each word's log-likelihood: held out (the fit on the other folds) or, with one fold, in-sample."""
    out = np.empty(len(y))
    ks = np.unique(folds)
    if len(ks) == 1:
        return gaussian_loglik(y - X @ ols(X, y))
    for k in ks:
        test = folds == k
        beta = ols(X[~test], y[~test])
        var = float(np.mean((y[~test] - X[~test] @ beta) ** 2))
        out[test] = gaussian_loglik(y[test] - X[test] @ beta, var)
    return out


def delta_ll(X_small: np.ndarray, X_large: np.ndarray, y: np.ndarray, folds: np.ndarray) -> Tuple[float, np.ndarray]:
    """(ΔLL per word of ``X_large`` over ``X_small``, each word's difference)."""
    d = loglik_per_word(X_large, y, folds) - loglik_per_word(X_small, y, folds)
    return float(d.mean()), d


def story_word_weights(story: np.ndarray, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """(replicates, n) counts: per replicate the stories drawn with replacement, then each drawn story's words
    drawn with replacement, as many as it has, once per time the story was drawn (``n_s`` draws ``c`` times
    are one multinomial of ``c n_s`` draws)."""
    names, index = np.unique(story, return_inverse=True)
    S = len(names)
    drawn = rng.integers(0, S, size=(replicates, S))
    times = np.stack([np.bincount(row, minlength=S) for row in drawn]) if replicates else np.zeros((0, S), int)
    w = np.zeros((replicates, len(story)), dtype=np.int64)
    for s in range(S):
        rows = np.flatnonzero(index == s)
        w[:, rows] = rng.multinomial(times[:, s] * len(rows), np.full(len(rows), 1.0 / len(rows)))
    return w


def _standardized(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[X | y]`` with every column but the intercept centred and scaled (no fit or ΔLL changes)."""
    Z = np.column_stack([X, y]).astype(float)
    mu, sd = Z[:, 1:].mean(axis=0), Z[:, 1:].std(axis=0)
    Z[:, 1:] = (Z[:, 1:] - mu) / np.where(sd > 0, sd, 1.0)
    return Z


def _weighted_loglik(G: np.ndarray, Gk: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Per replicate, the held-out log-likelihood summed over fold k's (weighted) words; ``G``/``Gk``:
    (r, q, q) sums of squares and cross-products of all words / of fold k, the last column y."""
    yi = G.shape[-1] - 1
    T = G - Gk
    A = T[:, cols[:, None], cols[None, :]] + _RIDGE * np.eye(len(cols))
    b = T[:, cols, yi]
    beta = np.linalg.solve(A, b[..., None])[..., 0]
    n_train = T[:, 0, 0]
    rss_train = T[:, yi, yi] - 2 * np.einsum("rp,rp->r", beta, b) + np.einsum("rp,rpq,rq->r", beta, A, beta)
    var = np.maximum(rss_train, 1e-12) / np.maximum(n_train, 1.0)
    Ak, bk = Gk[:, cols[:, None], cols[None, :]], Gk[:, cols, yi]
    rss = Gk[:, yi, yi] - 2 * np.einsum("rp,rp->r", beta, bk) + np.einsum("rp,rpq,rq->r", beta, Ak, beta)
    return -0.5 * Gk[:, 0, 0] * np.log(2 * np.pi * var) - rss / (2 * var)


class _Moments:
    """Each fold's per-word outer products of ``[X | y]`` (standardized): a replicate's weighted sums of
    squares and cross-products are one matrix product."""

    def __init__(self, X: np.ndarray, y: np.ndarray, folds: np.ndarray):
        Z = _standardized(X, y)
        self.q = Z.shape[1]
        self.masks = [folds == k for k in np.unique(folds)]
        self.outer = [np.einsum("ni,nj->nij", Z[m], Z[m]).reshape(-1, self.q * self.q) for m in self.masks]

    def sums(self, weights: np.ndarray):
        """(G, [G_k]): the (r, q, q) weighted sums over all words and over each fold."""
        Gk = [(weights[:, m] @ o).reshape(-1, self.q, self.q) for m, o in zip(self.masks, self.outer)]
        return sum(Gk), Gk

    @staticmethod
    def delta(G: np.ndarray, Gk, small: Sequence[int], large: Sequence[int]) -> np.ndarray:
        small, large = np.asarray(small), np.asarray(large)
        if len(Gk) == 1:  # in-sample: the fit and the measure on the same (weighted) words
            return _in_sample(G, large) - _in_sample(G, small)
        total = sum(_weighted_loglik(G, g, large) - _weighted_loglik(G, g, small) for g in Gk)
        return total / G[:, 0, 0]


def weighted_delta_ll(X: np.ndarray, y: np.ndarray, small: Sequence[int], large: Sequence[int], folds: np.ndarray,
                      weights: np.ndarray) -> np.ndarray:
    """Per row of ``weights`` (r, n), the held-out ΔLL per word of the columns ``large`` of ``X`` over ``small``
    (indices; 0 the intercept), the words counted with those weights. With unit weights it equals
    :func:`delta_ll` (the same least squares, by the normal equations)."""
    m = _Moments(X, y, folds)
    G, Gk = m.sums(np.atleast_2d(np.asarray(weights, dtype=float)))
    return m.delta(G, Gk, small, large)


def _in_sample(G: np.ndarray, cols: np.ndarray) -> np.ndarray:
    yi = G.shape[-1] - 1
    A = G[:, cols[:, None], cols[None, :]] + _RIDGE * np.eye(len(cols))
    b = G[:, cols, yi]
    beta = np.linalg.solve(A, b[..., None])[..., 0]
    rss = G[:, yi, yi] - 2 * np.einsum("rp,rp->r", beta, b) + np.einsum("rp,rpq,rq->r", beta, A, beta)
    n = G[:, 0, 0]
    return -0.5 * (np.log(2 * np.pi * np.maximum(rss, 1e-12) / n) + 1)


def bootstrap(X: np.ndarray, y: np.ndarray, story: np.ndarray, comparisons: Dict[str, Tuple[Sequence[int], Sequence[int]]],
              folds: np.ndarray, replicates: int = REPLICATES, seed: int = 0, chunk: int = 250) -> Dict[str, np.ndarray]:
    """Per comparison name (``(small, large)`` column indices), the ΔLL of every replicate; every comparison
    sees the same draws."""
    rng = np.random.default_rng(seed)
    moments = _Moments(X, y, folds)
    out = {name: [] for name in comparisons}
    done = 0
    while done < replicates:
        w = story_word_weights(story, min(chunk, replicates - done), rng)
        G, Gk = moments.sums(w.astype(float))
        for name, (small, large) in comparisons.items():
            out[name].append(moments.delta(G, Gk, small, large))
        done += len(w)
    return {name: np.concatenate(v) if v else np.zeros(0) for name, v in out.items()}


def interval(values: np.ndarray, level: float = 0.95) -> Optional[Tuple[float, float]]:
    if len(values) == 0:
        return None
    a = 100 * (1 - level) / 2
    lo, hi = np.percentile(values, [a, 100 - a])
    return float(lo), float(hi)

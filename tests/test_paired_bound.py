"""The equivalence bound of a paired comparison (``paired.equivalence_bound``, issue 48) against a simulation with a
known true difference.

What the bound promises (docs/evaluation.md, "Paired differences and intervals"): whatever the true difference D
between two runs (its expectation over trainings and over test items), |D| <= E in at least 95% of repetitions of
the protocol: new seeds of both runs, a new test set. So a "no difference shown" row with bound E excludes every
difference larger than E. The simulation draws seeds x items scores of a row and its baseline with a true
difference D, in three mixes of the two noises the protocol sees (a training's effect, shared by all items of
one seed; each item's own advantage, shared by all seeds; and per-seed item noise), and checks

* coverage: |D| <= E in at least 92% of the simulated repetitions (95% promised; 300 repetitions, so the
  binomial's sd is 1.3 points), at D = 0, at D near the bounds printed when nothing is there, and at D beyond
  almost all of them;
* at D = 0: the interval [-E, +E] holds 0, and the verdict calls a difference ("better"/"worse") in at most 10%
  of repetitions;
* power: a true difference as large as the 95th percentile of the bounds printed at D = 0 is called, in the
  right direction, in most repetitions (more than half), and the wrong direction almost never.

Fixed RNG seeds, counts of repetitions; nothing depends on time.
"""
import numpy as np
import pytest

from sipe_fairseq.eval.reports.paired import Items, equivalence_bound, paired_difference

SEEDS, ITEMS, REPETITIONS, BOOTSTRAP = 3, 300, 300, 200
REGIMES = {  # sd of a training's effect, of an item's own advantage, of the per-seed item noise (points)
    "training noise dominates": (1.0, 2.0, 2.0),
    "item noise dominates": (0.05, 10.0, 2.0),
    "both": (0.6, 8.0, 2.0),
}


def _simulate(rng, true_diff, seed_sd, item_sd, noise_sd):
    """``(row, base)``: ``{seed: Items}`` of accuracy-kind items whose statistic (100 x the mean) is the mean score in
    points; the row's expected advantage over both the trainings and the item population is ``true_diff``."""
    keys = [str(i) for i in range(ITEMS)]
    difficulty = rng.normal(0.0, 5.0, ITEMS)  # shared by both runs and every seed: cancels in the pairing
    advantage = true_diff + item_sd * rng.normal(size=ITEMS)  # the row's per-item advantage, shared by its seeds
    row, base = {}, {}
    for s in range(SEEDS):
        b = difficulty + seed_sd * rng.normal() + noise_sd * rng.normal(size=ITEMS)
        r = difficulty + advantage + seed_sd * rng.normal() + noise_sd * rng.normal(size=ITEMS)
        row[str(s)] = Items("accuracy", keys, list(r / 100.0), [1.0] * ITEMS, [""] * ITEMS)
        base[str(s)] = Items("accuracy", keys, list(b / 100.0), [1.0] * ITEMS, [""] * ITEMS)
    return row, base


def _repeat(rng, true_diff, regime):
    """``(bounds, verdicts)`` of REPETITIONS simulated protocols."""
    bounds, verdicts = [], []
    for _ in range(REPETITIONS):
        out = paired_difference(*_simulate(rng, true_diff, *REGIMES[regime]), replicates=BOOTSTRAP,
                                seed=int(rng.integers(1 << 30)))
        bounds.append(out["bound"]), verdicts.append(out["verdict"])
    return np.asarray(bounds), verdicts


@pytest.mark.parametrize("regime", list(REGIMES))
def test_the_bound_covers_the_true_difference_and_a_larger_one_is_called(regime):
    rng = np.random.default_rng(48)
    null_bounds, null_verdicts = _repeat(rng, 0.0, regime)
    assert np.all(null_bounds >= 0.0)  # [-E, +E] holds the true difference 0 every time
    assert sum(v != "no difference shown" for v in null_verdicts) <= 0.10 * REPETITIONS
    near, far = float(np.median(null_bounds)), float(np.percentile(null_bounds, 95))
    for true_diff in (-near, far):
        bounds, verdicts = _repeat(rng, true_diff, regime)
        covered = int(np.sum(abs(true_diff) <= bounds))
        assert covered >= 0.92 * REPETITIONS, (regime, true_diff, covered)
        right, wrong = ("better", "worse") if true_diff > 0 else ("worse", "better")
        assert verdicts.count(wrong) <= 0.05 * REPETITIONS, (regime, true_diff, verdicts.count(wrong))
        if true_diff == far:
            assert verdicts.count(right) > 0.5 * REPETITIONS, (regime, true_diff, verdicts.count(right))


def test_the_bound_by_hand():
    """|mean| + sqrt(h_seeds^2 + h_items^2), h_seeds = t(0.95, n - 1) sd / sqrt(n); none with one seed."""
    per_seed = [0.09, 1.30, -0.39]
    mean, sd = np.mean(per_seed), np.std(per_seed, ddof=1)
    h_seeds = 2.920 * sd / np.sqrt(3)
    assert equivalence_bound(per_seed, 0.4) == pytest.approx(abs(mean) + np.hypot(h_seeds, 0.4))
    assert equivalence_bound(per_seed, 0.0) == pytest.approx(abs(mean) + h_seeds)
    assert equivalence_bound([0.5], 0.4) is None


def test_the_tables_print_the_bound_on_rows_without_a_verdict():
    """``sipe-eval seeds``' table prints ±E where there is no verdict and "-" where there is one; ``sipe-eval scale``
    scales E by 100 / the baseline's perplexity, as its other numbers."""
    from collections import OrderedDict

    from sipe_fairseq.eval.reports.scale import relative_difference
    from sipe_fairseq.eval.reports.seeds import markdown_paired

    rng = np.random.default_rng(7)
    keys = [str(i) for i in range(200)]
    tokens = [10.0] * 200

    def ppl_items(nll_per_token):
        return Items("ppl", keys, list(10.0 * (nll_per_token + 0.3 * rng.normal(size=200))), tokens, [""] * 200)

    base = {s: ppl_items(4.6) for s in "123"}
    def shifted(shift):  # the baseline's sentences, every one moved by ``shift`` nats per token
        return {s: Items("ppl", keys, [x + 10.0 * shift[i] for x in base[s].num], tokens, [""] * 200)
                for i, s in enumerate("123")}

    same = shifted([0.02, -0.02, 0.005])  # per-seed differences of both signs: the seeds hold 0
    far = shifted([0.4, 0.4, 0.4])
    table = OrderedDict(same=OrderedDict(x=paired_difference(same, base, replicates=200)),
                        far=OrderedDict(x=paired_difference(far, base, replicates=200)))
    assert table["same"]["x"]["verdict"] == "no difference shown" and table["far"]["x"]["verdict"] == "worse"
    lines = {line.split("|")[1].strip(): line for line in markdown_paired(table, "base").splitlines()
             if line.startswith("| same") or line.startswith("| far")}
    assert lines["same"].rstrip(" |").endswith(f"±{table['same']['x']['bound']:.2f}")
    assert lines["far"].rstrip().endswith("| worse | - |")
    rel = relative_difference(same, base, replicates=200)
    assert rel["percent_bound"] == pytest.approx(100.0 * rel["paired"]["bound"] / rel["baseline_ppl"])

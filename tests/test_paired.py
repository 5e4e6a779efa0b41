"""Paired comparisons over seeds (sipe_fairseq/eval/reports/paired.py, sipe-eval seeds --baseline): the point estimate
against a direct computation, the bootstrap interval against normal theory, stratified draws, and the command on
sipe-eval-lm, BLiMP and SyntaxGym reports."""
import json
import math

import numpy as np
import pytest

from sipe_fairseq.cli.eval import main
from sipe_fairseq.eval.reports.paired import Items, _draw, _strata_index, paired_difference, verdict


def _ppl_items(nll, tokens, keys=None):
    keys = keys or [str(i) for i in range(len(nll))]
    return Items("ppl", list(keys), list(map(float, nll)), list(map(float, tokens)), [""] * len(nll))


def test_point_estimate_is_the_mean_of_per_seed_perplexity_differences():
    rng = np.random.default_rng(1)
    tokens = rng.integers(3, 30, size=50)
    row = {s: rng.uniform(2, 5, size=50) * tokens for s in "123"}
    base = {s: rng.uniform(2, 5, size=50) * tokens for s in "123"}
    out = paired_difference({s: _ppl_items(v, tokens) for s, v in row.items()},
                            {s: _ppl_items(v, tokens) for s, v in base.items()}, replicates=200)
    direct = [math.exp(row[s].sum() / tokens.sum()) - math.exp(base[s].sum() / tokens.sum()) for s in "123"]
    np.testing.assert_allclose(out["per_seed"], direct, rtol=1e-12)
    np.testing.assert_allclose(out["mean"], np.mean(direct), rtol=1e-12)
    assert out["items"] == 50 and out["seeds"] == ["1", "2", "3"]
    assert out["low"] <= out["mean"] <= out["high"]


def test_items_are_aligned_by_key_and_restricted_to_common_ones():
    tokens = [10.0] * 4
    row = _ppl_items([20, 30, 40, 50], tokens, keys=["a", "b", "c", "d"])
    base = _ppl_items([50, 40, 20], tokens[:3], keys=["d", "c", "a"])  # reordered, "b" missing
    out = paired_difference({"1": row}, {"1": base}, replicates=100)
    assert out["items"] == 3  # a, c, d
    np.testing.assert_allclose(out["per_seed"][0], 0.0, atol=1e-12)  # the same values once aligned
    assert out["low"] == out["high"] == 0.0 and out["verdict"] == "no difference shown"


def test_interval_matches_normal_theory_for_a_paired_accuracy_difference():
    rng = np.random.default_rng(7)
    n = 4000
    base = (rng.random(n) < 0.6).astype(float)
    flip = rng.random(n) < 0.1  # the row differs on 10% of the items, mostly for the better
    row = np.where(flip, (rng.random(n) < 0.8).astype(float), base)
    keys = [str(i) for i in range(n)]
    out = paired_difference({"1": Items("accuracy", keys, list(row), [1.0] * n, [""] * n)},
                            {"1": Items("accuracy", keys, list(base), [1.0] * n, [""] * n)}, replicates=4000, seed=3)
    d = 100.0 * (row - base)
    half = 1.96 * d.std(ddof=1) / math.sqrt(n)
    np.testing.assert_allclose(out["mean"], d.mean(), rtol=1e-12)
    # percentile bootstrap vs the normal interval: Monte Carlo error of 4,000 replicates is about 2-3% of the width
    assert abs((out["high"] - out["low"]) - 2 * half) < 0.1 * 2 * half
    assert abs((out["high"] + out["low"]) / 2 - d.mean()) < 0.1 * half
    assert out["seed_low"] is None and out["verdict"] == "no difference shown"  # one seed: no verdict


def test_seed_interval_and_verdict_need_the_seeds_to_agree():
    """Two seeds: the t interval is mean +- t(0.975, 1) x |d1 - d2| / 2; the item interval excludes 0 in both
    cases below, the verdict follows the seeds."""
    n = 300
    keys = [str(i) for i in range(n)]
    base = np.random.default_rng(11).uniform(3, 4, size=n)
    tokens = [10.0] * n

    def side(values):
        return Items("ppl", keys, [float(v) * 10 for v in values], tokens, [""] * n)

    for row_factors, want in (((0.95, 0.948), "better"), ((0.90, 1.02), "no difference shown")):
        out = paired_difference({s: side(base * f) for s, f in zip("12", row_factors)}, {"1": side(base), "2": side(base)},
                                replicates=500, seed=1)
        np.testing.assert_allclose(out["per_seed"], [np.exp((base * f).mean()) - np.exp(base.mean())
                                                     for f in row_factors], rtol=1e-9)
        half = 12.706 * abs(out["per_seed"][0] - out["per_seed"][1]) / 2
        np.testing.assert_allclose([out["seed_low"], out["seed_high"]], [out["mean"] - half, out["mean"] + half], rtol=1e-9)
        assert out["high"] < 0  # the items alone would say "better" in both cases
        assert out["verdict"] == want, out


def test_stratified_draws_keep_every_stratum_size():
    strata = ["a"] * 5 + ["b"] * 2 + ["c"] * 9
    idx = _strata_index(strata)
    counts = _draw(np.random.default_rng(0), idx, len(strata), 300)
    for s, size in (("a", 5), ("b", 2), ("c", 9)):
        cols = [i for i, x in enumerate(strata) if x == s]
        assert (counts[:, cols].sum(1) == size).all()
    assert counts.std(0).min() > 0  # items are drawn, not copied


def test_verdict_direction():
    assert verdict("ppl", -3.0, -0.5) == "better" and verdict("ppl", 0.5, 3.0) == "worse"
    assert verdict("accuracy", 0.5, 3.0) == "better" and verdict("accuracy", -3.0, -0.5) == "worse"
    assert verdict("accuracy", -0.1, 3.0) == "no difference shown"


def _lm_report(name, nll, tokens):
    return {name: {"lm": {"ppl": 1.0}, "tag_sources": {"self": {
        "ppl": math.exp(sum(nll) / sum(tokens)), "ppl_per_word": 1.0,
        "per_sentence": {"nll": list(nll), "tokens": list(tokens), "words": [t - 1 for t in tokens]}}}}}


def _gym_report(passes):
    """A sipe-eval syntaxgym report with models none and own under self, two suites of unequal size."""
    items = [{"suite": suite, "item": i + 1, "results": {col: {"scored": True, "pass": bool(p)} for col, p in cols.items()}}
             for suite, rows in passes.items() for i, cols in enumerate(rows)]
    overall = {}
    for col in ("none [self]", "own [self]"):
        per_suite = [np.mean([r[col] for r in rows]) for rows in passes.values()]
        overall[col] = {"accuracy": float(np.mean(per_suite))}
    return {"models": ["none", "own"], "suites": list(passes), "items": items, "overall": overall}


def test_seeds_baseline_on_lm_and_syntaxgym_reports(tmp_path, capsys):
    rng = np.random.default_rng(5)
    tokens = list(rng.integers(5, 20, size=40))
    files = []
    expect = []
    for s in (1, 2):
        nll_none = rng.uniform(3, 4, size=40) * np.array(tokens)
        nll_own = nll_none * 0.9  # 10% fewer nats on every sentence: better at every draw
        expect.append(math.exp(nll_own.sum() / sum(tokens)) - math.exp(nll_none.sum() / sum(tokens)))
        for name, nll in (("none", nll_none), ("own", nll_own)):
            f = tmp_path / f"{name}-s{s}.json"
            f.write_text(json.dumps(_lm_report(name, [float(x) for x in nll], [int(t) for t in tokens])))
            files.append(str(f))
        passes = {"s_big": [{"none [self]": i % 2, "own [self]": i % 2} for i in range(6)],
                  "s_small": [{"none [self]": 0, "own [self]": 1}, {"none [self]": 1, "own [self]": 1}]}
        f = tmp_path / f"syntaxgym-s{s}.json"
        f.write_text(json.dumps(_gym_report(passes)))
        files.append(str(f))
    out = tmp_path / "agg.json"
    assert main(["seeds", *files, "--baseline", "none", "--bootstrap", "500", "--json", str(out)]) == 0
    paired = json.loads(out.read_text())["paired"]
    assert paired["baseline"] == "none"
    own = paired["rows"]["own"]
    np.testing.assert_allclose(own["self"]["per_seed"], expect, rtol=1e-9)
    seed_high = np.mean(expect) + 12.706 * abs(expect[0] - expect[1]) / 2  # t(0.975, 1 df) x the standard error
    assert own["self"]["high"] < 0
    assert own["self"]["verdict"] == ("better" if seed_high < 0 else "no difference shown")
    gym = own["SyntaxGym self"]
    assert gym["items"] == 8 and gym["per_seed"] == [25.0, 25.0]  # s_small: 50 -> 100, s_big level; mean over 2 suites
    assert gym["low"] >= 0.0  # the big suite never differs and the small one never gets worse
    text = capsys.readouterr().out
    assert "vs none" in text and "95% interval over seeds" in text


def test_seeds_baseline_refusals(tmp_path, caplog):
    f = tmp_path / "own-s1.json"
    f.write_text(json.dumps({"own": {"lm": {"ppl": 1.0}, "tag_sources": {"self": {"ppl": 2.0, "ppl_per_word": 3.0}}}}))
    g = tmp_path / "none-s1.json"
    g.write_text(json.dumps({"none": {"lm": {"ppl": 1.0}, "tag_sources": {"self": {"ppl": 2.0, "ppl_per_word": 3.0}}}}))
    assert main(["seeds", str(f), str(g), "--baseline", "nobody"]) == 2
    assert "--baseline nobody: no such row" in caplog.text
    caplog.clear()
    assert main(["seeds", str(f), str(g), "--baseline", "none"]) == 2
    assert "no score with per-item records" in caplog.text


@pytest.mark.parametrize("n", [0])
def test_no_common_seed_is_an_error(n):
    with pytest.raises(ValueError, match="no seed in common"):
        paired_difference({"1": _ppl_items([1.0], [1.0])}, {"2": _ppl_items([1.0], [1.0])})


def test_blimp_report_records_each_scored_pair():
    from sipe_fairseq.eval.blimp import BlimpPair, compute_report
    from sipe_fairseq.eval.reports.seeds import suite_rows
    pairs = [BlimpPair(good=f"good {i}", bad=f"bad {i}", uid="p" + str(i % 3), pair_id=str(i), field="syntax",
                       term="t", location=f"f:{i}") for i in range(30)]
    rng = np.random.default_rng(2)
    scores = {"m": {}}
    for p in pairs:
        scores["m"][p.good], scores["m"][p.bad] = rng.normal(size=2)
    skipped = {"good 4": "too long"}
    unscored = {"m": {"bad 7": "no tree"}}
    report = compute_report(pairs, scores, skipped, unscored)
    items = suite_rows(report)["m"]["suite_items"]["BLiMP given"]
    assert len(items["keys"]) == report["overall"]["scored"] - report["overall"]["unscored"]["m"] == 28
    assert sum(items["num"]) == report["overall"]["correct"]["m"]
    assert "p1/4" not in items["keys"] and "p1/7" not in items["keys"]


def test_blimp_every_nth_keeps_each_paradigms_fixed_sample(tmp_path, caplog):
    from sipe_fairseq.eval.blimp import every_nth, read_blimp
    for uid, n in (("a", 25), ("b", 7)):
        (tmp_path / f"{uid}.jsonl").write_text("".join(json.dumps({"sentence_good": f"{uid} good {i}",
                                                                   "sentence_bad": f"{uid} bad {i}", "pairID": str(i)})
                                                       + "\n" for i in range(n)), encoding="utf-8")
    pairs = read_blimp([tmp_path])
    kept = every_nth(pairs, 10)
    assert [(p.uid, p.pair_id) for p in kept] == [("a", "0"), ("a", "10"), ("a", "20"), ("b", "0")]
    assert every_nth(pairs, 1) == pairs
    with pytest.raises(SystemExit) as exit_:
        main(["blimp", "--data", str(tmp_path), "--path", "x.pt", "--blimp", str(tmp_path), "--every", "0"])
    assert exit_.value.code == 2

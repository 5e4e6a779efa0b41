"""The reading-time evaluation's parts (sipe_fairseq/eval/reading_times): the alignment of model words to the
words the readers saw (punctuation, quotes, contractions, brackets; every failure counted), the exclusions,
the least squares against a closed form, the held-out ΔLL of pure noise (about 0) and of a planted predictor
(about ln(1 + b^2) / 2 when the predictor and the noise have unit variance), the weighted normal equations of
the bootstrap against least squares on duplicated words, and the bootstrap's draws (stories, then words)."""
import csv
import math
from pathlib import Path

import numpy as np
import pytest

from sipe_fairseq.eval.reading_times import (AlignmentError, ScoredSentence, UnigramCounts, align, build_table,
                                             check_alignment, delta_ll, has_punctuation, normalize, read_corpus,
                                             story_word_weights, weighted_delta_ll, word_length, zone_scores)
from sipe_fairseq.eval.reading_times.predictors import EXCLUSIONS, RT_RANGE
from sipe_fairseq.eval.reading_times.regression import design, fold_ids, ols

SYNTHETIC = Path(__file__).resolve().parent / "data" / "naturalstories_synthetic"

# a made-up excerpt, written as the corpus writes its zones and its parses their tokens
ZONES = ["'Don't", "go,'", "she", "said,", "\"it's", "long-bearded", "(really)", "nonsense!\""]
WORDS = ["``", "Do", "n't", "go", ",", "''", "she", "said", ",", '"', "it", "'s", "long-bearded", "(", "really", ")",
         "nonsense", "!", '"']
EXPECTED = [0, 0, 0, 1, 1, 1, 2, 3, 3, 4, 4, 4, 5, 6, 6, 6, 7, 7, 7]  # the zone of each model word


def test_alignment_with_punctuation_quotes_and_contractions():
    keys = [("s", z) for z in range(len(ZONES))]
    a = align(list(zip(keys, ZONES)), WORDS)
    assert a.unaligned_zones == [] and a.unaligned_words == []
    assert [k[1] for k in a.word_zone] == EXPECTED
    assert a.zone_words[("s", 0)] == [0, 1, 2] and a.zone_words[("s", 7)] == [16, 17, 18]
    assert normalize("``a''") == normalize("'a'") == normalize("\u201ca\u201d") == '"a"'


def test_every_unaligned_word_is_counted():
    keys = [("s", z) for z in range(len(ZONES))]
    unk = WORDS[:16] + ["<unk>", "!", '"']  # an unknown word's placeholder: its zone cannot be scored
    a = align(list(zip(keys, ZONES)), unk)
    assert [k for k, _, _ in a.unaligned_zones] == [("s", 7)]
    assert {w for w, _, _ in a.unaligned_words} == {16, 17, 18}  # <unk>, and the words of the zone it spoils
    assert all(a.word_zone[w] is not None for w in range(16))
    merged = WORDS[:6] + ["shesaid"] + WORDS[8:]  # a model word across two zones
    b = align(list(zip(keys, ZONES)), merged)
    assert sorted(k for k, _, _ in b.unaligned_zones) == [("s", 2), ("s", 3)]
    assert any(why == "crosses zones" for _, _, why in b.unaligned_words)
    assert len(b.zone_words) == len(ZONES) - 2


def test_punctuation_and_length_rules():
    for word in ("long-bearded", "don't", "It's", "mill"):
        assert not has_punctuation(word), word
    for word in ("'Do", "England,", "(red", "boar?'", "-ish"):
        assert has_punctuation(word), word
    assert word_length("England,") == 7 and word_length("'fog'.") == 3 and word_length("don't") == 5


def _rows():
    with open(SYNTHETIC / "naturalstories_RTS" / "processed_wordinfo.tsv", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_synthetic_corpus_aligns_and_exclusions_are_counted():
    corpus = read_corpus(SYNTHETIC)
    rows = _rows()
    assert corpus.zone_count() == len(rows) and len(corpus.stories) == 3
    scored = [ScoredSentence(s.words, [1.0 + 0.1 * len(w) for w in s.words]) for s in corpus.sentences]
    scores, report = zone_scores(corpus, scored)
    assert report["unaligned_zones"] == 0 and report["unaligned_model_words"] == 0 and len(scores) == len(rows)
    assert sum(s["model_words"] for s in report["per_story"].values()) == sum(len(s.words) for s in corpus.sentences)
    counts = UnigramCounts.from_words([w for s in corpus.sentences for w in s.words], "the excerpt itself")
    table = build_table(corpus.stories, scores, counts)
    # the exclusions, recounted here from the file, each word under its first rule
    last = {}
    for r in rows:
        last[r["item"]] = max(last.get(r["item"], 0), int(r["zone"]))
    edge = [r for r in rows if r["zone"] == "1" or int(r["zone"]) == last[r["item"]]]
    punct = [r for r in rows if r not in edge and has_punctuation(r["word"])]
    slow = [r for r in rows if r not in edge and r not in punct
            and not RT_RANGE[0] <= float(r["meanItemRT"]) <= RT_RANGE[1]]
    second = [r for r in rows if r["zone"] == "2" and r not in punct and r not in slow]  # no word t-2
    assert table.excluded == {EXCLUSIONS[0]: 6, EXCLUSIONS[1]: len(punct), EXCLUSIONS[2]: len(slow), EXCLUSIONS[3]: 0,
                              EXCLUSIONS[4]: len(second)}
    assert len(slow) == 2 and len(table) + sum(table.excluded.values()) == len(rows)
    # the spill-over columns are the previous words' values
    z = {(int(r["item"]), int(r["zone"])): r for r in rows}
    for k in range(len(table)):
        item, zone = int(table.story[k]), int(table.zone[k])
        assert table.columns["surprisal_1"][k] == pytest.approx(scores[item, zone - 1].surprisal)
        assert table.columns["length_2"][k] == word_length(z[item, zone - 2]["word"])
        assert table.rt[k] == pytest.approx(float(z[item, zone]["meanItemRT"]))


def test_more_than_one_percent_unaligned_is_an_error_naming_the_first():
    corpus = read_corpus(SYNTHETIC)
    scored = [ScoredSentence(s.words, [1.0] * len(s.words)) for s in corpus.sentences]
    scored[4] = ScoredSentence([], [], error="longer than the model's positions")
    _, report = zone_scores(corpus, scored)
    n = len(set(corpus.sentences[4].zones))
    assert report["unaligned_zones"] == n and report["per_story"][1]["unscored_sentences"] == 1
    assert len(report["unaligned"]) == n  # listed, every one
    with pytest.raises(AlignmentError, match=r"sentence 5 .*longer than the model's positions"):
        check_alignment(report, "m under self")
    report["unaligned_fraction"] = 0.01  # at the limit: allowed
    check_alignment(report, "m under self")


def test_least_squares_against_the_closed_form_of_two_predictors():
    rng = np.random.default_rng(3)
    n = 400
    x1, x2 = rng.normal(size=n), 0.6 * rng.normal(size=n) + 0.3 * rng.normal(size=n)
    x2 = x2 + 0.5 * x1  # correlated predictors
    y = 2.0 + 1.5 * x1 - 0.7 * x2 + rng.normal(size=n)
    beta = ols(design({"a": x1, "b": x2}, ["a", "b"]), y)
    c = np.cov(np.vstack([x1, x2, y]), bias=True)
    det = c[0, 0] * c[1, 1] - c[0, 1] ** 2
    b1 = (c[1, 1] * c[0, 2] - c[0, 1] * c[1, 2]) / det
    b2 = (c[0, 0] * c[1, 2] - c[0, 1] * c[0, 2]) / det
    assert beta[1:] == pytest.approx([b1, b2], abs=1e-10)
    assert beta[0] == pytest.approx(y.mean() - b1 * x1.mean() - b2 * x2.mean(), abs=1e-10)
    # in-sample ΔLL per word of x2 over x1 is -ln(RSS_large / RSS_small) / 2
    small, large = design({"a": x1}, ["a"]), design({"a": x1, "b": x2}, ["a", "b"])
    rss = [float(np.sum((y - X @ ols(X, y)) ** 2)) for X in (small, large)]
    est, per_word = delta_ll(small, large, y, np.zeros(n, dtype=int))
    assert est == pytest.approx(-0.5 * math.log(rss[1] / rss[0]), abs=1e-12) and len(per_word) == n


def _draws(b: float, draws: int, n: int, rng):
    out = []
    for _ in range(draws):
        base, x = rng.normal(size=n), rng.normal(size=n)
        y = 0.8 * base + b * x + rng.normal(size=n)
        cols = {"base": base, "x": x}
        out.append(delta_ll(design(cols, ["base"]), design(cols, ["base", "x"]), y, fold_ids(n, 10, 0))[0])
    return np.asarray(out)


def test_held_out_delta_ll_of_noise_is_about_zero_and_of_a_planted_predictor_positive():
    rng = np.random.default_rng(11)
    draws, n = 200, 500
    noise = _draws(0.0, draws, n, rng)
    se = noise.std(ddof=1) / math.sqrt(draws)
    # held out, a predictor that carries nothing costs about 1/(2n) per word: |mean| within 4 se of 0 and of that
    assert abs(noise.mean()) < 4 * se + 1.0 / n and noise.mean() < 4 * se
    planted = _draws(0.3, draws, n, rng)
    se_p = planted.std(ddof=1) / math.sqrt(draws)
    expected = 0.5 * math.log(1 + 0.3 ** 2)  # ln of the residual variances' ratio, halved
    assert planted.mean() > 10 * se_p and abs(planted.mean() - expected) < 4 * se_p + 2.0 / n
    assert (planted > 0).mean() > 0.99


def test_weighted_normal_equations_equal_least_squares_on_duplicated_words():
    rng = np.random.default_rng(5)
    n = 120
    cols = {k: rng.normal(size=n) for k in ("a", "b", "c")}
    y = 1 + cols["a"] - 0.5 * cols["c"] + rng.normal(size=n)
    X = design(cols, ["a", "b", "c"])
    folds = fold_ids(n, 5, 2)
    for f in (folds, np.zeros(n, dtype=int)):
        ones = weighted_delta_ll(X, y, [0, 1], [0, 1, 2, 3], f, np.ones((1, n)))[0]
        assert ones == pytest.approx(delta_ll(X[:, [0, 1]], X, y, f)[0], abs=1e-9)
        w = rng.integers(0, 3, size=n)
        rep = np.repeat(np.arange(n), w)  # the words drawn w times, each keeping its fold
        dup = delta_ll(X[rep][:, [0, 1]], X[rep], y[rep], f[rep])[0]
        assert weighted_delta_ll(X, y, [0, 1], [0, 1, 2, 3], f, w[None, :])[0] == pytest.approx(dup, abs=1e-9)


def test_the_bootstrap_draws_stories_then_words():
    sizes = {0: 1, 1: 2, 2: 50}
    story = np.repeat(list(sizes), list(sizes.values()))
    R = 4000
    w = story_word_weights(story, R, np.random.default_rng(7))
    assert w.shape == (R, len(story))
    per_story = np.stack([w[:, story == s].sum(axis=1) for s in sizes], axis=1)
    times = per_story / np.array(list(sizes.values()))
    # each story's total is its size times the number of times it was drawn, and three stories are drawn
    assert np.all(times == np.round(times)) and np.all(times.sum(axis=1) == 3)
    absent = (times[:, 2] == 0).mean()
    p = (2 / 3) ** 3
    assert abs(absent - p) < 4 * math.sqrt(p * (1 - p) / R)
    # within a story drawn once, its words are drawn with replacement (not each once)
    once = times[:, 2] == 1
    big = w[once][:, story == 2]
    assert (big != 1).any(axis=1).mean() > 0.99
    assert abs(big.mean() - 1) < 0.01 and abs(big.var() - (1 - 1 / 50)) < 0.05


def test_structural_predictors_come_from_the_per_word_fields():
    from collections import Counter

    from sipe_fairseq.eval.reading_times import analyse

    corpus = read_corpus(SYNTHETIC)
    rt = {(z.item, z.zone): z.rt for story in corpus.stories.values() for z in story}
    scored = []
    for s in corpus.sentences:
        per_zone = Counter(s.zones)
        planted = [(rt[k] - 300) / per_zone[k] for k in s.zones]  # summed over a zone: its reading time - 300
        scored.append(ScoredSentence(s.words, [1.0 + 0.1 * len(w) for w in s.words], planted,
                                     [0.5 * j for j in range(len(s.words))]))
    scores, _ = zone_scores(corpus, scored)
    s = corpus.sentences[0]
    last = max(j for j, k in enumerate(s.zones) if k == s.zones[-1])
    assert scores[s.zones[-1]].structure_entropy == 0.5 * last  # the entropy at the zone's last model word
    assert scores[s.zones[-1]].structure_surprisal == pytest.approx(rt[s.zones[-1]] - 300)
    counts = UnigramCounts.from_words([w for x in corpus.sentences for w in x.words], "the excerpt itself")
    out = analyse(corpus, scores, counts, structural=True, replicates=50)
    assert out["delta_ll"]["structural"]["estimate"] > 1  # the planted predictor fits the reading times exactly
    plain = analyse(corpus, scores, counts, structural=False, replicates=50)
    assert "structural" not in plain["delta_ll"] and plain["words"] == out["words"]


def _design(rng, informative: float, n: int = 600, drop=()):
    """A Design of n words in 6 stories: seven baseline columns, then three surprisal columns of which the
    first predicts y with weight ``informative``; the words in ``drop`` left out."""
    from sipe_fairseq.eval.reading_times.compare import Design

    base = rng.normal(size=(n, 7))
    surprisal = rng.normal(size=(n, 3))
    y = 300 + base @ np.linspace(1, 2, 7) + informative * surprisal[:, 0] + rng.normal(scale=1.0, size=n)
    keys = [(k % 6, k) for k in range(n)]
    keep = [k for k in range(n) if k not in set(drop)]
    X = np.column_stack([np.ones(n), base, surprisal])[keep]
    return Design(X, y[keep], np.array([keys[k][0] for k in keep]), [keys[k] for k in keep])


def test_paired_over_seeds_same_draws_verdicts_and_common_words():
    from sipe_fairseq.eval.reading_times.compare import group_of, paired

    rng = np.random.default_rng(21)
    small, large = list(range(8)), list(range(11))
    rows = {s: _design(rng, 0.8) for s in (1, 2, 3)}
    same = paired(rows, rows, small, large, replicates=300, seed=1)
    # the same draw for every seed of both sides: a row against itself differs by exactly 0 in every replicate
    assert same["per_seed"] == {"1": 0.0, "2": 0.0, "3": 0.0} and same["ci95_items"] == (0.0, 0.0)
    assert same["verdict"] == "no difference shown"
    noise = {s: _design(rng, 0.0) for s in (1, 2, 3)}
    better = paired(rows, noise, small, large, replicates=300, seed=1)
    expected = 0.5 * math.log(1 + 0.8 ** 2)  # the planted predictor's gain, per word, when the other gains nothing
    assert better["verdict"] == "better" and better["ci95_items"][0] > 0 and better["ci95_seeds"][0] > 0
    assert abs(better["mean"] - expected) < 0.1
    assert paired(noise, rows, small, large, replicates=300, seed=1)["verdict"] == "worse"
    one = paired({1: rows[1]}, {1: noise[1]}, small, large, replicates=300, seed=1)
    assert one["ci95_items"][0] > 0 and one["ci95_seeds"] is None and one["verdict"] == "no difference shown"
    alone = paired(rows, None, small, large, replicates=300, seed=1)  # a group's own ΔLL over its seeds
    assert alone["verdict"] == "better" and alone["mean"] == pytest.approx(np.mean(list(alone["per_seed"].values())))
    fewer = paired(rows, {1: _design(rng, 0.0, drop=range(50)), 2: noise[2]}, small, large, replicates=50, seed=1)
    assert fewer["seeds"] == [1, 2] and fewer["words"] == 550  # the words every seed of both sides keeps
    assert group_of("none-s12") == ("none", 12) and group_of("gilt") == ("gilt", None)

"""sipe-eval seeds: grouping by seed suffix, mean/sd/min/max against numpy, exit status on bad input."""
import json

import numpy as np

from sipe_fairseq.cli.eval import main


def _row(lm, per_word, sources):
    return {"lm": {"ppl": lm}, "lm.per_word": {"ppl": per_word},
            "tag_sources": {s: {"ppl": v, "ppl_per_word": 2 * v} for s, v in sources.items()}}


def test_seeds_groups_and_statistics(tmp_path, capsys):
    rng = np.random.default_rng(0)
    values = {f"position-s{s}": rng.uniform(50, 200, size=3) for s in (1, 2, 3)}
    values["none-s1"] = rng.uniform(50, 200, size=3)
    files = []
    for name, (lm, self_, beam) in values.items():
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps({name: _row(lm, lm * 3, {"self": self_, "beam:4": beam})}))
        files.append(str(f))
    out = tmp_path / "agg.json"
    assert main(["seeds", *files, "--json", str(out), "--per", "word"]) == 0
    table = json.loads(out.read_text())
    assert list(table) == ["position", "none"]
    pos = np.array([values[f"position-s{s}"] for s in (1, 2, 3)])
    got = table["position"]
    assert got["blocks p(x|tags)"]["n"] == 3 and got["self"]["seeds"] == ["position-s1", "position-s2", "position-s3"]
    np.testing.assert_allclose(got["blocks p(x|tags)"]["mean"], (3 * pos[:, 0]).mean())
    np.testing.assert_allclose(got["self"]["mean"], (2 * pos[:, 1]).mean())
    np.testing.assert_allclose(got["beam:4"]["sd"], (2 * pos[:, 2]).std(ddof=1))
    np.testing.assert_allclose(got["beam:4"]["max"], (2 * pos[:, 2]).max())
    assert table["none"]["self"]["n"] == 1
    text = capsys.readouterr().out
    assert "(1 seed)" in text and "(n=3)" in text


def test_seeds_bad_report_is_one_line(tmp_path, caplog):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    assert main(["seeds", str(bad)]) == 2
    assert len(caplog.records) == 1 and "bad.json" in caplog.records[0].getMessage()
    dup = tmp_path / "a.json"
    dup.write_text(json.dumps({"x-s1": _row(1.0, 2.0, {})}))
    assert main(["seeds", str(dup), str(dup)]) == 2


def test_seed_from_file_name_and_column_order(tmp_path, capsys):
    """section5.sh writes row 'position' into position-s2.json: the file's seed names the row; columns
    come in a fixed order (given, given-joint, self, beam:K by K), whatever order the JSON keys have."""
    files = []
    for s, v in ((1, 10.0), (2, 20.0)):
        f = tmp_path / f"position-s{s}.json"
        sources = {"beam:16": v + 3, "beam:4": v + 2, "given": v, "self": v + 1, "beam-word:4": v + 4}
        f.write_text(json.dumps({"position": _row(v, v, sources)}))
        files.append(str(f))
    out = tmp_path / "agg.json"
    assert main(["seeds", *files, "--json", str(out)]) == 0
    table = json.loads(out.read_text())
    assert list(table) == ["position"] and table["position"]["self"]["seeds"] == ["position-s1", "position-s2"]
    assert table["position"]["beam:16"]["mean"] == 18.0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.split(" | ")[1:] == ["blocks p(x|tags)", "given", "self", "beam:4", "beam:16", "beam-word:4 |"]


def test_blimp_and_syntaxgym_reports_join_the_model_rows(tmp_path, capsys):
    """BLiMP reports (compute_report's own output) and SyntaxGym reports add each column's overall accuracy
    to the row of its model and seed: 'position [self]' -> row position-sN, score 'BLiMP self'."""
    from sipe_fairseq.eval.blimp import BlimpPair, compute_report

    pairs = [BlimpPair(f"good {i}", f"bad {i}", "uid", str(i), "f", "t", f"x:{i}") for i in range(4)]
    files = []
    for seed, n_right in ((1, 3), (2, 1)):  # 'position' gets n_right of 4 pairs right, 'position [self]' all 4
        scores = {"position": {p.good: float(k < n_right) for k, p in enumerate(pairs)},
                  "position [self]": {p.good: 1.0 for p in pairs}}
        for name in scores:
            scores[name].update({p.bad: 0.5 for p in pairs})
        blimp = tmp_path / f"blimp-s{seed}.json"
        blimp.write_text(json.dumps(compute_report(pairs, scores, {})))
        gym = tmp_path / f"syntaxgym-s{seed}.json"
        gym.write_text(json.dumps({"suites": {}, "overall": {
            "position": {"accuracy": 0.25 * seed, "suites": 2, "suites_unscored": 0},
            "position [self]": {"accuracy": None, "suites": 0, "suites_unscored": 2}}}))
        lm = tmp_path / f"position-s{seed}.json"
        lm.write_text(json.dumps({"position": _row(10.0 * seed, 1.0, {"self": 20.0 * seed})}))
        files += [str(lm), str(blimp), str(gym)]
    out = tmp_path / "agg.json"
    assert main(["seeds", *files, "--json", str(out)]) == 0
    got = json.loads(out.read_text())["position"]
    np.testing.assert_allclose(got["BLiMP given"]["mean"], np.mean([75.0, 25.0]))
    np.testing.assert_allclose(got["BLiMP given"]["sd"], np.std([75.0, 25.0], ddof=1))
    assert got["BLiMP self"]["min"] == got["BLiMP self"]["max"] == 100.0
    np.testing.assert_allclose(got["SyntaxGym given"]["mean"], 37.5)
    assert "SyntaxGym self" not in got  # no suite scored: no number
    assert got["self"]["mean"] == 30.0 and got["self"]["n"] == 2
    header = capsys.readouterr().out.splitlines()[0]
    assert header.split(" | ")[1:] == ["blocks p(x|tags)", "self", "BLiMP given", "BLiMP self", "SyntaxGym given |"]
    # suites alone: the first column says accuracy, not perplexity
    assert main(["seeds", files[1], files[2]]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("| accuracy % | BLiMP given")
    # the same accuracy twice for one model and seed is refused
    assert main(["seeds", files[1], files[1]]) == 2

"""``sipe-eval report`` (Table 2 with Δ columns) and ``sipe-eval sweep-plot`` (Figure 3): Δ
arithmetic, assembly from precomputed JSON reports, the sweep's k values and PNG, and one end-to-end
report on two tiny trained checkpoints (round trip through the saved sub-reports)."""
import json
import math

import pytest

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from sipe_fairseq.cli.eval import main as eval_main  # noqa: E402
from sipe_fairseq.eval.reports import report as rp  # noqa: E402
from sipe_fairseq.eval.reports import sweep_plot  # noqa: E402

from conftest import SHARED, txl  # noqa: E402
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
UP, DOWN, DASH = "\u2191", "\u2193", "\u2013"


def _dump(path, obj):
    path.write_text(json.dumps(obj), encoding="utf-8")  # NaN is written as NaN, as sipe-eval-lm does
    return str(path)


# ------------------------------------------------------------------------------- Δ arithmetic
def test_relative_change_signs_and_exact_values():
    assert rp.relative_change(88.0, 80.0, True) == pytest.approx(10.0)        # higher is better: (x - b)/b
    assert rp.relative_change(72.0, 80.0, True) == pytest.approx(-10.0)
    assert rp.relative_change(15.0, 20.0, False) == pytest.approx(25.0)       # lower is better: (b - x)/b
    assert rp.relative_change(25.0, 20.0, False) == pytest.approx(-25.0)
    # the paper's Table 2 against Transformer-XL (75.30 / 18.63 / 73.09)
    assert round(rp.relative_change(74.01, 75.30, True), 2) == -1.71
    assert round(rp.relative_change(16.95, 18.63, False), 2) == 9.02
    assert round(rp.relative_change(21.60, 18.63, False), 2) == -15.94
    assert round(rp.relative_change(71.90, 73.09, True), 2) == -1.63
    for value, base in ((None, 80.0), (80.0, None), (80.0, 0.0), (float("nan"), 1.0)):
        assert rp.relative_change(value, base, True) is None
    assert rp.format_delta(9.0177) == f"{UP} +9.02" and rp.format_delta(-1.713) == f"{DOWN} -1.71"
    assert rp.format_delta(None) == "-" and rp.format_delta(3.0, is_baseline=True) == DASH
    assert rp.format_value(float("nan")) == "-" and rp.format_value(16.954) == "16.95"


# ------------------------------------------------------------------ table from precomputed JSON
BLIMP = {"models": ["none", "pos", "lm"], "overall": {"accuracy": {"none": 80.0, "pos": 84.0, "lm": 70.0}},
         "paradigm_mean": {"paradigms": 2, "accuracy": {"none": 60.0, "pos": 66.0, "lm": 75.0}}}
SYNTAXGYM = {"format": "sipe-syntaxgym/1", "models": ["none", "pos"],
             "overall": {"none": {"accuracy": 0.5}, "pos": {"accuracy": 0.6}}}


def _rows(ppl, joint, ppl_word, joint_word, sees_tags):
    return {"lm": {"ppl": ppl, "count": 100}, "joint": {"ppl": joint, "count": 100, "sees_tags": sees_tags},
            "lm.per_word": {"ppl": ppl_word, "count": 60}, "joint.per_word": {"ppl": joint_word, "count": 60}}


PPL = {"none": _rows(20.0, 20.0, 30.0, 30.0, False), "pos": _rows(15.0, 22.0, 24.0, 33.0, True),
       "lm": _rows(float("nan"), float("nan"), float("nan"), float("nan"), False)}


def test_table_from_precomputed_jsons(tmp_path):
    b, s, p = _dump(tmp_path / "b.json", BLIMP), _dump(tmp_path / "s.json", SYNTAXGYM), _dump(tmp_path / "p.json", PPL)
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    assert eval_main(["report", "--blimp-json", b, "--syntaxgym-json", s, "--ppl-json", p, "--baseline", "none",
                      "--json", str(out), "--markdown", str(md)]) == 0
    report = json.loads(out.read_text())
    assert report["format"] == "sipe-report/1" and report["baseline"] == "none"
    rows = {r["model"]: r for r in report["rows"]}
    assert [r["model"] for r in report["rows"]] == ["none", "pos", "lm"]
    none, pos, lm = rows["none"], rows["pos"], rows["lm"]
    assert none["baseline"] and not pos["baseline"]
    assert all(none[f"{k}_delta"] is None for k in ("blimp", "ppl", "joint_ppl", "ppl_word", "joint_ppl_word", "syntaxgym"))
    assert (pos["blimp"], pos["ppl"], pos["joint_ppl"], pos["syntaxgym"]) == (84.0, 15.0, 22.0, pytest.approx(60.0))
    assert pos["blimp_delta"] == pytest.approx(5.0)        # (84 - 80) / 80
    assert pos["ppl_delta"] == pytest.approx(25.0)         # (20 - 15) / 20
    assert pos["joint_ppl_delta"] == pytest.approx(-10.0)  # (20 - 22) / 20: the honest number got worse
    assert pos["syntaxgym_delta"] == pytest.approx(20.0)   # (60 - 50) / 50, fractions shown as %
    assert (pos["ppl_word"], pos["joint_ppl_word"], pos["sees_tags"]) == (24.0, 33.0, True)
    assert pos["ppl_word_delta"] == pytest.approx(20.0)         # (30 - 24) / 30: Table 2's PPL is per word
    assert pos["joint_ppl_word_delta"] == pytest.approx(-10.0)  # (30 - 33) / 30
    assert lm["blimp_delta"] == pytest.approx(-12.5)
    assert lm["ppl"] is None and lm["ppl_delta"] is None and lm["syntaxgym"] is None and lm["syntaxgym_delta"] is None
    assert pos["sources"] == {"blimp": b, "syntaxgym": s, "ppl": p}

    text = md.read_text()
    # Table 2's layout with per-word perplexities (the paper's), the per-token ones beside them
    assert (f"| model | BLiMP {UP} | \u0394 BLiMP (%) | PPL/word {DOWN} | \u0394 PPL/word (%) | joint PPL/word {DOWN} | "
            f"\u0394 joint PPL/word (%) | SyntaxGym {UP} | \u0394 SyntaxGym (%) | PPL/token {DOWN} | \u0394 PPL/token (%) | "
            f"joint PPL/token {DOWN} | \u0394 joint PPL/token (%) |") in text
    assert (f"| none | 80.00 | {DASH} | 30.00 | {DASH} | 30.00 | {DASH} | 50.00 | {DASH} | "
            f"20.00 | {DASH} | 20.00 | {DASH} |") in text
    assert (f"| pos | 84.00 | {UP} +5.00 | 24.00 | {UP} +20.00 | 33.00 | {DOWN} -10.00 | 60.00 | {UP} +20.00 | "
            f"15.00 | {UP} +25.00 | 22.00 | {DOWN} -10.00 |") in text
    assert f"| lm | 70.00 | {DOWN} -12.50 | - | - | - | - | - | - | - | - | - | - |" in text
    assert "PPL/word: perplexity of p(x | tags) per word" in text and "PPL/token is what fairseq-eval-lm prints" in text

    # another baseline, row selection, the paradigm mean; the first row is the default baseline
    assert eval_main(["report", "--blimp-json", b, "--blimp-average", "paradigms", "--rows", "pos", "lm",
                      "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["model"] for r in report["rows"]] == ["pos", "lm"] and report["baseline"] == "pos"
    assert report["rows"][1]["blimp"] == 75.0 and report["rows"][1]["blimp_delta"] == pytest.approx(100 * 9 / 66)


def test_report_input_errors(tmp_path, caplog):
    b = _dump(tmp_path / "b.json", BLIMP)
    assert eval_main(["report", "--blimp-json", b, "--baseline", "nope"]) == 2
    assert "baseline 'nope' is not among the models" in caplog.text
    assert eval_main(["report", "--blimp-json", b, b]) == 2  # the same model's BLiMP twice
    assert "blimp of model 'none' given twice" in caplog.text
    assert eval_main(["report", "--ppl-json", b]) == 2       # a BLiMP report where perplexities are expected
    assert "not a `sipe-eval-lm --json` output" in caplog.text
    assert eval_main(["report", "--syntaxgym-json", b]) == 2
    assert eval_main(["report"]) == 2
    assert "nothing to report" in caplog.text


# ------------------------------------------------------------------------------ sweep plot
def _sweep_report():
    def row(model, k, sg, ppl_word, joint_word, injection="position"):
        return {"model": model, "first_layer": k, "injection": injection, "syntaxgym": sg, "ppl_word": ppl_word,
                "joint_ppl_word": joint_word}
    return {"format": "sipe-report/1", "baseline": "none", "rows": [
        row("none", None, 73.1, 18.6, 18.6, injection="none"), row("k4", 4, 74.0, 16.9, 19.5),
        row("k1", 1, 80.6, 16.95, 19.0), row("old", None, 73.5, 16.2, 19.2), row("gpt2", None, 71.9, 21.6, 21.6, None)]}


def test_sweep_points_read_k_from_report_and_overrides():
    points, base = sweep_plot.sweep_points(_sweep_report(), {"old": 2})
    assert [(p["model"], p["k"]) for p in points] == [("k1", 1), ("old", 2), ("k4", 4)]  # gpt2: no k, left out
    assert points[0]["syntaxgym"] == 80.6 and points[0]["ppl_word"] == 16.95
    assert base == {"model": "none", "syntaxgym": 73.1, "ppl_word": 18.6}
    points, base = sweep_plot.sweep_points(_sweep_report(), {"k4": 6}, baseline="gpt2", ppl="joint")
    assert [(p["model"], p["k"]) for p in points] == [("k1", 1), ("k4", 6)] and base["model"] == "gpt2"
    assert points[0]["ppl_word"] == 19.0 and base["ppl_word"] == 21.6
    with pytest.raises(rp.ReportError, match="unknown model"):
        sweep_plot.sweep_points(_sweep_report(), {"nope": 3})


def test_sweep_plot_writes_a_png(tmp_path, capsys):
    report = _dump(tmp_path / "r.json", _sweep_report())
    fig = tmp_path / "sweep.png"
    assert eval_main(["sweep-plot", "--report", report, "--layer", "old=2", "--out", str(fig)]) == 0
    data = fig.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000
    out = capsys.readouterr().out
    assert "| 1 | k1 | 80.60 | 16.95 |" in out and "| 2 | old | 73.50 | 16.20 |" in out and "none (baseline)" in out
    assert eval_main(["sweep-plot", "--json", report, "--layer", "old=x", "--out", str(fig)]) == 2


# ----------------------------------------------------------------------------- end to end
def _chain_conllu(word_lists):
    lines = []
    for words in word_lists:
        lines += [f"{i}\t{w}\t_\t_\t_\t_\t{i - 1}\t{'root' if i == 1 else 'dep'}\t_\t_" for i, w in enumerate(words, 1)]
        lines.append("")
    return "\n".join(lines) + "\n"


def test_report_end_to_end_on_two_tiny_checkpoints(tmp_path, toy_corpus, toy_data, train_checkpoint):
    from sipe_fairseq.cli.eval_lm import evaluate_lm
    from sipe_fairseq.data import toy_grammar as tg
    from sipe_fairseq.eval import syntaxgym as sg

    data = toy_data
    ck_none, ck_pos = train_checkpoint.many([txl("none"), txl("position", "--sipe-first-layer", "2")])

    pairs = tmp_path / "pairs"  # toy BLiMP pairs, one file per UID, with their gold trees
    pairs.mkdir()
    toy_pairs = tg.minimal_pairs(12, seed=7)
    for uid in tg.PAIR_UIDS:
        tg.write_jsonl([p for p in toy_pairs if p["UID"] == uid], pairs / f"{uid}.jsonl")
    trees = []
    for good, i, bad_form, _ in tg.minimal_pair_trees(12, seed=7):
        trees += [good, tg.ToySentence(good.words[:i] + [bad_form] + good.words[i + 1:], good.lemmas, good.upos,
                                       good.feats, good.heads, good.deprels)]
    tg.write_conllu(trees, tmp_path / "trees.conllu")
    suite = SHARED / "data" / "syntaxgym-sample" / "number_prep.json"
    suite_args = []
    if suite.is_file():  # one shared SyntaxGym suite, its sentences given chain trees in the same tree file
        words = [s.words for s in sg.sentences_of([sg.load_suite(suite)])]
        with open(tmp_path / "trees.conllu", "a", encoding="utf-8") as f:
            f.write(_chain_conllu(words))
        suite_args = ["--suites", str(suite)]

    out = {k: tmp_path / f"{k}.json" for k in ("report", "blimp", "sg", "ppl", "again")}
    argv = ["report", "--data", str(data), "--path", f"none={ck_none}", "--path", f"pos={ck_pos}", "--baseline", "none",
            "--blimp", str(pairs), *suite_args, "--trees", str(tmp_path / "trees.conllu"), "--split", "test",
            "--batch-size", "16", "--json", str(out["report"]), "--markdown", str(tmp_path / "report.md"),
            "--blimp-out", str(out["blimp"]), "--syntaxgym-out", str(out["sg"]), "--ppl-out", str(out["ppl"])]
    assert eval_main(argv) == 0
    report = json.loads(out["report"].read_text())
    none, pos = report["rows"]
    assert (none["model"], pos["model"]) == ("none", "pos") and none["baseline"]
    assert (none["injection"], none["first_layer"], pos["injection"], pos["first_layer"]) == ("none", None, "position", 2)
    assert report["settings"]["split"] == "test" and report["settings"]["trees"].startswith("conllu:")

    # perplexities: the same numbers as sipe-eval-lm's evaluate_lm(); no tags -> joint = conditional
    for row, ck in ((none, ck_none), (pos, ck_pos)):
        rows = evaluate_lm(str(ck), str(data), "test")
        assert row["ppl"] == pytest.approx(rows["lm"]["ppl"], rel=1e-6)
        assert row["joint_ppl"] == pytest.approx(rows["joint"]["ppl"], rel=1e-6)
        assert row["ppl_word"] == pytest.approx(rows["lm.per_word"]["ppl"], rel=1e-6)
        assert row["joint_ppl_word"] == pytest.approx(rows["joint.per_word"]["ppl"], rel=1e-6)
        assert row["sources"]["ppl"] == "scored"
    assert none["joint_ppl"] == pytest.approx(none["ppl"]) and not none["sees_tags"]
    assert pos["joint_ppl"] > pos["ppl"] and pos["sees_tags"]

    blimp_report = json.loads(out["blimp"].read_text())
    assert blimp_report["models"] == ["none", "pos"] and blimp_report["overall"]["pairs"] == 12
    for row in (none, pos):
        assert 0 <= row["blimp"] <= 100 and row["blimp"] == blimp_report["overall"]["accuracy"][row["model"]]
    for m in rp.METRICS:
        assert none[f"{m.key}_delta"] is None
    # Δ by hand: higher is better for BLiMP, lower for the perplexities
    if none["blimp"]:
        assert pos["blimp_delta"] == pytest.approx(100.0 * (pos["blimp"] - none["blimp"]) / none["blimp"])
    for key in ("ppl_word", "joint_ppl_word", "ppl", "joint_ppl"):
        assert pos[f"{key}_delta"] == pytest.approx(100.0 * (none[key] - pos[key]) / none[key]), key
    md = (tmp_path / "report.md").read_text()
    assert f"| none | {none['blimp']:.2f} | {DASH} | {none['ppl_word']:.2f} | {DASH} | {none['joint_ppl_word']:.2f} |" in md
    assert none["ppl_word"] > none["ppl"]  # fewer words than tokens: the per-word perplexity is the larger
    # per word = the same summed NLL over (words + one </s> per sentence) of the test CoNLL-U, counted here
    conllu = (toy_corpus / "test.conllu").read_text().splitlines()
    words = sum(1 for ln in conllu if ln and ln.split("\t")[0].isdigit())
    sentences = sum(1 for k, ln in enumerate(conllu)
                    if ln and not ln.startswith("#") and (k + 1 == len(conllu) or not conllu[k + 1]))
    for row in (none, pos):
        for tok, word in (("ppl", "ppl_word"), ("joint_ppl", "joint_ppl_word")):
            assert math.log(row[word]) * (words + sentences) == pytest.approx(math.log(row[tok]) * row["tokens"], rel=1e-6)

    if suite_args:
        sg_report = json.loads(out["sg"].read_text())
        assert sg_report["models"] == ["none", "pos"] and set(sg_report["suites"]) == {"number_prep"}
        for row in (none, pos):
            scores = sg_report["suites"]["number_prep"]["scores"][row["model"]]
            assert scores["scored"] == 19 and scores["unscored"] == []  # every sentence found its tree
            assert row["syntaxgym"] == pytest.approx(100 * sg_report["overall"][row["model"]]["accuracy"])
        if none["syntaxgym"]:
            assert pos["syntaxgym_delta"] == pytest.approx(100.0 * (pos["syntaxgym"] - none["syntaxgym"]) / none["syntaxgym"])
    else:
        assert none["syntaxgym"] is None and "syntaxgym" not in none["sources"] and not out["sg"].exists()

    # the saved sub-reports assemble the same table without re-scoring
    assert eval_main(["report", "--blimp-json", str(out["blimp"]), "--ppl-json", str(out["ppl"]), "--baseline", "none",
                      *(["--syntaxgym-json", str(out["sg"])] if suite_args else []), "--json", str(out["again"])]) == 0
    again = json.loads(out["again"].read_text())
    for a, b in zip(report["rows"], again["rows"]):
        for m in rp.METRICS:
            for key in (m.key, f"{m.key}_delta"):
                assert (a[key] is None and b[key] is None) or a[key] == pytest.approx(b[key], rel=1e-9), key

    # the sweep plot from this report: pos at k=2 (its saved sipe_first_layer), none as the baseline;
    # and from a report without layers, k read from the checkpoint given by --path (no data, nothing scored)
    points, base = sweep_plot.sweep_points(report)
    assert [(p["model"], p["k"]) for p in points] == [("pos", 2)] and base["model"] == "none"
    for r in report["rows"]:
        r["first_layer"] = None
    _dump(out["again"], report)
    fig = tmp_path / "sweep.png"
    assert eval_main(["sweep-plot", "--report", str(out["again"]), "--path", f"pos={ck_pos}", "--out", str(fig)]) == 0
    assert fig.read_bytes()[:8] == PNG_MAGIC and fig.stat().st_size > 5000

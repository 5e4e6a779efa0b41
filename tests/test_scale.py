"""sipe-eval scale: the matched baseline when scored at a size and --baseline otherwise (numbers recomputed here
from the synthetic per-sentence nll), rows sorted by parameters, the figure, the tokens/s column from the training
logs, a missing baseline in one line (exit status 2); and sipe-eval-lm's run record of the parameter count."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

import launcher
from conftest import BIN, ENV
from sipe_fairseq.cli.eval import main

N = 30  # sentences
SOURCES = ("given", "given-joint", "self", "mix:16")
PARAMS = {("small", "none"): 1000, ("small", "gilt"): 2900, ("small", "nonegilt"): 3000,
          ("base", "none"): 4000, ("base", "gilt"): 8800, ("base", "nonegilt"): 9000}


def _sentences(size, run, seed, source):
    """Per-sentence nll and token / word counts of one row under one source (a model without tags: the same
    numbers under every source)."""
    tagged = run == "gilt"
    key = (list(PARAMS).index((size, run)), seed, SOURCES.index(source) if tagged else 0)
    rng = np.random.default_rng(key)
    tokens = rng.integers(5, 20, size=N)
    nll = tokens * rng.uniform(3.5, 5.0, size=N)
    return {"nll": nll.tolist(), "tokens": tokens.tolist(), "words": (tokens - 2).tolist()}


def _ppl(size, run, seed, source="given"):
    s = _sentences(size, run, seed, source)
    return math.exp(sum(s["nll"]) / sum(s["tokens"]))


def _row(size, run, seed):
    sources = {}
    for source in SOURCES:
        s = _sentences(size, run, seed, source)
        sources[source] = {"ppl": _ppl(size, run, seed, source), "ppl_per_word": math.exp(sum(s["nll"]) / sum(s["words"])),
                           "model": "arcs" if run == "gilt" else "none", "sentences": N, "per_sentence": s}
    run_record = {"split": "test", "sentences": N, "data": "/data", "arch": "gilt_txl_tiny" if run == "gilt" else "txl",
                  "injection": "none", "parameters": PARAMS[size, run]}
    return {"lm": {"ppl": 1.0}, "run": run_record, "tag_sources": sources}


@pytest.fixture
def reports(tmp_path):
    """{(size, run, seed): report path}: rows named as --path gives them (the run), files SIZE-RUN-sSEED.json."""
    out = {}
    for size, run in PARAMS:
        for seed in (1, 2):
            path = tmp_path / f"{size}-{run}-s{seed}.json"
            path.write_text(json.dumps({run: _row(size, run, seed)}))
            out[size, run, seed] = str(path)
    return out


def _expected(size, run, base, source):
    """100 x mean over seeds (row - base perplexity) / mean over seeds (base perplexity); base without tags."""
    rows = [_ppl(size, run, s, source) for s in (1, 2)]
    bases = [_ppl(size, base, s) for s in (1, 2)]
    return 100.0 * np.mean(np.subtract(rows, bases)) / np.mean(bases)


def _scale(tmp_path, files, *extra):
    out = tmp_path / "table.json"
    assert main(["scale", *files, "--bootstrap", "200", "--json", str(out), *extra]) == 0
    table = json.loads(out.read_text())
    return table, {(e["size"], e["run"]): e for e in table["rows"]}


def test_matched_baseline_when_scored_else_the_baseline(reports, tmp_path, capsys):
    table, rows = _scale(tmp_path, reports.values(), "--matched", "gilt=nonegilt")
    assert table["sources"] == ["given", "self", "mix:16"]  # given-joint (the joint bound) left out
    for size in ("small", "base"):
        gilt = rows[size, "gilt"]
        assert gilt["baseline"] == "nonegilt" and gilt["baseline_parameters"] == PARAMS[size, "nonegilt"]
        for source in table["sources"]:
            r = gilt["sources"][source]
            np.testing.assert_allclose(r["percent"], _expected(size, "gilt", "nonegilt", source))
            np.testing.assert_allclose(r["ppl"], np.mean([_ppl(size, "gilt", s, source) for s in (1, 2)]))
            assert r["percent_low"] <= r["percent"] <= r["percent_high"] and r["percent_seed_low"] is not None
        nonegilt = rows[size, "nonegilt"]  # a matched baseline is a row too, against --baseline
        assert nonegilt["baseline"] == "none" and not nonegilt["tags"]
        np.testing.assert_allclose(nonegilt["sources"]["self"]["percent"], _expected(size, "nonegilt", "none", "given"))
        assert rows[size, "none"]["baseline"] is None
    # without small-nonegilt, small's gilt falls back to none; base keeps its matched baseline
    files = [p for (size, run, _), p in reports.items() if (size, run) != ("small", "nonegilt")]
    _, rows = _scale(tmp_path, files, "--matched", "gilt=nonegilt", "--sources", "self")
    assert rows["small", "gilt"]["baseline"] == "none" and rows["base", "gilt"]["baseline"] == "nonegilt"
    np.testing.assert_allclose(rows["small", "gilt"]["sources"]["self"]["percent"],
                               _expected("small", "gilt", "none", "self"))


def test_rows_sorted_by_parameters_and_the_figure(reports, tmp_path, capsys):
    fig = tmp_path / "scale.png"
    table, _ = _scale(tmp_path, reports.values(), "--matched", "gilt=nonegilt", "--plot", str(fig),
                      "--markdown", str(tmp_path / "t.md"))
    order = sorted(PARAMS, key=PARAMS.get)
    assert [(e["size"], e["run"]) for e in table["rows"]] == order
    lines = [line for line in (tmp_path / "t.md").read_text().splitlines() if line.startswith("| ")][1:]
    assert [tuple(line.split(" | ")[:2]) for line in lines] == [(f"| {z}", r) for z, r in order]
    assert "| 2,900 | nonegilt | 3,000 | 2 |" in lines[1]
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {fig}" in capsys.readouterr().out


def test_train_tokens_per_second_from_the_logs(reports, tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    line = ("2026-12-04 17:49:03 | INFO | train | epoch {:03d} | loss 6.5 | ppl 65.9 | wps {} | ups 0.34 | wpb 10"
            " | num_updates {}")
    # seed 1: 100 updates at 20 tokens/s (slowed), 250 at 300, 100 at 100: the token-weighted median is 300;
    # seed 2: 396 updates at 180, then a last epoch of 4 updates at 5 (40 of 4,000 tokens): 180
    for seed, epochs in ((1, ((20.0, 100), (300.0, 350), (100.0, 450))), (2, ((180.0, 396), (5.0, 400)))):
        text = "\n".join(line.format(i + 1, w, n) for i, (w, n) in enumerate(epochs))
        valid = "2026-12-04 17:49:03 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 7.0 | wps 5325.5"
        (logs / f"train-small-gilt-s{seed}.log").write_text(text + "\n" + valid + "\n")
    seed1, seed2 = 300.0, 180.0  # the last epoch's wps would give 100 and 5; the mean over epochs 140 and 92.5
    table, rows = _scale(tmp_path, reports.values(), "--train-logs", str(logs))
    assert abs(rows["small", "gilt"]["train_wps"] - (seed1 + seed2) / 2) < 1e-9
    assert rows["base", "gilt"]["train_wps"] is None
    out = capsys.readouterr().out
    assert "train tokens/s |" in out.splitlines()[0]
    cells = {line.split(" | ")[1]: line.rstrip(" |").rsplit(" | ", 1)[1] for line in out.splitlines()
             if line.startswith("| small")}
    assert cells == {"none": "-", "gilt": f"{(seed1 + seed2) / 2:,.0f}", "nonegilt": "-"}


def test_missing_baseline_is_one_line(reports, tmp_path):
    files = [p for (size, run, _), p in reports.items() if (size, run) != ("small", "none")]
    proc = launcher.run([str(BIN / "sipe-eval"), "scale", *files, "--bootstrap", "100"], env=ENV, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "size small: no baseline row small-none (--baseline none)" in proc.stderr


def test_bad_names_and_missing_sources_are_one_line(reports, tmp_path, caplog):
    bad = tmp_path / "gilt.json"  # no SIZE-RUN-sSEED name
    bad.write_text(json.dumps({"gilt-s1": _row("small", "gilt", 1)}))
    assert main(["scale", str(bad)]) == 2
    assert len(caplog.records) == 1 and "row 'gilt-s1' is not named SIZE-RUN-sSEED" in caplog.records[0].getMessage()
    caplog.clear()
    assert main(["scale", *reports.values(), "--sources", "beam:4"]) == 2
    assert len(caplog.records) == 1 and "has no tag source 'beam:4'" in caplog.records[0].getMessage()
    caplog.clear()
    old = tmp_path / "old" / "small-gilt-s1.json"  # a report without per-sentence records for self
    old.parent.mkdir()
    row = _row("small", "gilt", 1)
    del row["tag_sources"]["self"]["per_sentence"]
    old.write_text(json.dumps({"gilt": row}))
    files = [str(old) if p == reports["small", "gilt", 1] else p for p in reports.values()]
    assert main(["scale", *files]) == 2
    assert len(caplog.records) == 1
    assert caplog.records[0].getMessage() == (f"{old}: row 'small-gilt-s1', tag source 'self': no per-sentence records "
                                              "(a report of an older sipe-eval-lm: score it again)")
    caplog.clear()
    for seed in (1, 2):  # the matched baseline scored on another split
        path = Path(reports["small", "nonegilt", seed])
        report = json.loads(path.read_text())
        report["nonegilt"]["run"]["split"] = "valid"
        path.write_text(json.dumps(report))
    assert main(["scale", *reports.values(), "--matched", "gilt=nonegilt"]) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "split differs between row small-gilt (test) and its baseline small-nonegilt (valid): not compared "
        "(--allow-mixed compares them anyway)"]
    caplog.clear()
    assert main(["scale", str(tmp_path / "missing-s1.json")]) == 2
    assert len(caplog.records) == 1 and "missing-s1.json" in caplog.records[0].getMessage()


def test_run_record_counts_the_parameters(tmp_path):
    from conftest import tiny_transformer_lm, toy_lm_task
    from sipe_fairseq.cli.eval_lm import run_record

    task = toy_lm_task(tmp_path)
    model = tiny_transformer_lm(task.source_dictionary)
    record = run_record(model, task, str(tmp_path / "data"), "valid")  # toy_lm_task's data directory
    assert record["split"] == "valid" and record["sentences"] == 12
    assert record["parameters"] == sum(p.numel() for p in model.parameters()) > 0

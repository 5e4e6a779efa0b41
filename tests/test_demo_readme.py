"""The README's demo table is what ``scripts/demo.py`` prints: the demo compares its numbers with the table it
reads from the README (README_ROWS' tolerances) and exits 1 when a cell is outside them. Here: the README's
table parses into every row the demo checks, for every run it trains, and the comparison tells a cell inside
the tolerance from one outside it."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import demo  # noqa: E402


def _printed(rows, runs, scale=1.0, shift=0.0):
    """What the demo would have printed: the README's own cells, perplexities times ``scale``, accuracy + ``shift``."""
    value = {start: [float(c) for c in next(v for k, v in rows.items() if k.startswith(start))] for start in demo.README_ROWS}
    keys = list(demo.README_ROWS)
    results = {r: {"fairseq_eval_lm_ppl": value[keys[0]][i] * scale, "self_tags_ppl": value[keys[1]][i] * scale}
               for i, r in enumerate(runs)}
    scores = {r: {"joint": {"ppl": value[keys[2]][i] * scale}} for i, r in enumerate(runs)}
    acc = {r: {"overall": {"accuracy": value[keys[3]][i] + shift}} for i, r in enumerate(runs)}
    return results, scores, acc


def test_the_readme_table_has_every_row_and_run_the_demo_checks():
    runs, rows = demo.readme_table(ROOT / "README.md")
    assert runs == list(demo.RUNS)
    for start in demo.README_ROWS:
        [label] = [k for k in rows if k.startswith(start)]
        assert len(rows[label]) == len(runs) and all(float(c) > 0 for c in rows[label])


def test_the_check_tells_inside_from_outside_the_tolerance():
    runs, rows = demo.readme_table(ROOT / "README.md")
    assert demo.readme_mismatches(*_printed(rows, runs)) == []
    assert demo.readme_mismatches(*_printed(rows, runs, scale=1.015, shift=-1.5)) == []
    far = demo.readme_mismatches(*_printed(rows, runs, scale=1.03))
    assert len(far) == 3 * len(runs) and all("relative" in line for line in far)  # three perplexity rows
    acc = demo.readme_mismatches(*_printed(rows, runs, shift=2.5))
    assert len(acc) == len(runs) and all(line.startswith("agreement minimal pairs") for line in acc)

"""The one markdown table writer (eval/reports/tables.py) and the one arc-F1 formula (data/gilt/arcs.py)."""
import pytest

from sipe_fairseq.data.gilt.arcs import arc_f1, arc_matches
from sipe_fairseq.eval.reports.tables import row, rule, table


def test_table_header_alignment_rows():
    assert table(["model", "ppl"], [["none", "30.00"], ["pos", 24]]) == [
        "| model | ppl |", "|---|---:|", "| none | 30.00 |", "| pos | 24 |"]
    assert table(["k", "model"], [[1, "a"]], "rl")[1] == "|---:|---|"
    assert row(["", "a", ""]) == "| | a | |"
    assert rule("llr") == "|---|---|---:|"


@pytest.mark.parametrize("header, align", [(["a", "b"], "l"), (["a"], "x")])
def test_table_bad_alignment(header, align):
    with pytest.raises(ValueError):
        table(header, [], align)


def test_arc_f1_from_matches():
    pred = [[(0, 1), (1, 2), (1, 2)], [(2, 1)]]
    gold = [[(0, 1), (1, 3)], [(0, 1)]]
    assert arc_matches(pred, gold) == (1, 3, 3)  # a sentence's arcs are a set
    p, r, f1 = arc_f1(1, 3, 3)
    assert p == r == f1 == pytest.approx(1 / 3)
    assert arc_f1(0, 0, 0) == (0.0, 0.0, 0.0)

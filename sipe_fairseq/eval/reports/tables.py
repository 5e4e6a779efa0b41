"""Markdown tables: the one writer of the reports' tables (header, alignment, rows).

    table(["model", "ppl"], [["none", "30.00"], ["pos", "24.00"]])
    -> ["| model | ppl |", "|---|---:|", "| none | 30.00 |", "| pos | 24.00 |"]

A cell is written as ``str(cell)`` between single spaces (an empty cell as ``| |``); the alignment row
has one letter per column, ``l`` (``---``) or ``r`` (``---:``), by default the first column left and the
others right.
"""
from typing import Iterable, List, Optional, Sequence


def row(cells: Iterable) -> str:
    """One table line: ``| a | b |``."""
    return "|" + "".join(f" {c} |" if str(c) else " |" for c in cells)


def rule(align: str) -> str:
    """The alignment line: ``l`` -> ``---``, ``r`` -> ``---:``, one letter per column."""
    bad = set(align) - {"l", "r"}
    if bad or not align:
        raise ValueError(f"alignment {align!r}: one letter l or r per column")
    return "|" + "".join("---|" if a == "l" else "---:|" for a in align)


def table(header: Sequence, rows: Iterable[Sequence] = (), align: Optional[str] = None) -> List[str]:
    """The lines of a table: ``header``, the alignment (default: ``l`` then ``r`` for every other column),
    then ``rows``."""
    align = align or "l" + "r" * (len(header) - 1)
    if len(align) != len(header):
        raise ValueError(f"alignment {align!r} for {len(header)} columns")
    return [row(header), rule(align)] + [row(r) for r in rows]

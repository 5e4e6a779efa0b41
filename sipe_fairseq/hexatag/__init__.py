"""Hexatag core: trees, hexatags, decoding. Pure Python (no torch, no fairseq).

>>> encode([3, 3, 0, 3, 3])
[('l', 'L1'), ('l', 'R1'), ('r', 'L0'), ('r', 'L0'), ('r', 'EOS')]
"""
from .conllu_io import ConlluSentence, read_conllu
from .errors import ConlluError, HexatagError, NonProjectiveError, TreeError
from .tags import EOS, NONTERMINALS, TERMINALS, decode, encode, encode_tree
from .tree import check_tree, is_projective, nonprojective_arcs, projectivize


def format_tags(tags) -> str:
    """``[("l", "L1"), ("r", "EOS")]`` -> ``"l/L1 r/EOS"`` (the ``sipe-hexatag`` line format)."""
    return " ".join(map("/".join, tags))


def parse_tags(line: str):
    """Inverse of :func:`format_tags`; raises :class:`HexatagError` on a malformed pair."""
    out = []
    for k, item in enumerate(line.split(), 1):
        t, sep, n = item.partition("/")
        if not sep:
            raise HexatagError(f"word {k}: {item!r} is not a TERMINAL/NONTERMINAL pair")
        out.append((t, n))
    return out


__all__ = [
    "TERMINALS", "NONTERMINALS", "EOS", "encode", "decode", "encode_tree", "format_tags",
    "parse_tags", "check_tree", "is_projective", "nonprojective_arcs", "projectivize",
    "read_conllu", "ConlluSentence", "HexatagError", "TreeError", "NonProjectiveError", "ConlluError",
]

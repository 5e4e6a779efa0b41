"""CoNLL-U reading with the ``conllu`` library, with errors that name the file and line.

Hexatags are per *syntactic word*: multiword-token lines (``3-4 don't``) are kept only as a
record of the surface form, and the syntactic words (``do``, ``n't``) are what gets tagged and
tokenized. Empty nodes (``8.1``) take no part in the basic tree and are skipped (counted).
"""
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List, Optional, Tuple, Union

import conllu

from .errors import ConlluError, TreeError
from .tree import check_tree


@dataclass
class Sentence:
    words: List[str]
    heads: List[int]
    deprels: List[str]
    line: int  # 1-based line of the sentence's first line in its file
    sent_id: Optional[str] = None
    text: Optional[str] = None
    # multiword tokens: (first word, last word, surface form), 1-based inclusive
    multiword: List[Tuple[int, int, str]] = field(default_factory=list)
    empty_nodes: int = 0


def _blocks(lines, path) -> Iterator[Tuple[int, str]]:
    start, buf = None, []
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\n").rstrip("\r")
        if line.strip() == "":
            if buf:
                yield start, "\n".join(buf) + "\n\n"
                buf = []
            continue
        if not buf:
            start = lineno
        buf.append(line)
    if buf:
        yield start, "\n".join(buf) + "\n\n"


def parse_sentence(block: str, path, start: int) -> Sentence:
    """Parse one CoNLL-U sentence block that starts at line ``start`` of ``path``."""
    lines = block.rstrip("\n").split("\n")
    for k, line in enumerate(lines):
        if not line.startswith("#") and line.count("\t") != 9:
            raise ConlluError(path, start + k, f"expected 10 tab-separated columns, got {line.count(chr(9)) + 1}")
    try:
        (tokens,) = conllu.parse(block)
    except Exception as e:  # conllu raises several exception types
        raise ConlluError(path, start, f"cannot parse sentence: {e}") from e
    token_lines = [start + k for k, line in enumerate(lines) if not line.startswith("#")]
    words, heads, deprels, mwt, empty = [], [], [], [], 0
    for tok, lineno in zip(tokens, token_lines):
        tid = tok["id"]
        if isinstance(tid, tuple):
            if len(tid) == 3 and tid[1] == "-":
                mwt.append((tid[0], tid[2], tok["form"]))
            elif len(tid) == 3 and tid[1] == ".":
                empty += 1
            else:
                raise ConlluError(path, lineno, f"unsupported ID {tid!r}")
            continue
        if not isinstance(tid, int) or tid != len(words) + 1:
            raise ConlluError(path, lineno, f"word ID {tid!r} out of sequence (expected {len(words) + 1})")
        head = tok["head"]
        if not isinstance(head, int):
            raise ConlluError(path, lineno, f"word {tid}: HEAD must be an integer, got {head!r}")
        words.append(tok["form"])
        heads.append(head)
        deprels.append(tok["deprel"] or "_")
    if not words:
        raise ConlluError(path, start, "sentence has no words")
    try:
        check_tree(heads)
    except TreeError as e:
        raise ConlluError(path, start, f"invalid tree: {e}") from e
    meta = tokens.metadata
    return Sentence(words, heads, deprels, start, meta.get("sent_id"), meta.get("text"), mwt, empty)


def read_conllu(source: Union[str, Path, io.TextIOBase]) -> Iterator[Sentence]:
    """Yield :class:`Sentence` objects from a CoNLL-U file (or open text stream)."""
    if isinstance(source, (str, Path)):
        path = str(source)
        with open(source, encoding="utf-8") as f:
            yield from read_conllu_lines(f, path)
    else:
        yield from read_conllu_lines(source, getattr(source, "name", "<stream>"))


def read_conllu_lines(lines, path="<stream>") -> Iterator[Sentence]:
    for start, block in _blocks(lines, path):
        yield parse_sentence(block, path, start)

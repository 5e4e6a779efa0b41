"""CoNLL-U reading with the ``conllu`` library's field parsers, with errors naming file and line,
and the one CoNLL-U writer (:func:`conllu_row`, :func:`conllu_lines`, :func:`conllu_sentence`).

Only what hexatags need is parsed (ID, FORM, HEAD, DEPREL, ``sent_id``/``text``). Lines are split
on tabs here and each field goes through ``conllu``'s own value parsers: ``conllu.parse`` would
also split columns on two spaces, which misreads such forms, and it does not report line numbers.
Hexatags are per *syntactic word*: multiword-token lines (``3-4 don't``) are kept only as a
record of the surface form, and the syntactic words (``do``, ``n't``) are what gets tagged and
tokenized; a range must cover two or more words, start at the next word and end in the sentence.
Empty nodes (``8.1``) take no part in the basic tree and are skipped (counted). Files are read by the one
line reader (:mod:`.lines`: lines end at ``\n`` only) with ``errors="surrogateescape"``, so a line that is not
UTF-8 fails its own sentence (file:line), not the file.
"""
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from conllu.exceptions import ParseException
from conllu.parser import parse_comment_line, parse_id_value, parse_int_value

from .errors import ConlluError, TreeError
from .lines import input_name, iter_lines, undecodable  # noqa: F401 (undecodable: re-exported)
from .tree import check_tree


@dataclass
class ConlluSentence:
    words: List[str]
    heads: List[int]
    deprels: List[str]
    line: int  # 1-based line of the sentence's first line in its file
    sent_id: Optional[str] = None
    text: Optional[str] = None
    # multiword tokens: (first word, last word, surface form), 1-based inclusive
    multiword: List[Tuple[int, int, str]] = field(default_factory=list)
    empty_nodes: int = 0


def sentence_blocks(lines: Iterable[str]) -> Iterator[Tuple[int, List[str]]]:
    """Split lines at blank lines: yields ``(first line number, lines)`` per sentence."""
    start, buf = 0, []
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if lineno == 1:
            line = line.lstrip("\ufeff")
        if not line or line.isspace():
            if buf:
                yield start, buf
                buf = []
            continue
        if not buf:
            start = lineno
        buf.append(line)
    if buf:
        yield start, buf


def parse_sentence(block: Union[str, Sequence[str]], path, start: int) -> ConlluSentence:
    """Parse one CoNLL-U sentence (a string or its lines) that starts at line ``start`` of ``path``."""
    lines = block.rstrip("\n").split("\n") if isinstance(block, str) else block
    words, heads, deprels, mwt, mwt_lines, empty, meta = [], [], [], [], [], 0, {}
    for lineno, line in enumerate(lines, start):
        plain = line.isascii()
        if not plain:
            bad = undecodable(line)
            if bad:
                raise ConlluError(path, lineno, bad)
        try:
            if line.startswith("#"):
                for key, value in parse_comment_line(line):
                    meta.setdefault(key, value)
                continue
            cols = line.split("\t")
            if len(cols) != 10:
                raise ConlluError(path, lineno, f"expected 10 tab-separated columns, got {len(cols)}")
            value = cols[0]  # fast path for a plain decimal, else conllu's parser (and its errors)
            tid = int(value) if plain and value.isdigit() and value[0] != "0" else parse_id_value(value)
            if tid.__class__ is tuple:  # (3, "-", 4): multiword token; (8, ".", 1): empty node
                if tid[1] == "-":
                    first, last = tid[0], tid[2]
                    if first >= last:
                        raise ConlluError(path, lineno, f"multiword token {value} must span two or more words")
                    if mwt and first <= mwt[-1][1]:
                        raise ConlluError(path, lineno, f"multiword token {value} overlaps {mwt[-1][0]}-{mwt[-1][1]}")
                    if first != len(words) + 1:
                        raise ConlluError(path, lineno, f"multiword token {value} out of sequence "
                                                        f"(expected it to start at word {len(words) + 1})")
                    mwt.append((first, last, cols[1]))
                    mwt_lines.append(lineno)
                else:
                    empty += 1
                continue
            if tid != len(words) + 1:
                raise ConlluError(path, lineno, f"word ID {tid} out of sequence (expected {len(words) + 1})")
            value = cols[6]
            head = int(value) if plain and value.isdigit() and value[0] != "0" else parse_int_value(value)
        except ParseException as e:
            raise ConlluError(path, lineno, str(e)) from e
        if head is None or head < 0:
            raise ConlluError(path, lineno, f"word {tid}: HEAD must be a non-negative integer, got {value!r}")
        words.append(cols[1])
        heads.append(head)
        deprels.append(cols[7] or "_")
    if not words:
        raise ConlluError(path, start, "sentence has no words")
    for (first, last, _), lineno in zip(mwt, mwt_lines):
        if last > len(words):
            raise ConlluError(path, lineno, f"multiword token {first}-{last} ends after the last word ({len(words)})")
    if max(heads) > len(words):
        i = next(i for i, h in enumerate(heads) if h > len(words))
        lineno = next(k for k, line in enumerate(lines, start) if line.split("\t", 1)[0] == str(i + 1))
        raise ConlluError(path, lineno, f"word {i + 1}: HEAD {heads[i]} out of range 0..{len(words)}")
    try:
        check_tree(heads)
    except TreeError as e:
        raise ConlluError(path, start, f"invalid tree: {e}") from e
    return ConlluSentence(words, heads, deprels, start, meta.get("sent_id"), meta.get("text"), mwt, empty)


def read_conllu(source: Union[str, Path, io.TextIOBase]) -> Iterator[ConlluSentence]:
    """Yield :class:`ConlluSentence` objects from a CoNLL-U file (``-``: stdin) or open stream, one at a time."""
    lines = iter_lines(source, errors="surrogateescape")  # bad bytes: ConlluError with the line
    yield from read_conllu_lines((text for _, text in lines), input_name(source))


def read_conllu_lines(lines: Iterable[str], path="<stream>") -> Iterator[ConlluSentence]:
    for start, block in sentence_blocks(lines):
        yield parse_sentence(block, path, start)


# ---------------------------------------------------------------------- writing
Field = Union[str, int, None]
Comments = Union[Mapping[str, Optional[object]], Iterable[Tuple[str, Optional[object]]]]


def conllu_field(value: Field) -> str:
    """A column's text: ``_`` for None or an empty value, else ``str(value)`` as it is."""
    if value is None:
        return "_"
    return str(value) or "_"


def conllu_row(id: Field, form: Field, head: Field = None, deprel: Field = None, *, lemma: Field = None,
               upos: Field = None, xpos: Field = None, feats: Field = None, deps: Field = None,
               misc: Field = None) -> str:
    """One word line: the 10 tab-separated columns ``ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC``
    (``_`` for each one not given or empty), without a line break."""
    return "\t".join(map(conllu_field, (id, form, lemma, upos, xpos, feats, head, deprel, deps, misc)))


def conllu_comment(key: str, value: Optional[object] = None) -> str:
    """``# key = value`` (``# key`` when ``value`` is None)."""
    return f"# {key}" if value is None else f"# {key} = {value}"


def plain_deprels(heads: Sequence[int]) -> List[str]:
    """The unlabelled relations of a tree: ``root`` for the head-0 word(s), ``dep`` for the others."""
    return ["root" if h == 0 else "dep" for h in heads]


def hexatag_misc(tag: Tuple[str, str]) -> str:
    """The MISC entry for a word's hexatag: ``("l", "L1")`` -> ``Hexatag=l,L1``."""
    return f"Hexatag={tag[0]},{tag[1]}"


def conllu_lines(words: Sequence[str], heads: Optional[Sequence[Field]] = None,
                 deprels: Optional[Sequence[Field]] = None, comments: Comments = (), *,
                 misc: Optional[Sequence[Field]] = None, **columns: Optional[Sequence[Field]]) -> List[str]:
    """A sentence's lines without line breaks: the comments (``(key, value)`` pairs or a mapping, in order;
    see :func:`conllu_comment`), then one :func:`conllu_row` per word, IDs from 1. ``heads``, ``deprels``,
    ``misc`` and ``columns`` (``lemma``, ``upos``, ``xpos``, ``feats``, ``deps``: per-word lists) may be
    None: that column is ``_`` on every row."""
    pairs = comments.items() if isinstance(comments, Mapping) else comments
    out = [conllu_comment(key, value) for key, value in pairs]
    n = len(words)
    per_word = {name: [None] * n if values is None else values for name, values in columns.items()}
    heads, deprels, misc = ([None] * n if v is None else v for v in (heads, deprels, misc))
    for i in range(n):
        out.append(conllu_row(i + 1, words[i], heads[i], deprels[i], misc=misc[i],
                              **{name: values[i] for name, values in per_word.items()}))
    return out


def conllu_sentence(words: Sequence[str], heads: Optional[Sequence[Field]] = None,
                    deprels: Optional[Sequence[Field]] = None, comments: Comments = (), **columns) -> str:
    """One CoNLL-U block: :func:`conllu_lines`, each ending in a line break, and the blank line after."""
    return "\n".join(conllu_lines(words, heads, deprels, comments, **columns)) + "\n\n"

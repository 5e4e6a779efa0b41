"""The one reader of line-based text input: sentence files (``sipe-surprisal``, ``sipe-tag``, ``sipe-preprocess
--input-format text|tokenized``), prompts (``sipe-generate``), CoNLL-U (:func:`~.conllu_io.read_conllu`,
``sipe-hexatag``, ``sipe-preprocess``), JSON lines (BLiMP, the parse cache); and the decoding of whole UTF-8 files
(SyntaxGym's suite JSON: :func:`read_text`). Pure Python.

The rules, one place each:

* **Lines end at ``\\n`` only.** One ``\\r`` before it (or at the very end) is dropped, so a CRLF file reads as
  its LF twin. Nothing else ends a line: a form feed, a vertical tab, NEL (U+0085), U+2028/U+2029, the
  separators U+001C-U+001E and a ``\\r`` anywhere else stay inside their line (``str.splitlines`` ends a line
  at each of them, which would shift the number of every later line: a sentence's id is its line's number).
* **UTF-8, strictly.** A line that is not UTF-8 raises :class:`~.errors.InputError` naming it,
  ``FILE:LINE: not UTF-8 (byte 0xff at column 7)`` (the byte's 1-based column in the line's bytes). With
  ``errors="surrogateescape"`` the bad bytes become lone surrogates instead, for a reader that refuses one
  sentence rather than the file (CoNLL-U: :func:`undecodable` names the line then). A byte-order mark at the
  start of the input is dropped.
* **Empty lines** are lines like any other, unless the caller passes ``empty=MESSAGE``: then a blank line
  (whitespace only) raises :class:`~.errors.InputError` ``FILE:LINE: MESSAGE``.
* **Names.** ``-`` is stdin, named ``<stdin>``; a path is named as given; a stream by its ``name``.

Ways to read: :func:`iter_lines` streams ``(line number, text)`` pairs and holds one line at a time;
:func:`read_lines` reads every line before returning them (nothing is used from an input with a bad line);
:func:`check_lines` reads every line and keeps none (their count); :class:`LineInput` is an input read more
than once, checked first and then used, without holding it in memory (stdin is copied to a temporary file).
"""
import os
import shutil
import stat
import sys
import tempfile
from typing import IO, Iterable, Iterator, List, Optional, Tuple, Union

from .errors import InputError

Source = Union[str, "os.PathLike[str]", IO]
BOM = "\ufeff"
STDIN = "-"
CHUNK = 1 << 16  # characters read at a time from a text stream


def input_name(source: Source, name: Optional[str] = None) -> str:
    """How errors name ``source``: ``name`` if given, ``<stdin>`` for ``-``, a path as given, a stream's ``name``."""
    if name is not None:
        return name
    if isinstance(source, (str, os.PathLike)):
        return "<stdin>" if str(source) == STDIN else str(source)
    named = getattr(source, "name", None)
    return named if isinstance(named, str) else "<stream>"


def undecodable(line: str) -> Optional[str]:
    """Why a line read with ``errors="surrogateescape"`` is not UTF-8 text (``not UTF-8 (byte 0xff at column
    3)``, the byte's 1-based column in the line's bytes, as :func:`decode_line` names it), or None if it is."""
    if line.isascii():
        return None
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as e:
        column = len(line[:e.start].encode("utf-8", "surrogateescape")) + 1
        code = ord(line[e.start])
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"lone surrogate U+{code:04X}"
        return f"not UTF-8 ({what} at column {column})"
    return None


def decode_line(raw: bytes, name: str, lineno: int, errors: str = "strict") -> str:
    """One line's bytes (without its ``\\n``) as text: a trailing ``\\r`` dropped, the BOM of line 1 dropped;
    :class:`~.errors.InputError` for bytes that are not UTF-8 (``errors="strict"``)."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        text = raw.decode("utf-8", errors)
    except UnicodeDecodeError as e:
        raise InputError(name, lineno, f"not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})") from None
    return text[1:] if lineno == 1 and text.startswith(BOM) else text


def _text_lines(stream) -> Iterator[str]:
    """The lines of an already decoded text stream, split on ``\\n`` only, without it."""
    rest = ""
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        parts = (rest + chunk).split("\n")
        rest = parts.pop()
        yield from parts
    if rest:
        yield rest


def _raw_lines(source: Source) -> Iterator[Union[bytes, str]]:
    """Each line of ``source`` without its ``\\n``: bytes (a path, stdin's bytes, a binary stream) or str (a text
    stream without bytes behind it, e.g. an ``io.StringIO``)."""
    if isinstance(source, (str, os.PathLike)) and str(source) != STDIN:
        with open(source, "rb") as f:
            for raw in f:
                yield raw[:-1] if raw.endswith(b"\n") else raw
        return
    stream = sys.stdin if isinstance(source, (str, os.PathLike)) else source
    binary = getattr(stream, "buffer", None) if stream is sys.stdin else None
    stream = binary if binary is not None else stream
    if isinstance(stream.read(0), bytes):
        for raw in stream:
            yield raw[:-1] if raw.endswith(b"\n") else raw
    else:
        yield from _text_lines(stream)


def iter_lines(source: Source, name: Optional[str] = None, *, errors: str = "strict",
               empty: Optional[str] = None) -> Iterator[Tuple[int, str]]:
    """``(line number, text)`` of every line of ``source`` (a path, ``-`` for stdin, or an open stream), 1-based,
    one at a time (see the module docstring for the rules); ``OSError`` when it cannot be read."""
    where = input_name(source, name)
    for lineno, raw in enumerate(_raw_lines(source), 1):
        if isinstance(raw, bytes):
            text = decode_line(raw, where, lineno, errors)
        else:  # already text: the same rules
            text = raw[:-1] if raw.endswith("\r") else raw
            text = text[1:] if lineno == 1 and text.startswith(BOM) else text
            bad = undecodable(text) if errors == "strict" else None
            if bad:
                raise InputError(where, lineno, bad)
        if empty is not None and not text.strip():
            raise InputError(where, lineno, empty)
        yield lineno, text


def read_lines(source: Source, name: Optional[str] = None, *, errors: str = "strict",
               empty: Optional[str] = None) -> List[str]:
    """Every line of ``source`` (:func:`iter_lines`), all read and checked before any is returned."""
    return [text for _, text in iter_lines(source, name, errors=errors, empty=empty)]


def check_lines(source: Source, name: Optional[str] = None, *, empty: Optional[str] = None) -> int:
    """Read every line of ``source`` as :func:`iter_lines` does and keep none: how many there are."""
    return sum(1 for _ in iter_lines(source, name, empty=empty))


def read_text(source: Source, name: Optional[str] = None) -> str:
    """A whole UTF-8 file (``-``: stdin) as one string, a leading BOM dropped, line breaks kept as they are
    (for a JSON document); :class:`~.errors.InputError` names the line of a byte that is not UTF-8."""
    where = input_name(source, name)
    if isinstance(source, (str, os.PathLike)) and str(source) != STDIN:
        with open(source, "rb") as f:
            data = f.read()
    else:
        stream = sys.stdin if isinstance(source, (str, os.PathLike)) else source
        stream = getattr(stream, "buffer", stream)
        data = stream.read()
        if isinstance(data, str):
            return data[1:] if data.startswith(BOM) else data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        start = data.rfind(b"\n", 0, e.start) + 1
        raise InputError(where, data.count(b"\n", 0, e.start) + 1,
                         f"not UTF-8 (byte 0x{data[e.start]:02x} at column {e.start - start + 1})") from None
    return text[1:] if text.startswith(BOM) else text


class LineInput:
    """An input read more than once (checked whole, then used) without being held in memory: a regular file is
    reopened for each reading; stdin (``-``), a stream, or a path that is no regular file (a FIFO, ``/dev/stdin``,
    a shell's ``<(...)``) is copied to a temporary file on entry (removed on exit, or when the copy is
    interrupted). Use it as a context manager; :meth:`lines` is :func:`iter_lines` over it, named as the input.
    A path that cannot be opened fails at the first reading (``OSError``), not on entry."""

    def __init__(self, source: Source, name: Optional[str] = None):
        self.source, self.name = source, input_name(source, name)
        self._spool: Optional[str] = None

    def __enter__(self) -> "LineInput":
        if isinstance(self.source, (str, os.PathLike)) and str(self.source) != STDIN:
            try:
                if stat.S_ISREG(os.stat(self.source).st_mode):
                    return self
                stream = open(self.source, "rb")
            except OSError:  # named by the first reading
                return self
            with stream:
                self._copy(stream)
            return self
        self._copy(sys.stdin if isinstance(self.source, (str, os.PathLike)) else self.source)
        return self

    def _copy(self, stream) -> None:
        binary = getattr(stream, "buffer", None) if stream is sys.stdin else None
        fd, self._spool = tempfile.mkstemp(prefix="sipe-input-")
        try:
            with os.fdopen(fd, "wb") as spool:
                if binary is not None or isinstance(stream.read(0), bytes):
                    shutil.copyfileobj(binary if binary is not None else stream, spool)
                else:  # decoded text (bad bytes, if any, kept as surrogates: named by the reading)
                    for chunk in iter(lambda: stream.read(CHUNK), ""):
                        spool.write(chunk.encode("utf-8", "surrogateescape"))
        except BaseException:  # Ctrl-C while a FIFO is read, a full disk: no temporary file left
            self.__exit__()
            raise

    def __exit__(self, *exc) -> None:
        if self._spool is not None:
            os.unlink(self._spool)
            self._spool = None

    def lines(self, *, errors: str = "strict", empty: Optional[str] = None) -> Iterator[Tuple[int, str]]:
        """:func:`iter_lines` over the input, from its first line, each call."""
        return iter_lines(self._spool or self.source, self.name, errors=errors, empty=empty)

    def texts(self, **kw) -> Iterable[str]:
        """The lines' texts alone (:meth:`lines`)."""
        return (text for _, text in self.lines(**kw))

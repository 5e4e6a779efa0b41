"""``dict.txt`` files and the data directories that hold them: the one loader, the one check of a directory.

* :func:`load_dictionary`: fairseq's ``Dictionary.load`` (same rules, same result), whose refusal of a
  malformed line (``Incorrect dictionary format ...``, a symbol given twice) names neither the file nor the
  line; here a :class:`~sipe_fairseq.hexatag.errors.DataError` says both in one line, ``FILE:LINE: ...``.
  Every place the plugin reads a dictionary uses it (the tasks, :mod:`.encode`, :mod:`.tag_dictionary`,
  ``sipe-preprocess --srcdict``, the checkpoints' dictionary check, ``--init-encoder``).
* :func:`data_directory_problem` / :func:`check_data_directory`: a ``--data`` directory (``data=`` of
  :func:`sipe_fairseq.hub.load`) that does not exist, is empty or holds a malformed ``dict.txt`` (with
  ``require_dictionary``: also one without ``dict.txt``), in one line, before anything is loaded (the commands:
  usage error, exit status 2). The commands check it where they parse their checkpoints, without
  ``require_dictionary``: a bad input file given with a folder that is no data directory is named first.
"""
import io
import os
from typing import Optional

from ..hexatag.errors import DataError

FORMAT = "'<token> <count> [#fairseq:overwrite]'"


def load_dictionary(path: str, dictionary_class=None):
    """``dictionary_class.load(path)`` (fairseq's reading of ``dict.txt``; default: fairseq's ``Dictionary``); a
    line it refuses raises :class:`DataError` ``PATH:LINE: ...``, a file that is not UTF-8 ``PATH:LINE: not
    UTF-8 ...``; a missing file raises ``FileNotFoundError`` as fairseq's."""
    if dictionary_class is None:
        from fairseq.data import Dictionary  # lazy (heavy): the directory check of the commands stays light

        dictionary_class = Dictionary
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except IsADirectoryError:
        raise DataError(f"{path}: a directory, not a dictionary file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise DataError(f"{path}:{line}: not UTF-8 (byte 0x{raw[e.start]:02x}); rebuild the data directory with "
                        "sipe-preprocess") from None
    dictionary = dictionary_class()
    try:
        dictionary.add_from_file(io.StringIO(text, newline=None))  # universal newlines, as fairseq's text mode
    except (ValueError, RuntimeError):
        raise DataError(_first_bad_line(path, text, dictionary_class)) from None
    return dictionary


def _first_bad_line(path: str, text: str, dictionary_class) -> str:
    """``PATH:LINE: what`` of the first line fairseq refuses (read again one line at a time, by fairseq's own
    ``add_from_file``, so that the rules are fairseq's)."""
    dictionary, first_seen = dictionary_class(), {}
    for number, line in enumerate(io.StringIO(text, newline=None), 1):
        symbol = _symbol(line)
        try:
            dictionary.add_from_file(io.StringIO(line))
        except RuntimeError:  # fairseq: "Duplicate word found when loading Dictionary"
            earlier = f"on line {first_seen[symbol]}" if symbol in first_seen else "a special symbol of every dictionary"
            return (f"{path}:{number}: token {symbol!r} already {earlier} (a line ending in #fairseq:overwrite "
                    "replaces it)")
        except ValueError:
            shown = line.rstrip("\r\n")
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            return f"{path}:{number}: not a fairseq dictionary line {FORMAT}: {shown!r}"
        first_seen.setdefault(symbol, number)
    return f"{path}: refused by fairseq's Dictionary.load: not {FORMAT} lines"  # not reached: the whole file was refused


def _symbol(line: str) -> str:
    """The symbol of a ``dict.txt`` line as fairseq reads it (the count and ``#fairseq:overwrite`` cut off)."""
    parts = line.rstrip().rsplit(" ", 1)
    if len(parts) == 2 and parts[1] == "#fairseq:overwrite":
        parts = parts[0].rsplit(" ", 1)
    return parts[0]


def data_directory_problem(data: Optional[str], require_dictionary: bool = True) -> Optional[str]:
    """One line saying why ``data`` (its first directory when ``os.pathsep``-joined) is not a data directory
    the plugin can load: missing, not a directory, empty, without ``dict.txt`` (when ``require_dictionary``) or
    with a malformed one (:func:`load_dictionary`); None when it is fine."""
    first = str(data).split(os.pathsep)[0]
    if not first:
        return "data directory '': no directory given"
    if not os.path.exists(first):
        return f"data directory {first}: no such directory"
    if not os.path.isdir(first):
        return f"data directory {first}: not a directory"
    if not os.listdir(first):
        return f"data directory {first}: empty: make one from CoNLL-U with `sipe-preprocess --destdir {first} ...`"
    dictionary = os.path.join(first, "dict.txt")
    if not os.path.isfile(dictionary):
        return f"data directory {first}: no dict.txt there: not a sipe-preprocess directory" if require_dictionary else None
    try:
        load_dictionary(dictionary)
    except DataError as e:
        return str(e)
    return None


def check_data_directory(data: Optional[str], require_dictionary: bool = True) -> None:
    """:class:`DataError` (a ``ValueError``) with :func:`data_directory_problem`'s line; nothing for a fine
    directory or ``data`` None (the directory saved in a checkpoint, checked where it is read)."""
    if data is None:
        return
    problem = data_directory_problem(data, require_dictionary)
    if problem:
        raise DataError(problem)

"""Writers shared by ``sipe-preprocess`` and ``sipe-glue-preprocess``: the one place that writes
token and tag streams (fairseq mmap ``.bin/.idx``), text files and the JSON manifest; and the package's
one atomic writer (:func:`atomic_open`, :func:`write_text`), through which every command's output file goes."""
import contextlib
import errno
import hashlib
import importlib.metadata as md
import json
import os
import re
import stat
import sys
import tempfile
import zlib
from typing import IO, Dict, Iterator, Optional, Tuple

import numpy as np

from ..hexatag.errors import OutputError


def write_stream(prefix: str, flat: np.ndarray, sizes: np.ndarray, vocab_size: int) -> None:
    """Write ``{prefix}.bin/.idx`` exactly as fairseq's mmap builder does for the sentences of
    ``flat`` split by ``sizes`` (dtype from ``best_fitting_int_dtype(vocab_size)``, items
    concatenated, fairseq's index writer), but in one write instead of one per sentence."""
    # lazy (heavy): fairseq imports torch; importing the writers (hashes, manifests, text) stays free of it
    from fairseq.data.indexed_dataset import MMapIndexedDataset, best_fitting_int_dtype, data_file_path, index_file_path

    dtype = best_fitting_int_dtype(vocab_size)
    with atomic_open(data_file_path(prefix), binary=True) as f:
        f.write(np.asarray(flat).astype(dtype).tobytes(order="C"))
    with MMapIndexedDataset.Index.writer(index_file_path(prefix), dtype) as index:
        index.write(np.asarray(sizes).tolist())


def write_streams(prefix: str, sizes: np.ndarray, streams: Dict[str, Tuple[np.ndarray, int]]) -> None:
    """The aligned streams of one split: ``{suffix: (flat ids, vocabulary size)}`` -> ``{prefix}{suffix}.bin/.idx``
    (suffix ``""`` for the tokens, ``".terminal"``, ``".nonterminal"``, ``".deprel"`` for tags), all
    with the same per-sentence ``sizes``."""
    for suffix, (flat, vocab_size) in streams.items():
        if len(flat) != int(np.asarray(sizes).sum()):
            raise ValueError(f"{prefix}{suffix}: {len(flat)} ids for {int(np.asarray(sizes).sum())} positions")
        write_stream(prefix + suffix, flat, sizes, vocab_size)


@contextlib.contextmanager
def atomic_open(path, binary: bool = False) -> Iterator[IO]:
    """A file to write ``path`` through, atomically: a temporary file in the same directory (UTF-8 text with
    ``\\n`` line breaks on every platform, or bytes), flushed and fsynced, then renamed over ``path``
    (``os.replace``; the permission bits of the file it replaces, or ``0o666`` less the umask for a new one) when
    the block ends; if an exception ends it, the temporary file is removed and ``path`` is left as it was (an
    interrupted run leaves no partial file). What ``path`` names decides (:func:`_destination`):

    * a regular file, or nothing yet: replaced atomically, as above;
    * a symbolic link: its final target is replaced (the link stays);
    * a FIFO, a character device (``/dev/null``, ``/dev/full``, a terminal), or a process's open file
      (``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``: whatever it is, even a regular file): written
      through, in place; a device node never becomes a regular file;
    * a block device: refused (:class:`~sipe_fairseq.hexatag.errors.OutputError`): a report is never written
      over a disk; a directory: the ``open`` error.

    Errors name ``path``, never the temporary file: opening ``path`` or its temporary file fails with the
    ``OSError`` of its kind (``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``); a write that
    fails (disk full ``ENOSPC``, file too large ``EFBIG``, a closed pipe ``EPIPE``, ...: in the block, when it
    is flushed, fsynced or renamed) raises :class:`~sipe_fairseq.hexatag.errors.OutputError`, one line naming
    ``path`` and the reason (a user error: exit status 1 for a command)."""
    path = os.fspath(path)
    target, through = _destination(path)
    mode = "wb" if binary else "w"
    text = {} if binary else {"encoding": "utf-8", "newline": "\n"}
    if through:
        with _written_through(path, target, mode, text) as f:
            yield f
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(target)),
                                   prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    except OSError as e:
        raise type(e)(e.errno, e.strerror, path) from e
    f = os.fdopen(fd, mode, **text)
    try:
        yield _Output(f, path)
        with naming(path):
            f.flush()
            os.fsync(f.fileno())
            f.close()
            os.chmod(tmp, _mode_of(target))
            os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):  # already failing: what the buffer still holds cannot go out
            f.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _destination(path: str) -> Tuple[str, bool]:
    """``(target, through)``: the file a write of ``path`` replaces (a symbolic link's final target), or
    ``through``: ``path`` is written in place (a FIFO, a character device, a process's open file such as
    ``/dev/stdout``); :class:`OutputError` for a block device."""
    target = path
    for _ in range(40):  # the kernel's own limit of links followed
        if _PROCESS_FILE.match(os.path.abspath(target)):
            return os.path.abspath(target), True  # /dev/stdout -> /proc/self/fd/1: an open file, whatever it is
        if not os.path.islink(target):
            break
        link = os.readlink(target)
        target = link if os.path.isabs(link) else os.path.join(os.path.dirname(target), link)
    else:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target, False
    except OSError as e:
        raise type(e)(e.errno, e.strerror, path) from e
    if stat.S_ISBLK(st.st_mode):
        raise OutputError(errno.EPERM, "a block device (a report is never written over a disk)", path)
    return (path, True) if not stat.S_ISREG(st.st_mode) else (target, False)


_PROCESS_FILE = re.compile(r"^/(?:proc/(?P<pid>[^/]+)|dev)/fd/(?P<fd>\d+)$")


@contextlib.contextmanager
def _written_through(path: str, target: str, mode: str, text: dict) -> Iterator[IO]:
    """``target`` written in place (no temporary file can replace it); write errors name ``path``. One of this
    process's own open files (``/dev/stdout``: ``/proc/self/fd/1``) is written through a duplicate of its
    descriptor, after what ``sys.stdout`` (``sys.stderr``) holds: at its offset, never truncated nor reopened."""
    own = _PROCESS_FILE.match(target)
    if own and own["pid"] not in (None, "self", "thread-self", str(os.getpid())):
        own = None
    try:
        if own:
            fd = int(own["fd"])
            for stream in (sys.stdout, sys.stderr):
                if stream is not None and _fileno(stream) == fd:
                    stream.flush()
            f = os.fdopen(os.dup(fd), mode, **text)
        else:
            f = open(target, mode, **text)
    except OSError as e:
        raise type(e)(e.errno, e.strerror, path) from e
    try:
        yield _Output(f, path)
        with naming(path):
            f.close()
    finally:
        if not f.closed:
            with contextlib.suppress(OSError):  # already failing: what the buffer still holds cannot go out
                f.close()


def _fileno(stream) -> Optional[int]:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a buffer (tests, notebooks), or closed
        return None


def _mode_of(target: str) -> int:
    """The permission bits the replacing file gets: those of the file it replaces, else ``0o666`` less the umask."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


@contextlib.contextmanager
def naming(path: str) -> Iterator[None]:
    """An ``OSError`` of writing ``path`` raised as :class:`~sipe_fairseq.hexatag.errors.OutputError` naming it."""
    try:
        yield
    except OutputError:
        raise
    except OSError as e:
        raise OutputError(e.errno, e.strerror or str(e), os.fspath(path)) from e


class _Output:
    """The file :func:`atomic_open` yields: writes and flushes that fail raise
    :class:`~sipe_fairseq.hexatag.errors.OutputError` naming the output's path (not the temporary file); the rest
    is the file's own."""

    def __init__(self, f: IO, path: str):
        self._f, self._path = f, path

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __iter__(self):
        return iter(self._f)

    def write(self, data):
        with naming(self._path):
            return self._f.write(data)

    def writelines(self, lines) -> None:
        with naming(self._path):
            self._f.writelines(lines)

    def flush(self) -> None:
        with naming(self._path):
            self._f.flush()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path, text: str) -> None:
    """``text`` into ``path`` through :func:`atomic_open` (UTF-8, ``\\n`` line breaks on every platform)."""
    with atomic_open(path) as f:
        f.write(text)


def save_figure(fig, path, **kwargs) -> str:
    """A matplotlib figure into ``path`` through :func:`atomic_open` (``kwargs``: of ``savefig``), in the format
    ``savefig`` would choose: the suffix's, else ``savefig.format`` with that suffix appended. Returns the path written."""
    import matplotlib  # lazy (heavy): only a figure needs it, and its caller has already imported it

    path = os.fspath(path)
    fmt = os.path.splitext(path)[1][1:]
    if not fmt:
        fmt = matplotlib.rcParams["savefig.format"]
        path = f"{path}.{fmt}"
    with atomic_open(path, binary=True) as f, naming(path):  # savefig may write to the file's descriptor itself
        fig.savefig(f, format=fmt, **kwargs)
    return path


def write_manifest(path: str, manifest: dict) -> None:
    """The JSON manifest of a data directory: sorted keys, no timestamps (re-runs give identical bytes)."""
    write_text(path, json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def digests(path: str, sha256: bool = True, crc32: bool = True) -> Dict[str, object]:
    """``{"sha256": hex, "crc32": int}`` (those asked for) of a file, read once."""
    h = hashlib.sha256() if sha256 else None
    crc = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            if h is not None:
                h.update(chunk)
            if crc32:
                crc = zlib.crc32(chunk, crc)
    out: Dict[str, object] = {}
    if h is not None:
        out["sha256"] = h.hexdigest()
    if crc32:
        out["crc32"] = crc
    return out


def sha256_file(path: str) -> str:
    return str(digests(path, crc32=False)["sha256"])


def file_digests(dest: str) -> Dict[str, dict]:
    """Bytes, crc32 (compared at every load, ``--validate-data fast``) and sha256 (``full``) of every
    file of a data directory but the manifest, each file read once (checked at load by
    :mod:`sipe_fairseq.data.validate`)."""
    out = {}
    for name in sorted(os.listdir(dest)):
        path = os.path.join(dest, name)
        if name != "manifest.json" and os.path.isfile(path):
            out[name] = {"bytes": os.path.getsize(path), **digests(path)}
    return out


def tool_versions() -> Dict[str, str]:
    """Versions recorded in a manifest: fairseq, sentencepiece, sipe_fairseq."""
    import fairseq  # lazy (heavy): fairseq imports torch; only a manifest needs the versions
    import sentencepiece

    try:
        sipe = md.version("sipe_fairseq")
    except md.PackageNotFoundError:
        sipe = "unknown"
    return {"fairseq": fairseq.__version__, "sentencepiece": sentencepiece.__version__, "sipe_fairseq": sipe}

"""Writers shared by ``sipe-preprocess`` and ``sipe-glue-preprocess``: the one place that writes
token and tag streams (fairseq mmap ``.bin/.idx``), text files and the JSON manifest; and the package's
one atomic writer (:func:`atomic_open`, :func:`write_text`), through which every command's output file goes."""
import contextlib
import hashlib
import importlib.metadata as md
import json
import os
import stat
import tempfile
import zlib
from typing import IO, Dict, Iterator, Tuple

import numpy as np


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
    (``os.replace``, mode ``0o666`` less the umask) when the block ends; if an exception ends it, the temporary
    file is removed and ``path`` is left as it was (an interrupted run leaves no partial file). A ``path``
    that exists and is not a regular file (``/dev/stdout``, a FIFO; a directory: the ``open`` error) cannot
    be replaced and is written in place; a symbolic link's target is replaced. ``OSError`` names ``path``,
    never the temporary file."""
    path = os.fspath(path)
    if os.path.islink(path):
        path = os.path.realpath(path)
    mode = "wb" if binary else "w"
    text = {} if binary else {"encoding": "utf-8", "newline": "\n"}
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        with open(path, mode, **text) as f:
            yield f
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=f".{os.path.basename(path)}.",
                                   suffix=".tmp")
    except OSError as e:
        raise type(e)(e.errno, e.strerror, path) from e
    try:
        with os.fdopen(fd, mode, **text) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
    with atomic_open(path, binary=True) as f:
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

"""Writing a command's reports: atomically (a temporary file in the same directory, then ``os.replace``), so
that an interrupted run leaves no partial file and an old report stays whole; JSON valid (``null``, never
``NaN``: :func:`~sipe_fairseq.eval.finite.json_safe`)."""
import json
import os
import tempfile

from sipe_fairseq.eval.finite import json_safe


def write_text(path: str, text: str) -> None:
    """``text`` into ``path``, atomically."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
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


def write_json(path: str, obj, **kwargs) -> None:
    """``obj`` as JSON into ``path`` (``kwargs``: of ``json.dumps``), atomically; non-finite floats as ``null``."""
    write_text(path, json.dumps(json_safe(obj), allow_nan=False, **kwargs) + "\n")

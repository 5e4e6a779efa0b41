"""Writing a command's reports: atomically, through the package's one atomic writer
(:func:`~sipe_fairseq.data.writers.write_text`: a temporary file in the same directory, then ``os.replace``), so
that an interrupted run leaves no partial file and an old report stays whole; JSON valid (``null``, never
``NaN``: :func:`~sipe_fairseq.eval.finite.json_safe`).

A write that fails (disk full, file too large, a closed pipe) raises
:class:`~sipe_fairseq.hexatag.errors.OutputError` from the writer itself, one line naming the path and the
reason: a user error, so every command ends on it in that one line with exit status 1 (the commands' error
hook, :func:`~sipe_fairseq.hexatag.errors.install_error_hook`), the old file left as it was; a write to a closed
stdout (``| head``) ends the same way."""
import json

from sipe_fairseq.data.writers import atomic_open, write_text  # noqa: F401  the commands' writers, re-exported
from sipe_fairseq.eval.finite import json_safe


def write_json(path: str, obj, **kwargs) -> None:
    """``obj`` as JSON into ``path`` (``kwargs``: of ``json.dumps``), atomically; non-finite floats as ``null``."""
    write_text(path, json.dumps(json_safe(obj), allow_nan=False, **kwargs) + "\n")

"""Writing a command's reports: atomically, through the package's one atomic writer
(:func:`~sipe_fairseq.data.writers.write_text`: a temporary file in the same directory, then ``os.replace``), so
that an interrupted run leaves no partial file and an old report stays whole; JSON valid (``null``, never
``NaN``: :func:`~sipe_fairseq.eval.finite.json_safe`)."""
import json

from sipe_fairseq.data.writers import atomic_open, write_text  # noqa: F401  the commands' writers, re-exported
from sipe_fairseq.eval.finite import json_safe


def write_json(path: str, obj, **kwargs) -> None:
    """``obj`` as JSON into ``path`` (``kwargs``: of ``json.dumps``), atomically; non-finite floats as ``null``."""
    write_text(path, json.dumps(json_safe(obj), allow_nan=False, **kwargs) + "\n")

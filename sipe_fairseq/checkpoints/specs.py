"""``--path [NAME=]CKPT`` checkpoint specs (``sipe-eval-lm``, ``sipe-eval``)."""
import os
from collections import OrderedDict

from .load import CheckpointError


def checkpoint_specs(specs) -> "OrderedDict[str, str]":
    """``["name=ckpt.pt", "other.pt"]`` -> ``{name: path}`` (a bare path names itself); raises
    ``ValueError`` for a name given twice and :class:`CheckpointError` for a missing file."""
    out = OrderedDict()
    for spec in specs or ():
        name, sep, path = spec.partition("=")
        name, path = (name, path) if sep else (spec, spec)
        if name in out:
            raise ValueError(f"checkpoint name {name!r} given twice")
        if not os.path.isfile(path):
            raise CheckpointError(f"checkpoint {path}: no such file")
        out[name] = path
    return out

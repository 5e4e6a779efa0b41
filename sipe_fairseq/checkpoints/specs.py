"""``--path [NAME=]CKPT`` checkpoint specs, and the one loader of them (layer 4).

* :func:`parse_checkpoint_specs`: ``["name=ckpt.pt",
  "other.pt"]`` -> ``{name: path}`` in order; a bare path names itself; a name given twice raises
  ``ValueError`` (the commands' usage error, exit status 2), a missing file :class:`CheckpointError`.
* :func:`load_checkpoint`: one checkpoint as a :class:`LoadedCheckpoint` (an eval-mode model with its
  task, from :func:`~sipe_fairseq.checkpoints.load.load_lm`: the data fingerprint check through the task,
  ``allow_dictionary_mismatch``), then :func:`check_dictionary`, the one dictionary check of every
  command: the model's dictionary (the task's, which its embedding rows were loaded against) must be the
  data directory's ``dict.txt``, the same symbols in the same order (a masked-LM encoder's task appends
  ``<mask>``, so the data's must be the model's without that last symbol). A ``data`` directory that is
  missing, empty or holds a malformed ``dict.txt`` is refused first, by both, in one
  :class:`~sipe_fairseq.hexatag.errors.DataError` line (a ``ValueError``: the commands' usage error, exit
  status 2; :func:`~sipe_fairseq.data.dictionary.check_data_directory`); :func:`load_checkpoint` also one
  without ``dict.txt`` (:class:`CheckpointSpecs`, built before a command reads its inputs, leaves that to the
  load, so that a bad input file is named first).
* :class:`CheckpointSpecs`: the parsed specs (ordered name -> path, :meth:`~CheckpointSpecs.paths` for the
  reports) and their data directory; iterating loads one checkpoint at a time and releases it (its
  :class:`LoadedCheckpoint` loses its model and task) before the next is loaded, so a command that
  scores one checkpoint at a time holds one model; :meth:`~CheckpointSpecs.load` loads one by name (a
  command that needs every model together, ``sipe-eval attention``, keeps what it loads).
"""
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Mapping, Optional, Sequence

from ..data.dictionary import check_data_directory, load_dictionary
from .load import CheckpointError, load_lm

MASK = "<mask>"  # the symbol fairseq's masked-LM tasks append to dict.txt


def parse_checkpoint_specs(specs: Optional[Iterable[str]]) -> "OrderedDict[str, str]":
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


@dataclass
class LoadedCheckpoint:
    """A checkpoint loaded by :func:`load_checkpoint`: ``model`` (eval mode) and its scoring ``task``, both
    None once released (:meth:`release`; iterating :class:`CheckpointSpecs` releases each before the next
    is loaded)."""
    name: str
    path: str
    model: object
    task: object

    def release(self) -> None:
        """Drop the model and the task (the memory is freed once nothing else holds them)."""
        self.model = self.task = None


def _data_dir(data: Optional[str], task) -> str:
    """The (first) data directory: ``data``, or the task's own (the one saved in the checkpoint)."""
    if data is None:
        cfg = getattr(task, "cfg", None) or getattr(task, "args", None)
        data = getattr(cfg, "data", None)
    return str(data or "").split(os.pathsep)[0]


def _first_difference(got: Sequence[str], want: Sequence[str]) -> str:
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"symbol {i} is {a!r} in the model's, {b!r} in the data's"
    i = min(len(got), len(want))
    if len(got) > len(want):
        return f"the model's has {got[i]!r} at {i}, where the data's ends"
    return f"the data's has {want[i]!r} at {i}, where the model's ends"


def check_dictionary(path: str, data: str, symbols: Sequence[str], masked: bool = False) -> None:
    """:class:`CheckpointError` naming the checkpoint ``path``, the data directory ``data``, both sizes and
    the first differing symbol, unless the model's dictionary ``symbols`` is ``data``'s ``dict.txt``;
    ``masked`` (a masked-LM encoder): ``dict.txt`` followed by ``<mask>``, which the task appends as in
    training."""
    data_symbols = data_dictionary_symbols(data)
    want = list(data_symbols) + ([MASK] if masked else [])
    got = list(symbols)
    if got == want:
        return
    where = f"checkpoint {path}: its dictionary ({len(got)} symbols) is not the data directory {data}'s dict.txt " \
            f"({len(data_symbols)} symbols"
    if masked:
        where += f", plus {MASK}: a masked-LM encoder's task appends it to dict.txt as in training"
    raise CheckpointError(f"{where}): {_first_difference(got, want)}; use the data directory the checkpoint "
                          "was trained on")


def data_dictionary_symbols(data: str) -> List[str]:
    """The symbols of ``data``'s ``dict.txt`` as fairseq reads it (its special symbols first)."""
    dictionary = os.path.join(data, "dict.txt")
    if not os.path.isfile(dictionary):
        raise CheckpointError(f"data directory {data}: no dict.txt to check the checkpoints' dictionaries against")
    return list(load_dictionary(dictionary).symbols)


def _is_masked_lm(task) -> bool:
    from fairseq.tasks.masked_lm import MaskedLMTask  # lazy (heavy)

    return isinstance(task, MaskedLMTask)


def load_checkpoint(path: str, data: Optional[str] = None, allow_dictionary_mismatch: bool = False,
                    context_window: int = 0, name: Optional[str] = None, device: str = "cpu") -> LoadedCheckpoint:
    """``path`` loaded by :func:`~sipe_fairseq.checkpoints.load.load_lm` on ``data`` (None: the directory
    saved in the checkpoint), then :func:`check_dictionary`; ``name`` defaults to ``path``. A ``data`` that is
    no data directory: :class:`~sipe_fairseq.hexatag.errors.DataError` (module docstring). ``device``: where the
    model is put (the commands' ``--device``)."""
    check_data_directory(data)
    model, task = load_lm(path, data, context_window, allow_dictionary_mismatch=allow_dictionary_mismatch, device=device)
    check_dictionary(path, _data_dir(data, task), task.source_dictionary.symbols, _is_masked_lm(task))
    return LoadedCheckpoint(path if name is None else name, path, model, task)


class CheckpointSpecs:
    """Checkpoints by name (``--path [NAME=]CKPT``, parsed by :func:`parse_checkpoint_specs`), loaded on
    ``data`` by :func:`load_checkpoint` when asked: ``for ck in specs`` holds one at a time (each released
    when the iteration moves on or stops), :meth:`load` loads one by name (kept as long as the caller holds it)."""

    def __init__(self, paths: Mapping[str, str], data: Optional[str] = None, allow_dictionary_mismatch: bool = False,
                 context_window: int = 0, device: str = "cpu"):
        check_data_directory(data, require_dictionary=False)  # before any work: one DataError line (a ValueError)
        self._paths = OrderedDict(paths)
        self.data, self.allow_dictionary_mismatch, self.context_window = data, allow_dictionary_mismatch, context_window
        self.device = device

    @classmethod
    def parse(cls, specs: Optional[Iterable[str]], data: Optional[str] = None, **options) -> "CheckpointSpecs":
        """The specs parsed (``ValueError``, :class:`CheckpointError`: see :func:`parse_checkpoint_specs`)."""
        return cls(parse_checkpoint_specs(specs), data, **options)

    def paths(self) -> "OrderedDict[str, str]":
        """``{name: path}`` in the order given (for the reports)."""
        return OrderedDict(self._paths)

    def names(self) -> List[str]:
        return list(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __contains__(self, name) -> bool:
        return name in self._paths

    def load(self, name: str) -> LoadedCheckpoint:
        """The checkpoint ``name`` loaded and checked (:func:`load_checkpoint`); ``KeyError`` for another name."""
        return load_checkpoint(self._paths[name], self.data, self.allow_dictionary_mismatch, self.context_window, name,
                               self.device)

    def __iter__(self) -> Iterator[LoadedCheckpoint]:
        for name in self._paths:
            loaded = self.load(name)
            try:
                yield loaded
            finally:
                loaded.release()  # before the next one is loaded: one model at a time

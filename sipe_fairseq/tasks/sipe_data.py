"""What every SiPE task shares: validated tag-stream loading, batch iterators, one-line user errors.

* :class:`SiPEDataConfig` adds ``--validate-data fast|full|none`` to a task's config (checks of
  :mod:`sipe_fairseq.data.validate`, run once per split before anything is loaded).
* :class:`SiPEDataMixin` (first among a task's bases) loads a split's token stream and its tag
  streams after validating them, and overrides ``get_batch_iterator``:

  - evaluation sets are batched with ``--required-batch-size-multiple 1``: fairseq's
    ``batch_by_size`` drops the last partial batch when the multiple is > 1 (fairseq issue #5036;
    default 8), and every evaluated example must count;
  - the training set's batches are a pure function of ``(seed, epoch)``: fairseq caches the
    epoch-1 batches and reuses them in later epochs of an uninterrupted run, but rebuilds them
    with ``seed + epoch`` when a run resumes from a checkpoint, so a resumed run would see other
    batches. Rebuilding them every epoch makes both runs see the same ones; with fairseq's
    per-update dropout seed (``seed + num_updates``, ``Trainer._set_seed``) a run resumed from
    ``checkpoint_last.pt`` logs the same loss at every update as the uninterrupted run.

* User errors (:data:`~sipe_fairseq.hexatag.errors.USER_ERRORS`: ``DataError``, ``EvaluationError``,
  ``OptionError``, ``CheckpointError``, e.g. from ``--gilt-init-from``) end a fairseq command with one
  line on stderr, ``sipe_fairseq: error: <file>: <what>``, and exit status 1 (``UsageError``, a criterion's
  option: 2, as argparse; ``CheckpointError``: 3, as the ``sipe-*`` commands), without a traceback: a task's
  ``setup_task`` run by a fairseq command installs :func:`~sipe_fairseq.hexatag.errors.install_error_hook`
  (:func:`install_command_error_hook`; fairseq runs ``load_dataset`` and ``build_model`` outside any handler
  of its own). Importing the tasks, or loading a checkpoint from Python (``sipe_fairseq.hub.load``), leaves
  ``sys.excepthook`` alone: there they are ordinary exceptions.
"""
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
from fairseq.data import BaseWrapperDataset, data_utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from ..checkpoints.load import check_archive, check_finite
from ..models._common import fairseq_hub_refusal
from ..data import dictionary as dictionaries
from ..data.fingerprint import KEY as FINGERPRINT_KEY
from ..data.fingerprint import data_fingerprint, fingerprint_mismatch
from ..data.settings import setting
from ..data.tag_dictionary import load_tag_dictionary
from ..data.tag_streams import load_tag_streams
from ..data.validate import VALIDATION_MODES, expectations, split_files, validate_split
from ..hexatag.errors import (  # noqa: F401  EvaluationError, OptionError: imported from here by the tasks and tests
    CHECKPOINT_EXIT_STATUS, USAGE_EXIT_STATUS, USER_ERRORS, CheckpointError, DataError, EvaluationError, OptionError,
    UsageError, install_error_hook,
)

logger = logging.getLogger(__name__)


def fairseq_command_running() -> bool:
    """Whether this process is one of fairseq's commands (``fairseq-train``, ``fairseq-eval-lm``,
    ``fairseq-generate``, ``fairseq-hydra-train``, ...): its ``__main__`` is a ``fairseq_cli`` module
    (``python -m fairseq_cli.train``, or the file run by path) or its ``argv[0]`` a ``fairseq-*`` script."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and (spec.name or "").split(".")[0] == "fairseq_cli":
        return True
    for path in (getattr(main, "__file__", None), sys.argv[0] if sys.argv else None):
        if path and (os.path.basename(path).startswith("fairseq-")
                     or os.path.basename(os.path.dirname(os.path.abspath(path))) == "fairseq_cli"):
            return True
    return False


_CHECKED: set = set()


def command_checkpoints_intact() -> None:
    """In a fairseq command, every checkpoint of its ``--path`` (fairseq's ``:``-separated ensemble) checked against
    the CRC-32s of its zip archive (:func:`~sipe_fairseq.checkpoints.load.check_archive`: a damaged one is a
    :class:`CheckpointError` naming the member, exit status 3 through the command's error hook): fairseq's own
    loader reads the archive without them. Each file once per process; ``SIPE_SKIP_CHECKPOINT_CRC=1`` skips it."""
    if not fairseq_command_running():
        return
    argv, paths = list(sys.argv[1:]), []
    for i, arg in enumerate(argv):
        if arg == "--path" and i + 1 < len(argv):
            paths += argv[i + 1].split(os.pathsep)
        elif arg.startswith("--path="):
            paths += arg.split("=", 1)[1].split(os.pathsep)
    for path in paths:
        if path and path not in _CHECKED and os.path.isfile(path):
            check_archive(path)
            _CHECKED.add(path)


def refuse_fairseq_hub() -> None:
    """:class:`CheckpointError` (the line of :func:`~sipe_fairseq.models._common.fairseq_hub_refusal`) when fairseq's
    ``hub_utils.from_pretrained`` is loading this checkpoint (``TransformerLanguageModel.from_pretrained`` after
    ``import_user_module``, for instance): its hub interface scores without the model's tags or arcs."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "from_pretrained" and frame.f_globals.get("__name__") == "fairseq.hub_utils":
            args = frame.f_locals
            raise CheckpointError(fairseq_hub_refusal(
                "fairseq's from_pretrained", args.get("model_name_or_path", "."), args.get("checkpoint_file", "model.pt"),
                args.get("data_name_or_path", ".")))
        frame = frame.f_back


def install_command_error_hook() -> bool:
    """In a fairseq command, the one-line user errors (:func:`~sipe_fairseq.hexatag.errors.install_error_hook`);
    anywhere else (Python, a notebook, ``sipe_fairseq.hub.load``) nothing. Called by every task's
    ``setup_task``; idempotent. True when it installed the hook."""
    return fairseq_command_running() and install_error_hook()


@dataclass
class SiPEDataConfig(FairseqDataclass):
    validate_data: ChoiceEnum(VALIDATION_MODES) = field(
        default="fast", metadata={"help": "check every split before loading it (sipe_fairseq.data.validate): fast = file "
                                          "structure, ids, tag positions and arcs (a sample on very large splits), the "
                                          "manifest's size and crc32 of each file (any changed byte is refused); full = "
                                          "all sentences and also the manifest's sha256; none = structure only"})
    allow_dictionary_mismatch: bool = field(
        default=False, metadata={"help": "load a checkpoint whose recorded data (dict.txt and spm.model sha256, tag "
                                         "dictionaries) differs from this data directory's, with a warning (default: "
                                         "refused, exit status 3)"})


_WARNED_MANIFESTS = set()  # one warning per old manifest and process, whatever the number of splits


def _warn_old_manifest(path: Optional[str], message: str) -> None:
    key = os.path.abspath(path or "")
    if key not in _WARNED_MANIFESTS:
        _WARNED_MANIFESTS.add(key)
        logger.warning(message)


def _option(task, name, default=None):
    cfg = task.cfg if getattr(task, "cfg", None) is not None else getattr(task, "args", None)
    value = setting(cfg, name, default)  # a task of another kind (the masked-LM and tagging ones) may lack it
    return default if value is None else value


class SiPEDataMixin:
    """Shared by the ``hexatag_*`` tasks; see the module docstring."""

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        """fairseq's ``setup_task`` of the task's other base, after :func:`install_command_error_hook` (a task
        that overrides ``setup_task`` without calling this one calls the hook itself)."""
        install_command_error_hook()
        return super().setup_task(cfg, **kwargs)

    @classmethod
    def load_dictionary(cls, filename):
        """fairseq's ``FairseqTask.load_dictionary`` through :func:`~sipe_fairseq.data.dictionary.load_dictionary`:
        a malformed line is one :class:`DataError` line naming the file and the line."""
        return dictionaries.load_dictionary(filename)

    @staticmethod
    def load_tag_dictionaries(folder: str, kinds: Sequence[str]) -> Dict[str, object]:
        """``{kind: dict.{kind}.txt}`` of ``folder``, each checked for the SiPE layout."""
        out = {}
        for kind in kinds:
            path = os.path.join(folder, f"dict.{kind}.txt")
            if not os.path.isfile(path):
                raise DataError(f"{path}: no such file: {folder} is not a SiPE data directory; make one from CoNLL-U "
                                f"with `sipe-preprocess --train FILE ... --destdir DIR`")
            try:
                out[kind] = load_tag_dictionary(path, kind)
            except ValueError as e:
                raise DataError(str(e)) from None
        return out

    validates_arcs = False  # gilt_lm: {split}.arcs is validated with the other streams

    def data_fingerprint(self) -> Optional[dict]:
        """:func:`~sipe_fairseq.data.fingerprint.data_fingerprint` of the task's (first) data directory, once."""
        if "_sipe_fingerprint" not in self.__dict__:
            data = _option(self, "data")
            self._sipe_fingerprint = data_fingerprint(str(data).split(os.pathsep)[0]) if data else None
        return self._sipe_fingerprint

    def build_model(self, cfg, from_checkpoint=False):
        """fairseq's model, refusing non-finite weights when a checkpoint's are loaded into it (fairseq-eval-lm,
        fairseq-generate, --restore-file: :func:`~sipe_fairseq.checkpoints.load.check_finite`); under a fairseq
        command that reads checkpoints (``--path``), each is first checked against its archive's CRCs
        (:func:`command_checkpoints_intact`)."""
        if from_checkpoint:
            command_checkpoints_intact()
            refuse_fairseq_hub()
        model = super().build_model(cfg, from_checkpoint)

        def refuse_non_finite(state_dict, prefix, *args):
            if not prefix:
                check_finite("being loaded", state_dict)

        model._register_load_state_dict_pre_hook(refuse_non_finite)
        return model

    def state_dict(self):
        """fairseq's task state, plus the data's fingerprint: saved in every checkpoint (``task_state``)."""
        out = dict(super().state_dict())
        fingerprint = self.data_fingerprint()
        if fingerprint is not None:
            out[FINGERPRINT_KEY] = fingerprint
        return out

    def load_state_dict(self, state_dict):
        """A checkpoint's task state (fairseq loads it before the model): its data fingerprint is compared with
        this data directory's (:class:`CheckpointError` when they differ, unless ``--allow-dictionary-mismatch``);
        a checkpoint without one is loaded with one warning."""
        state_dict = dict(state_dict or {})
        saved, current = state_dict.pop(FINGERPRINT_KEY, None), self.data_fingerprint()
        if current is not None:
            if saved is None:
                _warn_old_manifest(f"checkpoint:{current['data']}", "the checkpoint records no data fingerprint "
                                   f"(trained before checkpoints recorded their dict.txt): not compared with {current['data']}")
            else:
                problem = fingerprint_mismatch(saved, current)
                if problem and _option(self, "allow_dictionary_mismatch", False):
                    logger.warning(f"{problem} (--allow-dictionary-mismatch)")
                elif problem:
                    raise CheckpointError(f"{problem}; --allow-dictionary-mismatch loads it anyway")
        super().load_state_dict(state_dict)

    def validate_split(self, folder: str, split: str, dictionary, tag_dictionaries: Mapping[str, object]) -> Optional[dict]:
        """:func:`~sipe_fairseq.data.validate.validate_split` once per (folder, split, mode)."""
        mode = str(_option(self, "validate_data", "fast"))
        done = self.__dict__.setdefault("_sipe_validated", {})
        key = (os.path.abspath(folder), split, mode)
        if key not in done:
            exp = expectations(folder, split)
            report = validate_split(folder, split, dictionary, tag_dictionaries, mode, exp, arcs=self.validates_arcs)
            files = report.get("files")
            if mode == "none":
                note = "content not checked (--validate-data none)"
            else:
                note = f"checked {report['checked']}: ids, tag positions" + (", arcs" if self.validates_arcs else "")
                n_files = len(split_files(split, list(tag_dictionaries), self.validates_arcs))
                if files is None:
                    note += f"; {exp.manifest or 'no manifest'} records no file sizes/checksums"
                    if exp.split_stats is not None:  # a sipe-preprocess manifest from before they were recorded
                        _warn_old_manifest(exp.manifest, f"{exp.manifest} records no file sizes or checksums (written "
                                                         f"by an older sipe-preprocess): {n_files} files of split "
                                                         f"{split!r} not compared with it; rebuild the directory to "
                                                         "have every byte checked")
                else:
                    sums = "crc32, sha256" if mode == "full" else "crc32"
                    note += f"; {files['checked']} files match the manifest (sizes, {sums})"
                    if files["no_checksum"]:
                        note += f", {files['no_checksum']} without a recorded crc32"
                        _warn_old_manifest(exp.manifest, f"{exp.manifest} records no crc32 checksums (written by an "
                                                         f"older sipe-preprocess): {files['no_checksum']} files of "
                                                         f"split {split!r} compared by size only"
                                                         + (" and sha256" if mode == "full" else "")
                                                         + "; rebuild the directory to have every byte checked by "
                                                           "default")
                    if files["unrecorded"]:
                        note += f", {files['unrecorded']} not recorded in it"
            logger.info(f"{os.path.join(folder, split)}: {report['sentences']} sentences, {report['tokens']} tokens, "
                        f"streams {report['streams']}; {note}")
            done[key] = report
        return done[key]

    def load_split_streams(self, folder: str, split: str, dictionary, tag_dictionaries: Mapping[str, object],
                           dataset_impl: Optional[str] = None, combine: bool = False, required: bool = True
                           ) -> Tuple[Optional[object], Optional[Dict[str, object]]]:
        """Validate, then load ``{folder}/{split}`` and its tag streams: ``(tokens, {kind: stream})``;
        ``(None, None)`` for a missing split when not ``required``."""
        prefix = os.path.join(folder, split)
        if not required and not any(os.path.exists(prefix + ext) for ext in (".bin", ".idx")):
            return None, None
        self.validate_split(folder, split, dictionary, tag_dictionaries)
        tokens = data_utils.load_indexed_dataset(prefix, dictionary, dataset_impl, combine=combine)
        if tokens is None:
            raise DataError(f"{prefix}.bin/.idx: no split {split!r} in {folder}")
        return tokens, load_tag_streams(folder, split, tokens, list(tag_dictionaries), dataset_impl)

    def get_batch_iterator(self, dataset, *args, required_batch_size_multiple=1, disable_iterator_cache=False, **kwargs):
        if dataset is self.datasets.get("train"):
            disable_iterator_cache = True  # batches from (seed, epoch) alone, also after a resume
        elif required_batch_size_multiple > 1:
            logger.info(f"evaluation batches: --required-batch-size-multiple {required_batch_size_multiple} -> 1 "
                        "(fairseq would drop the last partial batch)")
            required_batch_size_multiple = 1
        if not kwargs.get("num_workers") and kwargs.get("data_buffer_size"):
            # fairseq's BufferedIterator collates ahead in a daemon thread; with in-process loading
            # (--num-workers 0) that gains little, and when training stops mid-epoch (--max-update) with
            # no validation after it, the interpreter could exit while that thread was inside a torch op:
            # "terminate called without an active exception", exit status 134 after a finished run.
            kwargs["data_buffer_size"] = 0
        return super().get_batch_iterator(dataset, *args, required_batch_size_multiple=required_batch_size_multiple,
                                          disable_iterator_cache=disable_iterator_cache, **kwargs)


class EpochShuffledDataset(BaseWrapperDataset):
    """Examples ordered by size, ties in a random order drawn from numpy's current RNG, which
    fairseq seeds with ``seed + epoch`` around ``ordered_indices`` (``FairseqTask.get_batch_iterator``):
    a new order each epoch, the same one whenever that epoch is rebuilt (resume)."""

    def __init__(self, dataset, sizes):
        super().__init__(dataset)
        self._order_sizes = np.asarray(sizes)

    def ordered_indices(self):
        return np.lexsort([np.random.permutation(len(self)), self._order_sizes])

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return False

"""Loading fairseq checkpoints: the one place a checkpoint file is read.

:func:`read_checkpoint` reads a file with fairseq's ``load_checkpoint_to_cpu`` under torch's
weights-only unpickler (plus :func:`~sipe_fairseq.checkpoints.compat.allow_fairseq_checkpoint_globals`);
a missing file, a file the unpickler refuses (a type outside the allowlist: untrusted content) or
one that is not a fairseq checkpoint raises :class:`CheckpointError`, whose one-line message names
the file. The ``sipe-*`` commands print that line and exit with :data:`CHECKPOINT_EXIT_STATUS`.
The loaders below pass the state read once to fairseq, so each file is unpickled once.

Before that, :func:`check_archive` reads the whole file once and compares every member of its zip archive
(``torch.save`` writes one) with the CRC-32 the archive records for it: torch's reader does not, so a
checkpoint damaged after it was written (a copy cut short inside a tensor, a disk or transfer error) would
load and score wrong numbers. A member that fails is :class:`CheckpointError` naming it and, when it can be
told, the tensor it holds. ``SIPE_SKIP_CHECKPOINT_CRC=1`` skips the check (very large files: it reads the
file once more, about 0.03 s per 100 MB from the page cache, docs/evaluation.md).
"""
import logging
import os
import pickle
import re
import zipfile
from typing import Optional, Tuple

import sipe_fairseq

from ..hexatag.errors import CHECKPOINT_EXIT_STATUS, CheckpointError  # noqa: F401  CHECKPOINT_EXIT_STATUS: re-exported
from .compat import allow_fairseq_checkpoint_globals

logger = logging.getLogger(__name__)

# tasks whose checkpoints are masked-LM encoders (scored by pseudo-log-likelihood, not by eval-lm)
MASKED_LM_TASKS = ("hexatag_mlm", "masked_lm")
_UNSUPPORTED_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
SKIP_CRC_ENV = "SIPE_SKIP_CHECKPOINT_CRC"  # 1: read_checkpoint does not compare the archive's CRCs


def check_archive(path: str) -> None:
    """:class:`CheckpointError` naming the first member of ``path``'s zip archive whose bytes do not match the
    CRC-32 recorded for it (``zipfile.ZipFile.testzip``), and the tensor it holds when it can be told. A file
    that is no zip archive (torch's legacy format, or no checkpoint at all) is left to the unpickler, which says
    what it is; ``SIPE_SKIP_CHECKPOINT_CRC=1`` skips the check."""
    if os.environ.get(SKIP_CRC_ENV, "").strip() not in ("", "0"):
        logger.debug(f"checkpoint {path}: CRC check skipped ({SKIP_CRC_ENV})")
        return
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
            tensor = _tensor_of_member(archive, bad) if bad is not None else None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError):
        return  # not a (readable) zip archive: torch.load's own error names what it is
    if bad is not None:
        held = f" (it holds tensor {tensor})" if tensor else ""
        raise CheckpointError(f"checkpoint {path}: damaged: zip member {bad}{held} does not match the CRC-32 recorded "
                              "when it was saved (changed on disk or in a copy); use an intact copy")


class _Stored:
    """A tensor (or storage) of a checkpoint's pickle, by the key of its archive member (``.../data/KEY``)."""

    def __init__(self, key=None):
        self.key = key

    def __call__(self, *args, **kwargs):  # a rebuild function applied to a storage: the tensor is that storage's
        storage = next((a for a in args if isinstance(a, _Stored)), None)
        return _Stored(storage.key if storage is not None else None)

    def __setstate__(self, state):
        pass


class _Mapping(dict):
    """An ``OrderedDict`` of the pickle (a state dict carries ``_metadata`` as an attribute)."""


def _tensor_of_member(archive: zipfile.ZipFile, member: str) -> Optional[str]:
    """The name of the model weight (``state["model"]``) whose storage is the archive member ``member``, read
    from the archive's ``data.pkl`` without building any tensor or object (every global is a stand-in); None
    when it cannot be told (another member, another layout)."""
    root, sep, key = member.rpartition("/data/")
    pickled = f"{root}/data.pkl"
    if not sep or pickled not in archive.namelist():
        return None

    class Names(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) == ("collections", "OrderedDict"):
                return _Mapping
            return _Stored()  # any other global: called, it gives a stand-in (keyed when given a storage)

        def persistent_load(self, pid):
            return _Stored(str(pid[2])) if isinstance(pid, tuple) and len(pid) > 2 else _Stored()

    try:
        state = Names(archive.open(pickled)).load()
        weights = state.get("model") if isinstance(state, dict) else None
        return next((name for name, value in (weights or {}).items()
                     if isinstance(value, _Stored) and value.key == key), None)
    except Exception:  # noqa: BLE001  a pickle the stand-ins cannot follow: the member alone is named
        return None


def _unpickler_reason(message: str) -> str:
    """The line that says what torch's weights-only unpickler met (its message is a paragraph)."""
    tail = message.split("WeightsUnpickler error:", 1)[-1]
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    return lines[0] if lines else "not a pickle"


def read_checkpoint(path: str, arg_overrides: Optional[dict] = None) -> dict:
    """fairseq's ``load_checkpoint_to_cpu(path, arg_overrides)`` with the allowlist, after :func:`check_archive`;
    raises :class:`CheckpointError` for a missing, damaged, refused (untrusted) or unreadable file."""
    from fairseq import checkpoint_utils  # lazy (heavy): importing sipe_fairseq.checkpoints stays light

    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path}: no such file")
    check_archive(path)
    sipe_fairseq.register()  # the tasks/models a checkpoint names, and the allowlist
    allow_fairseq_checkpoint_globals()
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path, arg_overrides)
    except pickle.UnpicklingError as e:
        m = _UNSUPPORTED_GLOBAL.search(str(e))
        if m:
            raise CheckpointError(f"checkpoint {path}: refused by torch's weights-only loading (it holds {m.group(1)}, "
                                  "a type outside the allowlist); load only checkpoints you trust") from None
        raise CheckpointError(f"checkpoint {path}: cannot be read as a fairseq checkpoint (UnpicklingError: "
                              f"{_unpickler_reason(str(e))})") from None
    except Exception as e:  # noqa: BLE001  a truncated file, a zip error, a non-checkpoint pickle
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(
            f"checkpoint {path}: cannot be read as a fairseq checkpoint ({type(e).__name__}: {first})") from None
    if not isinstance(state, dict) or "model" not in state or (state.get("cfg") is None and state.get("args") is None):
        raise CheckpointError(f"checkpoint {path}: not a fairseq checkpoint (no model weights and config)")
    check_finite(path, state["model"])
    return state


def check_finite(path: str, weights) -> None:
    """:class:`CheckpointError` naming the first floating-point tensor of ``weights`` (a state dict) that
    holds a NaN or an infinity: such a model scores every perplexity as NaN."""
    import torch  # lazy (heavy)

    for name, tensor in (weights or {}).items():
        if torch.is_tensor(tensor) and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(f"checkpoint {path}: tensor {name} holds {bad} non-finite values (NaN or inf) of "
                                  f"{tensor.numel()}: a damaged file or a diverged training")


def _load_models(path: str, load, data: Optional[str] = None):
    """``load()`` (fairseq's ensemble loading of ``path``), its errors as one :class:`CheckpointError` line: a
    data fingerprint that differs (:mod:`sipe_fairseq.data.fingerprint`) or a model whose shapes are not the
    data's (a dictionary of another size)."""
    where = f"checkpoint {path} does not fit the data directory {data}" if data else f"checkpoint {path}"
    try:
        return load()
    except CheckpointError as e:
        raise CheckpointError(f"{where}: {e}") from None
    except RuntimeError as e:  # a model whose load_state_dict does not say it in one line (fairseq's own)
        from ..models.classification import size_mismatch_line  # lazy (heavy); same layer

        line = size_mismatch_line(str(e))
        if line is None:
            raise
        raise CheckpointError(f"{where}: {line}") from None


def scoring_task(saved_name: Optional[str]) -> str:
    """The registered task that scores a checkpoint saved with task ``saved_name``: ``hexatag_mlm`` for
    masked-LM encoders, ``gilt_lm`` for GiLT decoders, ``hexatag_lm`` for every other decoder."""
    if saved_name in MASKED_LM_TASKS:
        return "hexatag_mlm"
    return "gilt_lm" if saved_name == "gilt_lm" else "hexatag_lm"


def saved_data_dir(path: str, saved_task: dict) -> str:
    """The data directory a checkpoint's task was trained on, when it still holds a ``dict.txt``;
    :class:`CheckpointError` naming what is missing otherwise."""
    data = str(saved_task.get("data") or "").split(os.pathsep)[0]
    if not data:
        raise CheckpointError(f"checkpoint {path}: no data directory saved in it: pass the sipe-preprocess directory "
                              "it was trained on (data=DIR, --data DIR)")
    if not os.path.isfile(os.path.join(data, "dict.txt")):
        raise CheckpointError(f"checkpoint {path}: its data directory {data} (saved in the checkpoint) has no dict.txt "
                              "here: pass the sipe-preprocess directory it was trained on (data=DIR, --data DIR)")
    return data


def load_lm(path: str, data: Optional[str] = None, context_window: int = 0,
            allow_dictionary_mismatch: bool = False, device: str = "cpu"):
    """(model, task) for a checkpoint, scored on ``data``: a ``hexatag_lm`` task for decoders
    (``hexatag_lm`` and stock ``language_modeling`` checkpoints; ``gilt_lm`` for GiLT ones), a ``hexatag_mlm`` task for
    masked-LM encoders (``hexatag_mlm`` and stock ``masked_lm`` ones, e.g. fairseq ``roberta``),
    built from the checkpoint's own task settings; the encoder task's dictionary is ``dict.txt``
    with ``<mask>`` appended, as in training. ``data`` None: the directory saved in the checkpoint
    (:func:`saved_data_dir`). The model is in eval mode. A checkpoint whose recorded data differs from
    ``data``'s (unless ``allow_dictionary_mismatch``) or whose weights do not fit its dictionary raises
    :class:`CheckpointError`. ``device``: where the model is put (``cpu``, ``cuda``, ``cuda:1``, ``mps``: the
    commands' ``--device``, checked by ``sipe_fairseq.cli.options.device_problem``)."""
    # lazy (heavy): importing sipe_fairseq.checkpoints stays light
    from fairseq import checkpoint_utils
    from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY
    from omegaconf import OmegaConf

    state = read_checkpoint(path, {"data": data} if data else None)  # registers the plugin's tasks (sipe_fairseq.register)
    saved = OmegaConf.to_container(state["cfg"]["task"], resolve=True)
    if data is None:
        data = saved_data_dir(path, saved)
    overrides = {"data": data}
    name = scoring_task(saved.get("_name"))
    if context_window and name == "hexatag_mlm":
        raise ValueError(f"{path}: a masked-LM encoder ({saved['_name']} checkpoint) has no --context-window")
    if context_window and name == "gilt_lm":  # GiLT decoders read the gold graphs ({split}.arcs), not hexatags
        raise ValueError(f"{path}: a gilt_lm checkpoint scores whole sentences: no --context-window")
    config, task_cls = TASK_DATACLASS_REGISTRY[name], TASK_REGISTRY[name]  # looked up by name: no task import
    fields = set(config.__dataclass_fields__)
    cfg = OmegaConf.merge(OmegaConf.structured(config), {k: v for k, v in saved.items() if k in fields})
    cfg.data = data
    cfg.tokens_per_sample -= context_window  # as fairseq-eval-lm does
    if "allow_dictionary_mismatch" in fields:
        cfg.allow_dictionary_mismatch = allow_dictionary_mismatch
    task = task_cls.setup_task(cfg)
    models, _ = _load_models(path, lambda: checkpoint_utils.load_model_ensemble([path], arg_overrides=overrides,
                                                                                 task=task, state=state), data)
    return models[0].to(device).eval(), task


def load_with_task(path: str, data: Optional[str] = None, state: Optional[dict] = None):
    """``(model in eval mode, task)`` of a checkpoint with its own task (taggers, GLUE classifiers); ``data``
    overrides the task's data directory. A tagger whose encoder came from ``--init-encoder``
    rebuilds from its own config; the init checkpoint is not needed. ``state``: the checkpoint
    already read by :func:`read_checkpoint` with the same ``data``."""
    from fairseq import checkpoint_utils  # lazy (heavy): importing sipe_fairseq.checkpoints stays light

    overrides = {"data": data} if data else {}
    state = read_checkpoint(path, overrides) if state is None else state
    models, _cfg, task = _load_models(path, lambda: checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides=overrides, state=state), data)
    return models[0].eval(), task


TAGGER_TASKS = ("hexatag_tagging",)
# what a checkpoint of another task is, for the line that refuses it where a hexatagger is needed
_TASK_KINDS = {"hexatag_lm": "a language model", "language_modeling": "a language model", "gilt_lm": "a GiLT language model",
               "hexatag_mlm": "a masked-LM encoder", "masked_lm": "a masked-LM encoder",
               "hexatag_sentence_prediction": "a sentence classifier", "sentence_prediction": "a sentence classifier"}


def _config_name(section, *keys: str) -> Optional[str]:
    for key in keys:
        try:
            value = section.get(key) if hasattr(section, "get") else getattr(section, key, None)
        except Exception:  # noqa: BLE001  a config section of an unexpected type: no name
            value = None
        if value:
            return str(value)
    return None


def checkpoint_kind(state: dict) -> Tuple[Optional[str], Optional[str]]:
    """``(task name, model/arch name)`` a checkpoint was trained with (either may be None)."""
    cfg, args = state.get("cfg"), state.get("args")
    if cfg is not None:
        task, model = cfg.get("task"), cfg.get("model")
        return (_config_name(task, "_name", "task") if task is not None else None,
                _config_name(model, "_name", "arch") if model is not None else None)
    return getattr(args, "task", None), getattr(args, "arch", None)


def load_tagger(path: str, data: Optional[str] = None):
    """``(model in eval mode, task)`` from a ``sipe_tagger`` checkpoint (task ``hexatag_tagging``); any
    other checkpoint raises :class:`CheckpointError` saying what it is."""
    state = read_checkpoint(path, {"data": data} if data else {})
    task_name, model_name = checkpoint_kind(state)
    if task_name not in TAGGER_TASKS:
        what = _TASK_KINDS.get(task_name, "not a tagger")
        raise CheckpointError(f"checkpoint {path}: not a hexatagger: a {task_name or 'unknown'} checkpoint "
                              f"(model {model_name or 'unknown'}, {what}); a hexatagger is a hexatag_tagging checkpoint "
                              "(--arch sipe_tagger*)")
    model, task = load_with_task(path, data, state)
    return model.eval(), task

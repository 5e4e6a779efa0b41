"""Loading fairseq checkpoints: the one place a checkpoint file is read.

:func:`read_checkpoint` reads a file with fairseq's ``load_checkpoint_to_cpu`` under torch's
weights-only unpickler (plus :func:`~sipe_fairseq.checkpoints.compat.allow_fairseq_checkpoint_globals`);
a missing file, a file the unpickler refuses (a type outside the allowlist: untrusted content) or
one that is not a fairseq checkpoint raises :class:`CheckpointError`, whose one-line message names
the file. The ``sipe-*`` commands print that line and exit with :data:`CHECKPOINT_EXIT_STATUS`.
The loaders below pass the state read once to fairseq, so each file is read once.
"""
import logging
import os
import pickle
import re
from typing import Optional, Tuple

import sipe_fairseq

from ..hexatag.errors import CHECKPOINT_EXIT_STATUS, CheckpointError  # noqa: F401  CHECKPOINT_EXIT_STATUS: re-exported
from .compat import allow_fairseq_checkpoint_globals

logger = logging.getLogger(__name__)

# tasks whose checkpoints are masked-LM encoders (scored by pseudo-log-likelihood, not by eval-lm)
MASKED_LM_TASKS = ("hexatag_mlm", "masked_lm")
_UNSUPPORTED_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")


def _unpickler_reason(message: str) -> str:
    """The line that says what torch's weights-only unpickler met (its message is a paragraph)."""
    tail = message.split("WeightsUnpickler error:", 1)[-1]
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    return lines[0] if lines else "not a pickle"


def read_checkpoint(path: str, arg_overrides: Optional[dict] = None) -> dict:
    """fairseq's ``load_checkpoint_to_cpu(path, arg_overrides)`` with the allowlist; raises
    :class:`CheckpointError` for a missing, refused (untrusted) or unreadable file."""
    from fairseq import checkpoint_utils  # lazy (heavy): importing sipe_fairseq.checkpoints stays light

    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path}: no such file")
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
    return state


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


def load_lm(path: str, data: Optional[str] = None, context_window: int = 0):
    """(model, task) for a checkpoint, scored on ``data``: a ``hexatag_lm`` task for decoders
    (``hexatag_lm`` and stock ``language_modeling`` checkpoints; ``gilt_lm`` for GiLT ones), a ``hexatag_mlm`` task for
    masked-LM encoders (``hexatag_mlm`` and stock ``masked_lm`` ones, e.g. fairseq ``roberta``),
    built from the checkpoint's own task settings; the encoder task's dictionary is ``dict.txt``
    with ``<mask>`` appended, as in training. ``data`` None: the directory saved in the checkpoint
    (:func:`saved_data_dir`). Weights that do not fit the data's dictionary raise :class:`CheckpointError`."""
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
    task = task_cls.setup_task(cfg)
    try:
        models, _ = checkpoint_utils.load_model_ensemble([path], arg_overrides=overrides, task=task, state=state)
    except RuntimeError as e:
        if "size mismatch" not in str(e):
            raise
        detail = next((ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln), "")
        raise CheckpointError(f"checkpoint {path} does not fit the data directory {data} (another dictionary?): "
                              f"{detail}") from None
    return models[0], task


def load_with_task(path: str, data: Optional[str] = None, state: Optional[dict] = None):
    """``(model, task)`` of a checkpoint with its own task (taggers, GLUE classifiers); ``data``
    overrides the task's data directory. A tagger whose encoder came from ``--init-encoder``
    rebuilds from its own config; the init checkpoint is not needed. ``state``: the checkpoint
    already read by :func:`read_checkpoint` with the same ``data``."""
    from fairseq import checkpoint_utils  # lazy (heavy): importing sipe_fairseq.checkpoints stays light

    overrides = {"data": data} if data else {}
    state = read_checkpoint(path, overrides) if state is None else state
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=overrides, state=state)
    return models[0], task


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

"""Helpers shared by the model assemblies (not a registered module): the tag-input checks, the tag
heads, the architecture presets and the parameter log."""
import logging
import os
from dataclasses import MISSING, fields
from typing import Optional, Tuple

import torch
import torch.nn as nn
from omegaconf import OmegaConf, open_dict

from ..data.lm_dataset import task_placement
from ..data.settings import task_setting
from ..hexatag.errors import CheckpointError, OptionError
from ..modules import tag_head

logger = logging.getLogger(__name__)

SIPE_PREFIXES = ("tags.", "fusion.", "deprel.")


def log_parameters(name: str, body) -> None:
    """Log the parameter count of ``body`` and how many belong to SiPE (tag tables, input fusion,
    deprel table, injection projections)."""
    n = sum(p.numel() for p in body.parameters())
    sipe = sum(p.numel() for k, p in body.named_parameters() if k.startswith(SIPE_PREFIXES) or "injections" in k)
    logger.info(f"{name}: {n:,} parameters ({sipe:,} SiPE: tag tables, fusion and projections)")


class RefusesFairseqHub:
    """fairseq's ``Model.from_pretrained(model_dir, checkpoint_file, data_name_or_path)`` builds a hub
    interface whose ``score`` and ``generate`` know nothing of the tags or arcs these decoders read; it
    refuses in one line naming ``sipe_fairseq.hub.load``, the interface that does (its model object sits
    above the models, in the evaluation layer, so a model cannot return it)."""

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        raise CheckpointError(fairseq_hub_refusal(f"{cls.__name__}.from_pretrained", model_name_or_path, checkpoint_file,
                                                  data_name_or_path))


def fairseq_hub_refusal(caller: str, model_name_or_path, checkpoint_file, data_name_or_path) -> str:
    """The one line that refuses fairseq's hub interface for these models (:class:`RefusesFairseqHub`, and the
    tasks when fairseq's ``hub_utils.from_pretrained`` builds one of them through another class), naming the call
    of ``sipe_fairseq.hub.load`` that reads the same files."""
    path = os.path.join(str(model_name_or_path), str(checkpoint_file))
    # the data directory fairseq's hub_utils.from_pretrained would read: under the model directory when it starts
    # with ".", else the path as given (relative to the current directory)
    data = str(data_name_or_path)
    if data.startswith("."):
        data = os.path.normpath(os.path.join(str(model_name_or_path), data))
    return (f"{caller}: fairseq's hub interface cannot read this model's structure; use "
            f"sipe_fairseq.hub.load({path!r}, data={data!r})")


def declared_defaults(cfg, config_cls):
    """``cfg`` with every field of the dataclass ``config_cls`` that it lacks set to the field's declared
    default, so that a model reads each declared field as ``cfg.x``. A configuration saved before a field
    existed lacks it, and fairseq fills it from the dataclass only for a checkpoint that names the model
    itself (``sipe_txl``), not an architecture preset (``sipe_txl_tiny``, ``gilt_txl_16l``)."""
    for f in fields(config_cls):
        if hasattr(cfg, f.name):
            continue
        value = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)
        if value is MISSING or (isinstance(value, str) and value.startswith("${")):  # required, or an interpolation
            continue
        if OmegaConf.is_config(cfg):
            with open_dict(cfg):
                cfg[f.name] = value
        else:
            setattr(cfg, f.name, value)
    return cfg


def preset(args, **defaults) -> None:
    """An architecture preset: set each default on ``args`` unless the user already set it."""
    for k, v in defaults.items():
        setattr(args, k, getattr(args, k, v))


# ----------------------------------------------------------------------------- tag inputs

def missing_tags_error(model: str, task: str) -> ValueError:
    """The error of a tagged model called without tag streams; ``model`` names it for the user."""
    return ValueError(f"{model} needs hexatags: pass src_terminals/src_nonterminals "
                      f"(use --task {task} on a sipe-preprocess directory)")


def check_tag_inputs(tokens: torch.Tensor, terminals: Optional[torch.Tensor], nonterminals: Optional[torch.Tensor],
                     model: str, task: str) -> None:
    """Both tag streams given, each of the tokens' shape (B, T)."""
    if terminals is None or nonterminals is None:
        raise missing_tags_error(model, task)
    if terminals.shape != tokens.shape or nonterminals.shape != tokens.shape:
        raise ValueError(f"tag shapes {tuple(terminals.shape)}/{tuple(nonterminals.shape)} differ from tokens "
                         f"{tuple(tokens.shape)}")


def task_tag_timing(task) -> str:
    """The task's ``--tag-timing`` (``paper`` for a task without one), which a tagged decoder keeps as
    ``tag_timing`` for the structure engine; a timing other than ``paper`` needs ``--tag-head-placement
    last_subword`` (the heads choose what a word carries just before it)."""
    timing = str(task_setting(task, "tag_timing", "paper"))
    placement = task_placement(task, default=None)  # None: a task without placement, nothing to check
    if timing != "paper" and placement not in (None, "last_subword"):
        raise OptionError(f"--tag-timing {timing}: the heads choose what a word carries just before it: it needs "
                          f"--tag-head-placement last_subword (given: {placement})")
    return timing


# ----------------------------------------------------------------------------- tag heads

def tag_heads_enabled(setting, tagged: bool) -> bool:
    """``--sipe-tag-heads``: on, off, or auto (on for a model that reads tags)."""
    return str(setting) == "on" or (str(setting) == "auto" and tagged)


def build_tag_heads(dim: int, enabled: bool = True) -> Tuple[Optional[nn.Linear], Optional[nn.Linear]]:
    """(terminal head, non-terminal head) on features of size ``dim``, or (None, None)."""
    if not enabled:
        return None, None
    return tag_head("terminal", dim), tag_head("nonterminal", dim)


def add_tag_logits(model: nn.Module, x: torch.Tensor, extra: dict) -> None:
    """``extra["terminal_logits"]`` (..., 2) and ``extra["nonterminal_logits"]`` (..., 5) from the
    model's heads, when it has them."""
    if model.terminal_head is not None:
        extra["terminal_logits"] = model.terminal_head(x)
        extra["nonterminal_logits"] = model.nonterminal_head(x)

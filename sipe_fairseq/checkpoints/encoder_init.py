"""Encoder bodies for the hexatagger: ``sipe_tagger --encoder-arch ARCH`` / ``--init-encoder CK.pt``.

A body is this plugin's :class:`~sipe_fairseq.models.sipe_encoder.SiPEEncoder` (architectures of
``sipe_roberta``, ``sipe_deberta``, ``sipe_modernbert``) or the sentence encoder of fairseq's
RoBERTa (``roberta*`` architectures, a ``TransformerEncoder``). It is described by an *encoder
spec*, a JSON-able dict::

    {"kind": "sipe" | "roberta", "arch": ARCH, "vocab": rows of the token embedding,
     "deprel_rows": rows of a SiPE deprel table (0: none), "args": {architecture settings}}

The ``hexatag_tagging`` task derives the spec once, when a tagger is first built for training (from
the checkpoint's saved config, or from an architecture's presets), and stores it in the tagger's
config (``encoder_spec``): a trained tagger rebuilds from its own checkpoint alone.

Dictionaries: ``masked_lm``/``hexatag_mlm`` use the data directory's ``dict.txt`` plus an appended
``<mask>``. The tagger's ``dict.txt`` must equal the encoder's ``dict.txt`` token for token (a
prefix is accepted: every tagger id then means what it meant in pre-training); the embedding keeps
the checkpoint's rows, ``<mask>`` included (unused).

The checkpoint is read by the one reader (:func:`sipe_fairseq.checkpoints.load.read_checkpoint`); a file it
refuses, a checkpoint that holds no encoder the tagger can use, or one whose dictionary is not found or
does not match the tagger's raises :class:`~sipe_fairseq.hexatag.errors.CheckpointError`, one line naming
``--init-encoder`` and the file.
"""
import argparse
import copy
import json
import logging
import os
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Dict, List, Optional

import torch
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_DATACLASS_REGISTRY
from fairseq.models.roberta import RobertaModel
from fairseq.models.roberta.model import RobertaEncoder
from fairseq.models.transformer import TransformerConfig
from omegaconf import OmegaConf

from ..data.dictionary import load_dictionary
from ..data.tag_dictionary import FIRST_TAG_ID
from ..hexatag.errors import CheckpointError, OptionError
from .load import read_checkpoint as read_checkpoint_file

logger = logging.getLogger(__name__)

KINDS = ("sipe", "roberta")


@dataclass
class EncoderInit:
    """What ``--init-encoder`` read: the spec, the body's weights (keys as in the tagger:
    ``encoder.*``) and the checkpoint keys outside the body (dropped)."""
    path: str
    spec: dict
    state: Dict[str, torch.Tensor] = field(default_factory=dict)
    dropped: List[str] = field(default_factory=list)


def encoder_kind(arch: str) -> str:
    """``sipe`` or ``roberta`` for a registered architecture; a clear error otherwise."""
    # lazy (cycle): models/sipe_tagger imports this module, and importing models.sipe_encoder runs
    # models/__init__.py, which imports sipe_tagger
    from ..models.sipe_encoder import _SiPEEncoderModel

    cls = ARCH_MODEL_REGISTRY.get(arch)
    if cls is not None and issubclass(cls, _SiPEEncoderModel):
        return "sipe"
    if cls is not None and issubclass(cls, RobertaModel):
        return "roberta"
    raise ValueError(f"{arch!r} is not an encoder the tagger can use: choose an architecture of sipe_roberta, "
                     "sipe_deberta, sipe_modernbert or fairseq's roberta"
                     + ("" if cls is not None else " (unknown architecture; is --user-dir sipe_fairseq loaded?)"))


def _jsonable(value):
    try:
        json.dumps(value)
        return True
    except TypeError:
        return False


def _lookup(cfg, key, default=None):
    """``key`` of a Namespace, dict or DictConfig."""
    if isinstance(cfg, argparse.Namespace):
        return getattr(cfg, key, default)
    try:
        return cfg[key] if key in cfg else default
    except TypeError:
        return default


def _items(cfg) -> dict:
    if isinstance(cfg, argparse.Namespace):
        return dict(vars(cfg))
    if OmegaConf.is_config(cfg):
        return {k: cfg[k] for k in cfg}
    return dict(cfg)


def sipe_args(arch: str, values: Optional[dict] = None, max_positions: Optional[int] = None) -> dict:
    """Every field of the model's dataclass: from ``values`` (a checkpoint's config) when present,
    else the architecture preset, else the dataclass default."""
    preset = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](preset)
    values = values or {}
    out = {}
    for f in fields(MODEL_DATACLASS_REGISTRY[ARCH_MODEL_NAME_REGISTRY[arch]]):
        if f.name.startswith("_"):
            continue
        if f.name in values and values[f.name] is not None:
            v = values[f.name]
        elif hasattr(preset, f.name):
            v = getattr(preset, f.name)
        else:
            v = f.default if f.default is not MISSING else f.default_factory()
        out[f.name] = v if isinstance(v, (bool, int, float, str, type(None))) else str(v)
    if max_positions is not None:
        out["max_positions"] = max_positions
    if not isinstance(out.get("max_positions"), int):
        raise ValueError(f"{arch}: no max_positions in the encoder's config ({out.get('max_positions')!r})")
    out["sipe_tag_heads"] = "off"  # the tagger has its own heads
    return out


class _ReadRecorder(argparse.Namespace):
    """A Namespace that records the attribute names read from it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        object.__setattr__(self, "_read", set())

    def __getattribute__(self, name):
        if not name.startswith("_"):
            object.__getattribute__(self, "_read").add(name)
        return object.__getattribute__(self, name)


def roberta_args(arch: str, values: Optional[dict] = None, max_positions: Optional[int] = None) -> dict:
    """The settings fairseq's RoBERTa encoder reads (its architecture function and
    ``TransformerConfig.from_namespace``), from ``values`` completed by the architecture."""
    ns = _ReadRecorder(**{k: v for k, v in (values or {}).items() if not k.startswith("_")})
    if max_positions is not None:
        ns.max_positions = max_positions
    ARCH_CONFIG_REGISTRY[arch](ns)
    if getattr(ns, "max_positions", None) is None:
        ns.max_positions = ns.max_source_positions
    TransformerConfig.from_namespace(ns)
    read = object.__getattribute__(ns, "_read") | {"max_positions"}
    return {k: v for k, v in sorted(vars(ns).items()) if k in read and not k.startswith("_") and _jsonable(v)}


def spec_from_arch(arch: str, vocab: int, max_positions: int) -> dict:
    """Spec of a from-scratch body with ``arch``'s preset sizes (SiPE injection none)."""
    kind = encoder_kind(arch)
    make = sipe_args if kind == "sipe" else roberta_args
    return {"kind": kind, "arch": arch, "vocab": vocab, "deprel_rows": 0, "args": make(arch, None, max_positions)}


class _Sized:
    """Stands in for a deprel dictionary: the SiPE encoder reads only its length."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def build_body(spec: dict, dictionary):
    """The encoder module of ``spec`` (its embedding has ``spec['vocab']`` rows), without LM head."""
    if spec.get("kind") not in KINDS:
        raise ValueError(f"encoder spec of unknown kind {spec.get('kind')!r} (expected one of {KINDS})")
    if len(dictionary) > spec["vocab"]:
        raise ValueError(f"the tagger's dictionary has {len(dictionary)} types but the encoder's embedding only "
                         f"{spec['vocab']} rows: the data directory does not belong to this encoder")
    vocab = copy.deepcopy(dictionary)
    while len(vocab) < spec["vocab"]:  # rows the tagger's data never uses, e.g. pre-training's <mask>
        vocab.add_symbol(f"<encoder_extra_{len(vocab)}>")
    args = argparse.Namespace(**spec["args"])
    if spec["kind"] == "sipe":
        from ..models.sipe_encoder import SiPEEncoder  # lazy (cycle): see encoder_kind

        deprel = _Sized(spec["deprel_rows"] - 1 + FIRST_TAG_ID) if spec.get("deprel_rows") else None
        body = SiPEEncoder(args, vocab, deprel)
        body.lm_head = None  # tied to the embedding; the tagger predicts tags, not tokens
        return body
    return RobertaEncoder(args, vocab).sentence_encoder  # its LM head is discarded


def _checkpoint_arch(model_cfg) -> str:
    arch = _lookup(model_cfg, "arch") or _lookup(model_cfg, "_name")
    if not arch:
        raise CheckpointError("no architecture name (arch/_name) in the checkpoint's model config")
    return str(arch)


def _resolve_dict(path: str, task_cfg, override: str) -> str:
    if override:
        if not os.path.isfile(override):
            raise OptionError(f"--init-encoder-dict {override}: no such file")
        return override
    tried = []
    data = _lookup(task_cfg, "data") if task_cfg is not None else None
    if data:
        tried.append(os.path.join(str(data).split(os.pathsep)[0], "dict.txt"))
    tried.append(os.path.join(os.path.dirname(os.path.abspath(path)), "dict.txt"))  # fairseq hub archives
    for candidate in tried:
        if os.path.isfile(candidate):
            return candidate
    raise CheckpointError(f"--init-encoder {path}: cannot find the dictionary it was trained with (tried "
                            f"{', '.join(tried)}); pass it with --init-encoder-dict DICT.txt")


def check_dictionaries(dictionary, dict_path: str, encoder_dict_path: str, rows: int, ckpt: str) -> None:
    """The tagger's dictionary must be the encoder's, token for token (or a prefix of it)."""
    theirs = load_dictionary(encoder_dict_path)
    ours = dictionary.symbols
    n = min(len(ours), len(theirs))
    diff = next((i for i in range(n) if ours[i] != theirs.symbols[i]), None)
    if diff is not None or len(ours) > len(theirs):
        where = (f"first difference at id {diff}: {ours[diff]!r} vs {theirs.symbols[diff]!r}" if diff is not None
                 else f"the tagger's has {len(ours) - len(theirs)} more types")
        raise CheckpointError(
            f"--init-encoder {ckpt}: dictionary mismatch between the tagger's data {dict_path} ({len(ours)} types) "
            f"and the encoder's {encoder_dict_path} ({len(theirs)} types): {where}. Tag with a data directory made "
            "with the pre-training dictionary (e.g. pre-train on the same sipe-preprocess directory)")
    if len(theirs) > rows:
        raise CheckpointError(f"--init-encoder {ckpt}: its dictionary {encoder_dict_path} has {len(theirs)} types but "
                         f"its token embedding only {rows} rows: wrong dictionary (see --init-encoder-dict)")


def read_encoder_init(path: str, dictionary, dict_path: str, dict_override: str = "") -> EncoderInit:
    """Spec and body weights of a ``hexatag_mlm`` (sipe_*) or fairseq ``roberta`` checkpoint; anything else
    raises :class:`CheckpointError` (one line)."""
    try:
        state = read_checkpoint_file(path)  # missing, refused (untrusted) or unreadable: CheckpointError
    except CheckpointError as e:
        raise CheckpointError(f"--init-encoder: {e}") from None
    cfg = state.get("cfg")
    if cfg is None or _lookup(cfg, "model") is None:
        raise CheckpointError(f"--init-encoder {path}: no model config in the checkpoint (not a fairseq checkpoint?)")
    model_cfg = _lookup(cfg, "model")
    try:
        arch = _checkpoint_arch(model_cfg)
        kind = encoder_kind(arch)
    except (CheckpointError, ValueError) as e:
        raise CheckpointError(f"--init-encoder {path}: {e}") from None
    weights = dict(state["model"])
    if kind == "roberta":  # older RoBERTa checkpoints (as RobertaModel.upgrade_state_dict_named)
        weights = {re.sub(r"^decoder\.", "encoder.", k).replace(".emb_layer_norm.", ".layernorm_embedding."): v
                   for k, v in weights.items()}
    prefix = "encoder." if kind == "sipe" else "encoder.sentence_encoder."
    emb = weights.get(prefix + "embed_tokens.weight")
    if emb is None:
        raise CheckpointError(f"--init-encoder {path}: no {prefix}embed_tokens.weight in its weights ({arch})")
    values = _items(model_cfg)
    args = sipe_args(arch, values) if kind == "sipe" else roberta_args(arch, values)
    deprel = weights.get(prefix + "deprel.weight")
    spec = {"kind": kind, "arch": arch, "vocab": int(emb.size(0)),
            "deprel_rows": int(deprel.size(0)) if deprel is not None else 0, "args": args}
    encoder_dict = _resolve_dict(path, _lookup(cfg, "task"), dict_override)
    check_dictionaries(dictionary, dict_path, encoder_dict, spec["vocab"], path)
    body = {"encoder." + k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
    dropped = [k for k in weights if not k.startswith(prefix)]
    logger.info(f"--init-encoder {path}: {arch} ({kind}), {spec['vocab']} embedding rows, dictionary {encoder_dict} "
                f"matches {dict_path}")
    return EncoderInit(path, spec, body, dropped)


def fold_layer_names(names) -> str:
    """Parameter names with layer indices folded: ``encoder.layers.{0-11}.attn.qkv.weight``."""
    groups: Dict[tuple, list] = {}
    for name in names:
        m = re.match(r"(.*\.layers\.)(\d+)(\..*)$", name)
        key = (m.group(1), m.group(3)) if m else (name, None)
        groups.setdefault(key, []).append(int(m.group(2)) if m else None)
    out = []
    for (head, tail), idx in groups.items():
        if tail is None:
            out.append(head)
            continue
        idx = sorted(idx)
        runs, start = [], idx[0]
        for a, b in zip(idx, idx[1:] + [None]):
            if b != a + 1:
                runs.append(str(start) if start == a else f"{start}-{a}")
                start = b
        out.append(f"{head}{{{','.join(runs)}}}{tail}")
    return ", ".join(out) if out else "(none)"

"""``--gilt-init-from CKPT``: start a ``gilt_transformer_lm`` from a trained ``transformer_lm`` or
``sipe_transformer_lm`` checkpoint (GiLT-GPT2's "everything else is loaded from GPT-2", docs/gilt-reference.md
section 6), or from an earlier stage's ``gilt_transformer_lm`` checkpoint (stage 1 -> stage 2).

Task ``gilt_lm`` calls :func:`read_base` and :func:`apply_architecture` before it builds a new model
(not when fairseq rebuilds a model from its own checkpoint: the copied settings are saved in its
config, so evaluation never needs the base again) and :func:`copy_base` after. Rules:

* the checkpoint is read by the one reader (:func:`sipe_fairseq.checkpoints.read_checkpoint`);
* its architecture settings (:data:`ARCH_FIELDS`: sizes, norms, positions, embeddings; for a
  ``sipe_transformer_lm`` the hexatag input; for a ``gilt_transformer_lm`` also its GiLT structure)
  replace the command line's; dropout and the other training-time settings stay the command line's;
* every weight of the model that is not a GiLT part (graph tables, graph projections, arc scorer)
  must come from the checkpoint with its shape, and the token embedding must have one row per
  type of the task's dictionary: otherwise :class:`~sipe_fairseq.checkpoints.CheckpointError`, one
  line naming the file (``fairseq-train`` prints it as ``sipe_fairseq: error: ...`` and exits with
  status 1, see ``tasks/sipe_data.py``);
* copied, new and dropped (checkpoint tensors the model has no place for, e.g. a
  ``sipe_transformer_lm``'s tag heads) tensors are logged, layer indices folded.
"""
import logging
from dataclasses import dataclass, field
from typing import Dict, List

import torch
from fairseq.models import ARCH_MODEL_NAME_REGISTRY
from omegaconf import OmegaConf, open_dict

from ..hexatag.errors import CheckpointError
from .encoder_init import fold_layer_names
from .load import read_checkpoint

logger = logging.getLogger(__name__)

BASES = ("transformer_lm", "sipe_transformer_lm", "gilt_transformer_lm")
# TransformerLanguageModelConfig fields that define the weights' shapes or the function they compute
ARCH_FIELDS = (
    "activation_fn", "decoder_embed_dim", "decoder_output_dim", "decoder_input_dim", "decoder_ffn_embed_dim",
    "decoder_layers", "decoder_attention_heads", "decoder_normalize_before", "no_decoder_final_norm",
    "adaptive_softmax_cutoff", "adaptive_softmax_factor", "no_token_positional_embeddings",
    "share_decoder_input_output_embed", "character_embeddings", "character_filters", "character_embedding_dim",
    "char_embedder_highway_layers", "adaptive_input", "adaptive_input_factor", "adaptive_input_cutoff",
    "tie_adaptive_weights", "tie_adaptive_proj", "decoder_learned_pos", "layernorm_embedding", "no_scale_embedding",
    "base_layers", "base_sublayers", "base_shuffle", "scale_fc", "scale_attn", "scale_heads", "scale_resids",
    "add_bos_token", "max_target_positions")
GILT_FIELDS = ("gilt_first_layer", "gilt_arc_scorer", "gilt_hexatag_input")  # structure of a gilt checkpoint
GILT_PREFIXES = ("decoder.graph_tables.", "decoder.arc_scorer.")


@dataclass
class BaseCheckpoint:
    """What :func:`read_base` read: the model family, the architecture settings, the weights."""
    path: str
    family: str
    arch: str
    settings: dict
    weights: Dict[str, torch.Tensor] = field(default_factory=dict)


def _model_config(state) -> dict:
    if state.get("cfg") is not None and state["cfg"].get("model") is not None:
        model = state["cfg"]["model"]
        return OmegaConf.to_container(model, resolve=True) if OmegaConf.is_config(model) else dict(vars(model))
    return dict(vars(state["args"]))


def read_base(path: str) -> BaseCheckpoint:
    """The checkpoint's family, architecture settings and weights; :class:`CheckpointError` for a
    missing or unreadable file or one of another model family."""
    state = read_checkpoint(path)
    values = _model_config(state)
    arch = str(values.get("arch") or values.get("_name") or "")
    family = ARCH_MODEL_NAME_REGISTRY.get(arch, arch)
    if family not in BASES:
        raise CheckpointError(f"--gilt-init-from {path}: a {family or 'unknown'} checkpoint (arch {arch or '?'}); "
                              f"expected one of {', '.join(BASES)}")
    fields = ARCH_FIELDS + (GILT_FIELDS if family == "gilt_transformer_lm" else ())
    settings = {k: values[k] for k in fields if k in values}
    if family == "sipe_transformer_lm":
        settings["gilt_hexatag_input"] = True
    return BaseCheckpoint(path, family, arch, settings, dict(state["model"]))


def apply_architecture(cfg, base: BaseCheckpoint) -> None:
    """Set the checkpoint's architecture settings on the model config ``cfg`` (logged when they differ)."""
    changed = []
    for key, value in base.settings.items():
        old = cfg.get(key) if OmegaConf.is_config(cfg) else getattr(cfg, key, None)
        if old != value:
            changed.append(f"{key} {old} -> {value}")
        if OmegaConf.is_config(cfg):
            with open_dict(cfg):
                cfg[key] = value
        else:
            setattr(cfg, key, value)
    logger.info(f"--gilt-init-from {base.path}: {base.arch} ({base.family}); architecture from the checkpoint"
                + (f": {', '.join(changed)}" if changed else " (as given)"))


def is_gilt_part(name: str) -> bool:
    """A tensor the GiLT post-training adds: the shared tables, a layer's graph projection, the arc scorer."""
    return name.startswith(GILT_PREFIXES) or ".graph_term." in name


def copy_base(model, base: BaseCheckpoint, dictionary_size: int) -> Dict[str, List[str]]:
    """Copy the checkpoint's weights into ``model``; returns and logs ``copied``/``new``/``dropped`` names."""
    weights = dict(base.weights)
    model.upgrade_state_dict(weights)  # fairseq's renames of older checkpoints (as load_state_dict does)
    emb = next((weights[k] for k in ("decoder.embed_tokens.weight", "decoder.embed_tokens.embed_tokens.weight")
                if k in weights), None)
    if emb is not None and emb.size(0) != dictionary_size:
        raise CheckpointError(f"--gilt-init-from {base.path}: its token embedding has {emb.size(0)} rows, the task's "
                              f"dictionary {dictionary_size} types: it was trained on another vocabulary")
    own = model.state_dict()
    wrong = [f"{k} {tuple(weights[k].shape)} vs {tuple(v.shape)}" for k, v in own.items()
             if k in weights and weights[k].shape != v.shape]
    missing = [k for k in own if k not in weights and not is_gilt_part(k)]
    if wrong or missing:
        raise CheckpointError(f"--gilt-init-from {base.path}: incompatible with the model built from its settings: "
                              f"missing {fold_layer_names(missing)}; shape mismatch: {'; '.join(wrong[:3]) or '(none)'}")
    copied = [k for k in own if k in weights]
    new = [k for k in own if k not in weights]
    dropped = [k for k in weights if k not in own]
    model.load_state_dict({**own, **{k: weights[k] for k in copied}}, strict=True)
    n = sum(own[k].numel() for k in copied)
    logger.info(f"--gilt-init-from {base.path}: copied {len(copied)} tensors ({n:,} values): {fold_layer_names(copied)}")
    logger.info(f"new (initialized here): {fold_layer_names(new)}")
    logger.info(f"dropped from the checkpoint: {fold_layer_names(dropped)}")
    return {"copied": copied, "new": new, "dropped": dropped}

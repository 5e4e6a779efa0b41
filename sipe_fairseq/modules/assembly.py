"""Turn an ``--sipe-injection`` spec into hooks on a stack of :class:`SiPEAttention` layers."""
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from .injections import AttentionBias, DisentangledBias, PositionCoupling, RotaryPhase, TagContext, TagProjection
from .tag_embedding import HexatagEmbedding

PARTS = ("input", "position", "disentangled", "attention-bias")
INJECTION_CHOICES = ("none", "input", "position", "disentangled", "attention-bias", "input+attention-bias",
                     "position+attention-bias")

# --sipe-tag-tables: one E^T, E^N pair read by every pathway of a combined injection (the default,
# as trained so far), or one pair per pathway (appendix B: "7d parameters per pathway").
TAG_TABLE_CHOICES = ("shared", "per-pathway")

# Paper defaults (appendix A.2-A.4): every projection per layer; position -> d_model,
# disentangled -> d_head, attention bias -> d_model (Eq. 8-9 select head n's block).
DEFAULT_TARGET = {"position": "d_model", "disentangled": "d_head", "attention-bias": "d_model"}


def parse_injection(spec: str) -> List[str]:
    """``"position+attention-bias"`` -> ``["position", "attention-bias"]``; ``"none"`` -> ``[]``."""
    if spec in (None, "", "none"):
        return []
    parts = [p.strip() for p in spec.split("+")]
    bad = [p for p in parts if p not in PARTS]
    if bad or len(set(parts)) != len(parts):
        raise ValueError(f"--sipe-injection {spec!r}: parts must be distinct, from {PARTS} joined by '+'")
    return parts


def attach_injections(attentions: Sequence[nn.Module], parts: Sequence[str], tag_dim: int, *,
                      sharing: str = "auto", target: str = "auto", first_layer: int = 1,
                      init_std: float = 1e-3) -> Dict[str, nn.Module]:
    """Append injection hooks to ``attentions[first_layer - 1:]``; return the shared projections.

    ``sharing``: ``layer`` (one W per layer, the paper's choice) or ``shared`` (one W reused).
    ``target``: ``d_model`` or ``d_head`` (``auto`` = paper default per part).
    """
    if not 1 <= first_layer <= max(1, len(attentions)):
        raise ValueError(f"--sipe-first-layer {first_layer} outside 1..{len(attentions)}")
    if sharing == "auto":
        sharing = "layer"
    if sharing not in ("layer", "shared"):
        raise ValueError(f"projection sharing must be layer or shared, got {sharing!r}")
    shared: Dict[str, nn.Module] = {}

    def projection(key, attn, tgt, std, out_dim=None):
        tgt = DEFAULT_TARGET.get(key.split(".")[0], "d_head") if tgt == "auto" else tgt
        make = lambda: TagProjection(tag_dim, attn.num_heads, attn.head_dim, tgt, std, out_dim)  # noqa: E731
        if sharing == "shared":
            if key not in shared:
                shared[key] = make()
            return shared[key]
        return make()

    for attn in attentions[first_layer - 1:]:
        for part in parts:
            if part == "position":
                if attn.relative is not None or attn.position == "disentangled":  # Eq. 5-6 / Eq. 12-13
                    attn.injections.append(PositionCoupling(projection("position", attn, target, init_std)))
                elif attn.rotary is not None:  # RoPE: the tag becomes a phase offset, W_delta = 0
                    rotary_target = "d_head" if target == "auto" else target
                    phase = projection("position.rotary", attn, rotary_target, 0.0, attn.head_dim // 2)
                    attn.injections.append(RotaryPhase(phase))
                else:
                    raise ValueError("position injection needs relative or rotary attention; use 'input' with absolute positions")
            elif part == "disentangled":
                attn.injections.append(DisentangledBias(projection("disentangled", attn, target, init_std)))
            elif part == "attention-bias":
                attn.injections.append(AttentionBias(projection("attention-bias.k", attn, target, init_std),
                                                     projection("attention-bias.v", attn, target, init_std)))
    return shared


def build_tag_tables(parts: Sequence[str], dim: int, mode: str = "shared",
                     init: str = "normal") -> Tuple[Optional[HexatagEmbedding], nn.ModuleDict]:
    """The tag tables of an injection: ``(tags, per_pathway)``. ``tags`` serves the first part (and
    every part when ``mode="shared"``); with ``per-pathway`` each further part gets its own table in
    ``per_pathway`` (keyed by part), so a model has 7d tag parameters per pathway. No parts: no table."""
    if mode not in TAG_TABLE_CHOICES:
        raise ValueError(f"--sipe-tag-tables must be one of {TAG_TABLE_CHOICES}, got {mode!r}")
    extra = nn.ModuleDict()
    if not parts:
        return None, extra
    tags = HexatagEmbedding(dim, init=init)
    if mode == "per-pathway":
        for part in parts[1:]:
            extra[part] = HexatagEmbedding(dim, init=init)
    return tags, extra


def tag_context(cls: torch.Tensor, tags: HexatagEmbedding, per_pathway: nn.ModuleDict) -> TagContext:
    """The :class:`TagContext` of one forward: the shared class table and each own pathway table."""
    tables = {part: emb.class_table() for part, emb in per_pathway.items()} or None
    return TagContext(cls=cls, table=tags.class_table(), tables=tables)

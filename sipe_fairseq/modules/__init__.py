"""Attention and injection building blocks (torch only, no fairseq registration)."""
from .assembly import INJECTION_CHOICES, attach_injections, parse_injection
from .attention import SiPEAttention
from .injections import AttentionBias, DisentangledBias, Injection, PositionCoupling, RotaryPhase, TagContext, TagProjection
from .layer import SiPETransformerLayer
from .tag_embedding import FIRST_TAG_ID, NO_TAG_CLASS, HexatagEmbedding, tag_pair_classes
from .tag_heads import TagLogProbs, WordAwareInput, tag_head, tag_log_probs
